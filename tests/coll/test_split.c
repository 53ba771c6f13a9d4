/* weftCommSplit: ranks as threads, processes and on emulated hosts (WEFT_HOSTID). Odd/even,
 * by host, NOCOLOR ranks, keys that reorder ranks (ties broken by the old rank), one color (a
 * dup), a split of a split, non-blocking splits; every new communicator's size and ranks are
 * checked against the test's own model of NCCL's rule, and used for AllReduce, Broadcast and
 * AllGather with exact results (the AllGather of old ranks shows who is where). Faults
 * (forked ranks): a rank killed before the split, and at a random moment of it, on one host
 * and on emulated hosts, blocking and not; every survivor returns within a bound, failures
 * are weftRemoteError naming the victim, and descriptors and /dev/shm are back where they
 * were. Refusals: bad colors, configs and handles, and a refused rank that calls again stays
 * in step with the others. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "forked.h"
#include "harness.h"

TestSuite(split, .timeout = 120);
TestSuite(split_fault, .timeout = 120);

#define MAX_RANKS 8
#define BCAST_COUNT 1031

/* ---- the model: what NCCL's rule makes of every rank's color and key ---- */

struct plan {
  int (*color)(int rank, int nranks, const struct plan *p);
  int (*key)(int rank, int nranks);
  int perHost;     /* by-host colors: rank r is on emulated host r / perHost */
  int nested;      /* split the new communicator again (halves, reversed) */
  int nonblocking; /* config.blocking = 0 */
};

/* New rank of rank r (-1: NOCOLOR) and the size of its communicator. */
static int placeOf(const int *colors, const int *keys, int n, int r, int *size) {
  *size = 0;
  if (colors[r] == WEFT_SPLIT_NOCOLOR) return -1;
  int below = 0;
  for (int q = 0; q < n; q++) {
    if (colors[q] != colors[r]) continue;
    (*size)++;
    below += keys[q] < keys[r] || (keys[q] == keys[r] && q < r);
  }
  return below;
}

/* The old rank that holds new rank `place` in color c. */
static int holderOf(const int *colors, const int *keys, int n, int c, int place) {
  for (int q = 0; q < n; q++) {
    int size;
    if (colors[q] == c && placeOf(colors, keys, n, q, &size) == place) return q;
  }
  return -1;
}

/* ---- waiting for non-blocking calls ---- */

static weftResult_t waitFor(weftComm_t comm) {
  weftResult_t state = weftInProgress;
  for (int i = 0; i < 30000 && state == weftInProgress; i++) {
    if (weftCommGetAsyncError(comm, &state) != weftSuccess) return weftInternalError;
    if (state == weftInProgress) usleep(1000);
  }
  return state;
}

/* A call on a non-blocking communicator returns weftInProgress, then completes. */
static weftResult_t finish(weftComm_t comm, weftResult_t rc, int nonblocking) {
  if (!nonblocking || rc != weftInProgress) return rc;
  return waitFor(comm);
}

/* ---- checks of a new communicator: size, rank, and three collectives exact ---- */

struct expect {
  int size, rank;
  const int *colors, *keys; /* the parent's, for who holds each new rank */
  int n, color;
  int oldRank;
  int nonblocking;
};

static long checkAllGather(weftComm_t comm, const struct expect *e) {
  int32_t mine[2] = {e->oldRank, e->oldRank * 7 + 1}, all[2 * MAX_RANKS];
  weftResult_t rc = finish(comm, weftAllGather(mine, all, 2, weftInt32, comm, NULL), e->nonblocking);
  if (rc != weftSuccess) {
    fprintf(stderr, "old rank %d: AllGather failed: %s\n", e->oldRank, weftGetLastError(comm));
    return 1;
  }
  long bad = 0;
  for (int i = 0; i < e->size; i++) {
    int q = holderOf(e->colors, e->keys, e->n, e->color, i);
    if (all[2 * i] != q || all[2 * i + 1] != q * 7 + 1) {
      fprintf(stderr, "old rank %d: new rank %d is old rank %d, expected %d\n", e->oldRank, i,
              all[2 * i], q);
      bad++;
    }
  }
  return bad;
}

