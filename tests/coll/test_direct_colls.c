/* The direct algorithm's collectives beyond the result
 * matrix of test_collectives.c (which forces direct on every path, every root):
 * - rank order: Reduce, ReduceScatter (and AllReduce) of floats that round at every step give
 *   the bits of a sequential reduction in rank order, computed here in plain C, on each path
 *   (one round, staged, in place for threads and for cross-memory attach);
 * - mismatches: ranks that disagree on the root of a synchronous Broadcast or Reduce fail on
 *   every rank with weftInvalidUsage naming both calls, and no receive buffer is written; on
 *   an eager one, a reader fails in that call naming both, and every rank by the next
 *   synchronising call or within the queue's depth of eager calls;
 * - eager calls: a root runs up to the queue's depth ahead of a reader that has not called
 *   yet, and no further; readers that arrive late take every queued call's own data;
 * - Gather, Scatter and AlltoAll: every root, in place and out, eager at a slot's edge and
 *   staged over many rounds; AlltoAll also read in place (threads, cross-memory attach);
 * - faults: a rank killed (SIGKILL) in a loop of direct Broadcasts: every survivor gets
 *   weftRemoteError naming it (rank, pid, host) well before the timeout; a rank stopped
 *   (SIGSTOP): the others time out after WEFT_TIMEOUT_MS, naming it. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "caps.h"
#include "collcases.h"
#include "collname.h"
#include "forked.h"
#include "harness.h"
#include "reduce.h"

TestSuite(direct_order, .timeout = 300);
TestSuite(direct_mismatch, .timeout = 120);
TestSuite(direct_faults, .timeout = 60);

/* ---- rank order ---- */

/* Element i of the reduction over ranks, in the order given (forward: 0, 1, ..., n-1). */
static void reference(void *out, size_t idx, size_t i, weftDataType_t type, weftRedOp_t op, int n,
                      int forward) {
  if (type == weftFloat32) {
    float acc = (float)roundingInput(i, forward ? 0 : n - 1, op);
    for (int k = 1; k < n; k++) {
      float v = (float)roundingInput(i, forward ? k : n - 1 - k, op);
      acc = op == weftProd ? acc * v : acc + v;
    }
    ((float *)out)[idx] = acc;
  } else {
    double acc = roundingInput(i, forward ? 0 : n - 1, op);
    for (int k = 1; k < n; k++) {
      double v = roundingInput(i, forward ? k : n - 1 - k, op);
      acc = op == weftProd ? acc * v : acc + v;
    }
    ((double *)out)[idx] = acc;
  }
}

/* Elements of got (elements first.. of the reduction) that differ from the rank-order reference;
 * *orderMatters counts those where the reverse order would give other bits. */
static size_t wrongBits(const void *got, size_t first, size_t count, weftDataType_t type,
                        weftRedOp_t op, int n, size_t *orderMatters) {
  size_t ts = weftTypeSize(type), wrong = 0;
  char want[8], back[8];
  for (size_t i = 0; i < count; i++) {
    reference(want, 0, first + i, type, op, n, 1);
    reference(back, 0, first + i, type, op, n, 0);
    wrong += memcmp((const char *)got + i * ts, want, ts) != 0;
    *orderMatters += memcmp(want, back, ts) != 0;
  }
  return wrong;
}

static const size_t orderCounts[] = {1021, 40009};
static const weftDataType_t orderTypes[] = {weftFloat32, weftFloat64};
static const weftRedOp_t orderOps[] = {weftSum, weftProd};

/* One collective of the rounding inputs; 1 if it failed or a bit differs. */
static long orderCase(weftComm_t comm, int rank, int n, weftColl_t coll, size_t count,
                      weftDataType_t type, weftRedOp_t op, int root, char *send, char *recv,
                      size_t *orderMatters) {
  size_t parts = coll == weftCollReduceScatter ? (size_t)n : 1, wrong = 0;
  fillRoundingFrom(send, 0, count * parts, type, op, rank);
  weftResult_t rc;
  if (coll == weftCollReduce) rc = weftReduce(send, recv, count, type, op, root, comm, NULL);
  else if (coll == weftCollReduceScatter) rc = weftReduceScatter(send, recv, count, type, op, comm, NULL);
  else rc = weftAllReduce(send, recv, count, type, op, comm, NULL);
  if (rc != weftSuccess) {
    fprintf(stderr, "rank %d: coll %d failed: %s\n", rank, (int)coll, weftGetLastError(comm));
    return 1;
  }
  if (coll == weftCollReduce && rank != root) return 0;
  size_t first = coll == weftCollReduceScatter ? (size_t)rank * count : 0;
  wrong = wrongBits(recv, first, count, type, op, n, orderMatters);
  if (wrong > 0)
    fprintf(stderr, "rank %d/%d: coll %d count %zu %s %s root %d: %zu elements differ from the "
            "rank-order reduction\n", rank, n, (int)coll, count, weftTypeName(type), weftOpName(op),
            root, wrong);
  return wrong > 0;
}

