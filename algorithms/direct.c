/* Direct shared-memory collectives, for communicators whose ranks all share one host:
 * AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, Gather, Scatter and AlltoAll.
 * How it works: one segment holds, per rank, three progress flags, its signature and a
 * staging area of two halves (by round parity), and a shared result area. Each collective is
 * a few rounds (direct.h): small calls take one round with one synchronisation (copy into
 * staging, post, every rank reads what it needs), larger ones move through the segment in
 * chunks of WEFT_DIRECT_CHUNK_BYTES (staged), and where peers' buffers can be read where they
 * are (threads of one process, or cross-memory attach for large calls) each rank reads them in
 * place and the data is copied once. The paths of each collective, their bytes and costs are
 * described in direct_allreduce.c and direct_coll.c; synchronisation and fault detection
 * (signatures in the flags, liveness, the fail word, timeouts) in direct_sync.c. Reductions
 * combine the ranks' inputs in rank order on every path, each element once, by one rank. */
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "check.h"
#include "deadline.h"
#include "direct.h"
#include "param.h"

/* Settings that decide which path a call takes (every rank must take the same) or the
 * segment's layout. */
enum { DIRECT_SHARED_SETTINGS = 4 };
static const char *const sharedSettingNames[DIRECT_SHARED_SETTINGS] = {
  "WEFT_DIRECT_EAGER_BYTES", "WEFT_DIRECT_CMA", "WEFT_DIRECT_CMA_MIN_BYTES", "WEFT_DIRECT_CMA_TRIALS"};
static void sharedSettings(int64_t v[DIRECT_SHARED_SETTINGS]) {
  v[0] = weftParamDirectEagerBytes(), v[1] = weftParamDirectCma();
  v[2] = weftParamDirectCmaMinBytes(), v[3] = weftParamDirectCmaTrials();
}

struct directHello {
  char name[WEFT_SHM_NAME_BYTES];
  int pid;
  int cmaOk;
  int cmaPermille; /* process_vm_readv's rate over memcpy's here, in thousandths */
  uint64_t probeAddr;
  int64_t settings[DIRECT_SHARED_SETTINGS]; /* every rank must have the same (sharedSettings) */
};

/* fail line | ctrl[n] | to a page | staging[n][2][chunk] | result[2][chunk] | eager area
 * (direct_eager.c): each rank's staging on whole pages, so it can live on its writer's NUMA
 * node (direct_place.c) */
static size_t segmentBytes(int n, size_t chunk, size_t eagerBytes) {
  return weftDirectHeaderBytes(n) + (size_t)n * 2 * chunk + 2 * chunk +
         weftDirectEagerBytes(n, eagerBytes);
}

static void layout(struct directState *s) {
  s->fail = (struct directFailLine *)s->seg;
  s->ctrl = (struct directCtrl *)(s->seg + sizeof(struct directFailLine));
  s->staging = s->seg + weftDirectHeaderBytes(s->n);
  s->result = s->staging + (size_t)s->n * 2 * s->chunkBytes;
  weftDirectEagerLayout(s, s->result + 2 * s->chunkBytes);
}

/* Rank 0 creates the segment with every rank's parts bound to that rank's NUMA node. */
static weftResult_t directCreateSegment(struct weftComm *comm, struct directState *s) {
  struct weftTopoPlace *places = malloc(sizeof *places * (size_t)s->n);
  if (places == NULL) return weftSetError(weftSystemError, "out of memory");
  for (int r = 0; r < s->n; r++) places[r] = comm->peers[r].place;
  struct directPlaceArgs where = {comm->topoHost, places, s->n, s->chunkBytes};
  weftResult_t rc = weftShmCreatePlaced(s->segBytes, s->name, (void **)&s->seg,
                                        weftDirectPlaceSegment, &where);
  free(places);
  return rc;
}

#define CMA_PROBE_VALUE 0x77656674u
static volatile uint64_t cmaProbeWord = CMA_PROBE_VALUE;

