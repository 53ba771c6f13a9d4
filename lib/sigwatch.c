/* Mismatch detection across hosts for waits that last. Ranks that disagree on a collective's
 * count or type may pick different algorithms and wait on different links, where the
 * signature trailer of every slot never arrives to tell them. On one host the direct
 * algorithm's segment shows every rank's signature; across hosts, a waiting rank sends the
 * signature of its collective to rank+1 over the bootstrap ring (idle after init) and reads
 * rank-1's. A rank that sees rank-1 at the same operation with another signature has found a
 * mismatch: it passes a note naming both around the ring, so every rank fails with
 * weftInvalidUsage and both signatures, including ranks that first saw a link close. */
#include <stdio.h>
#include <string.h>

#include "bootstrap.h"
#include "check.h"
#include "core.h"
#include "log.h"
#include "reduce.h"

#define NOTE_MAGIC 0x5746544eu /* "WFTN" */
enum { NOTE_AT = 1, NOTE_MISMATCH = 2 };
/* How long a rank that failed with a remote error waits for a mismatch note before saying
 * so: the note travels one bootstrap hop per rank, each taken at once by a failed rank. */
#define MISMATCH_NOTE_WAIT_MS 100

#define note weftSigNote

static void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (24 - 8 * i));
}
static void put64(uint8_t *p, uint64_t v) {
  put32(p, (uint32_t)(v >> 32));
  put32(p + 4, (uint32_t)v);
}
static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) << 32 | get32(p + 4); }

static void encode(const struct note *n, uint8_t out[WEFT_BOOT_NOTE_BYTES]) {
  put32(out, NOTE_MAGIC);
  put32(out + 4, n->kind);
  put64(out + 8, n->seq);
  put32(out + 16, n->rankA);
  put32(out + 20, n->rankB);
  put64(out + 24, n->sigA);
  put64(out + 32, n->sigB);
}

int weftSigNoteDecode(const uint8_t in[WEFT_BOOT_NOTE_BYTES], struct weftSigNote *n) {
  *n = (struct note){get32(in + 4), get64(in + 8), get32(in + 16), get32(in + 20), get64(in + 24),
                     get64(in + 32)};
  return get32(in) == NOTE_MAGIC && (n->kind == NOTE_AT || n->kind == NOTE_MISMATCH) ? 0 : -1;
}

void weftSigDescribe(uint64_t sig, char *buf, size_t len) {
  unsigned type = (unsigned)(sig >> 8) & 0xff, op = (unsigned)sig & 0xff; /* from a peer */
  snprintf(buf, len, "AllReduce(count %llu, %s, %s)", (unsigned long long)(sig >> 16),
           type < weftNumTypes ? weftTypeName((weftDataType_t)type) : "?",
           op < weftNumOps ? weftOpName((weftRedOp_t)op) : "?");
}

static weftResult_t mismatchError(const struct weftComm *comm, const struct note *n) {
  char a[96], b[96];
  weftSigDescribe(n->sigA, a, sizeof a);
  weftSigDescribe(n->sigB, b, sizeof b);
  return weftSetError(weftInvalidUsage,
                      "rank %d: mismatched collectives at operation %llu: rank %u called %s, rank "
                      "%u called %s", comm->rank, (unsigned long long)n->seq, n->rankA, a,
                      n->rankB, b);
}

static int active(const struct weftComm *comm) {
  return comm->initDone && comm->boot != NULL && comm->nranks > 1 && comm->nHosts > 1;
}

/* Passes a mismatch note on (best effort: rank+1 may have gone) and fails with it. */
static weftResult_t relayMismatch(struct weftComm *comm, const struct note *n) {
  uint8_t bytes[WEFT_BOOT_NOTE_BYTES];
  encode(n, bytes);
  (void)weftBootstrapNoteSend(comm->boot, bytes);
  comm->watchRelayed = 1;
  return mismatchError(comm, n);
}

/* Takes every note rank-1 sent; a mismatch of the current operation is the result. *open
 * is 0 once rank-1's side is closed. */
static weftResult_t readNotes(struct weftComm *comm, int *open) {
  uint8_t bytes[WEFT_BOOT_NOTE_BYTES];
  struct note n;
  int got;
  while ((got = weftBootstrapNoteRecv(comm->boot, bytes)) == 1) {
    if (weftSigNoteDecode(bytes, &n) != 0) continue;
    if (n.kind == NOTE_MISMATCH && n.seq == comm->opSig[0]) return relayMismatch(comm, &n);
    if (n.kind == NOTE_AT) {
      comm->watchPrevSeq = n.seq;
      comm->watchPrevSig = n.sigA;
    }
  }
  *open = got == 0;
  return weftSuccess;
}

weftResult_t weftSigWatch(struct weftComm *comm) {
  if (!active(comm)) return weftSuccess;
  uint64_t seq = comm->opSig[0], sig = comm->opSig[1];
  if (comm->watchSentSeq != seq) {
    struct note at = {NOTE_AT, seq, (uint32_t)comm->rank, 0, sig, 0};
    uint8_t bytes[WEFT_BOOT_NOTE_BYTES];
    encode(&at, bytes);
    if (weftBootstrapNoteSend(comm->boot, bytes) == 1) comm->watchSentSeq = seq;
  }
  int open;
  WEFTCHECK(readNotes(comm, &open));
  if (comm->watchPrevSeq != seq || comm->watchPrevSig == sig) return weftSuccess;
  int prev = (comm->rank + comm->nranks - 1) % comm->nranks;
  struct note n = {NOTE_MISMATCH, seq, (uint32_t)prev, (uint32_t)comm->rank, comm->watchPrevSig, sig};
  return relayMismatch(comm, &n);
}

void weftSigWatchAnnounce(struct weftComm *comm, int rankA, uint64_t sigA, int rankB,
                          uint64_t sigB) {
  if (!active(comm) || comm->watchRelayed) return;
  struct note n = {NOTE_MISMATCH, comm->opSig[0], (uint32_t)rankA, (uint32_t)rankB, sigA, sigB};
  (void)relayMismatch(comm, &n);
}

weftResult_t weftSigWatchOnFailure(struct weftComm *comm, weftResult_t rc) {
  if (rc != weftRemoteError || !active(comm) || comm->watchRelayed || weftCommAborted(comm))
    return rc;
  char was[1024];
  snprintf(was, sizeof was, "%s", weftThreadLastError());
  int64_t deadline = weftNowMs() + MISMATCH_NOTE_WAIT_MS;
  int open = 1;
  while (open && weftBootstrapNoteWait(comm->boot, deadline) == 1) {
    weftResult_t found = readNotes(comm, &open);
    if (found != weftSuccess) return found;
  }
  weftSetError(rc, "%s", was);
  return rc;
}
