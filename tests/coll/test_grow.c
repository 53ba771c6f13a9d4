/* weftCommGetUniqueId and weftCommGrow. Forked ranks (one host, and emulated hosts over TCP):
 * a communicator grows by new processes that wait for the id in shared memory; after a rank
 * is killed and the survivors recover, they grow back to full size with a spare process; a
 * grow of a grown communicator; non-blocking. Every grown communicator is checked: its size,
 * that the old ranks kept their ranks and the new ones have theirs (an AllGather of who each
 * process is), exact AllReduce and a Broadcast from a new rank. A rank of the communicator
 * dead before the grow fails it on every survivor with weftRemoteError naming it (the new
 * ranks time out, or fail once the root's process is gone). Threads: a grow inside one process, and the refusals: more or fewer than
 * one id, different sizes, bad arguments. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "forked.h"
#include "harness.h"

TestSuite(grow, .timeout = 120);

#define MAX_RANKS 8
#define TIMEOUT_MS 6000

/* ---- checks of a grown communicator ---- */

static weftResult_t waitFor(weftComm_t comm) {
  weftResult_t state = weftInProgress;
  for (int i = 0; i < 30000 && state == weftInProgress; i++) {
    if (weftCommGetAsyncError(comm, &state) != weftSuccess) return weftInternalError;
    if (state == weftInProgress) usleep(1000);
  }
  return state;
}

static weftResult_t finish(weftComm_t comm, weftResult_t rc, int nonblocking) {
  return nonblocking && rc == weftInProgress ? waitFor(comm) : rc;
}

/* tags[k]: who must be rank k (the test's own numbering of its processes or threads). */
static long checkGrown(weftComm_t comm, int size, int rank, const int *tags, int nonblocking) {
  int n = -1, me = -1;
  weftCommCount(comm, &n);
  weftCommUserRank(comm, &me);
  if (n != size || me != rank) {
    fprintf(stderr, "tag %d: rank %d of %d, expected %d of %d\n", tags[rank], me, n, rank, size);
    return 1;
  }
  long bad = 0;
  int32_t mine = tags[rank], all[MAX_RANKS];
  weftResult_t rc = finish(comm, weftAllGather(&mine, all, 1, weftInt32, comm, NULL), nonblocking);
  for (int k = 0; k < size; k++) bad += rc != weftSuccess || all[k] != tags[k];
  if (bad) fprintf(stderr, "tag %d: AllGather of who is where wrong (rc %d)\n", mine, rc);
  int32_t send[257], recv[257];
  fillInput(send, 257, weftInt32, weftSum, rank);
  rc = finish(comm, weftAllReduce(send, recv, 257, weftInt32, weftSum, comm, NULL), nonblocking);
  bad += rc != weftSuccess || countWrong(recv, 257, weftInt32, weftSum, size) != 0;
  double dsend[33], drecv[33];
  fillInput(dsend, 33, weftFloat64, weftAvg, rank);
  rc = finish(comm, weftAllReduce(dsend, drecv, 33, weftFloat64, weftAvg, comm, NULL), nonblocking);
  bad += rc != weftSuccess || countWrong(drecv, 33, weftFloat64, weftAvg, size) != 0;
  int32_t b[100];
  for (int i = 0; i < 100; i++) b[i] = rank == size - 1 ? tags[size - 1] * 1000 + i : -1;
  rc = finish(comm, weftBroadcast(b, b, 100, weftInt32, size - 1, comm, NULL), nonblocking);
  for (int i = 0; i < 100; i++) bad += rc != weftSuccess || b[i] != tags[size - 1] * 1000 + i;
  if (bad) fprintf(stderr, "tag %d: %ld wrong (last rc %d: %s)\n", mine, bad, rc, weftGetLastError(comm));
  return bad;
}

/* ---- forked: old processes [0, nInit), new ones after them ---- */

