/* What the files of the direct algorithm share (algorithms/direct*.c): the segment's layout,
 * the rounds every collective is made of, and the helpers that read peers' memory.
 * - direct.c: init (segment, cross-memory attach probe), finalize, dispatch, the ops table;
 * - direct_sync.c: flags, waits (liveness, fail word, timeouts naming late ranks), signatures;
 * - direct_peer.c: peer memory (pointer or process_vm_readv/writev), reductions in rank order;
 * - direct_allreduce.c: AllReduce; direct_coll.c: Broadcast, Reduce, AllGather, ReduceScatter;
 * - direct_eager.c: Broadcast, Reduce, Gather and Scatter of at most WEFT_DIRECT_EAGER_BYTES,
 *   unsynchronised; direct_gather.c: larger Gather and Scatter, staged;
 * - direct_alltoall.c: AlltoAll, staged or read in place;
 * - direct_learn.c: which of the two paths a class of calls takes, from timed trials.
 * A round is one step every rank takes: it raises its flags of the round in turn (POSTED,
 * then REDUCED, DONE where the collective needs them), and a flag's value is the round. Every
 * round starts with POSTED and a wait for every rank's POSTED (weftDirectArrive), and a rank
 * posts round s + 1 only after it finished round s, so a rank in round s + 2 knows that every
 * rank is done with round s: staging halves and result halves (by round parity) are never
 * overwritten while read, and addresses published for round s stay valid while it is read. */
#ifndef WEFT_DIRECT_H_
#define WEFT_DIRECT_H_

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "shmseg.h"

/* Calls whose data per rank through the segment is at most this take the one-round paths. */
#define DIRECT_SMALL_BYTES 16384
/* Pieces of peers' buffers read through process_vm_readv fit in the cache. */
#define DIRECT_BOUNCE_BYTES (256 * 1024)

enum { FLAG_POSTED, FLAG_REDUCED, FLAG_DONE, FLAG_COUNT };

/* The fail word: reason << 56 | (noticer + 1) << 28 | (culprit + 1). Every lasting wait reads
 * it at every pause, so it has a line of its own, which nothing writes until a failure. */
enum { FAIL_DEAD = 1, FAIL_ABORTED = 2, FAIL_MISMATCH = 3 };
struct directFailLine {
  _Alignas(64) _Atomic uint64_t word;
};

/* What a rank was asked to do at operation seq: count, weftSigWhat << 16 | type << 8 | op.
 * A seqlock (direct_sync.c): seq is 0 while the entry is rewritten. */
struct directSig {
  _Atomic uint64_t seq, count, what;
};
/* Operations a rank's signatures are kept for: eager calls let a rank run ahead of another
 * (up to DIRECT_EAGER_DEPTH calls per queue), and a rank that waits still reads the signature
 * its peer had at the waiter's operation. */
#define DIRECT_SIG_HISTORY 64

/* Calls that may read peers in place learn which path is faster per class: collective (those
 * with an in-place path: AllReduce to AlltoAll) and power-of-two size from 16 KiB
 * (direct_learn.c). */
#define DIRECT_LEARN_SIZES 32
#define DIRECT_LEARN_CLASSES ((weftCollAlltoAll + 1) * DIRECT_LEARN_SIZES)
#define DIRECT_LEARN_MAX_TRIALS 15 /* WEFT_DIRECT_CMA_TRIALS' maximum */
enum { LEARNED_NONE, LEARNED_STAGED, LEARNED_IN_PLACE };

/* One per rank, in the segment; only its rank writes it (rank 0's fail word excepted). */
struct directCtrl {
  _Alignas(64) _Atomic uint64_t flag[FLAG_COUNT][8]; /* [i][0] used; the rest pads to a line */
  _Alignas(64) uint64_t sendAddr, recvAddr; /* in-place paths: this round's buffers */
  _Atomic uint64_t opSeq;  /* the operation this rank is in (for timeout messages) */
  struct directSig sig[DIRECT_SIG_HISTORY]; /* [seq % DIRECT_SIG_HISTORY] */
  /* rank 0's only: the path its trials chose per class (LEARNED_*), read by every rank */
  _Alignas(64) _Atomic uint8_t learned[DIRECT_LEARN_CLASSES];
};

