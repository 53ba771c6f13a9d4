/* The direct algorithm's synchronisation and fault detection (see direct.c for the whole).
 * A flag's value is the round (low 32 bits, compared modulo 2^32) and a 32-bit hash of the
 * operation's signature (sequence, collective, root, count, datatype, op, and a hash of the
 * eager calls before it) in the high bits; the full signature sits in a history of the last
 * DIRECT_SIG_HISTORY operations that only its writer touches on the fast path. After an
 * operation's first wait for every rank's post, each rank compares every hash with its own
 * (free: the flag lines are already here), so mismatched calls fail on every rank
 * (weftInvalidUsage, both signatures in the message) before any data is combined. A wait that
 * lasts looks, every DIRECT_LIVENESS_MS, whether the rank it waits for still exists, and reads
 * the segment's fail word: the first rank that finds a peer dead (or is aborted) writes it
 * there, so every other waiter fails within milliseconds, wherever it waits. A timeout names
 * every rank that had not arrived and the operation it was at. */
#include <stdatomic.h>
#include <stdio.h>

#include "check.h"
#include "deadline.h"
#include "direct.h"
#include "liveness.h"
#include "prims.h"
#include "reduce.h"

#define DIRECT_LIVENESS_MS 50

#ifdef DIRECT_TSAN
char weftDirectTsanSync;
#endif

void weftDirectPost(struct directState *s, int flag, uint64_t seq) {
  DIRECT_TSAN_RELEASE();
  atomic_store_explicit(&s->ctrl[s->me].flag[flag][0],
                        (uint64_t)s->sigHash << 32 | (uint32_t)seq, memory_order_release);
}

void weftDirectPublishFail(struct directState *s, int reason, int culprit) {
  uint64_t word = (uint64_t)reason << 56 | (uint64_t)(s->me + 1) << 28 | (uint64_t)(culprit + 1);
  uint64_t none = 0;
  atomic_compare_exchange_strong(&s->fail->word, &none, word);
}

static const char *hostOf(const struct weftComm *comm, int rank) {
  return comm->peers != NULL ? comm->peers[rank].hostname : "?";
}

/* The failure another rank published in the fail word. */
static weftResult_t publishedFailure(struct weftComm *comm, struct directState *s, uint64_t word) {
  int reason = (int)(word >> 56), noticer = (int)((word >> 28) & 0xfffffff) - 1;
  int culprit = (int)(word & 0xfffffff) - 1;
  if (culprit < 0 || culprit >= s->n || noticer < 0 || noticer >= s->n) culprit = noticer = 0;
  if (reason == FAIL_MISMATCH)
    return weftSetError(weftInvalidUsage,
                        "direct: rank %d found that rank %d called another collective than it "
                        "(this rank is at operation %llu; that rank's error names both calls)",
                        noticer, culprit, (unsigned long long)comm->opSeq);
  if (reason == FAIL_ABORTED)
    return weftSetError(weftRemoteError,
                        "direct: rank %d (pid %d on host %s) aborted its communicator during "
                        "operation %llu", culprit, s->pids[culprit], hostOf(comm, culprit),
                        (unsigned long long)comm->opSeq);
  return weftSetError(weftRemoteError,
                      "direct: rank %d (pid %d on host %s) died during operation %llu (noticed "
                      "by rank %d)", culprit, s->pids[culprit], hostOf(comm, culprit),
                      (unsigned long long)comm->opSeq, noticer);
}

weftResult_t weftDirectFailed(struct weftComm *comm, struct directState *s) {
  uint64_t word = atomic_load_explicit(&s->fail->word, memory_order_acquire);
  return word != 0 ? publishedFailure(comm, s, word) : weftSuccess;
}