struct report {
  volatile int done, rc, bad, fdsBefore, fdsAfter, ms;
  char msg[768];
};
struct shared {
  struct report r[MAX_RANKS];
  weftUniqueId growId;
  volatile int idReady;
  weftUniqueId growId2; /* the second grow's */
  volatile int id2Ready;
  int nInit, nNew, nNew2, hosts, victim, nonblocking;
};

/* The process that is rank k of the grown communicator, given the communicator that grew
 * (the init's ranks, minus the victim after a recovery) and the new processes in order. */
static void expectedTags(const struct shared *sh, int *tags, int *size) {
  int n = 0;
  for (int p = 0; p < sh->nInit; p++)
    if (p != sh->victim) tags[n++] = p;
  for (int j = 0; j < sh->nNew; j++) tags[n++] = sh->nInit + j;
  *size = n;
}

static int waitId(volatile int *ready) {
  int64_t end = forkedNowMs() + 20000;
  while (!*ready && forkedNowMs() < end) usleep(1000);
  return *ready;
}

static weftResult_t recoverFromVictim(weftComm_t *comm, struct report *me) {
  float x[64];
  for (int i = 0; i < 64; i++) x[i] = 1;
  weftResult_t rc = weftSuccess;
  for (int it = 0; it < 100000 && rc == weftSuccess; it++)
    rc = weftAllReduce(x, x, 64, weftFloat32, weftSum, *comm, NULL);
  weftComm_t survivors;
  rc = weftCommRecover(*comm, &survivors, NULL, NULL, NULL);
  if (rc != weftSuccess) {
    snprintf(me->msg, sizeof me->msg, "recover: %s", weftGetLastError(*comm));
    return rc;
  }
  weftCommDestroy(*comm);
  *comm = survivors;
  return weftSuccess;
}

/* A second grow of the grown communicator, by nNew2 more processes. */
static long growAgain(struct shared *sh, weftComm_t *grown, int rank, int size, const int *tags) {
  weftUniqueId id;
  const weftUniqueId *mine = NULL;
  if (rank == 0) {
    if (weftCommGetUniqueId(*grown, &id) != weftSuccess) return 1;
    sh->growId2 = id;
    __atomic_store_n(&sh->id2Ready, 1, __ATOMIC_RELEASE);
    mine = &id;
  }
  weftComm_t again = NULL;
  weftResult_t rc = weftCommGrow(*grown, size + sh->nNew2, mine, -1, &again, NULL);
  if (rc != weftSuccess) return 1;
  int all[MAX_RANKS];
  memcpy(all, tags, sizeof(int) * (size_t)size);
  for (int j = 0; j < sh->nNew2; j++) all[size + j] = sh->nInit + sh->nNew + j;
  long bad = checkGrown(again, size + sh->nNew2, rank, all, 0);
  weftCommDestroy(*grown);
  *grown = again;
  return bad;
}

static weftResult_t oldRank(struct shared *sh, weftUniqueId id, int p, struct report *me) {
  weftComm_t comm = NULL, grown = NULL;
  weftResult_t rc = weftCommInitRank(&comm, sh->nInit, id, p);
  if (rc != weftSuccess) return rc;
  if (p == sh->victim) raise(SIGKILL);
  if (sh->victim >= 0 && sh->nNew > 0) rc = recoverFromVictim(&comm, me);
  int rank = -1, tags[MAX_RANKS], size;
  weftCommUserRank(comm, &rank);
  weftUniqueId growId;
  const weftUniqueId *mine = NULL;
  if (rc == weftSuccess && rank == 0) {
    rc = weftCommGetUniqueId(comm, &growId);
    sh->growId = growId;
    __atomic_store_n(&sh->idReady, rc == weftSuccess, __ATOMIC_RELEASE);
    mine = &growId;
  }
  expectedTags(sh, tags, &size);
  weftConfig_t config = WEFT_CONFIG_INITIALIZER;
  config.blocking = !sh->nonblocking;
  if (rc == weftSuccess) rc = weftCommGrow(comm, size, mine, -1, &grown, &config);
  if (rc == weftInProgress) rc = waitFor(grown);
  if (rc != weftSuccess)
    snprintf(me->msg, sizeof me->msg, "%s", weftGetLastError(grown != NULL ? grown : comm));
  if (rc == weftSuccess) me->bad = (int)checkGrown(grown, size, rank, tags, sh->nonblocking);
  if (rc == weftSuccess && sh->nNew2 > 0) me->bad += (int)growAgain(sh, &grown, rank, size, tags);
  if (grown != NULL) weftCommDestroy(grown);
  weftCommDestroy(comm);
  return rc;
}

