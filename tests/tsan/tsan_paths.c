/* The multi-threaded paths of the library, for ThreadSanitizer (make check-tsan), which
 * Criterion's fork machinery cannot run under: ranks as threads of one process, and threads
 * of processes on emulated hosts (WEFT_HOSTID) so that hier, tcp between hosts and the
 * signature notes of lib/sigwatch.c run too; non-blocking init and collectives with their
 * own threads; weftCommAbort from another thread; a mismatch only the notes can see; a stuck
 * rank named through the chain of waits; direct's eager and synchronous Broadcast and Reduce
 * between threads, and its AlltoAll, Gather and Scatter. Every scenario checks its results (exactly, as the
 * suite does); any failure or sanitizer report fails the run.
 *   tsan_paths [NAME...]   (default: all; prints PASS/FAIL per scenario, exit 1 on a failure) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "algo.h"
#include "core.h"
#include "forked.h"
#include "collcases.h"
#include "harness.h"

#define TIMEOUT_S 300

static const size_t counts[] = {0, 1, 31, 4099, 300007};
static const weftDataType_t types[] = {weftInt32, weftFloat16, weftFloat32, weftBfloat16};
static const weftRedOp_t ops[] = {weftSum, weftMax, weftAvg};
static const struct collMatrix matrix = {counts, 5, types, 4, ops, 3};

static long hostsWith(const char *algo) {
  if (algo) setenv("WEFT_ALGO", algo, 1);
  else unsetenv("WEFT_ALGO");
  long f = runThreadsOnHosts(2, 2, collMatrixBody, (void *)&matrix, TIMEOUT_S);
  unsetenv("WEFT_ALGO");
  return f;
}

/* 2 emulated hosts x 2 threads: shm between the threads of a host, tcp between hosts. */
static long hostsHier(void) { return hostsWith("hier"); }
static long hostsRing(void) { return hostsWith("ring"); }
static long hostsTree(void) { return hostsWith("tree"); }
static long hostsTuner(void) { return hostsWith(NULL); }

/* 4 threads of this process: every registered algorithm that runs on one host, the tuner. */
static long threadsEveryAlgo(void) {
  long f = 0;
  for (int a = 0; a <= weftAlgoCount(); a++) {
    char why[160];
    if (a < weftAlgoCount() && !algoRunsOn(weftAlgos[a]->name, 1, 4, why, sizeof why)) continue;
    if (a < weftAlgoCount()) setenv("WEFT_ALGO", weftAlgos[a]->name, 1);
    else unsetenv("WEFT_ALGO");
    f += runRanks(1, 4, collMatrixBody, (void *)&matrix, TIMEOUT_S);
  }
  unsetenv("WEFT_ALGO");
  return f;
}

/* 4 threads, direct: Broadcast and Reduce eager (1 and 31 floats: a root runs ahead into its
 * queue), synchronous (4099) and in place between threads (300007), every root. */
static long threadsDirectRooted(void) {
  static const size_t rootedCounts[] = {1, 31, 4099, 300007};
  static const weftDataType_t rootedTypes[] = {weftInt32, weftFloat32};
  long f = 0;
  setenv("WEFT_ALGO", "direct", 1);
  for (int c = 0; c < 2; c++) {
    struct collSweep sweep = {c == 0 ? weftCollBroadcast : weftCollReduce, rootedCounts, 4,
                              rootedTypes, 2, 1};
    collSweepPrepare(&sweep, 4);
    f += runRanks(1, 4, collSweepBody, &sweep, TIMEOUT_S);
  }
  unsetenv("WEFT_ALGO");
  return f;
}

/* 4 threads, direct: AlltoAll staged (31 elements) and read in place between threads (4099,
 * 300007), Gather and Scatter eager and staged, every root. */
static long threadsDirectGathered(void) {
  static const size_t gatheredCounts[] = {31, 4099, 300007};
  static const weftDataType_t gatheredTypes[] = {weftInt32};
  static const weftColl_t colls[] = {weftCollAlltoAll, weftCollGather, weftCollScatter};
  long f = 0;
  setenv("WEFT_ALGO", "direct", 1);
  for (int c = 0; c < 3; c++) {
    struct collSweep sweep = {colls[c], gatheredCounts, 3, gatheredTypes, 1, 1};
    collSweepPrepare(&sweep, 4);
    f += runRanks(1, 4, collSweepBody, &sweep, TIMEOUT_S);
  }
  unsetenv("WEFT_ALGO");
  return f;
}