weftResult_t weftDirectCheckPeer(struct weftComm *comm, struct directState *s, int r,
                                 const _Atomic uint64_t *awaited, uint64_t seq, int lookNow) {
  uint64_t word = atomic_load_explicit(&s->fail->word, memory_order_acquire);
  if (word != 0) return publishedFailure(comm, s, word);
  if (s->samePid || !lookNow) return weftSuccess;
  int64_t now = weftNowMs();
  if (now - s->lastLivenessMs < DIRECT_LIVENESS_MS) return weftSuccess;
  s->lastLivenessMs = now;
  if (!weftProcessGone(s->pids[r])) return weftSuccess;
  /* A rank that raised the flag and then finished its operation and exited (its last step
   * lets it go while slower ranks still read flags) is gone, not dead to this wait. */
  if (weftDirectReached(atomic_load_explicit(awaited, memory_order_acquire), seq)) return weftSuccess;
  weftDirectPublishFail(s, FAIL_DEAD, r);
  return weftSetError(weftRemoteError, "direct: rank %d (pid %d on host %s) died during operation %llu",
                      r, s->pids[r], hostOf(comm, r), (unsigned long long)comm->opSeq);
}

/* A wait failed with rc: a timeout names every rank not yet at this point; an abort tells
 * the others. */
static weftResult_t waitFailed(struct weftComm *comm, struct directState *s, int flag,
                               uint64_t seq, const char *what, weftResult_t rc) {
  if (weftCommAborted(comm)) {
    weftDirectPublishFail(s, FAIL_ABORTED, s->me);
    return rc;
  }
  if (rc != weftTimeout) return rc;
  char late[512] = "";
  size_t o = 0;
  int nlate = 0;
  for (int r = 0; r < s->n; r++) {
    if (r == s->me || weftDirectReached(atomic_load(&s->ctrl[r].flag[flag][0]), seq)) continue;
    unsigned long long at = (unsigned long long)atomic_load(&s->ctrl[r].opSeq);
    if (o < sizeof late)
      o += (size_t)snprintf(late + o, sizeof late - o, "%srank %d (pid %d, at operation %llu%s)",
                            nlate ? ", " : "", r, s->pids[r], at,
                            at < comm->opSeq ? ": has not called it" : "");
    nlate++;
  }
  return weftSetError(weftTimeout,
                      "direct: rank %d timed out after %lld ms at operation %llu, %s %s; set "
                      "WEFT_TIMEOUT_MS to wait longer",
                      s->me, (long long)comm->timeoutMs, (unsigned long long)comm->opSeq, what,
                      late);
}

/* The first rank from `from` on (not me) whose flag has not reached seq; n when none. */
static int firstLate(struct directState *s, int from, int flag, uint64_t seq) {
  for (int r = from; r < s->n; r++)
    if (r != s->me &&
        !weftDirectReached(atomic_load_explicit(&s->ctrl[r].flag[flag][0], memory_order_acquire), seq))
      return r;
  return s->n;
}

/* One waiter for all peers: a wait costs at most one spin phase and one reading of the clock
 * however many peers are late, and when ranks outnumber cores (no spin phase) each pause is a
 * yield at once, so a rank that posted gives its core to one that has not. Ranks found
 * arrived are not looked at again (flags only grow). */
weftResult_t weftDirectWaitAll(struct weftComm *comm, struct directState *s, int flag, uint64_t seq) {
  static const char *const what[] = {"waiting for the input of", "waiting for the reduction of",
                                     "waiting for the end of"};
  int r = firstLate(s, 0, flag, seq);
  if (r == s->n) {
    DIRECT_TSAN_ACQUIRE();
    return weftSuccess;
  }
  struct weftWaiter w;
  weftWaitStart(&w, comm);
  while ((r = firstLate(s, r, flag, seq)) < s->n) {
    weftResult_t rc = weftWaitPause(&w, what[flag], r);
    /* past the spin phase only (deadlineMs is set then): spinning stays cheap. weftDirectCheckPeer
     * is one load of the fail word, and a liveness check every DIRECT_LIVENESS_MS, the clock
     * read every 16th pause (a pause that yields costs a microsecond or more: 16 of them are
     * far below DIRECT_LIVENESS_MS). */
    if (rc == weftSuccess && w.deadlineMs != 0)
      rc = weftDirectCheckPeer(comm, s, r, &s->ctrl[r].flag[flag][0], seq, (w.iter & 15) == 0);
    if (rc != weftSuccess) return waitFailed(comm, s, flag, seq, what[flag], rc);
  }
  weftWaitDone(&w);
  DIRECT_TSAN_ACQUIRE();
  return weftSuccess;
}

