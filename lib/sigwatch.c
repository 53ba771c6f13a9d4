/* What waits that last tell each other. Ranks that disagree on a collective's count or type may
 * pick different algorithms and wait on different links, where the signature trailer of every
 * slot never arrives to tell them; and a rank that waits for its neighbour cannot tell which
 * rank upstream is the one not arriving. So a wait that has lasted (the algorithms' watch
 * tick) announces its operation and signature to both bootstrap-ring neighbours (the ring is
 * idle after init), and every rank passes news of other ranks on, so each waiting rank learns
 * where every rank it can reach is. A rank heard of at the same operation with another
 * signature is a mismatch: every waiting rank sees it itself and fails with weftInvalidUsage
 * and both signatures (ranks that see a link close first get the same from the close's cause,
 * weftConnClose hands it to the transports). A wait that times out follows the chain of waits to the rank that went
 * silent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "bytes.h"
#include "check.h"
#include "collname.h"
#include "core.h"
#include "deadline.h"
#include "log.h"
#include "reduce.h"

#define NOTE_MAGIC 0x5746544eu /* "WFTN" */
enum { NOTE_AT = 1 };

#define note weftSigNote


_Static_assert(WEFT_SIG_NOTE_BYTES == WEFT_BOOT_NOTE_BYTES, "a note is one bootstrap note");

/* magic u32 | kind u32 | seq u64 | rankA u32 | rankB u32 | sigA u64 | sigB u64 | whatA u64 */
static void encode(const struct note *n, uint8_t out[WEFT_BOOT_NOTE_BYTES]) {
  weftPutBe32(out, NOTE_MAGIC);
  weftPutBe32(out + 4, n->kind);
  weftPutBe64(out + 8, n->seq);
  weftPutBe32(out + 16, n->rankA);
  weftPutBe32(out + 20, n->rankB);
  weftPutBe64(out + 24, n->sigA);
  weftPutBe64(out + 32, n->sigB);
  weftPutBe64(out + 40, n->whatA);
}

int weftSigNoteDecode(const uint8_t in[WEFT_SIG_NOTE_BYTES], struct weftSigNote *n) {
  *n = (struct note){weftGetBe32(in + 4), weftGetBe64(in + 8),  weftGetBe32(in + 16),
                     weftGetBe32(in + 20), weftGetBe64(in + 24), weftGetBe64(in + 32),
                     weftGetBe64(in + 40), 0};
  return weftGetBe32(in) == NOTE_MAGIC && n->kind == NOTE_AT ? 0 : -1;
}

void weftSigDescribe(uint64_t sig, uint64_t what, char *buf, size_t len) {
  unsigned type = (unsigned)(sig >> 8) & 0xff, op = (unsigned)sig & 0xff; /* from a peer */
  weftColl_t coll = (weftColl_t)(what >> 32);
  long long root = (long long)(uint32_t)what - 1;
  const char *typeName = type < weftNumTypes ? weftTypeName((weftDataType_t)type) : "?";
  const char *opName = op <= (unsigned)WEFT_OP_PREMULSUM ? weftOpName((weftRedOp_t)op) : "?";
  int reduces = coll == weftCollAllReduce || coll == weftCollReduce || coll == weftCollReduceScatter;
  int n = snprintf(buf, len, "%s(count %llu, %s", weftCollName(coll), (unsigned long long)(sig >> 16),
                   typeName);
  if (n > 0 && (size_t)n < len && reduces) n += snprintf(buf + n, len - (size_t)n, ", %s", opName);
  if (n > 0 && (size_t)n < len && root >= 0) n += snprintf(buf + n, len - (size_t)n, ", root %lld", root);
  if (n > 0 && (size_t)n < len) snprintf(buf + n, len - (size_t)n, ")");
}