static weftResult_t newRank(struct shared *sh, int p, struct report *me) {
  int second = p >= sh->nInit + sh->nNew;
  if (!waitId(second ? &sh->id2Ready : &sh->idReady)) return weftInternalError;
  weftUniqueId id = second ? sh->growId2 : sh->growId;
  int tags[MAX_RANKS], size;
  expectedTags(sh, tags, &size);
  for (int j = 0; j < sh->nNew2; j++) tags[size + j] = sh->nInit + sh->nNew + j;
  int rank = second ? size + (p - sh->nInit - sh->nNew) : size - sh->nNew + (p - sh->nInit);
  int total = second ? size + sh->nNew2 : size;
  weftConfig_t config = WEFT_CONFIG_INITIALIZER;
  config.blocking = second || !sh->nonblocking;
  weftComm_t grown = NULL;
  weftResult_t rc = weftCommGrow(NULL, total, &id, rank, &grown, &config);
  if (rc == weftInProgress) rc = waitFor(grown);
  if (rc != weftSuccess) {
    snprintf(me->msg, sizeof me->msg, "%s", weftGetLastError(grown));
    if (grown != NULL) weftCommDestroy(grown);
    return rc;
  }
  me->bad = (int)checkGrown(grown, total, rank, tags, !second && sh->nonblocking);
  if (!second && sh->nNew2 > 0) { /* take part in the second grow too */
    weftComm_t again = NULL;
    rc = weftCommGrow(grown, size + sh->nNew2, NULL, -1, &again, NULL);
    if (rc == weftSuccess) me->bad += (int)checkGrown(again, size + sh->nNew2, rank, tags, 0);
    if (again != NULL) weftCommDestroy(again);
  }
  weftCommDestroy(grown);
  return rc;
}

static void rankEntry(void *shared, weftUniqueId id, int p, int nprocs) {
  struct shared *sh = shared;
  struct report *me = &sh->r[p];
  (void)nprocs;
  if (sh->hosts > 0) {
    char host[32];
    snprintf(host, sizeof host, "growhost%d", p % sh->hosts);
    setenv("WEFT_HOSTID", host, 1);
  }
  me->fdsBefore = countOpenFds();
  weftResult_t rc = p < sh->nInit ? oldRank(sh, id, p, me) : newRank(sh, p, me);
  me->fdsAfter = countOpenFds();
  me->rc = rc;
  me->done = 1;
  _exit(0);
}

/* victim >= 0: killed after init; the survivors recover, then grow back. */
static struct shared *runForked(int nInit, int nNew, int nNew2, int hosts, int victim,
                                int nonblocking, pid_t *pids, int *nprocs) {
  struct shared *sh = forkedShared(sizeof *sh);
  sh->nInit = nInit;
  sh->nNew = nNew;
  sh->nNew2 = nNew2;
  sh->hosts = hosts;
  sh->victim = victim;
  sh->nonblocking = nonblocking;
  *nprocs = nInit + nNew + nNew2;
  forkedLaunch(*nprocs, rankEntry, sh, pids);
  forkedReap(pids, *nprocs, 60000);
  return sh;
}