/* Before the first post of an operation: what this rank was asked to do, written as a seqlock
 * (seq 0 while count and what change) so a reader never pairs one call's count with another's. */
static void publishSig(struct directState *s, const struct weftCollArgs *a) {
  struct directCtrl *c = &s->ctrl[s->me];
  struct directSig *e = &c->sig[a->seq % DIRECT_SIG_HISTORY];
  uint64_t what = weftSigWhat(a->coll, a->root) << 16 | (uint64_t)a->type << 8 | (uint64_t)a->op;
  /* released after seq's 0 (no fences: ThreadSanitizer has none): a reader that acquires a
   * new count or what then sees seq 0 or later, never the old seq again */
  atomic_store_explicit(&e->seq, 0, memory_order_relaxed);
  atomic_store_explicit(&e->count, a->count, memory_order_release);
  atomic_store_explicit(&e->what, what, memory_order_release);
  atomic_store_explicit(&e->seq, a->seq, memory_order_release);
  atomic_store_explicit(&c->opSeq, a->seq, memory_order_release); /* after sig: see weftDirectWatch */
  /* the eager calls so far too: ranks that disagreed on one that nobody checked differ here */
  uint64_t h = a->seq * 0x9e3779b97f4a7c15ULL ^ a->count * 0xc2b2ae3d27d4eb4fULL ^ what ^ s->eagerChain;
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ULL;
  s->sigHash = (uint32_t)(h >> 32);
}

int weftDirectSigAt(struct directState *s, int rank, uint64_t seq, uint64_t sig[3]) {
  struct directSig *e = &s->ctrl[rank].sig[seq % DIRECT_SIG_HISTORY];
  uint64_t before = atomic_load_explicit(&e->seq, memory_order_acquire);
  sig[1] = atomic_load_explicit(&e->count, memory_order_acquire);
  sig[2] = atomic_load_explicit(&e->what, memory_order_acquire);
  uint64_t after = atomic_load_explicit(&e->seq, memory_order_relaxed);
  sig[0] = seq;
  return before == seq && after == seq;
}

/* sig: seq, count, weftSigWhat << 16 | type << 8 | op (publishSig). */
static void describeDirectSig(const uint64_t sig[3], char *buf, size_t len) {
  char call[160];
  weftSigDescribe(sig[1] << 16 | (sig[2] & 0xffff), sig[2] >> 16, call, sizeof call);
  snprintf(buf, len, "%s (its operation %llu)", call, (unsigned long long)sig[0]);
}

weftResult_t weftDirectSigMismatch(struct directState *s, int r, const uint64_t mine[3],
                                   const uint64_t sig[3]) {
  char a[192], b[192];
  describeDirectSig(mine, a, sizeof a);
  describeDirectSig(sig, b, sizeof b);
  return weftSetError(weftInvalidUsage,
                      "mismatched collectives at operation %llu: rank %d called %s, rank %d "
                      "called %s", (unsigned long long)mine[0], s->me, a, r, b);
}

/* The signature of the operation rank r is in now (a few tries: it may be moving on). */
static void currentSig(struct directState *s, int r, uint64_t sig[3]) {
  for (int tries = 0; tries < 8; tries++) {
    uint64_t at = atomic_load_explicit(&s->ctrl[r].opSeq, memory_order_acquire);
    if (weftDirectSigAt(s, r, at, sig)) return;
  }
  sig[1] = sig[2] = 0;
}