/* Reads the peer's probe word and writes the same value back: both directions are allowed. */
static int cmaAccessible(int pid, uint64_t addr) {
  uint64_t v = 0;
  struct iovec local = {&v, sizeof v}, remote = {(void *)(uintptr_t)addr, sizeof v};
  if (process_vm_readv(pid, &local, 1, &remote, 1, 0) != (ssize_t)sizeof v || v != CMA_PROBE_VALUE)
    return 0;
  return process_vm_writev(pid, &local, 1, &remote, 1, 0) == (ssize_t)sizeof v;
}

static weftResult_t directMapSegment(struct weftComm *comm, struct directState *s,
                                     struct directHello *hello) {
  if (s->me == 0) {
    WEFTCHECK(directCreateSegment(comm, s));
    s->named = 1;
    memcpy(hello[0].name, s->name, sizeof s->name);
  }
  hello[s->me].pid = (int)getpid();
  hello[s->me].probeAddr = (uint64_t)(uintptr_t)&cmaProbeWord;
  sharedSettings(hello[s->me].settings);
  WEFTCHECK(weftBootstrapAllGather(comm->boot, hello, sizeof *hello, weftDeadline(comm)));
  const int64_t *mine = hello[s->me].settings;
  for (int r = 0; r < s->n; r++) /* a rank that returned at once would leave the others waiting */
    for (int i = 0; i < DIRECT_SHARED_SETTINGS; i++)
      if (hello[r].settings[i] != mine[i])
        return weftSetError(weftInvalidUsage, "direct: %s must be the same on every rank: rank "
                            "%d has %lld, rank %d %lld", sharedSettingNames[i], s->me,
                            (long long)mine[i], r, (long long)hello[r].settings[i]);
  if (s->me != 0) {
    hello[0].name[sizeof hello[0].name - 1] = '\0';
    WEFTCHECK(weftShmOpen(hello[0].name, s->segBytes, (void **)&s->seg));
  }
  layout(s);
  return weftSuccess;
}