static long orderBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  size_t cap = 40009 * 8 * (size_t)n;
  char *send = malloc(cap), *recv = malloc(cap);
  size_t orderMatters = 0;
  long failures = 0;
  static const weftColl_t colls[] = {weftCollAllReduce, weftCollReduce, weftCollReduceScatter};
  for (int c = 0; c < 3; c++)
    for (int k = 0; k < 2; k++)
      for (int t = 0; t < 2; t++)
        for (int o = 0; o < 2; o++)
          for (int root = 0; root < (colls[c] == weftCollReduce ? n : 1); root++)
            failures += orderCase(comm, rank, n, colls[c], orderCounts[k], orderTypes[t],
                                  orderOps[o], root, send, recv, &orderMatters);
  free(send), free(recv);
  /* with one rank every order is the same; else inputs that did not round prove nothing */
  if (n > 2 && orderMatters == 0) {
    fprintf(stderr, "rank %d: no element whose rank-order reduction differs from the reverse\n", rank);
    failures++;
  }
  return failures;
}

enum path { PATH_THREADS, PATH_STAGED, PATH_CMA };

static void rankOrder(int procs, int threads, enum path path) {
  if (path == PATH_CMA) SKIP_UNLESS("cma");
  setenv("WEFT_ALGO", "direct", 1);
  setenv("WEFT_DIRECT_CHUNK_BYTES", "16384", 1);
  setenv("WEFT_DIRECT_CMA", path == PATH_STAGED ? "0" : "2", 1);
  setenv("WEFT_DIRECT_CMA_MIN_BYTES", "0", 1);
  long failures = runRanks(procs, threads, orderBody, NULL, 300);
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_DIRECT_CHUNK_BYTES");
  unsetenv("WEFT_DIRECT_CMA");
  unsetenv("WEFT_DIRECT_CMA_MIN_BYTES");
  cr_expect_eq(failures, 0, "%d x %d ranks, path %d: %ld failures", procs, threads, path, failures);
}

Test(direct_order, threads_4) { rankOrder(1, 4, PATH_THREADS); }
Test(direct_order, procs_3_staged) { rankOrder(3, 1, PATH_STAGED); }
Test(direct_order, procs_3_cma) { rankOrder(3, 1, PATH_CMA); }
Test(direct_order, mixed_2x2_cma) { rankOrder(2, 2, PATH_CMA); }

/* ---- mismatched roots ---- */

#define POISON 0x5a

struct rootCase {
  weftColl_t coll;
  size_t count;
};

/* Rank n - 1 names root 1, the others root 0: every rank fails, naming both calls, and no
 * receive buffer is written. */
static long rootMismatchBody(weftComm_t comm, int rank, int n, void *arg) {
  const struct rootCase *c = arg;
  size_t bytes = c->count * sizeof(float);
  float *send = malloc(bytes);
  unsigned char *recv = malloc(bytes);
  for (size_t i = 0; i < c->count; i++) send[i] = (float)(rank + 1);
  memset(recv, POISON, bytes);
  int root = rank == n - 1 ? 1 : 0;
  weftResult_t rc = c->coll == weftCollBroadcast
                        ? weftBroadcast(send, recv, c->count, weftFloat32, root, comm, NULL)
                        : weftReduce(send, recv, c->count, weftFloat32, weftSum, root, comm, NULL);
  const char *name = c->coll == weftCollBroadcast ? "Broadcast" : "Reduce";
  const char *op = c->coll == weftCollBroadcast ? "" : ", sum";
  char call0[96], call1[96];
  snprintf(call0, sizeof call0, "%s(count %zu, float%s, root 0)", name, c->count, op);
  snprintf(call1, sizeof call1, "%s(count %zu, float%s, root 1)", name, c->count, op);
  const char *msg = weftGetLastError(comm);
  long bad = 0;
  if (rc != weftInvalidUsage || strstr(msg, call0) == NULL || strstr(msg, call1) == NULL) {
    fprintf(stderr, "rank %d: %s of %zu: rc %d: %s\n", rank, name, c->count, rc, msg);
    bad++;
  }
  for (size_t i = 0; i < bytes && !bad; i++)
    if (recv[i] != POISON) {
      fprintf(stderr, "rank %d: %s of %zu wrote its recvbuff (byte %zu)\n", rank, name, c->count, i);
      bad++;
    }
  free(send), free(recv);
  return bad;
}

