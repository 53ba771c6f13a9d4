/* weftCommShrink and weftCommRecover: ranks as forked processes, on one host (shared memory)
 * and on emulated hosts (WEFT_HOSTID: TCP, and survivors probe each other's listeners).
 * Healthy shrink (the parent stays usable), shrink and recover after a rank is killed at a
 * random point of a loop of AllReduces, two recoveries in a row, recover with nobody gone,
 * members that disagree, bad arguments. Every new communicator is checked with exact
 * AllReduce results, and every survivor's descriptors and /dev/shm are back to where they were. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "forked.h"
#include "harness.h"

/* A hang fails the test (tests/run-all.sh requires a timeout on every test). */
TestSuite(shrink, .timeout = 60);

#define MAX_RANKS 8
#define TIMEOUT_MS "4000"

#define nowMs forkedNowMs

enum scenario { HEALTHY_SHRINK, KILL_SHRINK, KILL_RECOVER, TWICE_RECOVER, ALIVE_RECOVER, DISAGREE };

struct report {
  volatile int done, rc, failures;
  volatile int newRank, newCount, excluded[MAX_RANKS], nExcluded;
  volatile int fdsBefore, fdsAfter;
  volatile int64_t recoverMs; /* from the failed collective to a usable new communicator */
  char msg[512];
};
struct shared {
  struct report r[MAX_RANKS];
  int victims[2]; /* old rank killed first; rank of the first new communicator killed second */
  int killAfter[2]; /* collectives before the victim kills itself */
  int hosts;        /* > 0: rank r is on host r % hosts */
  enum scenario scenario;
};

static long checkComm(weftComm_t comm) {
  int n = 0, me = 0;
  weftCommCount(comm, &n);
  weftCommUserRank(comm, &me);
  static const size_t counts[] = {0, 1, 7, 1031};
  int32_t *send = malloc(1031 * 8), *recv = malloc(1031 * 8);
  long bad = 0;
  for (size_t i = 0; i < sizeof counts / sizeof *counts; i++) {
    bad += checkAllReduce(comm, me, n, counts[i], weftInt32, weftSum, 0, send, recv);
    bad += checkAllReduce(comm, me, n, counts[i], weftFloat64, weftAvg, 1, send, recv);
  }
  free(send);
  free(recv);
  return bad;
}

/* AllReduces until one fails; the victim kills itself after killAfter of them. */
static weftResult_t loopUntilFailure(weftComm_t comm, int me, int victim, int killAfter) {
  float buf[256];
  for (int i = 0; i < 256; i++) buf[i] = 1.0f;
  int64_t end = nowMs() + 15000;
  for (int it = 0; nowMs() < end; it++) {
    if (me == victim && it == killAfter) raise(SIGKILL);
    weftResult_t rc = weftAllReduce(buf, buf, 1 + (size_t)it % 256, weftFloat32, weftSum, comm, NULL);
    if (rc != weftSuccess) return rc;
  }
  return weftSuccess;
}

static void noteResult(struct report *me, weftComm_t comm, weftComm_t child, int nExcluded,
                       const int *excluded) {
  weftCommUserRank(child, (int *)&me->newRank);
  weftCommCount(child, (int *)&me->newCount);
  me->nExcluded = nExcluded;
  for (int i = 0; i < nExcluded && i < MAX_RANKS; i++) me->excluded[i] = excluded[i];
  (void)comm;
}

static weftResult_t recoverOnce(struct report *me, weftComm_t *comm, int victim, int killAfter) {
  int rank;
  weftCommUserRank(*comm, &rank);
  weftResult_t rc = loopUntilFailure(*comm, rank, victim, killAfter);
  if (rc == weftSuccess) return weftInternalError; /* the victim never died */
  int64_t failedAt = nowMs();
  weftComm_t child;
  int excluded[MAX_RANKS], nExcluded = -1;
  rc = weftCommRecover(*comm, &child, NULL, excluded, &nExcluded);
  if (rc != weftSuccess) {
    snprintf(me->msg, sizeof me->msg, "recover: %s", weftGetLastError(*comm));
    return rc;
  }
  me->recoverMs = nowMs() - failedAt;
  noteResult(me, *comm, child, nExcluded, excluded);
  weftCommDestroy(*comm);
  *comm = child;
  return weftSuccess;
}