static void expectAllGrew(const char *what, int nInit, int nNew, int nNew2, int hosts, int victim,
                          int nonblocking) {
  setenv("WEFT_TIMEOUT_MS", "6000", 1);
  pid_t pids[MAX_RANKS];
  int nprocs;
  struct shared *sh = runForked(nInit, nNew, nNew2, hosts, victim, nonblocking, pids, &nprocs);
  for (int p = 0; p < nprocs; p++) {
    if (p == victim) continue;
    const struct report *r = &sh->r[p];
    cr_expect(r->done, "%s: process %d did not finish", what, p);
    cr_expect_eq(r->rc, weftSuccess, "%s: process %d got %d: %s", what, p, r->rc, r->msg);
    cr_expect_eq(r->bad, 0, "%s: process %d: %d wrong checks", what, p, r->bad);
    cr_expect_eq(r->fdsAfter, r->fdsBefore, "%s: process %d has %d descriptors, had %d", what, p,
                 r->fdsAfter, r->fdsBefore);
  }
  char names[512];
  int left = takeSegmentsOf(pids, nprocs, names, sizeof names);
  cr_expect_eq(left, 0, "%s: %d segments left:%s", what, left, names);
  munmap(sh, sizeof *sh);
  unsetenv("WEFT_TIMEOUT_MS");
}

Test(grow, processes_one_host) { expectAllGrew("3 + 2 processes", 3, 2, 0, 0, -1, 0); }
Test(grow, processes_tcp_hosts) { expectAllGrew("2 + 2 on 4 hosts", 2, 2, 0, 4, -1, 0); }
Test(grow, nonblocking) { expectAllGrew("2 + 1, non-blocking", 2, 1, 0, 2, -1, 1); }
Test(grow, grown_communicator_grows_again) { expectAllGrew("2 + 1 + 2", 2, 1, 2, 0, -1, 0); }
Test(grow, back_to_full_size_after_recover) {
  expectAllGrew("4, rank 1 killed, recovered, + 1", 4, 1, 0, 0, 1, 0);
  expectAllGrew("4 on 2 hosts, rank 2 killed, recovered, + 1", 4, 1, 0, 2, 2, 0);
}

/* A rank of the communicator is gone before the grow: the others fail fast, naming it. */
static void deadRank(void *shared, weftUniqueId id, int p, int nprocs) {
  struct shared *sh = shared;
  struct report *me = &sh->r[p];
  (void)nprocs;
  weftResult_t rc;
  int64_t start = 0;
  if (p < sh->nInit) {
    weftComm_t comm = NULL, grown = NULL;
    rc = weftCommInitRank(&comm, sh->nInit, id, p);
    if (rc == weftSuccess && p == sh->victim) raise(SIGKILL);
    const weftUniqueId *mine = NULL;
    weftUniqueId growId;
    if (rc == weftSuccess && p == 0) {
      rc = weftCommGetUniqueId(comm, &growId);
      sh->growId = growId;
      __atomic_store_n(&sh->idReady, 1, __ATOMIC_RELEASE);
      mine = &growId;
    }
    start = forkedNowMs();
    if (rc == weftSuccess) rc = weftCommGrow(comm, sh->nInit + 1, mine, -1, &grown, NULL);
    snprintf(me->msg, sizeof me->msg, "%s", weftGetLastError(comm));
    if (grown != NULL) weftCommDestroy(grown);
    if (comm != NULL) weftCommDestroy(comm);
  } else {
    weftComm_t grown = NULL;
    start = forkedNowMs();
    rc = waitId(&sh->idReady) ? weftCommGrow(NULL, sh->nInit + 1, &sh->growId, sh->nInit, &grown, NULL)
                              : weftInternalError;
    snprintf(me->msg, sizeof me->msg, "%s", weftGetLastError(NULL));
    if (grown != NULL) weftCommDestroy(grown);
  }
  me->ms = (int)(forkedNowMs() - start);
  me->rc = rc;
  me->done = 1;
  _exit(0);
}