/* A rank's own record of one class's trials (direct_learn.c). */
struct directLearn {
  uint32_t calls;  /* of this class that could read in place, counted alike on every rank */
  uint8_t choice;  /* LEARNED_*: once read from rank 0's ctrl */
  float estimateUs[2]; /* [staged, in place] as the model put them (for the report) */
  uint8_t samples[2]; /* rank 0: timed trials of [staged, in place] so far */
  float us[2][DIRECT_LEARN_MAX_TRIALS]; /* ... and their times */
};

/* ---- eager calls (direct_eager.c) ----
 * A Broadcast or Reduce of at most WEFT_DIRECT_EAGER_BYTES does not synchronise the ranks:
 * each rank has a queue of DIRECT_EAGER_DEPTH slots in the segment, a sender (a Broadcast's
 * root, a Reduce's other ranks) writes its data into slot seq % depth with the call's
 * signature and returns, and a reader (the others, the Reduce's root) waits for its slot,
 * checks the signature, takes the data and records in its own row of `taken` the operation
 * it took from that sender. A sender reuses a slot once its previous readers took it. */
#define DIRECT_EAGER_DEPTH 32
struct directEagerSlot { /* at a line's start; the data follows chain (direct_eager.c) */
  _Atomic uint64_t seq;              /* the operation whose data follows (0: none yet) */
  uint64_t count, what;              /* its signature, as struct directSig */
  uint64_t chain;                    /* the sender's eager calls to this one, hashed */
};

/* Each rank maps the shared segment at its own address, so ThreadSanitizer cannot pair a
 * release of a flag (or an eager slot) through one mapping with its acquire through another, and reports the
 * user buffers that the flags order (read in place by threads of one process) as races.
 * Under TSan only, the handoff is also told to it on one process-wide object. */
#if defined(__SANITIZE_THREAD__)
#define DIRECT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define DIRECT_TSAN 1
#endif
#endif
#ifdef DIRECT_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
extern char weftDirectTsanSync; /* direct_sync.c */
#define DIRECT_TSAN_RELEASE() __tsan_release(&weftDirectTsanSync)
#define DIRECT_TSAN_ACQUIRE() __tsan_acquire(&weftDirectTsanSync)
#else
#define DIRECT_TSAN_RELEASE() ((void)0)
#define DIRECT_TSAN_ACQUIRE() ((void)0)
#endif

static inline size_t weftDirectMin(size_t a, size_t b) { return a < b ? a : b; }

/* Whether a flag value has reached round seq (modulo 2^32: ranks are never 2^31 apart). */
static inline int weftDirectReached(uint64_t flagValue, uint64_t seq) {
  return (int32_t)((uint32_t)flagValue - (uint32_t)seq) >= 0;
}

struct directState {
  char *seg;
  size_t segBytes;
  char name[WEFT_SHM_NAME_BYTES];
  int named;
  int n, me;
  size_t chunkBytes; /* staging per rank and round parity */
  size_t cmaMinBytes;
  int samePid;  /* every rank is a thread of this process */
  int cmaOk;    /* every rank can read and write every other rank's memory (process_vm_*) */
  int cmaAlways; /* WEFT_DIRECT_CMA=2: the in-place path wherever it can run, whatever it costs */
  double peerCopySpeed; /* reading a peer in place against memcpy: 1 for threads, for other
                         * processes process_vm_readv's measured rate over memcpy's, the
                         * slowest rank's (0.3-0.5 in a VM, near 1 on bare metal) */
  int *pids;    /* by rank */
  uint32_t sigHash; /* of the running operation, in the high half of every flag value */
  _Atomic int *abortFlag; /* the communicator's */
  int64_t lastLivenessMs;
  uint64_t seq; /* rounds done */
  struct directFailLine *fail; /* at the segment's start */
  struct directCtrl *ctrl;     /* [n], after it */
  char *staging; /* [rank][2][chunkBytes] */
  char *result;  /* [2][chunkBytes] */
  char *bounce;  /* DIRECT_BOUNCE_BYTES: a peer's piece read with process_vm_readv */
  char *accum;   /* DIRECT_BOUNCE_BYTES: a piece being reduced where its destination cannot be */
  const char **inputs; /* [n]: scratch for one reduction's inputs */
  uint64_t *addrs;     /* [n]: scratch for one reduction's inputs in peers' memory */
  /* eager calls: at most eagerBytes (0: none), every rank's the same (init checks) */
  size_t eagerBytes, slotBytes, takenRowBytes;
  char *eagerSlots;  /* [n][DIRECT_EAGER_DEPTH][slotBytes] */
  char *eagerTaken;  /* [n readers][takenRowBytes]: _Atomic uint64_t per sender */
  uint64_t eagerUse[DIRECT_EAGER_DEPTH]; /* my slot's last operation (0: none) */
  int eagerReader[DIRECT_EAGER_DEPTH];   /* ... its reader (-1: every other rank) */
  uint64_t eagerSig[DIRECT_EAGER_DEPTH][2]; /* ... and its count and what (struct directSig) */
  uint64_t eagerChain; /* every eager call's signature so far, hashed (direct_eager.c) */
  uint64_t *knownTaken; /* [n]: what I last read of taken[r][me] */
  int cmaTrials;  /* WEFT_DIRECT_CMA_TRIALS (0 with WEFT_DIRECT_CMA other than 1) */
  struct directLearn *learn; /* [DIRECT_LEARN_CLASSES] */
  int trialClass; /* rank 0: the running call's class when it is a timed trial, else -1 */
  int trialPath;  /* ... and its path: 0 staged, 1 in place */
  int64_t trialStartNs;
};