static weftResult_t runScenario(struct shared *sh, enum scenario sc, int rank, int nranks,
                                weftComm_t *comm) {
  struct report *me = &sh->r[rank];
  weftComm_t child = NULL;
  weftResult_t rc = weftSuccess;
  int excl[2] = {sh->victims[0], -1};
  switch (sc) {
    case HEALTHY_SHRINK:
      if (rank != nranks - 1) {
        excl[0] = nranks - 1;
        rc = weftCommShrink(*comm, excl, 1, &child, NULL, WEFT_SHRINK_DEFAULT);
        if (rc == weftSuccess) {
          noteResult(me, *comm, child, 1, excl);
          me->failures += (int)checkComm(child);
          weftCommDestroy(child);
        }
      }
      me->failures += (int)checkComm(*comm); /* the parent still works, with every rank */
      return rc;
    case KILL_SHRINK:
      if (loopUntilFailure(*comm, rank, sh->victims[0], sh->killAfter[0]) == weftSuccess)
        return weftInternalError;
      rc = weftCommShrink(*comm, excl, 1, &child, NULL, WEFT_SHRINK_ABORT);
      if (rc != weftSuccess) return rc;
      noteResult(me, *comm, child, 1, excl);
      weftCommDestroy(*comm);
      *comm = child;
      break;
    case KILL_RECOVER:
    case TWICE_RECOVER:
      rc = recoverOnce(me, comm, sh->victims[0], sh->killAfter[0]);
      if (rc == weftSuccess && sc == TWICE_RECOVER)
        rc = recoverOnce(me, comm, sh->victims[1], sh->killAfter[1]);
      if (rc != weftSuccess) return rc;
      break;
    case ALIVE_RECOVER: {
      int excluded[MAX_RANKS], nExcluded = -1;
      rc = weftCommRecover(*comm, &child, NULL, excluded, &nExcluded);
      if (rc != weftSuccess) return rc;
      noteResult(me, *comm, child, nExcluded, excluded);
      weftCommDestroy(*comm);
      *comm = child;
      break;
    }
    case DISAGREE: /* ranks 0 and 1 leave out the last rank, the others nobody */
      excl[0] = nranks - 1;
      rc = weftCommShrink(*comm, excl, rank < 2 ? 1 : 0, &child, NULL, WEFT_SHRINK_DEFAULT);
      if (rc == weftSuccess) weftCommDestroy(child);
      return rc;
  }
  me->failures += (int)checkComm(*comm);
  return weftSuccess;
}

static void rankMain(struct shared *sh, weftUniqueId id, enum scenario sc, int rank, int nranks) {
  struct report *me = &sh->r[rank];
  if (sh->hosts > 0) {
    char host[32];
    snprintf(host, sizeof host, "shrinkhost%d", rank % sh->hosts);
    setenv("WEFT_HOSTID", host, 1);
  }
  me->fdsBefore = countOpenFds();
  weftComm_t comm = NULL;
  weftResult_t rc = weftCommInitRank(&comm, nranks, id, rank);
  if (rc == weftSuccess) rc = runScenario(sh, sc, rank, nranks, &comm);
  if (rc != weftSuccess && me->msg[0] == '\0')
    snprintf(me->msg, sizeof me->msg, "%s", weftGetLastError(comm));
  if (comm != NULL) weftCommDestroy(comm);
  me->fdsAfter = countOpenFds();
  me->rc = rc;
  me->done = 1;
  _exit(0);
}

static void rankEntry(void *shared, weftUniqueId id, int rank, int nranks) {
  struct shared *sh = shared;
  rankMain(sh, id, sh->scenario, rank, nranks);
}