/* One round (100 floats, synchronous: WEFT_DIRECT_EAGER_BYTES=0), staged chunks or in place
 * (300,000 floats: 1.2 MB). */
static void rootMismatch(int procs, int threads, const char *cma) {
  setenv("WEFT_ALGO", "direct", 1);
  setenv("WEFT_DIRECT_EAGER_BYTES", "0", 1);
  setenv("WEFT_TIMEOUT_MS", "20000", 1);
  setenv("WEFT_DIRECT_CMA", cma, 1);
  static const struct rootCase cases[] = {{weftCollBroadcast, 100}, {weftCollBroadcast, 300000},
                                          {weftCollReduce, 100}, {weftCollReduce, 300000}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    cr_expect_eq(runRanks(procs, threads, rootMismatchBody, (void *)&cases[i], 60), 0,
                 "%d x %d ranks, WEFT_DIRECT_CMA=%s, case %zu", procs, threads, cma, i);
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_TIMEOUT_MS");
  unsetenv("WEFT_DIRECT_CMA");
  unsetenv("WEFT_DIRECT_EAGER_BYTES");
}

Test(direct_mismatch, roots_threads_3) { rootMismatch(1, 3, "1"); }
Test(direct_mismatch, roots_procs_3_staged) { rootMismatch(3, 1, "0"); }
Test(direct_mismatch, roots_procs_3_cma) {
  SKIP_UNLESS("cma");
  rootMismatch(3, 1, "2");
}

/* ---- mismatched roots on eager calls ---- */

#define EAGER_DEPTH 32 /* algorithms/direct.h's DIRECT_EAGER_DEPTH */

struct eagerMismatch {
  weftColl_t coll;
  int thenSync; /* the calls after it: 1 one AllReduce (synchronous), 0 eager Broadcasts */
};

/* The last rank names root 1, the others root 0, on 100 floats (eager). A rank may return
 * from it (a Broadcast's root, a Reduce's other ranks: nothing to check there); then it must
 * fail at the AllReduce after it, or within the queue's depth of Broadcasts after it. Every
 * rank fails with weftInvalidUsage; with 2 ranks, or a reader that saw the other root's data,
 * naming both calls. */
static long eagerMismatchBody(weftComm_t comm, int rank, int n, void *arg) {
  const struct eagerMismatch *m = arg;
  float send[100], recv[100];
  for (int i = 0; i < 100; i++) send[i] = (float)rank;
  int root = rank == n - 1 ? 1 : 0, after = 0;
  weftResult_t rc = m->coll == weftCollBroadcast
                        ? weftBroadcast(send, recv, 100, weftFloat32, root, comm, NULL)
                        : weftReduce(send, recv, 100, weftFloat32, weftSum, root, comm, NULL);
  while (rc == weftSuccess && after < (m->thenSync ? 1 : EAGER_DEPTH + 1)) {
    rc = m->thenSync ? weftAllReduce(send, recv, 1, weftFloat32, weftSum, comm, NULL)
                     : weftBroadcast(send, recv, 100, weftFloat32, 0, comm, NULL);
    after++;
  }
  const char *msg = weftGetLastError(comm);
  if (rc != weftInvalidUsage) {
    fprintf(stderr, "rank %d: %s with root %d, then %d %s: rc %d: %s\n", rank,
            weftCollName(m->coll), root, after, m->thenSync ? "AllReduce" : "Broadcasts", rc, msg);
    return 1;
  }
  return 0;
}

static void eagerMismatch(int procs, int threads) {
  setenv("WEFT_ALGO", "direct", 1);
  setenv("WEFT_TIMEOUT_MS", "20000", 1);
  static const struct eagerMismatch cases[] = {{weftCollBroadcast, 0}, {weftCollBroadcast, 1},
                                               {weftCollReduce, 0}, {weftCollReduce, 1}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    cr_expect_eq(runRanks(procs, threads, eagerMismatchBody, (void *)&cases[i], 60), 0,
                 "%d x %d ranks, %s then %s", procs, threads, weftCollName(cases[i].coll),
                 cases[i].thenSync ? "an AllReduce" : "Broadcasts");
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_TIMEOUT_MS");
}

Test(direct_mismatch, eager_roots_procs_2) { eagerMismatch(2, 1); }
Test(direct_mismatch, eager_roots_procs_3) { eagerMismatch(3, 1); }
Test(direct_mismatch, eager_roots_threads_4) { eagerMismatch(1, 4); }

/* ---- eager calls run ahead, as far as the queue ---- */

/* Rank 0 broadcasts 2 * depth calls of 3 ints (call k: k * 1000 + i) while rank 1 sleeps
 * 300 ms before its first: rank 0's first `depth` calls return before rank 1 calls, its next
 * one not. Rank 1 then takes every call's own data. */
static long runAheadBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)n, (void)arg;
  int buf[3];
  long bad = 0;
  if (rank == 1) usleep(300000);
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int k = 0; k < 2 * EAGER_DEPTH && !bad; k++) {
    for (int i = 0; i < 3; i++) buf[i] = rank == 0 ? k * 1000 + i : -1;
    weftResult_t rc = weftBroadcast(buf, buf, 3, weftInt32, 0, comm, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t);
    double ms = (double)(t.tv_sec - t0.tv_sec) * 1e3 + (double)(t.tv_nsec - t0.tv_nsec) / 1e6;
    if (rc != weftSuccess) {
      fprintf(stderr, "rank %d: call %d: %s\n", rank, k, weftGetLastError(comm));
      return 1;
    }
    if (rank == 0 && k == EAGER_DEPTH - 1 && ms > 150)
      bad += fprintf(stderr, "rank 0: %d calls took %.0f ms: not run ahead\n", k + 1, ms) > 0;
    if (rank == 0 && k == EAGER_DEPTH && ms < 200)
      bad += fprintf(stderr, "rank 0: call %d returned after %.0f ms: ran past the queue\n", k, ms) > 0;
    for (int i = 0; i < 3 && rank == 1; i++)
      if (buf[i] != k * 1000 + i)
        bad += fprintf(stderr, "rank 1: call %d element %d is %d\n", k, i, buf[i]) > 0;
  }
  return bad;
}