/* Elements of each of the n parts one staged round carries (ReduceScatter's and Scatter's
 * rounds): chunk / n bytes, 64-byte aligned. */
static inline size_t weftDirectScatterPiece(const struct directState *s, size_t ts) {
  return s->chunkBytes / (size_t)s->n / 64 * 64 / ts;
}

/* ---- direct_sync.c ---- */
/* Raises this rank's flag to round seq (release: what it wrote before is visible). */
void weftDirectPost(struct directState *s, int flag, uint64_t seq);
/* Waits until every other rank's flag reached seq. A wait that lasts checks the fail word
 * and the liveness of the rank it waits for; a timeout names every rank not there yet. */
weftResult_t weftDirectWaitAll(struct weftComm *comm, struct directState *s, int flag, uint64_t seq);
/* The start of round seq: post, wait for every rank's post; on an operation's first round
 * (first != 0) compare every rank's signature with mine, so a mismatch fails on every rank
 * before any data is combined. */
weftResult_t weftDirectArrive(struct weftComm *comm, struct directState *s,
                              const struct weftCollArgs *a, uint64_t seq, int first);
/* During a lasting wait for rank r's word to reach seq (weftDirectReached): has another rank
 * published a failure, or (lookNow: the clock is read for it) is r dead without getting there? */
weftResult_t weftDirectCheckPeer(struct weftComm *comm, struct directState *s, int r,
                                 const _Atomic uint64_t *word, uint64_t seq, int lookNow);
/* The failure another rank published in the fail word, if any. */
weftResult_t weftDirectFailed(struct weftComm *comm, struct directState *s);
/* What rank `rank` was asked to do at operation seq (sig: seq, count, what); 0 when that is no
 * longer (or not yet) known. */
int weftDirectSigAt(struct directState *s, int rank, uint64_t seq, uint64_t sig[3]);
/* weftInvalidUsage naming both calls (sigs as weftDirectSigAt's). */
weftResult_t weftDirectSigMismatch(struct directState *s, int r, const uint64_t mine[3],
                                   const uint64_t theirs[3]);
/* The first rank to see a failure writes it where every waiter reads it. */
void weftDirectPublishFail(struct directState *s, int reason, int culprit);
/* The ops' begin and watch (lib/algo.h). */
void weftDirectBegin(void *state, const struct weftCollArgs *a);
weftResult_t weftDirectWatch(void *state, struct weftComm *comm);

/* ---- direct_peer.c ---- */
/* Rank `rank`'s staging half of round seq. */
static inline char *weftDirectStagingOf(struct directState *s, int rank, uint64_t seq) {
  return s->staging + ((size_t)rank * 2 + (seq & 1)) * s->chunkBytes;
}
/* Whether rank's memory is this process's (a thread of it, or this rank). */
static inline int weftDirectIsLocal(const struct directState *s, int rank) {
  return s->pids[rank] == s->pids[s->me];
}
/* Whether a call that puts `bytes` per rank through the segment can read peers in place
 * instead; each collective takes that path where its cost is the lower (weftDirectPeerBw). */