/* ---- non-blocking init and collectives ---- */

struct nbRank {
  pthread_t tid;
  weftUniqueId id;
  int rank, nranks;
  weftComm_t comm;
  weftResult_t rc;
};

static void *nbInit(void *p) {
  struct nbRank *t = p;
  weftConfig_t config = WEFT_CONFIG_INITIALIZER;
  config.blocking = 0;
  t->rc = weftCommInitRankConfig(&t->comm, t->nranks, t->id, t->rank, &config);
  return NULL;
}

static weftResult_t pollState(weftComm_t comm) {
  weftResult_t state = weftInProgress;
  for (int64_t end = forkedNowMs() + 60000; state == weftInProgress && forkedNowMs() < end;) {
    if (weftCommGetAsyncError(comm, &state) != weftSuccess) return weftInternalError;
    if (state == weftInProgress) usleep(1000);
  }
  return state;
}

/* n communicators initialized without blocking by as many threads; 0 when all came up. */
static long nbStart(struct nbRank *t, int n) {
  weftUniqueId id;
  if (weftGetUniqueId(&id) != weftSuccess) return 1;
  for (int r = 0; r < n; r++) {
    t[r] = (struct nbRank){.id = id, .rank = r, .nranks = n};
    pthread_create(&t[r].tid, NULL, nbInit, &t[r]);
  }
  long f = 0;
  for (int r = 0; r < n; r++) pthread_join(t[r].tid, NULL);
  for (int r = 0; r < n; r++) f += t[r].rc != weftInProgress || pollState(t[r].comm) != weftSuccess;
  return f;
}

static long nonblocking(void) {
  struct nbRank t[3];
  long f = nbStart(t, 3);
  if (f) return f;
  float in[3][1000], out[3][1000];
  for (int round = 0; round < 3; round++) {
    for (int r = 0; r < 3; r++) {
      for (int i = 0; i < 1000; i++) in[r][i] = (float)(r + round * i);
      f += weftAllReduce(in[r], out[r], 1000, weftFloat32, weftSum, t[r].comm, NULL) != weftInProgress;
    }
    for (int r = 0; r < 3; r++) {
      f += pollState(t[r].comm) != weftSuccess;
      for (int i = 0; i < 1000; i++) f += out[r][i] != (float)(3 + 3 * round * i);
    }
  }
  /* a collective that cannot complete (rank 1 never calls), aborted while pending */
  float x = 1, y;
  f += weftAllReduce(&x, &y, 1, weftFloat32, weftSum, t[0].comm, NULL) != weftInProgress;
  usleep(50000);
  f += weftCommAbort(t[0].comm) != weftSuccess;
  for (int r = 1; r < 3; r++) f += weftCommAbort(t[r].comm) != weftSuccess;
  return f;
}

/* ---- abort from another thread ---- */

struct blocked {
  weftComm_t comm;
  weftResult_t rc;
};

static void *blockedAllReduce(void *p) {
  struct blocked *b = p;
  float x = 1, y;
  b->rc = weftAllReduce(&x, &y, 1, weftFloat32, weftSum, b->comm, NULL);
  return NULL;
}

static void *blockingInit(void *p) {
  struct nbRank *t = p;
  t->rc = weftCommInitRank(&t->comm, t->nranks, t->id, t->rank);
  return NULL;
}

static long abortFor(const char *algo) {
  setenv("WEFT_ALGO", algo, 1);
  weftUniqueId id;
  if (weftGetUniqueId(&id) != weftSuccess) return 1;
  struct nbRank t[2];
  for (int r = 0; r < 2; r++) {
    t[r] = (struct nbRank){.id = id, .rank = r, .nranks = 2};
    pthread_create(&t[r].tid, NULL, blockingInit, &t[r]);
  }
  for (int r = 0; r < 2; r++) pthread_join(t[r].tid, NULL);
  unsetenv("WEFT_ALGO");
  if (t[0].rc != weftSuccess || t[1].rc != weftSuccess) return 1;
  struct blocked b = {.comm = t[0].comm};
  pthread_t tid;
  pthread_create(&tid, NULL, blockedAllReduce, &b); /* rank 1 never comes */
  usleep(100000);
  long f = weftCommAbort(t[0].comm) != weftSuccess;
  pthread_join(tid, NULL);
  f += b.rc != weftRemoteError;
  struct blocked b1 = {.comm = t[1].comm};
  for (int i = 0; i < 2 && b1.rc == weftSuccess; i++) blockedAllReduce(&b1);
  f += b1.rc != weftRemoteError;
  f += weftCommDestroy(t[1].comm) != weftSuccess;
  return f;
}