static weftResult_t mismatchError(const struct weftComm *comm, const struct note *n) {
  char a[128], b[128];
  weftSigDescribe(n->sigA, n->whatA, a, sizeof a);
  weftSigDescribe(n->sigB, n->whatB, b, sizeof b);
  return weftSetError(weftInvalidUsage,
                      "rank %d: mismatched collectives at operation %llu: rank %u called %s, rank "
                      "%u called %s", comm->rank, (unsigned long long)n->seq, n->rankA, a,
                      n->rankB, b);
}

static int active(const struct weftComm *comm) {
  return comm->initDone && comm->boot != NULL && comm->nranks > 1;
}

/* Where each rank was last heard of: its operation, that operation's signature, 1 + the rank it
 * was waiting for (0: not said), the number of its note (each rank counts its own), and when
 * (this rank's CLOCK_MONOTONIC ms) that news arrived. */
#define SEEN_FIELDS 6
#define SEEN_SEQ(r) (SEEN_FIELDS * (size_t)(r))
#define SEEN_SIG(r) (SEEN_FIELDS * (size_t)(r) + 1)
#define SEEN_WAIT(r) (SEEN_FIELDS * (size_t)(r) + 2)
#define SEEN_BEAT(r) (SEEN_FIELDS * (size_t)(r) + 3)
#define SEEN_WHEN(r) (SEEN_FIELDS * (size_t)(r) + 4)
#define SEEN_WHAT(r) (SEEN_FIELDS * (size_t)(r) + 5)
/* A waiting rank says again where it is this often, so that news older than NOTE_STALE_MS at
 * a timeout is of a rank that stopped saying it (stopped, or busy elsewhere). */
#define NOTE_BEAT_MS 250
#define NOTE_STALE_MS 1000
static uint64_t *seenTable(struct weftComm *comm) {
  if (comm->watchSeen == NULL)
    comm->watchSeen = calloc(SEEN_FIELDS * (size_t)comm->nranks, sizeof(uint64_t));
  return comm->watchSeen;
}

/* To both neighbours but the one it came from (-1: both), best effort. */
static void sendOn(struct weftComm *comm, const struct note *n, int from) {
  uint8_t bytes[WEFT_BOOT_NOTE_BYTES];
  encode(n, bytes);
  for (int dir = WEFT_NOTE_NEXT; dir <= WEFT_NOTE_PREV; dir++)
    if (dir != from) (void)weftBootstrapNoteSend(comm->boot, dir, bytes);
}

/* A note from a neighbour: where a rank is goes into the table and, when news, on to the
 * other neighbour. */
static void takeNote(struct weftComm *comm, const struct note *n, int from) {
  uint64_t *seen = seenTable(comm);
  uint32_t r = n->rankA;
  if (seen == NULL || r >= (uint32_t)comm->nranks || r == (uint32_t)comm->rank ||
      n->sigB <= seen[SEEN_BEAT(r)])
    return; /* old news: it came the other way round too */
  seen[SEEN_SEQ(r)] = n->seq;
  seen[SEEN_SIG(r)] = n->sigA;
  seen[SEEN_WHAT(r)] = n->whatA;
  seen[SEEN_WAIT(r)] = n->rankB <= (uint32_t)comm->nranks ? n->rankB : 0;
  seen[SEEN_BEAT(r)] = n->sigB;
  seen[SEEN_WHEN(r)] = (uint64_t)weftNowMs();
  sendOn(comm, n, from);
}

/* Takes every note the neighbours sent. */
static void readNotes(struct weftComm *comm) {
  uint8_t bytes[WEFT_BOOT_NOTE_BYTES];
  struct note n;
  for (int dir = WEFT_NOTE_NEXT; dir <= WEFT_NOTE_PREV; dir++)
    while (weftBootstrapNoteRecv(comm->boot, dir, bytes) == 1)
      if (weftSigNoteDecode(bytes, &n) == 0) takeNote(comm, &n, dir);
}