static inline int weftDirectCanInPlace(const struct directState *s, size_t bytes) {
  return bytes > DIRECT_SMALL_BYTES && (s->samePid || (s->cmaOk && bytes >= s->cmaMinBytes));
}
/* Whether a call takes the in-place path, given both paths' costs. */
static inline int weftDirectTakesInPlace(const struct directState *s, size_t bytes, double inPlaceUs,
                                         double stagedUs) {
  return weftDirectCanInPlace(s, bytes) && (s->cmaAlways || inPlaceUs < stagedUs);
}
/* ---- direct_learn.c ---- */
/* Whether a call that is running (not costed) reads peers in place: between processes, the
 * class's trials decide; weftDirectTakesInPlace's estimate elsewhere and until they have. */
int weftDirectRunsInPlace(struct directState *s, const struct weftCollArgs *a, size_t bytes,
                          double inPlaceUs, double stagedUs);
/* Trial call k of a class with T timed calls a path: its path (0 staged, 1 in place; -1: past
 * the trials) and whether it is timed. */
int weftDirectTrialAt(int T, uint32_t k, int *timed);
/* The path (LEARNED_*) of trials' medians: the estimate's unless the other path was 10% faster. */
uint8_t weftDirectLearnPick(int estimateInPlace, double stagedUs, double inPlaceUs);
/* Rank 0, after a call weftDirectRunsInPlace made a timed trial: its time, and after the last
 * trial the class's choice. */
void weftDirectTrialEnd(struct directState *s, const struct weftCollArgs *a);
/* Bytes per us of an in-place path's copies (memcpy's 8e3 scaled by the peer copy speed). */
static inline double weftDirectPeerBw(const struct directState *s) {
  return 8e3 * (s->samePid ? 1.0 : s->peerCopySpeed);
}
/* Copies between a peer's address and local memory: memcpy for a thread of this process,
 * process_vm_readv / process_vm_writev otherwise. */
weftResult_t weftDirectPeerRead(struct directState *s, int rank, void *dst, uint64_t addr,
                                size_t bytes);
weftResult_t weftDirectPeerWrite(struct directState *s, int rank, uint64_t addr, const void *src,
                                 size_t bytes);
/* dst = inputs[0] op inputs[1] op ... op inputs[n-1], in rank order; the last step final
 * (avg divides by n). dst may be inputs[0], never another input. */
void weftDirectReduceAll(char *dst, const char *const *inputs, int n, size_t count,
                         const struct weftCollArgs *a);
/* The same for count elements (at most a bounce buffer's) at addrs[r] in rank r's memory:
 * a thread's read in place, another process's through the bounce buffer. dst is local and may
 * be any input's address (then the piece is reduced aside and copied in at the end). */
weftResult_t weftDirectReducePeers(struct directState *s, const struct weftCollArgs *a,
                                   const uint64_t *addrs, size_t count, char *dst);
/* Elements [*first, *first + *len) of `count` that rank `who` of n reduces; 64-byte aligned. */
void weftDirectSliceOf(size_t count, size_t typeSize, int n, int who, size_t *first, size_t *len);

/* ---- direct_place.c: the segment's pages on the NUMA nodes of their writers ---- */
/* The header (fail line, ctrl[n]) is padded to this, so each rank's staging starts on a page
 * (the chunk is a multiple of it: settings.c). A larger system page only binds less. */
#define DIRECT_PAGE_BYTES 4096
size_t weftDirectHeaderBytes(int n);
/* A part of the segment (offset and length, whole pages) one rank writes, and its node. */
struct directSpan {
  size_t off, len;
  int rank, node;
};
#define DIRECT_SPANS_PER_RANK 3
/* Rank's parts: its staging (both halves), its slice of each result half (a full chunk cut
 * as the reductions cut it, weftDirectSliceOf), whole pages of pageBytes only; their count. */
int weftDirectSpansOf(int n, size_t chunkBytes, size_t pageBytes, int rank, struct directSpan *spans);
/* What the creator binds: host (NULL: nothing) and the places of the n ranks. */
struct directPlaceArgs {
  const struct weftTopoHost *host;
  const struct weftTopoPlace *places;
  int n;
  size_t chunkBytes;
};
/* Every rank's parts whose writer has a NUMA node to bind to (weftTopoMemNode), in spans
 * (room for n * DIRECT_SPANS_PER_RANK); their count. Pure. */
