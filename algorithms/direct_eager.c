/* The direct algorithm's eager Broadcast and Reduce (direct.h, "eager calls"): calls of at most
 * WEFT_DIRECT_EAGER_BYTES where only one side needs the other. A Broadcast's root, a Reduce's
 * other ranks write their data into their next slot and return; the readers wait for it. With
 * ranks outnumbering cores this is what makes small rooted calls cheap: a sender that runs
 * ahead fills its queue in one scheduling slice and a reader drains many calls in its own,
 * where a synchronising call costs every rank a trip through the scheduler (a scheduler round
 * trip per rank, per call). Open MPI's eager sends behave the same.
 * What it gives up: a mismatch (another count, datatype, root or collective) is found by a
 * reader, in that call, from the signature beside the data, or by a waiting rank from the
 * signature history (weftDirectWatch), and published in the fail word; a sender that already
 * returned fails at its next call that finds the word (every eager call reads it first; a
 * sender waits, and so reads it, at the latest when its queue is full). WEFT_DIRECT_EAGER_BYTES=0
 * makes every call synchronous again, where a mismatch fails on every rank in that call.
 * Liveness as every direct wait: a reader whose sender died, a sender whose reader died before
 * taking its slot fails within DIRECT_LIVENESS_MS of noticing, and tells the others. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "direct.h"
#include "log.h"
#include "prims.h"
#include "reduce.h"

static size_t roundUp(size_t v, size_t to) { return (v + to - 1) / to * to; }

/* A slot's data follows its header in the same line: a call of up to 32 bytes moves one line
 * from its sender to each reader, not two. */
#define EAGER_HEADER_BYTES (offsetof(struct directEagerSlot, chain) + sizeof(uint64_t))
_Static_assert(EAGER_HEADER_BYTES == 32, "an eager slot's header is half a line");

static size_t slotBytesFor(size_t eagerBytes) { return roundUp(EAGER_HEADER_BYTES + eagerBytes, 64); }

size_t weftDirectEagerBytes(int n, size_t eagerBytes) {
  if (eagerBytes == 0) return 0;
  size_t slot = slotBytesFor(eagerBytes);
  size_t row = roundUp((size_t)n * sizeof(uint64_t), 64);
  return (size_t)n * row + (size_t)n * DIRECT_EAGER_DEPTH * slot;
}

void weftDirectEagerLayout(struct directState *s, char *at) {
  s->slotBytes = slotBytesFor(s->eagerBytes);
  s->takenRowBytes = roundUp((size_t)s->n * sizeof(uint64_t), 64);
  s->eagerTaken = at;
  s->eagerSlots = at + (size_t)s->n * s->takenRowBytes;
  for (int i = 0; i < DIRECT_EAGER_DEPTH; i++) s->eagerUse[i] = 0, s->eagerReader[i] = -1;
}

static struct directEagerSlot *slotOf(struct directState *s, int sender, uint64_t seq) {
  size_t i = (size_t)sender * DIRECT_EAGER_DEPTH + seq % DIRECT_EAGER_DEPTH;
  return (struct directEagerSlot *)(s->eagerSlots + i * s->slotBytes);
}

static char *dataOf(struct directEagerSlot *slot) { return (char *)slot + EAGER_HEADER_BYTES; }

/* The last operation `reader` took from `sender`. */
static _Atomic uint64_t *takenOf(struct directState *s, int reader, int sender) {
  return (_Atomic uint64_t *)(s->eagerTaken + (size_t)reader * s->takenRowBytes) + sender;
}

static uint64_t whatOf(const struct weftCollArgs *a) {
  return weftSigWhat(a->coll, a->root) << 16 | (uint64_t)a->type << 8 | (uint64_t)a->op;
}

/* A lasting eager wait failed with rc: an abort tells the others (every direct wait does); a
 * timeout also names the ranks behind this one, as the rank it waited for may itself be
 * waiting for them (a root whose queue is full waits for its slowest reader). */
static weftResult_t eagerWaitFailed(struct weftComm *comm, struct directState *s, weftResult_t rc) {
  if (weftCommAborted(comm)) weftDirectPublishFail(s, FAIL_ABORTED, s->me);
  if (rc != weftTimeout) return rc;
  char was[512], behind[512] = "";
  snprintf(was, sizeof was, "%s", weftThreadLastError());
  size_t o = 0;
  for (int r = 0; r < s->n && o < sizeof behind; r++) {
    uint64_t at = atomic_load_explicit(&s->ctrl[r].opSeq, memory_order_acquire);
    if (r != s->me && (int64_t)(at - comm->opSeq) < 0)
      o += (size_t)snprintf(behind + o, sizeof behind - o, "%srank %d (pid %d, at operation %llu)",
                            o ? ", " : "", r, s->pids[r], (unsigned long long)at);
  }
  if (o == 0) return rc;
  return weftSetError(rc, "%s; behind this rank: %s", was, behind);
}

