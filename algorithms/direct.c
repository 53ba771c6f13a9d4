/* Direct shared-memory AllReduce, for communicators whose ranks all share one host.
 * How it works: one segment holds, per rank, three progress flags and a staging area.
 * - small (<= WEFT_DIRECT_SMALL bytes): each rank copies its input into its staging slot and
 *   raises `posted`; once all have posted, every rank reduces all inputs itself, in rank
 *   order (so all get the same bits). One synchronisation.
 * - staged (no way to read peers' memory): per chunk, copy in, post; rank i reduces slice i of
 *   the chunk from all staging slots into a shared result area, raises `reduced`; then every
 *   rank copies the whole result out. Two synchronisations per chunk.
 * - in place (peers are threads of this process, or cross-memory attach works and the buffer is
 *   large): ranks publish their buffer addresses; rank i reduces slice i reading the others'
 *   send buffers where they are (pointer, or process_vm_readv into a cache-sized bounce
 *   buffer), writes it into its own receive buffer, raises `reduced`; then reads the other
 *   slices from the other ranks' receive buffers, raises `done`, and waits for all `done`
 *   since the others read its buffers until then. Three synchronisations, one copy of the
 *   data per rank instead of three.
 * Staging areas alternate between two halves by round parity; a rank can only start round
 * s+2 after all have posted round s+1, which they do only after finishing round s, so a half
 * is never overwritten while read.
 * Bytes moved per rank: in place ~ 2(n-1)/n * bytes of peer reads; staged ~ 3 * bytes copies.
 * cost() = synchronisations * sync latency + bytes moved / memory bandwidth.
 * Faults: a flag's value is the round (low 32 bits, compared modulo 2^32) and a 32-bit hash of
 * the operation's signature (sequence, count, datatype, op) in the high bits; the full
 * signature sits in a line only its writer touches on the fast path. After the first
 * synchronisation each rank compares every hash with its own (free: the flag lines are already
 * here), so mismatched calls fail on every rank (weftInvalidUsage, both signatures in the
 * message) before any data is combined. A wait that lasts
 * looks, every DIRECT_LIVENESS_MS, whether the rank it waits for still exists, and reads the
 * segment's fail word: the first rank that finds a peer dead (or is aborted) writes it there,
 * so every other waiter fails within milliseconds, wherever it waits. A timeout names every
 * rank that had not arrived and the operation it was at. */
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "bootstrap.h"
#include "check.h"
#include "core.h"
#include "param.h"
#include "prims.h"
#include "reduce.h"
#include "shmseg.h"

#define DIRECT_SMALL_BYTES 16384
#define DIRECT_BOUNCE_BYTES (256 * 1024)

enum { FLAG_POSTED, FLAG_REDUCED, FLAG_DONE, FLAG_COUNT };

/* The fail word (in rank 0's block): reason << 56 | (noticer + 1) << 28 | (culprit + 1). */
enum { FAIL_DEAD = 1, FAIL_ABORTED = 2 };
#define DIRECT_LIVENESS_MS 50

struct directCtrl {
  _Alignas(64) _Atomic uint64_t flag[FLAG_COUNT][8]; /* [i][0] used; the rest pads to a line */
  _Alignas(64) uint64_t sendAddr, recvAddr;
  _Atomic uint64_t opSeq;  /* the operation this rank is in (for timeout messages) */
  _Atomic uint64_t fail;   /* rank 0's only: see the fail word */
  _Atomic uint64_t sig[2][3]; /* [op parity]: seq, count, weftSigWhat << 16 | type << 8 | op */
};

/* Whether a flag value has reached round seq (modulo 2^32: ranks are never 2^31 apart). */
static inline int reached(uint64_t flagValue, uint64_t seq) {
  return (int32_t)((uint32_t)flagValue - (uint32_t)seq) >= 0;
}

