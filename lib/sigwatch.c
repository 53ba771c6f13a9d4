/* What waits that last tell each other. Ranks that disagree on a collective's count or type may
 * pick different algorithms and wait on different links, where the signature trailer of every
 * slot never arrives to tell them; and a rank that waits for its neighbour cannot tell which
 * rank upstream is the one not arriving. So a wait that has lasted (the algorithms' watch
 * tick) announces its operation and signature to both bootstrap-ring neighbours (the ring is
 * idle after init), and every rank passes news of other ranks on, so each waiting rank learns
 * where every rank it can reach is. A rank heard of at the same operation with another
 * signature is a mismatch: a note naming both goes around, and every rank fails with
 * weftInvalidUsage and both signatures, including ranks that first saw a link close. A wait
 * that times out names the ranks no note showed at its operation. */
#include <stdio.h>
#include <stdlib.h>
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
  return comm->initDone && comm->boot != NULL && comm->nranks > 1;
}

/* Where each rank was last heard of: [2r] its operation, [2r+1] that operation's signature. */
static uint64_t *seenTable(struct weftComm *comm) {
  if (comm->watchSeen == NULL) comm->watchSeen = calloc(2 * (size_t)comm->nranks, sizeof(uint64_t));
  return comm->watchSeen;
}

/* To both neighbours but the one it came from (-1: both), best effort. */
static void sendOn(struct weftComm *comm, const struct note *n, int from) {
  uint8_t bytes[WEFT_BOOT_NOTE_BYTES];
  encode(n, bytes);
  for (int dir = WEFT_NOTE_NEXT; dir <= WEFT_NOTE_PREV; dir++)
    if (dir != from) (void)weftBootstrapNoteSend(comm->boot, dir, bytes);
}

/* Passes a mismatch note on and fails with it. */
static weftResult_t relayMismatch(struct weftComm *comm, const struct note *n, int from) {
  sendOn(comm, n, from);
  comm->watchRelayed = 1;
  return mismatchError(comm, n);
}

/* A note from a neighbour: a mismatch of the current operation is the result; where a rank is
 * goes into the table and, when news, on to the other neighbour. */
static weftResult_t takeNote(struct weftComm *comm, const struct note *n, int from) {
  if (n->kind == NOTE_MISMATCH) return n->seq == comm->opSig[0] ? relayMismatch(comm, n, from) : weftSuccess;
  uint64_t *seen = seenTable(comm);
  if (seen == NULL || n->rankA >= (uint32_t)comm->nranks || n->seq <= seen[2 * n->rankA]) return weftSuccess;
  seen[2 * n->rankA] = n->seq;
  seen[2 * n->rankA + 1] = n->sigA;
  sendOn(comm, n, from);
  return weftSuccess;
}

/* Takes every note the neighbours sent. *open is 0 once both their sides are closed. */
static weftResult_t readNotes(struct weftComm *comm, int *open) {
  uint8_t bytes[WEFT_BOOT_NOTE_BYTES];
  struct note n;
  *open = 0;
  for (int dir = WEFT_NOTE_NEXT; dir <= WEFT_NOTE_PREV; dir++) {
    int got;
    while ((got = weftBootstrapNoteRecv(comm->boot, dir, bytes)) == 1)
      if (weftSigNoteDecode(bytes, &n) == 0) WEFTCHECK(takeNote(comm, &n, dir));
    *open |= got == 0;
  }
  return weftSuccess;
}

/* A rank heard of at this operation with another signature is a mismatch. */
static weftResult_t compareSeen(struct weftComm *comm) {
  const uint64_t *seen = comm->watchSeen;
  uint64_t seq = comm->opSig[0], sig = comm->opSig[1];
  for (int r = 0; seen != NULL && r < comm->nranks; r++) {
    if (r == comm->rank || seen[2 * r] != seq || seen[2 * r + 1] == sig) continue;
    struct note n = {NOTE_MISMATCH, seq, (uint32_t)r, (uint32_t)comm->rank, seen[2 * r + 1], sig};
    return relayMismatch(comm, &n, -1);
  }
  return weftSuccess;
}

weftResult_t weftSigWatch(struct weftComm *comm) {
  if (!active(comm)) return weftSuccess;
  uint64_t seq = comm->opSig[0], sig = comm->opSig[1];
  if (comm->watchSentSeq != seq) {
    struct note at = {NOTE_AT, seq, (uint32_t)comm->rank, 0, sig, 0};
    sendOn(comm, &at, -1);
    comm->watchSentSeq = seq;
  }
  int open;
  WEFTCHECK(readNotes(comm, &open));
  return compareSeen(comm);
}

void weftSigWatchAnnounce(struct weftComm *comm, int rankA, uint64_t sigA, int rankB,
                          uint64_t sigB) {
  if (!active(comm) || comm->watchRelayed) return;
  struct note n = {NOTE_MISMATCH, comm->opSig[0], (uint32_t)rankA, (uint32_t)rankB, sigA, sigB};
  (void)relayMismatch(comm, &n, -1);
}

weftResult_t weftSigWatchOnFailure(struct weftComm *comm, weftResult_t rc) {
  if (rc != weftRemoteError || !active(comm) || comm->watchRelayed || weftCommAborted(comm))
    return rc;
  char was[1024];
  snprintf(was, sizeof was, "%s", weftThreadLastError());
  int64_t deadline = weftNowMs() + MISMATCH_NOTE_WAIT_MS;
  int open = 1;
  /* The clock is checked here, not only by the poll: a neighbour's closed socket stays
   * readable, so the poll alone would never let the deadline pass. */
  while (open && weftNowMs() < deadline && weftBootstrapNoteWait(comm->boot, deadline) == 1) {
    weftResult_t found = readNotes(comm, &open);
    if (found != weftSuccess) return found;
  }
  weftSetError(rc, "%s", was);
  return rc;
}

weftResult_t weftSigWatchOnTimeout(struct weftComm *comm, weftResult_t rc) {
  int open;
  if (!active(comm) || weftCommAborted(comm) || readNotes(comm, &open) != weftSuccess ||
      comm->watchSeen == NULL)
    return rc;
  char late[512] = "";
  size_t o = 0;
  int nlate = 0, nheard = 0;
  uint64_t seq = comm->opSig[0];
  for (int r = 0; r < comm->nranks; r++) {
    uint64_t at = comm->watchSeen[2 * r];
    if (r == comm->rank || at == seq) {
      nheard += r != comm->rank;
      continue;
    }
    if (o < sizeof late)
      o += (size_t)snprintf(late + o, sizeof late - o, "%srank %d (%s)", nlate ? ", " : "", r,
                            at == 0 ? "not heard from" : "last heard at an earlier operation");
    nlate++;
  }
  if (nlate == 0 || nheard == 0) return rc; /* all here (a deadlock elsewhere), or no news */
  char was[1024];
  snprintf(was, sizeof was, "%s", weftThreadLastError());
  return weftSetError(rc, "%s; ranks not known to have reached operation %llu (the others "
                          "announced it over the bootstrap ring): %s",
                      was, (unsigned long long)seq, late);
}