Test(grow, dead_rank_of_the_communicator) {
  setenv("WEFT_TIMEOUT_MS", "3000", 1);
  pid_t pids[MAX_RANKS];
  struct shared *sh = forkedShared(sizeof *sh);
  srand((unsigned)getpid());
  sh->nInit = 4;
  sh->victim = 1 + rand() % 3; /* rank 0 makes the id */
  forkedLaunch(5, deadRank, sh, pids);
  forkedReap(pids, 5, 30000);
  char victim[32];
  snprintf(victim, sizeof victim, "rank %d (", sh->victim);
  for (int p = 0; p < 4; p++) {
    if (p == sh->victim) continue;
    cr_expect_eq(sh->r[p].rc, weftRemoteError, "rank %d got %d: %s", p, sh->r[p].rc, sh->r[p].msg);
    cr_expect(strstr(sh->r[p].msg, victim) != NULL, "rank %d does not name rank %d: %s", p,
              sh->victim, sh->r[p].msg);
    cr_expect_lt(sh->r[p].ms, 2000, "rank %d took %d ms", p, sh->r[p].ms);
  }
  /* It waits at the id's root until its timeout, or fails as soon as the root's process (rank
   * 0, done after its failed grow) exits. */
  cr_expect(sh->r[4].rc == weftTimeout || sh->r[4].rc == weftRemoteError, "the new rank got %d: %s",
            sh->r[4].rc, sh->r[4].msg);
  cr_expect_lt(sh->r[4].ms, 3000 + 2000, "the new rank took %d ms", sh->r[4].ms);
  char names[512];
  cr_expect_eq(takeSegmentsOf(pids, 5, names, sizeof names), 0, "segments left:%s", names);
  munmap(sh, sizeof *sh);
  unsetenv("WEFT_TIMEOUT_MS");
}

/* ---- threads of one process ---- */

struct threadRank {
  pthread_t tid;
  weftUniqueId id;   /* the first communicator's */
  int tag, nOld, total;
  int passId;        /* -1: as the test decides (rank 0); 0 or 1: forced, for refusals */
  int sizeAsked;     /* the nRanks this rank passes (refusals) */
  weftUniqueId *growId;
  volatile int *idReady;
  weftResult_t rc;
  long bad;
};

static void *threadMain(void *arg) {
  struct threadRank *t = arg;
  weftComm_t comm = NULL, grown = NULL;
  int tags[MAX_RANKS];
  for (int k = 0; k < t->total; k++) tags[k] = k;
  if (t->tag >= t->nOld) { /* a new rank */
    while (!__atomic_load_n(t->idReady, __ATOMIC_ACQUIRE)) usleep(500);
    t->rc = weftCommGrow(NULL, t->total, t->growId, t->tag, &grown, NULL);
  } else {
    t->rc = weftCommInitRank(&comm, t->nOld, t->id, t->tag);
    weftUniqueId mine;
    int pass = t->passId >= 0 ? t->passId : t->tag == 0;
    if (t->rc == weftSuccess && pass) t->rc = weftCommGetUniqueId(comm, &mine);
    if (t->rc == weftSuccess && t->tag == 0) {
      *t->growId = mine;
      __atomic_store_n(t->idReady, 1, __ATOMIC_RELEASE);
    }
    if (t->rc == weftSuccess)
      t->rc = weftCommGrow(comm, t->sizeAsked, pass ? &mine : NULL, -1, &grown, NULL);
  }
  if (t->rc == weftSuccess) t->bad = checkGrown(grown, t->total, t->tag, tags, 0);
  if (grown != NULL) weftCommDestroy(grown);
  if (comm != NULL) weftCommDestroy(comm);
  return NULL;
}

/* nOld thread ranks grow to total; passId/sizes per old rank (NULL: the normal call). */
static void runThreads(int nOld, int total, const int *passId, const int *sizes,
                       struct threadRank *t) {
  weftUniqueId id, growId;
  volatile int ready = 0;
  cr_assert_eq(weftGetUniqueId(&id), weftSuccess);
  for (int k = 0; k < total; k++) {
    t[k] = (struct threadRank){.id = id, .tag = k, .nOld = nOld, .total = total,
                               .passId = passId ? passId[k] : -1,
                               .sizeAsked = sizes ? sizes[k] : total, .growId = &growId,
                               .idReady = &ready};
    pthread_create(&t[k].tid, NULL, threadMain, &t[k]);
  }
  for (int k = 0; k < total; k++) pthread_join(t[k].tid, NULL);
}