static struct shared *launch(enum scenario sc, int nranks, int hosts, pid_t *pids) {
  struct shared *sh = forkedShared(sizeof *sh);
  sh->scenario = sc;
  sh->hosts = hosts;
  sh->victims[0] = rand() % nranks;
  sh->victims[1] = rand() % (nranks - 1);
  sh->killAfter[0] = rand() % 200;
  sh->killAfter[1] = rand() % 200;
  forkedLaunch(nranks, rankEntry, sh, pids);
  return sh;
}

static int isVictim(const struct shared *sh, enum scenario sc, int r, int nranks) {
  if (sc == KILL_SHRINK || sc == KILL_RECOVER || sc == TWICE_RECOVER) {
    if (r == sh->victims[0]) return 1;
    /* The second victim is a rank of the first new communicator. */
    int newRank = r - (r > sh->victims[0]);
    if (sc == TWICE_RECOVER && newRank == sh->victims[1]) return 1;
  }
  (void)nranks;
  return 0;
}

static void expectSurvivor(const struct shared *sh, enum scenario sc, int r, int nranks,
                           const char *what) {
  const struct report *rep = &sh->r[r];
  cr_expect(rep->done, "%s: rank %d did not finish", what, r);
  cr_expect_eq(rep->rc, weftSuccess, "%s: rank %d got %d: %s", what, r, rep->rc, rep->msg);
  cr_expect_eq(rep->failures, 0, "%s: rank %d: %d wrong AllReduce cases", what, r, rep->failures);
  cr_expect_eq(rep->fdsAfter, rep->fdsBefore, "%s: rank %d has %d descriptors, had %d", what, r,
               rep->fdsAfter, rep->fdsBefore);
  int gone = sc == TWICE_RECOVER ? 2 : sc == ALIVE_RECOVER ? 0 : 1;
  if (sc == DISAGREE || (sc == HEALTHY_SHRINK && r == nranks - 1)) return; /* not a member */
  cr_expect_eq(rep->newCount, nranks - gone, "%s: rank %d's new communicator has %d ranks", what,
               r, rep->newCount);
  if (sc != TWICE_RECOVER)
    cr_expect_eq(rep->nExcluded, gone, "%s: rank %d excluded %d ranks", what, r, rep->nExcluded);
  if (sc == KILL_RECOVER || sc == KILL_SHRINK) {
    cr_expect_eq(rep->excluded[0], sh->victims[0], "%s: rank %d excluded %d, not %d", what, r,
                 rep->excluded[0], sh->victims[0]);
    cr_expect_eq(rep->newRank, r - (r > sh->victims[0]), "%s: rank %d is new rank %d", what, r,
                 rep->newRank);
  }
}

static void scenario(enum scenario sc, int nranks, int hosts, int reps) {
  setenv("WEFT_TIMEOUT_MS", TIMEOUT_MS, 1);
  unsigned seed = (unsigned)getpid() ^ (unsigned)nowMs();
  srand(seed);
  for (int rep = 0; rep < reps; rep++) {
    pid_t pids[MAX_RANKS];
    struct shared *sh = launch(sc, nranks, hosts, pids);
    forkedReap(pids, nranks, 30000);
    char what[96];
    snprintf(what, sizeof what, "scenario %d, %d ranks, %d hosts, seed %u, rep %d, victims %d/%d",
             (int)sc, nranks, hosts, seed, rep, sh->victims[0], sh->victims[1]);
    for (int r = 0; r < nranks; r++) {
      if (isVictim(sh, sc, r, nranks)) continue;
      if (sc == DISAGREE) {
        cr_expect_neq(sh->r[r].rc, weftSuccess, "%s: rank %d formed a communicator", what, r);
        continue;
      }
      if (getenv("WEFT_TEST_VERBOSE"))
        fprintf(stderr, "%s: rank %d rc %d recover %lld ms: %s\n", what, r, sh->r[r].rc,
                (long long)sh->r[r].recoverMs, sh->r[r].msg);
      expectSurvivor(sh, sc, r, nranks, what);
    }
    char names[512];
    int left = takeSegmentsOf(pids, nranks, names, sizeof names);
    cr_expect_eq(left, 0, "%s: %d segments left in /dev/shm:%s", what, left, names);
    munmap(sh, sizeof *sh);
  }
  unsetenv("WEFT_TIMEOUT_MS");
}