static long abortDirect(void) { return abortFor("direct"); }
static long abortRing(void) { return abortFor("ring"); }

/* ---- the signature notes of lib/sigwatch.c ---- */

/* Rank 1 calls with a count that makes the tuner pick another algorithm: the ranks wait on
 * different links and only the notes can tell. Every rank: weftInvalidUsage, "mismatched". */
static long mismatchBody(weftComm_t comm, int rank, int nranks, void *arg) {
  (void)nranks;
  (void)arg;
  size_t big = 1 << 20, count = rank == 1 ? 100 : big;
  float *buf = calloc(big, sizeof *buf);
  weftResult_t rc = weftSuccess;
  for (int i = 0; i < 3 && rc == weftSuccess; i++) rc = weftAllReduce(buf, buf, 100, weftFloat32, weftSum, comm, NULL);
  if (rc == weftSuccess) rc = weftAllReduce(buf, buf, count, weftFloat32, weftSum, comm, NULL);
  free(buf);
  int ok = rc == weftInvalidUsage && strstr(weftGetLastError(comm), "mismatched collectives") != NULL;
  if (!ok) fprintf(stderr, "rank %d: %d %s\n", rank, rc, weftGetLastError(comm));
  return !ok;
}

static long mismatchNotes(void) {
  setenv("WEFT_TIMEOUT_MS", "20000", 1);
  long f = runThreadsOnHosts(2, 2, mismatchBody, NULL, TIMEOUT_S);
  unsetenv("WEFT_TIMEOUT_MS");
  return f;
}

/* Rank 3 does not come to the third call; the others time out and name it, through the
 * chain of waits where their own wait was for a live neighbour. */
static long stuckBody(weftComm_t comm, int rank, int nranks, void *arg) {
  (void)arg;
  float x[64] = {0};
  weftResult_t rc = weftSuccess;
  for (int i = 0; i < 2 && rc == weftSuccess; i++) rc = weftAllReduce(x, x, 64, weftFloat32, weftSum, comm, NULL);
  if (rank == nranks - 1) {
    sleep(4); /* past the others' 1.5 s timeout */
    return rc != weftSuccess;
  }
  if (rc == weftSuccess) rc = weftAllReduce(x, x, 64, weftFloat32, weftSum, comm, NULL);
  char needle[24];
  snprintf(needle, sizeof needle, "rank %d", nranks - 1);
  int ok = rc == weftTimeout && strstr(weftGetLastError(comm), needle) != NULL;
  if (!ok) fprintf(stderr, "rank %d: %d %s\n", rank, rc, weftGetLastError(comm));
  return !ok;
}

static long stuckChain(void) {
  setenv("WEFT_TIMEOUT_MS", "1500", 1);
  setenv("WEFT_ALGO", "ring", 1);
  long f = runThreadsOnHosts(2, 2, stuckBody, NULL, TIMEOUT_S);
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_TIMEOUT_MS");
  return f;
}

static const struct {
  const char *name;
  long (*run)(void);
} scenarios[] = {
    {"threads_every_algo", threadsEveryAlgo}, {"threads_direct_rooted", threadsDirectRooted},
    {"threads_direct_gathered", threadsDirectGathered}, {"hosts_hier", hostsHier},
    {"hosts_ring", hostsRing},                {"hosts_tree", hostsTree},
    {"hosts_tuner", hostsTuner},              {"nonblocking", nonblocking},
    {"abort_direct", abortDirect},            {"abort_ring", abortRing},
    {"mismatch_notes", mismatchNotes},        {"stuck_chain", stuckChain},
};

int main(int argc, char **argv) {
  int failed = 0, ran = 0;
  for (size_t s = 0; s < sizeof scenarios / sizeof scenarios[0]; s++) {
    int wanted = argc == 1;
    for (int i = 1; i < argc; i++) wanted |= strcmp(argv[i], scenarios[s].name) == 0;
    if (!wanted) continue;
    int64_t start = forkedNowMs();
    long f = scenarios[s].run();
    printf("%s %s (%lld ms)\n", f ? "FAIL" : "PASS", scenarios[s].name, (long long)(forkedNowMs() - start));
    fflush(stdout);
    failed += f != 0;
    ran++;
  }
  printf("tsan_paths: %d passed, %d failed\n", ran - failed, failed);
  return failed || ran == 0;
}