int weftDirectPlacement(const struct directPlaceArgs *p, size_t pageBytes, struct directSpan *spans);
/* weftShmPlaceFn: binds the parts weftDirectPlacement lists (arg: struct directPlaceArgs). */
void weftDirectPlaceSegment(void *seg, size_t bytes, void *arg);

/* ---- costs (microseconds, pure: every rank computes the same) ---- */
/* One round's synchronisation: ~0.2 us per peer when every rank has a core, a scheduler
 * round trip (~0.7 us per rank) when ranks outnumber cores (calibrated on a 2-core x86 host). */
static inline double weftDirectSyncUs(const struct weftComm *comm, int n) {
  return comm->oversubscribed ? 0.7 * n : 0.2 * (n - 1) + 0.1;
}

/* ---- direct_eager.c ---- */
/* The eager area's bytes for n ranks and eagerBytes per slot; its layout in s. */
size_t weftDirectEagerBytes(int n, size_t eagerBytes);
void weftDirectEagerLayout(struct directState *s, char *at);
/* Whether the call runs eagerly: what one slot carries fits (a Scatter's whole buffer). */
static inline int weftDirectIsEager(const struct directState *s, const struct weftCollArgs *a) {
  if (a->coll == weftCollScatter) return a->bytes <= s->eagerBytes / (size_t)s->n;
  return (a->coll == weftCollBroadcast || a->coll == weftCollReduce ||
          a->coll == weftCollGather) && a->bytes <= s->eagerBytes;
}
weftResult_t weftDirectEagerBroadcast(struct weftComm *comm, struct directState *s,
                                      const struct weftCollArgs *a);
weftResult_t weftDirectEagerReduce(struct weftComm *comm, struct directState *s,
                                   const struct weftCollArgs *a);
weftResult_t weftDirectEagerGather(struct weftComm *comm, struct directState *s,
                                   const struct weftCollArgs *a);
weftResult_t weftDirectEagerScatter(struct weftComm *comm, struct directState *s,
                                    const struct weftCollArgs *a);
double weftDirectEagerCost(const struct directState *s, const struct weftComm *comm,
                           const struct weftCollArgs *a);

/* ---- the collectives ---- */
weftResult_t weftDirectAllReduce(struct weftComm *comm, struct directState *s,
                                 const struct weftCollArgs *a);
double weftDirectAllReduceCost(const struct directState *s, const struct weftComm *comm,
                               const struct weftCollArgs *a);
weftResult_t weftDirectBroadcast(struct weftComm *comm, struct directState *s,
                                 const struct weftCollArgs *a);
weftResult_t weftDirectReduce(struct weftComm *comm, struct directState *s,
                              const struct weftCollArgs *a);
weftResult_t weftDirectAllGather(struct weftComm *comm, struct directState *s,
                                 const struct weftCollArgs *a);
weftResult_t weftDirectReduceScatter(struct weftComm *comm, struct directState *s,
                                     const struct weftCollArgs *a);
/* Gather and Scatter, staged (direct_gather.c). */
weftResult_t weftDirectGather(struct weftComm *comm, struct directState *s,
                              const struct weftCollArgs *a);
weftResult_t weftDirectScatter(struct weftComm *comm, struct directState *s,
                               const struct weftCollArgs *a);
double weftDirectGatherCost(const struct directState *s, const struct weftComm *comm,
                            const struct weftCollArgs *a);
/* AlltoAll (direct_alltoall.c). */
weftResult_t weftDirectAlltoAll(struct weftComm *comm, struct directState *s,
                                const struct weftCollArgs *a);
double weftDirectAlltoAllCost(const struct directState *s, const struct weftComm *comm,
                              const struct weftCollArgs *a);
/* Broadcast, Reduce, AllGather, ReduceScatter (direct_coll.c). */
/* Whether the running Broadcast, Reduce, AllGather or ReduceScatter a takes the in-place
 * path (weftDirectRunsInPlace: it may be a trial). */
int weftDirectCollInPlace(struct directState *s, const struct weftComm *comm,
                          const struct weftCollArgs *a);
double weftDirectCollCost(const struct directState *s, const struct weftComm *comm,
                          const struct weftCollArgs *a);

#endif