static double secondsNow(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* process_vm_readv's copy rate against memcpy's, in thousandths: each timed on 256 KiB of this
 * process, the best of five (a rank descheduled in one try is not slow), in [1, 1000].
 * Cross-memory attach pins every page it copies, which in a VM costs more than the copy
 * (0.3-0.5 of memcpy measured here): the in-place paths are taken only where they still win. */
enum { cmaProbeBytes = 256 << 10, cmaProbeTries = 5 };
static int measureCmaPermilleNow(void) {
  char *src = malloc(cmaProbeBytes), *dst = malloc(cmaProbeBytes);
  double copy = 1e9, cma = 1e9;
  if (src != NULL && dst != NULL) {
    memset(src, 1, cmaProbeBytes), memset(dst, 2, cmaProbeBytes);
    struct iovec local = {dst, cmaProbeBytes}, remote = {src, cmaProbeBytes};
    for (int i = 0; i < cmaProbeTries; i++) {
      double t0 = secondsNow();
      memcpy(dst, src, cmaProbeBytes);
      double t1 = secondsNow();
      ssize_t got = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
      double t2 = secondsNow();
      if (got != cmaProbeBytes) cma = 1e9, i = cmaProbeTries; /* refused: never pays */
      else if (t2 - t1 < cma) cma = t2 - t1;
      if (t1 - t0 < copy) copy = t1 - t0;
    }
  }
  free(src), free(dst);
  int permille = (int)(1000.0 * copy / cma);
  return permille < 1 ? 1 : permille > 1000 ? 1000 : permille;
}

/* Once per process: every communicator's init would otherwise copy 2.5 MB to learn the same. */
static int measureCmaPermille(void) {
  static _Atomic int measured; /* 0: not yet */
  int v = atomic_load(&measured);
  if (v == 0) atomic_store(&measured, v = measureCmaPermilleNow());
  return v;
}

/* Every rank tries to read and write every other process; all agree on the AND of the answers
 * and on the slowest rank's cross-memory copy speed. */
static weftResult_t directProbeCma(struct weftComm *comm, struct directState *s,
                                   struct directHello *hello) {
  int ok = weftParamDirectCma() != 0;
  s->cmaAlways = weftParamDirectCma() == 2;
  s->samePid = 1;
  for (int r = 0; r < s->n; r++) {
    s->pids[r] = hello[r].pid;
    if (hello[r].pid == (int)getpid()) continue;
    s->samePid = 0;
    if (ok && !cmaAccessible(hello[r].pid, hello[r].probeAddr)) {
      INFO(WEFT_SHM, "direct: process_vm_readv/writev of rank %d (pid %d) refused; staging instead",
           r, hello[r].pid);
      ok = 0;
    }
  }
  hello[s->me].cmaOk = ok;
  hello[s->me].cmaPermille = ok && !s->samePid ? measureCmaPermille() : 1000;
  WEFTCHECK(weftBootstrapAllGather(comm->boot, hello, sizeof *hello, weftDeadline(comm)));
  s->cmaOk = 1;
  int slowest = 1000; /* every rank must pick the same paths: the slowest rank's speed */
  for (int r = 0; r < s->n; r++) {
    s->cmaOk &= hello[r].cmaOk;
    if (hello[r].cmaPermille < slowest) slowest = hello[r].cmaPermille;
  }
  s->peerCopySpeed = slowest / 1000.0;
  return weftSuccess;
}

static weftResult_t directFinalize(void *state);

/* The state's private memory: pid table, scratch arrays, bounce and accumulation buffers. */
static int directAlloc(struct directState *s, int n) {
  s->pids = calloc((size_t)n, sizeof(int));
  s->inputs = calloc((size_t)n, sizeof(char *));
  s->addrs = calloc((size_t)n, sizeof(uint64_t));
  s->bounce = aligned_alloc(64, DIRECT_BOUNCE_BYTES);
  s->accum = aligned_alloc(64, DIRECT_BOUNCE_BYTES);
  s->knownTaken = calloc((size_t)n, sizeof(uint64_t));
  s->learn = calloc(DIRECT_LEARN_CLASSES, sizeof *s->learn);
  return s->pids && s->inputs && s->addrs && s->bounce && s->accum && s->knownTaken && s->learn;
}

static weftResult_t directInit(struct weftComm *comm, void **state, char *why, size_t whyLen) {
  *state = NULL;
  if (comm->nLocalRanks != comm->nranks) {
    snprintf(why, whyLen, "it needs every rank on one host (shared memory), and the ranks span %d "
             "hosts", comm->nHosts);
    return weftSuccess;
  }
  struct directState *s = calloc(1, sizeof *s);
  struct directHello *hello = calloc((size_t)comm->nranks, sizeof *hello);
  weftResult_t rc = weftSuccess;
  if (s == NULL || hello == NULL || !directAlloc(s, comm->nranks)) {
    rc = weftSetError(weftSystemError, "out of memory");
    goto fail;
  }
  s->n = comm->nranks;
  s->me = comm->rank;
  s->abortFlag = &comm->abortFlag;
  /* settings.c holds it to [16 KiB, 1 GiB] in 4 KiB steps; ReduceScatter's staged rounds
   * put a 64-byte piece of every rank's part in one chunk, so it holds n of those too */
  s->chunkBytes = (size_t)weftParamDirectChunkBytes();
  if (s->chunkBytes < (size_t)s->n * 64) s->chunkBytes = ((size_t)s->n * 64 + 4095) / 4096 * 4096;
  s->eagerBytes = (size_t)weftParamDirectEagerBytes();
  s->segBytes = segmentBytes(s->n, s->chunkBytes, s->eagerBytes);
  s->cmaTrials = weftParamDirectCma() == 1 ? (int)weftParamDirectCmaTrials() : 0;
  s->trialClass = -1;
  int64_t cmaMin = weftParamDirectCmaMinBytes();
  s->cmaMinBytes = cmaMin > DIRECT_SMALL_BYTES ? (size_t)cmaMin : DIRECT_SMALL_BYTES + 1;
  WEFTCHECKGOTO(directMapSegment(comm, s, hello), rc, fail);
  WEFTCHECKGOTO(directProbeCma(comm, s, hello), rc, fail); /* also: everyone has mapped */
  if (s->named) weftShmUnlink(s->name);
  s->named = 0;
  INFO(WEFT_SHM, "direct: %d ranks, %s (peer copies at %.2f of memcpy), chunk %zu bytes", s->n,
       s->samePid ? "threads of one process" : s->cmaOk ? "cross-memory attach" : "staging only",
       s->peerCopySpeed, s->chunkBytes);
  free(hello);
  *state = s;
  return weftSuccess;
fail:
  free(hello);
  if (s != NULL) directFinalize(s);
  return rc;
}

static weftResult_t directRunPath(struct directState *s, struct weftComm *comm,
                                  const struct weftCollArgs *a) {
  int eager = weftDirectIsEager(s, a);
  switch (a->coll) {
    case weftCollGather: return eager ? weftDirectEagerGather(comm, s, a) : weftDirectGather(comm, s, a);
    case weftCollScatter: return eager ? weftDirectEagerScatter(comm, s, a) : weftDirectScatter(comm, s, a);
    case weftCollAlltoAll: return weftDirectAlltoAll(comm, s, a);
    default: break;
  }
  if (eager)
    return a->coll == weftCollBroadcast ? weftDirectEagerBroadcast(comm, s, a)
                                        : weftDirectEagerReduce(comm, s, a);
  switch (a->coll) {
    case weftCollBroadcast: return weftDirectBroadcast(comm, s, a);
    case weftCollReduce: return weftDirectReduce(comm, s, a);
    case weftCollAllGather: return weftDirectAllGather(comm, s, a);
    case weftCollReduceScatter: return weftDirectReduceScatter(comm, s, a);
    default: return weftDirectAllReduce(comm, s, a);
  }
}

static weftResult_t directRun(void *state, struct weftComm *comm, const struct weftCollArgs *a) {
  struct directState *s = state; /* weftDirectBegin published the signature */
  s->trialClass = -1;
  WEFTCHECK(directRunPath(s, comm, a));
  if (s->trialClass >= 0) weftDirectTrialEnd(s, a);
  return weftSuccess;
}

static double directCost(void *state, const struct weftComm *comm, const struct weftCollArgs *a) {
  if (a->coll == weftCollAllReduce) return weftDirectAllReduceCost(state, comm, a);
  if (a->coll == weftCollAlltoAll) return weftDirectAlltoAllCost(state, comm, a);
  if (weftDirectIsEager(state, a)) return weftDirectEagerCost(state, comm, a);
  if (a->coll == weftCollGather || a->coll == weftCollScatter)
    return weftDirectGatherCost(state, comm, a);
  return weftDirectCollCost(state, comm, a);
}

static weftResult_t directFinalize(void *state) {
  struct directState *s = state;
  if (s == NULL) return weftSuccess;
  if (s->named) weftShmUnlink(s->name);
  if (s->seg != NULL && s->fail != NULL && s->abortFlag != NULL && atomic_load(s->abortFlag))
    weftDirectPublishFail(s, FAIL_ABORTED, s->me); /* peers waiting on this rank fail now */
  weftShmUnmap(s->seg, s->segBytes);
  free(s->pids);
  free(s->inputs);
  free(s->addrs);
  free(s->bounce);
  free(s->accum);
  free(s->knownTaken);
  free(s->learn);
  free(s);
  return weftSuccess;
}

const struct weftAlgoOps weftAlgoDirect = {
  .size = sizeof(struct weftAlgoOps),
  .name = "direct",
  .colls = WEFT_COLL_BIT(weftCollAllReduce) | WEFT_COLL_BIT(weftCollBroadcast) |
           WEFT_COLL_BIT(weftCollReduce) | WEFT_COLL_BIT(weftCollAllGather) |
           WEFT_COLL_BIT(weftCollReduceScatter) | WEFT_COLL_BIT(weftCollGather) |
           WEFT_COLL_BIT(weftCollScatter) | WEFT_COLL_BIT(weftCollAlltoAll),
  .init = directInit,
  .cost = directCost,
  .run = directRun,
  .finalize = directFinalize,
  .begin = weftDirectBegin,
  .watch = weftDirectWatch,
};