Test(direct_order, eager_runs_ahead_as_far_as_its_queue) {
  setenv("WEFT_ALGO", "direct", 1);
  cr_expect_eq(runRanks(2, 1, runAheadBody, NULL, 60), 0, "processes");
  cr_expect_eq(runRanks(1, 2, runAheadBody, NULL, 60), 0, "threads");
  unsetenv("WEFT_ALGO");
}

/* ---- Gather, Scatter, AlltoAll: eager at the slot's edge, in many rounds, in place ---- */

/* Every root, in place and out, with the smallest chunk (16 KiB: a Scatter or AlltoAll round
 * carries 16 KiB / n of each block) and a 256-byte eager slot: counts on both sides of one
 * slot (for a Scatter, of a slot holding n blocks) and over many rounds. AlltoAll on the path
 * given: staged, or its peers' send buffers read in place (threads; cross-memory attach). */
static void gatheredRounds(int procs, int threads, enum path path) {
  static const size_t counts[] = {1, 63, 64, 65, 1021, 16385, 70001};
  static const weftDataType_t types[] = {weftInt8, weftInt32, weftFloat64};
  static const weftColl_t colls[] = {weftCollGather, weftCollScatter, weftCollAlltoAll};
  if (path == PATH_CMA) SKIP_UNLESS("cma");
  setenv("WEFT_ALGO", "direct", 1);
  setenv("WEFT_DIRECT_CHUNK_BYTES", "16384", 1);
  setenv("WEFT_DIRECT_EAGER_BYTES", "256", 1);
  setenv("WEFT_DIRECT_CMA", path == PATH_STAGED ? "0" : "2", 1);
  setenv("WEFT_DIRECT_CMA_MIN_BYTES", "0", 1);
  for (int c = path == PATH_CMA ? 2 : 0; c < 3; c++) { /* only AlltoAll reads in place */
    struct collSweep sweep = {colls[c], counts, 7, types, 3, 1};
    collSweepPrepare(&sweep, procs * threads);
    cr_expect_eq(runRanks(procs, threads, collSweepBody, &sweep, 120), 0, "%s, %d x %d ranks, path %d",
                 weftCollName(sweep.coll), procs, threads, path);
  }
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_DIRECT_CHUNK_BYTES");
  unsetenv("WEFT_DIRECT_EAGER_BYTES");
  unsetenv("WEFT_DIRECT_CMA");
  unsetenv("WEFT_DIRECT_CMA_MIN_BYTES");
}