struct directState {
  char *seg;
  size_t segBytes;
  char name[WEFT_SHM_NAME_BYTES];
  int named;
  int n, me;
  size_t chunkBytes;
  size_t cmaMinBytes;
  int samePid;  /* every rank is a thread of this process */
  int cmaOk;    /* every rank can read every other rank's memory with process_vm_readv */
  int *pids;    /* by rank */
  uint32_t sigHash; /* of the running operation, in the high half of every flag value */
  _Atomic int *abortFlag; /* the communicator's */
  int64_t lastLivenessMs;
  uint64_t seq; /* rounds done */
  struct directCtrl *ctrl;
  char *staging; /* [rank][2][chunkBytes] */
  char *result;  /* [2][chunkBytes] */
  char *bounce;
};

struct directHello {
  char name[WEFT_SHM_NAME_BYTES];
  int pid;
  int cmaOk;
  uint64_t probeAddr;
};

static size_t segmentBytes(int n, size_t chunk) {
  return sizeof(struct directCtrl) * (size_t)n + (size_t)n * 2 * chunk + 2 * chunk;
}

static void layout(struct directState *s) {
  s->ctrl = (struct directCtrl *)s->seg;
  s->staging = s->seg + sizeof(struct directCtrl) * (size_t)s->n;
  s->result = s->staging + (size_t)s->n * 2 * s->chunkBytes;
}

static volatile uint64_t cmaProbeWord = 0x77656674;

static int cmaReadable(int pid, uint64_t addr) {
  uint64_t v = 0;
  struct iovec local = {&v, sizeof v}, remote = {(void *)(uintptr_t)addr, sizeof v};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof v && v == 0x77656674;
}

static weftResult_t directMapSegment(struct weftComm *comm, struct directState *s,
                                     struct directHello *hello) {
  if (s->me == 0) {
    WEFTCHECK(weftShmCreate(s->segBytes, s->name, (void **)&s->seg));
    s->named = 1;
    memcpy(hello[0].name, s->name, sizeof s->name);
  }
  hello[s->me].pid = (int)getpid();
  hello[s->me].probeAddr = (uint64_t)(uintptr_t)&cmaProbeWord;
  WEFTCHECK(weftBootstrapAllGather(comm->boot, hello, sizeof *hello, weftDeadline(comm)));
  if (s->me != 0) {
    hello[0].name[sizeof hello[0].name - 1] = '\0';
    WEFTCHECK(weftShmOpen(hello[0].name, s->segBytes, (void **)&s->seg));
  }
  layout(s);
  return weftSuccess;
}

/* Every rank tries to read every other process; all agree on the AND of the answers. */
static weftResult_t directProbeCma(struct weftComm *comm, struct directState *s,
                                   struct directHello *hello) {
  int ok = weftParamDirectCma() != 0;
  s->samePid = 1;
  for (int r = 0; r < s->n; r++) {
    s->pids[r] = hello[r].pid;
    if (hello[r].pid == (int)getpid()) continue;
    s->samePid = 0;
    if (ok && !cmaReadable(hello[r].pid, hello[r].probeAddr)) {
      INFO(WEFT_SHM, "direct: process_vm_readv of rank %d (pid %d) refused; staging instead", r,
           hello[r].pid);
      ok = 0;
    }
  }
  hello[s->me].cmaOk = ok;
  WEFTCHECK(weftBootstrapAllGather(comm->boot, hello, sizeof *hello, weftDeadline(comm)));
  s->cmaOk = 1;
  for (int r = 0; r < s->n; r++) s->cmaOk &= hello[r].cmaOk;
  return weftSuccess;
}

static weftResult_t directFinalize(void *state);