Test(grow, threads_of_one_process) {
  struct threadRank t[5];
  runThreads(2, 5, NULL, NULL, t);
  for (int k = 0; k < 5; k++) {
    cr_expect_eq(t[k].rc, weftSuccess, "rank %d got %d", k, t[k].rc);
    cr_expect_eq(t[k].bad, 0, "rank %d: %ld wrong checks", k, t[k].bad);
  }
}

/* The ranks of the communicator refuse a grow they disagree on, each the same way. */
static void expectDisagreement(const int *passId, const int *sizes, const char *says) {
  setenv("WEFT_TIMEOUT_MS", "5000", 1); /* the ids' roots, which nobody reaches, end then */
  struct threadRank t[2];
  runThreads(2, 2, passId, sizes, t); /* total 2: no new rank joins */
  for (int k = 0; k < 2; k++)
    cr_expect_eq(t[k].rc, weftInvalidUsage, "%s: rank %d got %d", says, k, t[k].rc);
  unsetenv("WEFT_TIMEOUT_MS");
}

Test(grow, disagreements_refused) {
  static const int both[] = {1, 1}, none[] = {0, 0}, one[] = {1, 0}, sizes[] = {3, 4};
  expectDisagreement(both, (const int[]){3, 3}, "two ids");
  expectDisagreement(none, (const int[]){3, 3}, "no id");
  expectDisagreement(one, sizes, "3 and 4 ranks");
}

Test(grow, bad_arguments) {
  weftUniqueId id, growId;
  weftComm_t comm, grown = (weftComm_t)&id;
  cr_assert_eq(weftGetUniqueId(&id), weftSuccess);
  cr_assert_eq(weftCommInitRank(&comm, 1, id, 0), weftSuccess);
  cr_expect_eq(weftCommGetUniqueId(comm, NULL), weftInvalidArgument);
  cr_expect_eq(weftCommGetUniqueId(NULL, &growId), weftInvalidArgument);
  cr_expect_eq(weftCommGrow(comm, 2, NULL, 0, &grown, NULL), weftInvalidArgument);
  cr_expect(strstr(weftGetLastError(comm), "passes -1") != NULL, "%s", weftGetLastError(comm));
  cr_expect_null(grown);
  cr_expect_eq(weftCommGrow(comm, 1, NULL, -1, &grown, NULL), weftInvalidArgument);
  cr_expect_eq(weftCommGrow(comm, 2, NULL, -1, NULL, NULL), weftInvalidArgument);
  weftConfig_t bad = WEFT_CONFIG_INITIALIZER;
  bad.size = 3;
  cr_expect_eq(weftCommGrow(comm, 2, NULL, -1, &grown, &bad), weftInvalidArgument);
  cr_expect_eq(weftCommGrow(NULL, 2, NULL, 1, &grown, NULL), weftInvalidArgument);
  cr_expect(strstr(weftGetLastError(NULL), "needs the id") != NULL, "%s", weftGetLastError(NULL));
  cr_expect_eq(weftCommGrow(NULL, 2, &id, 0, &grown, NULL), weftInvalidArgument);
  cr_expect_eq(weftCommGrow(NULL, 2, &id, 2, &grown, NULL), weftInvalidArgument);
  cr_expect_eq(weftCommGrow(NULL, 2, &id, 1, NULL, NULL), weftInvalidArgument);
  cr_expect_eq(weftCommGrow(NULL, 2, &id, 1, &grown, &bad), weftInvalidArgument);
  weftCommDestroy(comm);
  cr_expect_eq(weftCommGetUniqueId(comm, &growId), weftInvalidUsage, "a destroyed communicator");
}