static long checkBroadcast(weftComm_t comm, const struct expect *e) {
  int root = e->size - 1, q = holderOf(e->colors, e->keys, e->n, e->color, root);
  int32_t *buf = malloc(BCAST_COUNT * sizeof *buf);
  for (int i = 0; i < BCAST_COUNT; i++) buf[i] = e->rank == root ? q * 100000 + i : -1;
  weftResult_t rc = finish(comm, weftBroadcast(buf, buf, BCAST_COUNT, weftInt32, root, comm, NULL),
                           e->nonblocking);
  long bad = rc != weftSuccess;
  for (int i = 0; rc == weftSuccess && i < BCAST_COUNT; i++) bad += buf[i] != q * 100000 + i;
  if (bad) fprintf(stderr, "old rank %d: Broadcast from new rank %d: %ld wrong (%s)\n", e->oldRank,
                   root, bad, rc == weftSuccess ? "values" : weftGetLastError(comm));
  free(buf);
  return bad;
}

static long checkAllReduces(weftComm_t comm, const struct expect *e) {
  static const size_t counts[] = {1, 7, 1031};
  int64_t *send = malloc(1031 * 8), *recv = malloc(1031 * 8);
  long bad = 0;
  for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
    if (e->nonblocking) { /* checkAllReduce expects a blocking call: the same by hand */
      fillInput(send, counts[c], weftInt32, weftSum, e->rank);
      weftResult_t rc = finish(comm, weftAllReduce(send, recv, counts[c], weftInt32, weftSum, comm,
                                                   NULL), 1);
      bad += rc != weftSuccess || countWrong(recv, counts[c], weftInt32, weftSum, e->size) != 0;
      continue;
    }
    bad += checkAllReduce(comm, e->rank, e->size, counts[c], weftInt32, weftSum, 0, send, recv);
    bad += checkAllReduce(comm, e->rank, e->size, counts[c], weftFloat64, weftAvg, 1, send, recv);
  }
  free(send);
  free(recv);
  return bad;
}

static long checkChild(weftComm_t child, const struct expect *e) {
  int size = -1, rank = -1;
  weftCommCount(child, &size);
  weftCommUserRank(child, &rank);
  if (size != e->size || rank != e->rank) {
    fprintf(stderr, "old rank %d: new rank %d of %d, expected %d of %d\n", e->oldRank, rank, size,
            e->rank, e->size);
    return 1;
  }
  return checkAllGather(child, e) + checkBroadcast(child, e) + checkAllReduces(child, e);
}

/* ---- healthy splits: a rankBody for the harness ---- */

static int hostOfThisProcess(void) {
  const char *id = getenv("WEFT_HOSTID"); /* "weft-test-host-<n>", tests/common/harness.c */
  const char *digits = id != NULL ? strrchr(id, '-') : NULL;
  return digits != NULL ? atoi(digits + 1) : -1;
}

/* One split of comm (rank `me` of n) by colors/keys; *child (NULL for NOCOLOR) on success. */
static long splitOnce(weftComm_t comm, int me, int n, const int *colors, const int *keys,
                      int nonblocking, weftComm_t *child, struct expect *e) {
  weftConfig_t config = WEFT_CONFIG_INITIALIZER;
  config.blocking = nonblocking ? 0 : 1;
  weftResult_t rc = weftCommSplit(comm, colors[me], keys[me], child, &config);
  if (nonblocking && rc != weftInProgress) {
    fprintf(stderr, "rank %d: non-blocking split returned %d, not weftInProgress\n", me, rc);
    return 1;
  }
  if (nonblocking) rc = waitFor(*child != NULL ? *child : comm);
  *e = (struct expect){.colors = colors, .keys = keys, .n = n, .color = colors[me], .oldRank = me,
                       .nonblocking = nonblocking};
  e->rank = placeOf(colors, keys, n, me, &e->size);
  if (rc != weftSuccess) {
    fprintf(stderr, "rank %d: split (color %d key %d) failed: %s\n", me, colors[me], keys[me],
            weftGetLastError(*child != NULL ? *child : comm));
    return 1;
  }
  if ((e->rank < 0) != (*child == NULL)) {
    fprintf(stderr, "rank %d: color %d gave newcomm %p\n", me, colors[me], (void *)*child);
    return 1;
  }
  return 0;
}