static weftResult_t directInit(struct weftComm *comm, void **state, char *why, size_t whyLen) {
  *state = NULL;
  if (comm->nLocalRanks != comm->nranks) {
    snprintf(why, whyLen, "it needs every rank on one host (shared memory), and the ranks span %d "
             "hosts", comm->nHosts);
    return weftSuccess;
  }
  int64_t chunk = weftParamDirectChunkBytes();
  if (chunk < DIRECT_SMALL_BYTES || chunk % 4096 != 0) chunk = 1 << 20;
  struct directState *s = calloc(1, sizeof *s);
  struct directHello *hello = calloc((size_t)comm->nranks, sizeof *hello);
  weftResult_t rc = weftSuccess;
  if (s == NULL || hello == NULL || (s->pids = calloc((size_t)comm->nranks, sizeof(int))) == NULL ||
      (s->bounce = aligned_alloc(64, DIRECT_BOUNCE_BYTES)) == NULL) {
    rc = weftSetError(weftSystemError, "out of memory");
    goto fail;
  }
  s->n = comm->nranks;
  s->me = comm->rank;
  s->abortFlag = &comm->abortFlag;
  s->chunkBytes = (size_t)chunk;
  s->segBytes = segmentBytes(s->n, s->chunkBytes);
  int64_t cmaMin = weftParamDirectCmaMinBytes();
  s->cmaMinBytes = cmaMin > DIRECT_SMALL_BYTES ? (size_t)cmaMin : DIRECT_SMALL_BYTES + 1;
  WEFTCHECKGOTO(directMapSegment(comm, s, hello), rc, fail);
  WEFTCHECKGOTO(directProbeCma(comm, s, hello), rc, fail); /* also: everyone has mapped */
  if (s->named) weftShmUnlink(s->name);
  s->named = 0;
  INFO(WEFT_SHM, "direct: %d ranks, %s, chunk %zu bytes", s->n,
       s->samePid ? "threads of one process" : s->cmaOk ? "cross-memory attach" : "staging only",
       s->chunkBytes);
  free(hello);
  *state = s;
  return weftSuccess;
fail:
  free(hello);
  if (s != NULL) directFinalize(s);
  return rc;
}

/* Each rank maps the shared segment at its own address, so ThreadSanitizer cannot pair a
 * release of a flag through one mapping with its acquire through another, and reports the
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
static char directTsanSync;
#define DIRECT_TSAN_RELEASE() __tsan_release(&directTsanSync)
#define DIRECT_TSAN_ACQUIRE() __tsan_acquire(&directTsanSync)
#else
#define DIRECT_TSAN_RELEASE() ((void)0)
#define DIRECT_TSAN_ACQUIRE() ((void)0)
#endif

static void post(struct directState *s, int flag, uint64_t seq) {
  DIRECT_TSAN_RELEASE();
  atomic_store_explicit(&s->ctrl[s->me].flag[flag][0],
                        (uint64_t)s->sigHash << 32 | (uint32_t)seq, memory_order_release);
}

static void publishFail(struct directState *s, int reason, int culprit) {
  uint64_t word = (uint64_t)reason << 56 | (uint64_t)(s->me + 1) << 28 | (uint64_t)(culprit + 1);
  uint64_t none = 0;
  atomic_compare_exchange_strong(&s->ctrl[0].fail, &none, word);
}

static const char *hostOf(const struct weftComm *comm, int rank) {
  return comm->peers != NULL ? comm->peers[rank].hostname : "?";
}

/* A wait that lasts for rank r's flag to reach seq: has another rank published a failure, or
 * is r dead? */