Test(direct_order, gathered_rounds_procs_3_staged) { gatheredRounds(3, 1, PATH_STAGED); }
Test(direct_order, gathered_rounds_procs_3_cma) { gatheredRounds(3, 1, PATH_CMA); }
Test(direct_order, gathered_rounds_threads_4) { gatheredRounds(1, 4, PATH_THREADS); }
Test(direct_order, gathered_rounds_mixed_2x2_cma) { gatheredRounds(2, 2, PATH_CMA); }

/* ---- a killed or stopped rank in a loop of Broadcasts ---- */

#define NRANKS 4
#define DETECT_BOUND_MS 10000 /* detection takes milliseconds; the timeout is 60 s */

struct report {
  volatile int started, done, rc;
  volatile int64_t atMs;
  volatile long iters;
  char msg[1024];
};
struct shared {
  struct report r[NRANKS];
  volatile int release;
  size_t maxCount; /* floats per call at most */
};

/* Broadcasts from every root in turn, of 1 float to maxCount floats (64 K: one round and
 * staged chunks of 64 KiB; 64: eager calls only), for up to 20 s. */
static void broadcastLoop(void *arg, weftUniqueId id, int rank, int nranks) {
  struct shared *sh = arg;
  struct report *me = &sh->r[rank];
  weftComm_t comm;
  weftResult_t rc = weftCommInitRank(&comm, nranks, id, rank);
  if (rc != weftSuccess) {
    me->rc = 100 + rc;
    snprintf(me->msg, sizeof me->msg, "init: %s", weftGetLastError(NULL));
    me->done = 1;
    _exit(1);
  }
  size_t max = sh->maxCount;
  float *buf = malloc(max * sizeof *buf);
  for (size_t i = 0; i < max; i++) buf[i] = (float)rank;
  me->started = 1;
  for (int64_t end = forkedNowMs() + 20000; rc == weftSuccess && forkedNowMs() < end; me->iters++) {
    size_t count = 1 + (size_t)(me->iters * 4099 % max);
    rc = weftBcast(buf, count, weftFloat32, (int)(me->iters % nranks), comm, NULL);
  }
  me->rc = rc;
  me->atMs = forkedNowMs();
  snprintf(me->msg, sizeof me->msg, "%s", weftGetLastError(comm));
  weftCommDestroy(comm);
  free(buf);
  me->done = 1;
  for (int64_t until = forkedNowMs() + 20000; !sh->release && forkedNowMs() < until;) usleep(1000);
  _exit(0);
}

static struct shared *startLoop(pid_t *pids, const char *timeoutMs, size_t maxCount) {
  setenv("WEFT_ALGO", "direct", 1);
  setenv("WEFT_TIMEOUT_MS", timeoutMs, 1);
  setenv("WEFT_DIRECT_CHUNK_BYTES", "65536", 1);
  struct shared *sh = forkedShared(sizeof *sh);
  sh->maxCount = maxCount;
  forkedLaunch(NRANKS, broadcastLoop, sh, pids);
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_TIMEOUT_MS");
  unsetenv("WEFT_DIRECT_CHUNK_BYTES");
  int64_t end = forkedNowMs() + 20000;
  for (int r = 0; r < NRANKS; r++)
    while (!sh->r[r].started && !sh->r[r].done && forkedNowMs() < end) usleep(1000);
  return sh;
}