static long nestedSplit(weftComm_t child, const struct expect *outer) {
  int colors[MAX_RANKS], keys[MAX_RANKS];
  for (int r = 0; r < outer->size; r++) {
    colors[r] = r < outer->size / 2 ? 10 : 11;
    keys[r] = -r;
  }
  weftComm_t grand = NULL;
  struct expect e;
  long bad = splitOnce(child, outer->rank, outer->size, colors, keys, outer->nonblocking, &grand, &e);
  if (bad == 0) {
    e.oldRank = outer->rank; /* the AllGather carries ranks of child, the parent of grand */
    bad += checkChild(grand, &e);
  }
  if (grand != NULL) weftCommDestroy(grand);
  return bad;
}

static long splitBody(weftComm_t comm, int rank, int nranks, void *arg) {
  const struct plan *p = arg;
  int colors[MAX_RANKS], keys[MAX_RANKS];
  for (int r = 0; r < nranks; r++) {
    colors[r] = p->color(r, nranks, p);
    keys[r] = p->key(r, nranks);
  }
  long bad = 0;
  if (p->perHost > 0) { /* the color is the host this process is on, as a user would pick it */
    int host = hostOfThisProcess();
    if (host != colors[rank]) {
      fprintf(stderr, "rank %d: on host %d, the test expected %d\n", rank, host, colors[rank]);
      return 1;
    }
  }
  weftComm_t child = NULL;
  struct expect e;
  bad += splitOnce(comm, rank, nranks, colors, keys, p->nonblocking, &child, &e);
  if (bad == 0 && child != NULL) bad += checkChild(child, &e);
  if (bad == 0 && child != NULL && p->nested) bad += nestedSplit(child, &e);
  if (child != NULL) weftCommDestroy(child);
  /* The parent still works, with every rank. */
  int64_t send[64], recv[64];
  bad += checkAllReduce(comm, rank, nranks, 64, weftInt64, weftSum, 0, send, recv);
  return bad;
}

static int colorOddEven(int r, int n, const struct plan *p) { (void)n, (void)p; return r % 2; }
static int colorOne(int r, int n, const struct plan *p) { (void)r, (void)n, (void)p; return 3; }
static int colorByHost(int r, int n, const struct plan *p) { (void)n; return r / p->perHost; }
/* Every third rank NOCOLOR, the others odd/even. */
static int colorSome(int r, int n, const struct plan *p) {
  (void)n, (void)p;
  return r % 3 == 0 ? WEFT_SPLIT_NOCOLOR : r % 2;
}
static int keyRank(int r, int n) { (void)n; return r; }
static int keyZero(int r, int n) { (void)r, (void)n; return 0; }
/* Descending, with ties (6 ranks: 3 2 2 1 1 0): new order 5, 3 4, 1 2, 0. */
static int keyReorder(int r, int n) { return (n - r) / 2; }

static void expectRun(long failures, const char *what) {
  cr_expect_eq(failures, 0, "%s: %ld failures (-1: a rank crashed or hung)", what, failures);
}

Test(split, odd_even_threads) {
  struct plan p = {colorOddEven, keyRank, 0, 0, 0};
  expectRun(runRanks(1, 6, splitBody, &p, 60), "6 threads");
}
Test(split, odd_even_processes) {
  struct plan p = {colorOddEven, keyRank, 0, 0, 0};
  expectRun(runRanks(5, 1, splitBody, &p, 60), "5 processes");
}
Test(split, odd_even_mixed) {
  struct plan p = {colorOddEven, keyRank, 0, 0, 0};
  expectRun(runRanks(2, 2, splitBody, &p, 60), "2 processes x 2 threads");
}
Test(split, by_host_processes) {
  struct plan p = {colorByHost, keyRank, 2, 0, 0};
  expectRun(runRanksOnHosts(3, 2, splitBody, &p, 60), "3 hosts x 2 processes");
}
Test(split, by_host_threads) {
  struct plan p = {colorByHost, keyRank, 3, 0, 0};
  expectRun(runThreadsOnHosts(2, 3, splitBody, &p, 60), "2 hosts x 3 threads");
}
Test(split, nocolor_ranks) {
  struct plan p = {colorSome, keyRank, 0, 0, 0};
  expectRun(runRanks(1, 7, splitBody, &p, 60), "7 threads");
  expectRun(runRanksOnHosts(2, 2, splitBody, &p, 60), "2 hosts x 2 processes");
}
Test(split, keys_reorder) {
  struct plan all = {colorOne, keyReorder, 0, 0, 0}, halves = {colorOddEven, keyReorder, 0, 0, 0};
  expectRun(runRanks(1, 6, splitBody, &all, 60), "one color, 6 threads");
  expectRun(runRanks(6, 1, splitBody, &halves, 60), "odd/even, 6 processes");
}
Test(split, one_color_is_a_dup) {
  struct plan p = {colorOne, keyZero, 0, 0, 0};
  expectRun(runRanks(1, 4, splitBody, &p, 60), "4 threads");
  expectRun(runRanksOnHosts(2, 2, splitBody, &p, 60), "2 hosts x 2 processes");
}
Test(split, split_of_a_split) {
  struct plan p = {colorOddEven, keyReorder, 0, 1, 0};
  expectRun(runRanks(1, 8, splitBody, &p, 60), "8 threads");
  expectRun(runRanksOnHosts(2, 3, splitBody, &p, 60), "2 hosts x 3 processes");
}
Test(split, nonblocking) {
  struct plan p = {colorSome, keyReorder, 0, 1, 1};
  expectRun(runRanks(1, 6, splitBody, &p, 60), "6 threads");
  expectRun(runRanks(4, 1, splitBody, &p, 60), "4 processes");
}