static weftResult_t checkPeers(struct weftComm *comm, struct directState *s, int r, int flag,
                               uint64_t seq) {
  uint64_t word = atomic_load_explicit(&s->ctrl[0].fail, memory_order_acquire);
  if (word != 0) {
    int reason = (int)(word >> 56), noticer = (int)((word >> 28) & 0xfffffff) - 1;
    int culprit = (int)(word & 0xfffffff) - 1;
    if (culprit < 0 || culprit >= s->n || noticer < 0 || noticer >= s->n) culprit = noticer = 0;
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
  if (s->samePid) return weftSuccess;
  int64_t now = weftNowMs();
  if (now - s->lastLivenessMs < DIRECT_LIVENESS_MS) return weftSuccess;
  s->lastLivenessMs = now;
  if (!weftProcessGone(s->pids[r])) return weftSuccess;
  /* A rank that raised the flag and then finished its operation and exited (its last step
   * lets it go while slower ranks still read flags) is gone, not dead to this wait. */
  if (reached(atomic_load_explicit(&s->ctrl[r].flag[flag][0], memory_order_acquire), seq))
    return weftSuccess;
  publishFail(s, FAIL_DEAD, r);
  return weftSetError(weftRemoteError, "direct: rank %d (pid %d on host %s) died during operation %llu",
                      r, s->pids[r], hostOf(comm, r), (unsigned long long)comm->opSeq);
}

/* A wait failed with rc: a timeout names every rank not yet at this point; an abort tells
 * the others. */
static weftResult_t waitFailed(struct weftComm *comm, struct directState *s, int flag,
                               uint64_t seq, const char *what, weftResult_t rc) {
  if (weftCommAborted(comm)) {
    publishFail(s, FAIL_ABORTED, s->me);
    return rc;
  }
  if (rc != weftTimeout) return rc;
  char late[512] = "";
  size_t o = 0;
  int nlate = 0;
  for (int r = 0; r < s->n; r++) {
    if (r == s->me || reached(atomic_load(&s->ctrl[r].flag[flag][0]), seq)) continue;
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

static weftResult_t waitAll(struct weftComm *comm, struct directState *s, int flag, uint64_t seq) {
  static const char *const what[] = {"waiting for the input of", "waiting for the reduction of",
                                     "waiting for the end of"};
  for (int r = 0; r < s->n; r++) {
    if (r == s->me) continue;
    struct weftWaiter w;
    weftWaitStart(&w, comm);
    while (!reached(atomic_load_explicit(&s->ctrl[r].flag[flag][0], memory_order_acquire), seq)) {
      weftResult_t rc = weftWaitPause(&w, what[flag], r);
      /* past the spin phase only (deadlineMs is set then): spinning stays cheap. checkPeers
       * is one load of the fail word, and a liveness check every DIRECT_LIVENESS_MS. */
      if (rc == weftSuccess && w.deadlineMs != 0) rc = checkPeers(comm, s, r, flag, seq);
      if (rc != weftSuccess) return waitFailed(comm, s, flag, seq, what[flag], rc);
    }
    weftWaitDone(&w);
  }
  DIRECT_TSAN_ACQUIRE();
  return weftSuccess;
}

/* Before the first post of an operation: what this rank was asked to do. */
static void publishSig(struct directState *s, const struct weftCollArgs *a) {
  struct directCtrl *c = &s->ctrl[s->me];
  _Atomic uint64_t *sig = c->sig[a->seq & 1];
  uint64_t what = weftSigWhat(a->coll, a->root) << 16 | (uint64_t)a->type << 8 | (uint64_t)a->op;
  atomic_store_explicit(&sig[0], a->seq, memory_order_relaxed);
  atomic_store_explicit(&sig[1], a->count, memory_order_relaxed);
  atomic_store_explicit(&sig[2], what, memory_order_relaxed);
  atomic_store_explicit(&c->opSeq, a->seq, memory_order_release); /* after sig: see directWatch */
  uint64_t h = a->seq * 0x9e3779b97f4a7c15ULL ^ a->count * 0xc2b2ae3d27d4eb4fULL ^ what;
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ULL;
  s->sigHash = (uint32_t)(h >> 32);
}

static void readSig(struct directState *s, int rank, int par, uint64_t sig[3]) {
  for (int k = 0; k < 3; k++) sig[k] = atomic_load_explicit(&s->ctrl[rank].sig[par][k], memory_order_relaxed);
}

/* sig: seq, count, weftSigWhat << 16 | type << 8 | op (publishSig). */
static void describeDirectSig(const uint64_t sig[3], char *buf, size_t len) {
  char call[160];
  weftSigDescribe(sig[1] << 16 | (sig[2] & 0xffff), sig[2] >> 16, call, sizeof call);
  snprintf(buf, len, "%s (its operation %llu)", call, (unsigned long long)sig[0]);
}

static weftResult_t sigMismatch(struct directState *s, int r, const uint64_t mine[3],
                                const uint64_t sig[3]) {
  char a[192], b[192];
  describeDirectSig(mine, a, sizeof a);
  describeDirectSig(sig, b, sizeof b);
  return weftSetError(weftInvalidUsage,
                      "mismatched collectives at operation %llu: rank %d called %s, rank %d "
                      "called %s", (unsigned long long)mine[0], s->me, a, r, b);
}

/* After the first wait for every rank's post: every signature is the same as mine. A rank
 * that runs one operation ahead or behind shows up as a different sequence number. */
static weftResult_t checkSigs(struct directState *s, const struct weftCollArgs *a,
                              uint64_t seq) {
  int par = (int)(a->seq & 1);
  uint64_t mine[3], sig[3];
  for (int r = 0; r < s->n; r++) {
    uint64_t v = atomic_load_explicit(&s->ctrl[r].flag[FLAG_POSTED][0], memory_order_relaxed);
    /* A rank already at a later round compared its hash with mine and found them equal. */
    if (r == s->me || (uint32_t)(v >> 32) == s->sigHash || (uint32_t)v != (uint32_t)seq) continue;
    readSig(s, s->me, par, mine);
    readSig(s, r, par, sig);
    return sigMismatch(s, r, mine, sig);
  }
  return weftSuccess;
}

/* Every collective publishes its signature here, whichever algorithm runs it. */
static void directBegin(void *state, const struct weftCollArgs *a) { publishSig(state, a); }

/* A lasting wait, whichever algorithm: a rank at my operation that published another
 * signature (the ranks may even run different algorithms, chosen by their different sizes). */
static weftResult_t directWatch(void *state, struct weftComm *comm) {
  struct directState *s = state;
  uint64_t seq = comm->opSeq, mine[3], sig[3];
  int par = (int)(seq & 1);
  readSig(s, s->me, par, mine);
  if (mine[0] != seq) return weftSuccess; /* not in a collective (init) */
  for (int r = 0; r < s->n; r++) {
    if (r == s->me || atomic_load_explicit(&s->ctrl[r].opSeq, memory_order_acquire) != seq) continue;
    readSig(s, r, par, sig);
    /* rank r cannot pass operation seq + 1 without me, so sig[par] is still seq's */
    if (sig[0] == mine[0] && sig[1] == mine[1] && sig[2] == mine[2]) continue;
    return sigMismatch(s, r, mine, sig);
  }
  return weftSuccess;
}

static char *stagingOf(struct directState *s, int rank, uint64_t seq) {
  return s->staging + ((size_t)rank * 2 + (seq & 1)) * s->chunkBytes;
}

/* dst = inputs[0] op inputs[1] op ... op inputs[n-1], in that order; the last step final. */
static void reduceAll(char *dst, const char *const *inputs, int n, size_t count,
                      const struct weftCollArgs *a) {
  if (n == 1) {
    weftReduceFinalCopy(dst, inputs[0], count, a->type, a->op, 1);
    return;
  }
  const char *acc = inputs[0];
  for (int i = 1; i < n - 1; i++) {
    weftReduceApply(dst, acc, inputs[i], count, a->type, a->op);
    acc = dst;
  }
  weftReduceFinal(dst, acc, inputs[n - 1], count, a->type, a->op, n);
}

/* Elements [*first, *first + *len) of `count` that rank `who` of n owns; 64-byte aligned. */
static void sliceOf(size_t count, size_t typeSize, int n, int who, size_t *first, size_t *len) {
  size_t align = 64 / typeSize;
  size_t per = (count + (size_t)n - 1) / (size_t)n;
  per = (per + align - 1) / align * align;
  size_t start = per * (size_t)who;
  *first = start < count ? start : count;
  *len = start < count ? (count - start < per ? count - start : per) : 0;
}

static weftResult_t directSmall(struct weftComm *comm, struct directState *s,
                                const struct weftCollArgs *a) {
  uint64_t seq = ++s->seq;
  memcpy(stagingOf(s, s->me, seq), a->sendbuff, a->bytes);
  post(s, FLAG_POSTED, seq);
  WEFTCHECK(waitAll(comm, s, FLAG_POSTED, seq));
  WEFTCHECK(checkSigs(s, a, seq));
  const char *inputs[64];
  char *scratch = NULL;
  const char **in = s->n <= 64 ? inputs : (const char **)(scratch = malloc(sizeof(char *) * (size_t)s->n));
  if (in == NULL) return weftSetError(weftSystemError, "out of memory");
  for (int r = 0; r < s->n; r++) in[r] = stagingOf(s, r, seq);
  reduceAll(a->recvbuff, in, s->n, a->count, a);
  free(scratch);
  return weftSuccess;
}

static weftResult_t directStagedChunk(struct weftComm *comm, struct directState *s,
                                      const struct weftCollArgs *a, size_t first, size_t count,
                                      const char **in) {
  size_t ts = weftTypeSize(a->type);
  uint64_t seq = ++s->seq;
  memcpy(stagingOf(s, s->me, seq), (const char *)a->sendbuff + first * ts, count * ts);
  post(s, FLAG_POSTED, seq);
  WEFTCHECK(waitAll(comm, s, FLAG_POSTED, seq));
  if (first == 0) WEFTCHECK(checkSigs(s, a, seq));
  size_t sFirst, sLen;
  sliceOf(count, ts, s->n, s->me, &sFirst, &sLen);
  char *result = s->result + (seq & 1) * s->chunkBytes;
  if (sLen > 0) {
    for (int r = 0; r < s->n; r++) in[r] = stagingOf(s, r, seq) + sFirst * ts;
    reduceAll(result + sFirst * ts, in, s->n, sLen, a);
  }
  post(s, FLAG_REDUCED, seq);
  WEFTCHECK(waitAll(comm, s, FLAG_REDUCED, seq));
  memcpy((char *)a->recvbuff + first * ts, result, count * ts);
  return weftSuccess;
}

static weftResult_t directStaged(struct weftComm *comm, struct directState *s,
                                 const struct weftCollArgs *a) {
  size_t ts = weftTypeSize(a->type);
  size_t perChunk = s->chunkBytes / ts;
  const char **in = malloc(sizeof(char *) * (size_t)s->n);
  if (in == NULL) return weftSetError(weftSystemError, "out of memory");
  weftResult_t rc = weftSuccess;
  for (size_t first = 0; first < a->count && rc == weftSuccess; first += perChunk) {
    size_t count = a->count - first < perChunk ? a->count - first : perChunk;
    rc = directStagedChunk(comm, s, a, first, count, in);
  }
  free(in);
  return rc;
}

/* Copies bytes at a peer's address into dst: memcpy for a thread of this process,
 * process_vm_readv otherwise (it may move fewer bytes than asked: loop). */
static weftResult_t peerRead(struct directState *s, int rank, void *dst, uint64_t addr,
                             size_t bytes) {
  if (s->pids[rank] == (int)getpid()) {
    memcpy(dst, (const void *)(uintptr_t)addr, bytes);
    return weftSuccess;
  }
  size_t done = 0;
  while (done < bytes) {
    struct iovec local = {(char *)dst + done, bytes - done};
    struct iovec remote = {(void *)(uintptr_t)(addr + done), bytes - done};
    ssize_t got = process_vm_readv(s->pids[rank], &local, 1, &remote, 1, 0);
    if (got <= 0)
      return weftSetSysError(errno, "direct: process_vm_readv of %zu bytes from rank %d (pid %d)",
                             bytes - done, rank, s->pids[rank]);
    done += (size_t)got;
  }
  return weftSuccess;
}

/* Where a peer's bytes can be read from: in place for a thread of this process, else after a
 * copy into the bounce buffer. */
static weftResult_t peerView(struct directState *s, int rank, uint64_t addr, size_t bytes,
                             const char **view) {
  if (s->pids[rank] == (int)getpid()) {
    *view = (const char *)(uintptr_t)addr;
    return weftSuccess;
  }
  WEFTCHECK(peerRead(s, rank, s->bounce, addr, bytes));
  *view = s->bounce;
  return weftSuccess;
}

/* My slice: recv = send(me) op send(others...), in bounce-sized pieces. */
static weftResult_t reduceMySlice(struct directState *s, const struct weftCollArgs *a,
                                  size_t first, size_t len) {
  size_t ts = weftTypeSize(a->type);
  size_t piece = DIRECT_BOUNCE_BYTES / ts;
  for (size_t done = 0; done < len; done += piece) {
    size_t n = len - done < piece ? len - done : piece;
    size_t off = (first + done) * ts;
    char *dst = (char *)a->recvbuff + off;
    const char *acc = (const char *)a->sendbuff + off;
    int left = s->n - 1;
    if (left == 0) weftReduceFinalCopy(dst, acc, n, a->type, a->op, 1);
    for (int r = 0; r < s->n; r++) {
      if (r == s->me) continue;
      const char *peer;
      WEFTCHECK(peerView(s, r, s->ctrl[r].sendAddr + off, n * ts, &peer));
      if (--left == 0) weftReduceFinal(dst, acc, peer, n, a->type, a->op, s->n);
      else weftReduceApply(dst, acc, peer, n, a->type, a->op);
      acc = dst;
    }
  }
  return weftSuccess;
}

static weftResult_t directInPlace(struct weftComm *comm, struct directState *s,
                                  const struct weftCollArgs *a) {
  size_t ts = weftTypeSize(a->type);
  uint64_t seq = ++s->seq;
  s->ctrl[s->me].sendAddr = (uint64_t)(uintptr_t)a->sendbuff;
  s->ctrl[s->me].recvAddr = (uint64_t)(uintptr_t)a->recvbuff;
  post(s, FLAG_POSTED, seq);
  WEFTCHECK(waitAll(comm, s, FLAG_POSTED, seq));
  WEFTCHECK(checkSigs(s, a, seq));
  size_t first, len;
  sliceOf(a->count, ts, s->n, s->me, &first, &len);
  WEFTCHECK(reduceMySlice(s, a, first, len));
  post(s, FLAG_REDUCED, seq);
  WEFTCHECK(waitAll(comm, s, FLAG_REDUCED, seq));
  for (int r = 0; r < s->n; r++) {
    if (r == s->me) continue;
    sliceOf(a->count, ts, s->n, r, &first, &len);
    if (len > 0)
      WEFTCHECK(peerRead(s, r, (char *)a->recvbuff + first * ts, s->ctrl[r].recvAddr + first * ts,
                         len * ts));
  }
  post(s, FLAG_DONE, seq);
  return waitAll(comm, s, FLAG_DONE, seq);
}

static int useInPlace(const struct directState *s, size_t bytes) {
  return s->samePid || (s->cmaOk && bytes >= s->cmaMinBytes);
}

static weftResult_t directAllReduce(void *state, struct weftComm *comm,
                                    const struct weftCollArgs *a) {
  struct directState *s = state; /* directBegin published the signature */
  if (a->bytes <= DIRECT_SMALL_BYTES) return directSmall(comm, s, a);
  if (useInPlace(s, a->bytes)) return directInPlace(comm, s, a);
  return directStaged(comm, s, a);
}

/* Calibrated on a 2-core x86 host: a flag round costs ~0.2 us per peer when every rank has a
 * core, a scheduler round trip (~0.7 us per rank) when ranks outnumber cores. */
static double directCost(void *state, const struct weftComm *comm, const struct weftCollArgs *args) {
  size_t count = args->count, bytes = args->bytes;
  (void)count;
  const struct directState *s = state;
  int n = s->n;
  double sync = comm->oversubscribed ? 0.7 * n : 0.2 * (n - 1) + 0.1;
  double b = (double)bytes;
  if (bytes <= DIRECT_SMALL_BYTES) return sync + b * (2.0 + n) / 10e3;
  if (useInPlace(s, bytes)) return 3 * sync + 2.0 + b * 2.5 / 8e3;
  double chunks = (double)((bytes + s->chunkBytes - 1) / s->chunkBytes);
  return chunks * 2 * sync + b * 3.0 / 8e3;
}

static weftResult_t directFinalize(void *state) {
  struct directState *s = state;
  if (s == NULL) return weftSuccess;
  if (s->named) weftShmUnlink(s->name);
  if (s->seg != NULL && s->ctrl != NULL && s->abortFlag != NULL && atomic_load(s->abortFlag))
    publishFail(s, FAIL_ABORTED, s->me); /* peers waiting on this rank fail now */
  weftShmUnmap(s->seg, s->segBytes);
  free(s->pids);
  free(s->bounce);
  free(s);
  return weftSuccess;
}

const struct weftAlgoOps weftAlgoDirect = {
  .size = sizeof(struct weftAlgoOps),
  .name = "direct",
  .colls = WEFT_COLL_BIT(weftCollAllReduce),
  .init = directInit,
  .cost = directCost,
  .run = directAllReduce,
  .finalize = directFinalize,
  .begin = directBegin,
  .watch = directWatch,
};