/* A rank heard of at this operation with another signature is a mismatch. */
static weftResult_t compareSeen(struct weftComm *comm) {
  const uint64_t *seen = comm->watchSeen;
  uint64_t seq = comm->opSig[0], sig = comm->opSig[1], what = comm->opSig[2];
  for (int r = 0; seen != NULL && r < comm->nranks; r++) {
    if (r == comm->rank || seen[SEEN_SEQ(r)] != seq ||
        (seen[SEEN_SIG(r)] == sig && seen[SEEN_WHAT(r)] == what))
      continue;
    struct note n = {NOTE_AT, seq, (uint32_t)r, (uint32_t)comm->rank, seen[SEEN_SIG(r)], sig,
                     seen[SEEN_WHAT(r)], what};
    return mismatchError(comm, &n);
  }
  return weftSuccess;
}

weftResult_t weftSigWatch(struct weftComm *comm, int peer) {
  if (!active(comm)) return weftSuccess;
  uint64_t seq = comm->opSig[0], sig = comm->opSig[1];
  uint32_t waitFor = peer >= 0 && peer < comm->nranks ? (uint32_t)peer + 1 : 0;
  comm->watchWaitFor = waitFor;
  int64_t now = weftNowMs();
  if (comm->watchSentSeq != seq || comm->watchSentWait != waitFor ||
      now - comm->watchSentMs >= NOTE_BEAT_MS) {
    struct note at = {NOTE_AT, seq, (uint32_t)comm->rank, waitFor, sig, ++comm->watchBeat,
                      comm->opSig[2], 0};
    sendOn(comm, &at, -1);
    comm->watchSentSeq = seq;
    comm->watchSentWait = waitFor;
    comm->watchSentMs = now;
  }
  readNotes(comm);
  return compareSeen(comm);
}

/* "rank 0 waits for rank 2, which waits for rank 1 (not heard from)": the chain of waits from
 * this rank as the notes tell it, up to a rank that has gone silent or was never heard of (or
 * back to this rank: a cycle of waits). */
static int describeWaitChain(const struct weftComm *comm, char *buf, size_t len) {
  const uint64_t *seen = comm->watchSeen;
  uint64_t seq = comm->opSig[0];
  int n = snprintf(buf, len, "rank %d", comm->rank);
  uint32_t next = comm->watchWaitFor;
  int64_t now = weftNowMs();
  for (int hops = 0; next > 0 && hops < comm->nranks && n > 0 && (size_t)n < len; hops++) {
    int r = (int)next - 1;
    uint64_t at = seen[SEEN_SEQ(r)];
    long long age = (long long)(now - (int64_t)seen[SEEN_WHEN(r)]);
    int stale = at == 0 || age > NOTE_STALE_MS;
    char where[96] = "";
    if (at == 0)
      snprintf(where, sizeof where, " (not heard from)");
    else if (stale) /* it stopped saying where it is: stopped, or busy outside weft */
      snprintf(where, sizeof where, " (silent for %lld ms, last at operation %llu)", age,
               (unsigned long long)at);
    else if (at != seq)
      snprintf(where, sizeof where, " (at operation %llu)", (unsigned long long)at);
    n += snprintf(buf + n, len - (size_t)n, "%s rank %d%s", hops ? ", which waits for" : " waits for",
                  r, r == comm->rank ? " (a cycle of waits)" : where);
    if (r == comm->rank || stale) break;
    next = (uint32_t)seen[SEEN_WAIT(r)];
  }
  return n > 0 && (size_t)n < len;
}

weftResult_t weftSigWatchOnTimeout(struct weftComm *comm, weftResult_t rc) {
  if (!active(comm) || weftCommAborted(comm)) return rc;
  readNotes(comm);
  if (comm->watchSeen == NULL || comm->watchWaitFor == 0) return rc;
  char chain[512], was[1024];
  if (!describeWaitChain(comm, chain, sizeof chain)) return rc;
  snprintf(was, sizeof was, "%s", weftThreadLastError());
  return weftSetError(rc, "%s; the chain of waits, from the notes of waiting ranks: %s", was, chain);
}