/* ---- a rank killed before or during the split (forked ranks) ---- */

#define FAULT_TIMEOUT_MS 8000
/* Far below the timeout: a survivor that only stops at its timeout fails the test. */
#define FAULT_BOUND_MS 3000

enum when { KILL_BEFORE, KILL_DURING };

struct faultReport {
  volatile int done, rc, childBad, fdsBefore, fdsAfter;
  volatile int64_t splitMs;
  char msg[768];
};
struct faultShared {
  struct faultReport r[MAX_RANKS];
  int victim, killAfterMs, hosts, nonblocking;
  int noColor; /* every third rank passes WEFT_SPLIT_NOCOLOR (before only: its own numbering) */
  enum when when;
};

static void *killLater(void *arg) {
  usleep((useconds_t)(*(int *)arg) * 1000);
  raise(SIGKILL);
  return NULL;
}

/* For a survivor whose split succeeded: its communicator works (exact) unless the victim is
 * in it, where an AllReduce may also fail with weftRemoteError (it died after the init). */
static int checkSurvivorChild(weftComm_t child, int victimInside, int nonblocking) {
  int n = 0, me = 0;
  weftCommCount(child, &n);
  weftCommUserRank(child, &me);
  int32_t send[31], recv[31];
  fillInput(send, 31, weftInt32, weftSum, me);
  weftResult_t rc = finish(child, weftAllReduce(send, recv, 31, weftInt32, weftSum, child, NULL),
                           nonblocking);
  if (rc == weftSuccess) return countWrong(recv, 31, weftInt32, weftSum, n) != 0;
  return !(victimInside && rc == weftRemoteError);
}

static void faultRank(void *shared, weftUniqueId id, int rank, int nranks) {
  struct faultShared *sh = shared;
  struct faultReport *me = &sh->r[rank];
  if (sh->hosts > 0) {
    char host[32];
    snprintf(host, sizeof host, "splithost%d", rank % sh->hosts);
    setenv("WEFT_HOSTID", host, 1);
  }
  me->fdsBefore = countOpenFds();
  weftComm_t comm = NULL, child = NULL;
  weftResult_t rc = weftCommInitRank(&comm, nranks, id, rank);
  if (rc == weftSuccess && rank == sh->victim) {
    pthread_t t;
    if (sh->when == KILL_BEFORE) raise(SIGKILL);
    pthread_create(&t, NULL, killLater, &sh->killAfterMs);
  }
  int64_t start = forkedNowMs();
  if (rc == weftSuccess) {
    weftConfig_t config = WEFT_CONFIG_INITIALIZER;
    config.blocking = !sh->nonblocking;
    int color = sh->noColor && rank % 3 == 0 ? WEFT_SPLIT_NOCOLOR : rank % 2;
    rc = weftCommSplit(comm, color, rank, &child, &config);
    /* A NOCOLOR rank's non-blocking part is the parent's operation: its state tells. */
    if (sh->nonblocking && rc == weftInProgress) rc = waitFor(child != NULL ? child : comm);
    snprintf(me->msg, sizeof me->msg, "%s", weftGetLastError(child != NULL ? child : comm));
  }
  me->splitMs = forkedNowMs() - start;
  if (rc == weftSuccess && child != NULL)
    me->childBad = checkSurvivorChild(child, sh->victim % 2 == rank % 2, sh->nonblocking);
  if (child != NULL) weftCommDestroy(child);
  if (comm != NULL) weftCommDestroy(comm);
  me->fdsAfter = countOpenFds();
  me->rc = rc;
  me->done = 1;
  _exit(0);
}