/* ---- the sender's side ---- */

/* Whether rank r is past operation seq. Its opSeq is stored after what it did in seq. */
static int passed(struct directState *s, int r, uint64_t seq) {
  uint64_t at = atomic_load_explicit(&s->ctrl[r].opSeq, memory_order_acquire);
  return (int64_t)(at - seq) > 0;
}

/* Reader r passed the operation of my slot i without taking it: it was asked for something
 * else there (its call named when its signature history still has it). */
static weftResult_t notTaken(struct directState *s, unsigned i, int r) {
  uint64_t mine[3] = {s->eagerUse[i], s->eagerSig[i][0], s->eagerSig[i][1]}, theirs[3];
  weftDirectPublishFail(s, FAIL_MISMATCH, r);
  if (weftDirectSigAt(s, r, mine[0], theirs)) return weftDirectSigMismatch(s, r, mine, theirs);
  char call[160];
  weftSigDescribe(mine[1] << 16 | (mine[2] & 0xffff), mine[2] >> 16, call, sizeof call);
  return weftSetError(weftInvalidUsage,
                      "mismatched collectives at operation %llu: rank %d called %s, and rank %d "
                      "went past that operation without taking its data (it called something "
                      "else)", (unsigned long long)mine[0], s->me, call, r);
}

/* Waits until the readers of my slot's previous operation took it. */
static weftResult_t slotFree(struct weftComm *comm, struct directState *s, unsigned i) {
  uint64_t need = s->eagerUse[i];
  for (int r = 0; r < s->n && need != 0; r++) {
    if (r == s->me || (s->eagerReader[i] >= 0 && s->eagerReader[i] != r)) continue;
    if (weftDirectReached(s->knownTaken[r], need)) continue;
    _Atomic uint64_t *taken = takenOf(s, r, s->me);
    struct weftWaiter w;
    weftWaitStart(&w, comm);
    while (!weftDirectReached(s->knownTaken[r] = atomic_load_explicit(taken, memory_order_acquire), need)) {
      if (w.deadlineMs != 0 && passed(s, r, need) && /* past the spin: see eagerReceive */
          !weftDirectReached(atomic_load_explicit(taken, memory_order_acquire), need))
        return notTaken(s, i, r);
      weftResult_t rc = weftWaitPause(&w, "waiting for its eager data to be taken by", r);
      if (rc == weftSuccess && w.deadlineMs != 0)
        rc = weftDirectCheckPeer(comm, s, r, taken, need, (w.iter & 15) == 0);
      if (rc != weftSuccess) return eagerWaitFailed(comm, s, rc);
    }
    weftWaitDone(&w);
  }
  DIRECT_TSAN_ACQUIRE(); /* the readers are done with the slot */
  return weftSuccess;
}

/* My data for operation a->seq (len bytes), for `reader` (-1: every other rank), into my next
 * slot. */
static weftResult_t eagerSend(struct weftComm *comm, struct directState *s,
                              const struct weftCollArgs *a, const void *data, size_t len, int reader) {
  unsigned i = (unsigned)(a->seq % DIRECT_EAGER_DEPTH);
  WEFTCHECK(slotFree(comm, s, i));
  struct directEagerSlot *slot = slotOf(s, s->me, a->seq);
  memcpy(dataOf(slot), data, len);
  slot->count = a->count;
  slot->what = whatOf(a);
  slot->chain = s->eagerChain;
  DIRECT_TSAN_RELEASE();
  atomic_store_explicit(&slot->seq, a->seq, memory_order_release);
  s->eagerUse[i] = a->seq;
  s->eagerReader[i] = reader;
  s->eagerSig[i][0] = a->count;
  s->eagerSig[i][1] = slot->what;
  return weftSuccess;
}

/* ---- the reader's side ---- */

/* The slot holds another operation's data, or its sender moved past mine without writing it:
 * a mismatch, published so that the ranks that ran ahead fail too. */