Test(shrink, healthy_parent_stays_usable, .timeout = 60) { scenario(HEALTHY_SHRINK, 4, 0, 1); }
Test(shrink, after_kill_shm, .timeout = 90) { scenario(KILL_SHRINK, 4, 0, 2); }
Test(shrink, after_kill_tcp_hosts, .timeout = 90) { scenario(KILL_SHRINK, 4, 2, 2); }
Test(shrink, disagreeing_members_fail, .timeout = 60) { scenario(DISAGREE, 4, 0, 1); }
Test(recover, after_kill_shm, .timeout = 120) { scenario(KILL_RECOVER, 4, 0, 3); }
Test(recover, after_kill_tcp_hosts, .timeout = 120) { scenario(KILL_RECOVER, 4, 4, 3); }
Test(recover, after_kill_mixed_hosts, .timeout = 120) { scenario(KILL_RECOVER, 5, 2, 2); }
Test(recover, twice_in_a_row, .timeout = 120) { scenario(TWICE_RECOVER, 5, 2, 2); }
Test(recover, nobody_gone, .timeout = 60) { scenario(ALIVE_RECOVER, 3, 0, 1); }

/* ---- arguments, on a one-rank communicator ---- */

Test(shrink, bad_arguments) {
  weftUniqueId id;
  weftComm_t comm, child = NULL;
  cr_assert_eq(weftGetUniqueId(&id), weftSuccess);
  cr_assert_eq(weftCommInitRank(&comm, 1, id, 0), weftSuccess);
  int self = 0, outside = 3, twice[2] = {0, 0};
  cr_expect_eq(weftCommShrink(comm, &self, 1, &child, NULL, 0), weftInvalidArgument);
  cr_expect(strstr(weftGetLastError(comm), "excludes itself") != NULL, "%s", weftGetLastError(comm));
  cr_expect_eq(weftCommShrink(comm, &outside, 1, &child, NULL, 0), weftInvalidArgument);
  cr_expect_eq(weftCommShrink(comm, twice, 2, &child, NULL, 0), weftInvalidArgument);
  cr_expect_eq(weftCommShrink(comm, NULL, 1, &child, NULL, 0), weftInvalidArgument);
  cr_expect_eq(weftCommShrink(comm, NULL, 0, NULL, NULL, 0), weftInvalidArgument);
  cr_expect_eq(weftCommShrink(comm, NULL, 0, &child, NULL, 7), weftInvalidArgument);
  cr_expect_eq(weftCommShrink(NULL, NULL, 0, &child, NULL, 0), weftInvalidArgument);
  cr_expect_eq(weftCommRecover(comm, NULL, NULL, NULL, NULL), weftInvalidArgument);
  cr_expect_null(child);
  /* The trivial shrink of one rank works, and so does recovering it. */
  cr_assert_eq(weftCommShrink(comm, NULL, 0, &child, NULL, 0), weftSuccess, "%s",
               weftGetLastError(comm));
  cr_expect_eq(checkComm(child), 0);
  weftComm_t again = NULL;
  int excluded[1] = {-1}, nExcluded = -1;
  cr_assert_eq(weftCommRecover(child, &again, NULL, excluded, &nExcluded), weftSuccess, "%s",
               weftGetLastError(child));
  cr_expect_eq(nExcluded, 0);
  cr_expect_eq(checkComm(again), 0);
  weftCommDestroy(again);
  weftCommDestroy(child);
  weftCommDestroy(comm);
}