static void faultScenario(enum when when, int nranks, int hosts, int nonblocking, int noColor,
                          int reps) {
  char timeout[16];
  snprintf(timeout, sizeof timeout, "%d", FAULT_TIMEOUT_MS);
  setenv("WEFT_TIMEOUT_MS", timeout, 1);
  unsigned seed = (unsigned)getpid() ^ (unsigned)forkedNowMs();
  srand(seed);
  for (int rep = 0; rep < reps; rep++) {
    pid_t pids[MAX_RANKS];
    struct faultShared *sh = forkedShared(sizeof *sh);
    *sh = (struct faultShared){.victim = rand() % nranks, .killAfterMs = rand() % 40,
                               .hosts = hosts, .nonblocking = nonblocking, .noColor = noColor,
                               .when = when};
    forkedLaunch(nranks, faultRank, sh, pids);
    forkedReap(pids, nranks, 30000);
    char what[128], victim[32];
    snprintf(what, sizeof what, "%s, %d ranks, %d hosts, %s, seed %u rep %d, victim %d after %d ms",
             when == KILL_BEFORE ? "before" : "during", nranks, hosts,
             nonblocking ? "non-blocking" : "blocking", seed, rep, sh->victim, sh->killAfterMs);
    /* A failure of the agreement or of a bootstrap names the victim by its old rank; one of
     * the new communicator's init (its transports, after the bootstrap: a rank of the
     * victim's color) by its new rank, as any init does. Colors are rank % 2, keys the rank. */
    char victimNew[32];
    snprintf(victim, sizeof victim, "rank %d (", sh->victim);
    snprintf(victimNew, sizeof victimNew, "rank %d (", sh->victim / 2);
    for (int r = 0; r < nranks; r++) {
      const struct faultReport *rep_ = &sh->r[r];
      if (r == sh->victim) continue;
      if (getenv("WEFT_TEST_VERBOSE"))
        fprintf(stderr, "%s: rank %d rc %d in %lld ms: %s\n", what, r, rep_->rc,
                (long long)rep_->splitMs, rep_->msg);
      cr_expect(rep_->done, "%s: rank %d did not finish", what, r);
      cr_expect_lt(rep_->splitMs, FAULT_BOUND_MS, "%s: rank %d took %lld ms", what, r,
                   (long long)rep_->splitMs);
      cr_expect_eq(rep_->fdsAfter, rep_->fdsBefore, "%s: rank %d has %d descriptors, had %d",
                   what, r, rep_->fdsAfter, rep_->fdsBefore);
      if (when == KILL_BEFORE || rep_->rc != weftSuccess) {
        cr_expect_eq(rep_->rc, weftRemoteError, "%s: rank %d got %d: %s", what, r, rep_->rc, rep_->msg);
        int sameColor = r % 2 == sh->victim % 2;
        cr_expect(strstr(rep_->msg, victim) != NULL ||
                      (sameColor && strstr(rep_->msg, victimNew) != NULL),
                  "%s: rank %d does not name the victim: %s", what, r, rep_->msg);
      } else {
        cr_expect_eq(rep_->childBad, 0, "%s: rank %d's new communicator is wrong", what, r);
      }
    }
    char names[512];
    int left = takeSegmentsOf(pids, nranks, names, sizeof names);
    cr_expect_eq(left, 0, "%s: %d segments left in /dev/shm:%s", what, left, names);
    munmap(sh, sizeof *sh);
  }
  unsetenv("WEFT_TIMEOUT_MS");
}

Test(split_fault, killed_before_shm) { faultScenario(KILL_BEFORE, 4, 0, 0, 0, 2); }
Test(split_fault, killed_before_tcp_hosts) { faultScenario(KILL_BEFORE, 4, 2, 0, 0, 2); }
Test(split_fault, killed_before_nonblocking) { faultScenario(KILL_BEFORE, 5, 0, 1, 0, 1); }
Test(split_fault, killed_before_nocolor_ranks) {
  faultScenario(KILL_BEFORE, 6, 0, 0, 1, 1);
  faultScenario(KILL_BEFORE, 6, 3, 1, 1, 1); /* non-blocking: NOCOLOR ranks poll the parent */
}
Test(split_fault, killed_during_shm) { faultScenario(KILL_DURING, 4, 0, 0, 0, 3); }
Test(split_fault, killed_during_tcp_hosts) { faultScenario(KILL_DURING, 5, 5, 1, 0, 3); }