static weftResult_t eagerMismatch(struct directState *s, const struct weftCollArgs *a, int sender,
                                  const struct directEagerSlot *slot, uint64_t seen) {
  uint64_t mine[3] = {a->seq, a->count, whatOf(a)}, theirs[3] = {a->seq, 0, 0};
  if (seen == a->seq) theirs[1] = slot->count, theirs[2] = slot->what;
  else weftDirectSigAt(s, sender, a->seq, theirs); /* what it was asked for instead, if known */
  weftDirectPublishFail(s, FAIL_MISMATCH, sender);
  return weftDirectSigMismatch(s, sender, mine, theirs);
}

/* The sender agrees on this call but not on an eager one before it (one that nobody could
 * check: a rank that took itself for the root, whose data nobody read). */
static weftResult_t historyMismatch(struct directState *s, const struct weftCollArgs *a, int sender) {
  char call[160];
  weftSigDescribe((uint64_t)a->count << 16 | (whatOf(a) & 0xffff), whatOf(a) >> 16, call, sizeof call);
  weftDirectPublishFail(s, FAIL_MISMATCH, sender);
  return weftSetError(weftInvalidUsage,
                      "mismatched collectives before operation %llu: ranks %d and %d both called "
                      "%s, but an eager Broadcast or Reduce before it differed between them (a "
                      "root, count, datatype or op that no rank could check then)",
                      (unsigned long long)a->seq, s->me, sender, call);
}

/* Waits for sender's slot of operation a->seq and checks its signature and history. */
static weftResult_t eagerReceive(struct weftComm *comm, struct directState *s,
                                 const struct weftCollArgs *a, int sender,
                                 struct directEagerSlot **out) {
  struct directEagerSlot *slot = slotOf(s, sender, a->seq);
  uint64_t seen = atomic_load_explicit(&slot->seq, memory_order_acquire);
  if (seen != a->seq) {
    struct weftWaiter w;
    weftWaitStart(&w, comm);
    while ((seen = atomic_load_explicit(&slot->seq, memory_order_acquire)) != a->seq) {
      if (weftDirectReached(seen, a->seq)) break; /* a later operation's: mine never came */
      /* Past the spin phase only: the sender stores its opSeq at every call, and a reader that
       * polled that line makes the store a miss that the sender's next stores queue behind. */
      if (w.deadlineMs != 0 && passed(s, sender, a->seq)) { /* its opSeq is stored after its slot */
        seen = atomic_load_explicit(&slot->seq, memory_order_acquire);
        if (seen != a->seq) break;
        continue;
      }
      weftResult_t rc = weftWaitPause(&w, "waiting for the eager data of", sender);
      if (rc == weftSuccess && w.deadlineMs != 0)
        rc = weftDirectCheckPeer(comm, s, sender, &slot->seq, a->seq, (w.iter & 15) == 0);
      if (rc != weftSuccess) return eagerWaitFailed(comm, s, rc);
    }
    weftWaitDone(&w);
  }
  if (seen != a->seq || slot->count != a->count || slot->what != whatOf(a))
    return eagerMismatch(s, a, sender, slot, seen);
  if (slot->chain != s->eagerChain) return historyMismatch(s, a, sender);
  DIRECT_TSAN_ACQUIRE();
  *out = slot;
  return weftSuccess;
}

static void eagerTaken(struct directState *s, int sender, uint64_t seq) {
  DIRECT_TSAN_RELEASE();
  atomic_store_explicit(takenOf(s, s->me, sender), seq, memory_order_release);
}

/* ---- the collectives ---- */

/* An eager call as this rank made it, folded into what the next synchronising direct call
 * compares (direct_sync.c): a disagreement nobody read (a rank that took itself for the
 * root) fails there on every rank, if no reader or sender found it before. */
static void chain(struct directState *s, const struct weftCollArgs *a) {
  uint64_t h = (s->eagerChain ^ whatOf(a)) * 0x9e3779b97f4a7c15ULL ^ a->count;
  s->eagerChain = h ^ h >> 29;
}

/* Every eager call's start: a failure another rank published fails it (a rank that ran ahead
 * learns of a mismatch here), and the call joins the eager hash. */
static weftResult_t eagerBegin(struct weftComm *comm, struct directState *s,
                               const struct weftCollArgs *a) {
  WEFTCHECK(weftDirectFailed(comm, s));
  chain(s, a);
  return weftSuccess;
}