/* Waits (at most timeoutMs) for every rank but the victim to report, then ends them all. */
static void finishLoop(struct shared *sh, pid_t *pids, int victim, int timeoutMs) {
  int64_t end = forkedNowMs() + timeoutMs;
  for (int r = 0; r < NRANKS; r++)
    while (r != victim && !sh->r[r].done && forkedNowMs() < end) usleep(1000);
  sh->release = 1;
  forkedReap(pids, NRANKS, 5000);
}

static void killedRank(size_t maxCount) {
  pid_t pids[NRANKS];
  struct shared *sh = startLoop(pids, "60000", maxCount);
  srand((unsigned)getpid());
  int victim = rand() % NRANKS;
  usleep(20000 + (useconds_t)(rand() % 200) * 1000);
  int64_t killedAt = forkedNowMs();
  kill(pids[victim], SIGKILL); /* reaped at the end: survivors see a zombie */
  finishLoop(sh, pids, victim, DETECT_BOUND_MS + 5000);
  char rankName[32], pidName[32], host[64] = "";
  snprintf(rankName, sizeof rankName, "rank %d ", victim);
  snprintf(pidName, sizeof pidName, "pid %d ", (int)pids[victim]);
  gethostname(host, sizeof host - 1);
  if (strchr(host, '.') != NULL) *strchr(host, '.') = '\0';
  for (int r = 0; r < NRANKS; r++) {
    if (r == victim) continue;
    struct report *rep = &sh->r[r];
    cr_expect(rep->done, "rank %d never returned after rank %d was killed", r, victim);
    cr_expect_eq(rep->rc, weftRemoteError, "rank %d got %d after %ld calls: %s", r, rep->rc,
                 rep->iters, rep->msg);
    cr_expect_lt(rep->atMs - killedAt, DETECT_BOUND_MS, "rank %d took %lld ms", r,
                 (long long)(rep->atMs - killedAt));
    cr_expect(strstr(rep->msg, rankName) && strstr(rep->msg, pidName) && strstr(rep->msg, host),
              "rank %d's message does not name rank %d (%s on %s): %s", r, victim, pidName, host,
              rep->msg);
    cr_expect_gt(rep->iters, 0, "rank %d ran no Broadcast before the kill", r);
  }
  munmap(sh, sizeof *sh);
  char names[512];
  int left = segmentsLeft(names, sizeof names);
  cr_expect_eq(left, 0, "%d weft segments left in /dev/shm:%s", left, names);
}

Test(direct_faults, killed_rank_in_broadcasts) { killedRank(65536); }
Test(direct_faults, killed_rank_in_eager_broadcasts) { killedRank(64); }

/* A rank stopped in a loop of Broadcasts: every other rank times out naming it, whether it
 * waited for it or for a rank that waits for it (eager calls: a root whose queue is full waits
 * for its slowest reader, the others for that root). */
static void stoppedRank(size_t maxCount) {
  pid_t pids[NRANKS];
  struct shared *sh = startLoop(pids, "1500", maxCount);
  int victim = NRANKS - 1;
  usleep(50000);
  int64_t stoppedAt = forkedNowMs();
  kill(pids[victim], SIGSTOP);
  finishLoop(sh, pids, victim, 20000);
  char rankName[32];
  snprintf(rankName, sizeof rankName, "rank %d ", victim);
  for (int r = 0; r < NRANKS - 1; r++) {
    struct report *rep = &sh->r[r];
    long long after = (long long)(rep->atMs - stoppedAt);
    cr_expect(rep->done, "rank %d never returned", r);
    cr_expect_eq(rep->rc, weftTimeout, "rank %d got %d: %s", r, rep->rc, rep->msg);
    cr_expect(after >= 1400 && after < 15000, "rank %d returned after %lld ms", r, after);
    cr_expect(strstr(rep->msg, rankName) != NULL && strstr(rep->msg, "operation") != NULL,
              "rank %d's message does not name rank %d and the operation: %s", r, victim, rep->msg);
  }
  munmap(sh, sizeof *sh);
}

Test(direct_faults, stopped_rank_in_broadcasts) { stoppedRank(65536); }
Test(direct_faults, stopped_rank_in_eager_broadcasts) { stoppedRank(64); }