/* ---- refusals ---- */

Test(split, bad_arguments, .timeout = 30) {
  weftUniqueId id;
  weftComm_t comm, child = (weftComm_t)&id;
  cr_assert_eq(weftGetUniqueId(&id), weftSuccess);
  cr_assert_eq(weftCommInitRank(&comm, 1, id, 0), weftSuccess);
  cr_expect_eq(weftCommSplit(comm, -2, 0, &child, NULL), weftInvalidArgument);
  cr_expect(strstr(weftGetLastError(comm), "color -2") != NULL, "%s", weftGetLastError(comm));
  cr_expect_null(child, "newcomm is set to NULL on a refusal");
  cr_expect_eq(weftCommSplit(comm, -1000, 0, &child, NULL), weftInvalidArgument);
  cr_expect_eq(weftCommSplit(comm, 0, 0, NULL, NULL), weftInvalidArgument);
  cr_expect_eq(weftCommSplit(NULL, 0, 0, &child, NULL), weftInvalidArgument);
  weftConfig_t bad = WEFT_CONFIG_INITIALIZER;
  bad.magic = 0;
  cr_expect_eq(weftCommSplit(comm, 0, 0, &child, &bad), weftInvalidArgument);
  bad = (weftConfig_t)WEFT_CONFIG_INITIALIZER;
  bad.timeoutMs = 0;
  cr_expect_eq(weftCommSplit(comm, 0, 0, &child, &bad), weftInvalidArgument);
  bad.timeoutMs = WEFT_CONFIG_UNDEF_INT;
  bad.blocking = 2;
  cr_expect_eq(weftCommSplit(comm, 0, 0, &child, &bad), weftInvalidArgument);
  setenv("WEFT_TIMEOUT_MS", "0", 1); /* a setting not allowed: refused at the split too */
  cr_expect_eq(weftCommSplit(comm, 0, 0, &child, NULL), weftInvalidArgument);
  cr_expect(strstr(weftGetLastError(comm), "WEFT_TIMEOUT_MS") != NULL, "%s", weftGetLastError(comm));
  unsetenv("WEFT_TIMEOUT_MS");
  /* NOCOLOR on one rank: nothing to join. A large color and a negative key are fine. */
  child = (weftComm_t)&id;
  cr_expect_eq(weftCommSplit(comm, WEFT_SPLIT_NOCOLOR, 0, &child, NULL), weftSuccess);
  cr_expect_null(child);
  cr_assert_eq(weftCommSplit(comm, 0x7fffffff, -5, &child, NULL), weftSuccess, "%s",
               weftGetLastError(comm));
  int n = 0;
  weftCommCount(child, &n);
  cr_expect_eq(n, 1);
  weftCommDestroy(child);
  weftCommDestroy(comm);
  cr_expect_eq(weftCommSplit(comm, 0, 0, &child, NULL), weftInvalidUsage, "a destroyed parent");
}

/* A rank refused for its own argument takes no part: calling again, it meets the others. */
static long refusedThenAgain(weftComm_t comm, int rank, int nranks, void *arg) {
  (void)arg;
  weftComm_t child = NULL;
  if (rank == 0 && weftCommSplit(comm, -7, 0, &child, NULL) != weftInvalidArgument) return 1;
  if (weftCommSplit(comm, 0, -rank, &child, NULL) != weftSuccess) {
    fprintf(stderr, "rank %d: %s\n", rank, weftGetLastError(comm));
    return 1;
  }
  int me = -1;
  weftCommUserRank(child, &me);
  int32_t send[5], recv[5];
  long bad = me != nranks - 1 - rank;
  bad += checkAllReduce(child, me, nranks, 5, weftInt32, weftSum, 0, send, recv);
  weftCommDestroy(child);
  return bad;
}

Test(split, refused_rank_stays_in_step) {
  expectRun(runRanks(1, 3, refusedThenAgain, NULL, 60), "3 threads");
}