/* Every other rank's slot of this call, its data in s->inputs (mine left as it is). */
static weftResult_t receiveFromAll(struct weftComm *comm, struct directState *s,
                                   const struct weftCollArgs *a) {
  for (int r = 0; r < s->n; r++) {
    struct directEagerSlot *slot;
    if (r == s->me) continue;
    WEFTCHECK(eagerReceive(comm, s, a, r, &slot));
    s->inputs[r] = dataOf(slot);
  }
  return weftSuccess;
}

static void takenFromAll(struct directState *s, uint64_t seq) {
  for (int r = 0; r < s->n; r++)
    if (r != s->me) eagerTaken(s, r, seq);
}

/* A reader of the root's slot: its bytes from offset `at` of the slot's data. */
static weftResult_t readRoot(struct weftComm *comm, struct directState *s,
                             const struct weftCollArgs *a, size_t at) {
  struct directEagerSlot *slot;
  WEFTCHECK(eagerReceive(comm, s, a, a->root, &slot));
  memcpy(a->recvbuff, dataOf(slot) + at, a->bytes);
  eagerTaken(s, a->root, a->seq);
  return weftSuccess;
}

weftResult_t weftDirectEagerBroadcast(struct weftComm *comm, struct directState *s,
                                      const struct weftCollArgs *a) {
  WEFTCHECK(eagerBegin(comm, s, a));
  if (s->me != a->root) return readRoot(comm, s, a, 0);
  WEFTCHECK(eagerSend(comm, s, a, a->sendbuff, a->bytes, -1));
  if (a->recvbuff != a->sendbuff) memcpy(a->recvbuff, a->sendbuff, a->bytes);
  return weftSuccess;
}

/* The root reduces every rank's slot with its own input, in rank order. */
weftResult_t weftDirectEagerReduce(struct weftComm *comm, struct directState *s,
                                   const struct weftCollArgs *a) {
  WEFTCHECK(eagerBegin(comm, s, a));
  if (s->me != a->root) return eagerSend(comm, s, a, a->sendbuff, a->bytes, a->root);
  WEFTCHECK(receiveFromAll(comm, s, a));
  /* the reduction writes dst while it reads inputs[1..]: my input may only be dst as the first */
  const char *own = a->sendbuff;
  if (own == a->recvbuff && s->me != 0) own = memcpy(s->accum, a->sendbuff, a->bytes);
  s->inputs[s->me] = own;
  weftDirectReduceAll(a->recvbuff, s->inputs, s->n, a->count, a);
  takenFromAll(s, a->seq);
  return weftSuccess;
}

/* The root copies every rank's slot into its block. */
weftResult_t weftDirectEagerGather(struct weftComm *comm, struct directState *s,
                                   const struct weftCollArgs *a) {
  WEFTCHECK(eagerBegin(comm, s, a));
  if (s->me != a->root) return eagerSend(comm, s, a, a->sendbuff, a->bytes, a->root);
  WEFTCHECK(receiveFromAll(comm, s, a));
  for (int r = 0; r < s->n; r++)
    if (r != s->me) memcpy((char *)a->recvbuff + (size_t)r * a->bytes, s->inputs[r], a->bytes);
  char *own = (char *)a->recvbuff + (size_t)s->me * a->bytes;
  if (own != a->sendbuff) memcpy(own, a->sendbuff, a->bytes);
  takenFromAll(s, a->seq);
  return weftSuccess;
}

/* The root puts its whole send buffer in one slot; each rank takes its block. */
weftResult_t weftDirectEagerScatter(struct weftComm *comm, struct directState *s,
                                    const struct weftCollArgs *a) {
  WEFTCHECK(eagerBegin(comm, s, a));
  if (s->me != a->root) return readRoot(comm, s, a, (size_t)s->me * a->bytes);
  WEFTCHECK(eagerSend(comm, s, a, a->sendbuff, (size_t)s->n * a->bytes, -1));
  const char *own = (const char *)a->sendbuff + (size_t)s->me * a->bytes;
  if (own != a->recvbuff) memcpy(a->recvbuff, own, a->bytes);
  return weftSuccess;
}

/* No synchronisation: the copies in and out of a slot (cached), and for a Reduce's root the
 * reduction of n inputs (a Gather's root copies n blocks, a Scatter's root n into its slot). */
double weftDirectEagerCost(const struct directState *s, const struct weftComm *comm,
                           const struct weftCollArgs *a) {
  (void)comm;
  double b = (double)a->bytes;
  return 0.1 + (a->coll == weftCollBroadcast ? 2.0 * b : b * (1.0 + s->n)) / 10e3;
}