/* After the first wait for every rank's post: every signature is the same as mine. A rank
 * that runs one operation ahead or behind shows up as a different sequence number. */
static weftResult_t checkSigs(struct directState *s, const struct weftCollArgs *a,
                              uint64_t seq) {
  uint64_t mine[3], sig[3];
  for (int r = 0; r < s->n; r++) {
    uint64_t v = atomic_load_explicit(&s->ctrl[r].flag[FLAG_POSTED][0], memory_order_relaxed);
    /* A rank already at a later round compared its hash with mine and found them equal. */
    if (r == s->me || (uint32_t)(v >> 32) == s->sigHash || (uint32_t)v != (uint32_t)seq) continue;
    weftDirectSigAt(s, s->me, a->seq, mine);
    currentSig(s, r, sig);
    if (sig[0] != mine[0] || sig[1] != mine[1] || sig[2] != mine[2])
      return weftDirectSigMismatch(s, r, mine, sig);
    char call[192];
    describeDirectSig(mine, call, sizeof call);
    return weftSetError(weftInvalidUsage,
                        "mismatched collectives before operation %llu: ranks %d and %d both "
                        "called %s, but an eager Broadcast or Reduce before it differed between "
                        "them (a root, count, datatype or op that no rank could check then)",
                        (unsigned long long)mine[0], s->me, r, call);
  }
  return weftSuccess;
}

weftResult_t weftDirectArrive(struct weftComm *comm, struct directState *s,
                              const struct weftCollArgs *a, uint64_t seq, int first) {
  weftDirectPost(s, FLAG_POSTED, seq);
  WEFTCHECK(weftDirectWaitAll(comm, s, FLAG_POSTED, seq));
  return first ? checkSigs(s, a, seq) : weftSuccess;
}

/* Every collective publishes its signature here, whichever algorithm runs it. */
void weftDirectBegin(void *state, const struct weftCollArgs *a) { publishSig(state, a); }

/* Whether a signature (count, what) is a call that runs eagerly: a rank may have returned from
 * it, and learns of a mismatch only from the fail word. */
static int eagerSig(const struct directState *s, const uint64_t sig[3]) {
  weftColl_t coll = (weftColl_t)(sig[2] >> 48);
  size_t ts = weftTypeSize((weftDataType_t)((sig[2] >> 8) & 0xff));
  return (coll == weftCollBroadcast || coll == weftCollReduce) && ts > 0 &&
         sig[1] <= s->eagerBytes / ts;
}

/* A lasting wait, whichever algorithm: a rank at or past my operation that was asked for
 * something else there (the ranks may even run different algorithms, chosen by their
 * different sizes, and an eager call lets a rank run ahead). */
weftResult_t weftDirectWatch(void *state, struct weftComm *comm) {
  struct directState *s = state;
  uint64_t seq = comm->opSeq, mine[3], sig[3];
  /* not in a collective: before the first (operation 0, whose history entry reads as written
   * since the segment starts zeroed) or past the history */
  if (seq == 0 || !weftDirectSigAt(s, s->me, seq, mine)) return weftSuccess;
  for (int r = 0; r < s->n; r++) {
    uint64_t at = atomic_load_explicit(&s->ctrl[r].opSeq, memory_order_acquire);
    if (r == s->me || (int64_t)(at - seq) < 0) continue; /* behind: it will compare with me */
    if (!weftDirectSigAt(s, r, seq, sig)) continue;       /* passed beyond the history */
    if (sig[1] == mine[1] && sig[2] == mine[2]) continue;
    if (eagerSig(s, mine) || eagerSig(s, sig)) /* for the ranks it let run ahead */
      weftDirectPublishFail(s, FAIL_MISMATCH, r);
    return weftDirectSigMismatch(s, r, mine, sig);
  }
  return weftSuccess;
}
