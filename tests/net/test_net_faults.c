/* Faults across emulated hosts: ranks are processes in the network namespaces of
 * tests/mpi/cluster.sh (each host its own address and hostname; ranks of different hosts talk
 * over TCP on eth0, ranks of one host over shared memory), 3 hosts x 1 rank and 2 hosts x 2
 * ranks, with WEFT_ALGO=ring, tree, hier (2 x 2 only: with one rank per host its AllReduce is
 * a Reduce and a Broadcast along the ring, which tests/coll covers) and the tuner. Scenarios, each repeated with the failure at a random point (the seed is printed;
 * WEFT_TEST_SEED repeats the random choices):
 *   dead_peer    SIGKILL one rank in a loop of AllReduces: every survivor gets weftRemoteError
 *                within 2 s, naming the dead rank and its host;
 *   init_death   SIGKILL one rank 0-300 ms after the ranks get the unique id: every survivor
 *                gets weftRemoteError within 2 s naming it, or, when it died before it
 *                registered with the bootstrap root, weftTimeout "had not registered";
 *   stuck_peer   SIGSTOP one rank: the others get weftTimeout after WEFT_TIMEOUT_MS, naming
 *                whom they waited for and the operation, and every survivor names it;
 *   abort        one rank stops calling, another aborts its communicator from a second thread
 *                while its collective is blocked: that call returns at once, the abort too, and
 *                the rest fail instead of waiting for the timeout;
 *   mismatch     one rank calls with another count, datatype or op: weftInvalidUsage on every
 *                rank, with both signatures (a tcp or shm close passes the first cause on);
 *   recover      SIGKILL one rank in a loop; the survivors call weftCommRecover, agree that
 *                it is gone, renumber in order and run 50 checked AllReduces on the result;
 *   shrink       the same with weftCommShrink(WEFT_SHRINK_ABORT) excluding the dead rank.
 * After each run every rank that returned has destroyed (or aborted) its communicator and
 * holds the descriptors and threads it had before init, and no weft segment of any rank (the
 * killed one included) is left in /dev/shm. Without root or
 * `ip netns`, every test is skipped with the reason. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "netns.h"
#include "reduce.h"

#define MAX_RANKS 8
#define GOOD_COUNT 100
#define BIG_COUNT 200003 /* past a 512 KiB tcp slot: several pieces in flight */

enum mode { MODE_LOOP, MODE_ABORT, MODE_MISMATCH, MODE_RECOVER, MODE_SHRINK };
enum mismatchKind { MISMATCH_COUNT, MISMATCH_TYPE, MISMATCH_OP };
enum phase { PHASE_FORKED, PHASE_INIT, PHASE_COLL, PHASE_CLEANUP };
static const char *const phaseNames[] = {"before init", "in init", "in collectives", "after"};

struct rankReport {
  volatile int phase;
  volatile int initRc, rc;
  volatile int64_t initStartMs, initEndMs, atMs; /* atMs: when the failing call returned */
  volatile long iters;                           /* collectives called */
  volatile int64_t abortCallMs, abortReturnMs;   /* the aborter's weftCommAbort */
  volatile int fdsBefore, fdsAfter, threadsBefore, threadsAfter, mapsAfter;
  volatile int returned; /* from init or the collectives, before destroy */
  volatile int done;
  char host[64];
  char algo[16]; /* what the tuner (or WEFT_ALGO) runs for the loop's small calls */
  char msg[1024];
  /* MODE_RECOVER: weftCommRecover's result and what the new communicator is */
  volatile int recoverRc, newRank, newCount, nGone, gone[MAX_RANKS];
  volatile int64_t recoveredMs;
  volatile long itersAfter; /* good collectives on the new communicator */
};

/* One page shared by the test and its rank processes: the scenario, then the reports. */
struct shared {
  int mode, victim, aborter, stopAfter, abortDelayMs, mismatch;
  int holdDestroy; /* destroy only once every other survivor has returned too */
  volatile int victimStopped; /* MODE_ABORT: the victim made its last call */
  volatile int abortDone;     /* MODE_ABORT: the aborter's weftCommAbort returned */
  volatile int release;       /* ranks stay alive until then, so only the victim is gone */
  struct rankReport r[MAX_RANKS];
};

/* ---- what a rank process does ---- */


static void report(struct rankReport *me, weftResult_t rc) {
  me->atMs = netnsNowMs();
  snprintf(me->msg, sizeof me->msg, "%s", weftGetLastError(NULL)); /* this thread's error */
  me->rc = rc;
}

/* Each element is the sum of the ranks' numbers: a call that "succeeds" with wrong data fails. */
static int resultWrong(const float *out, size_t count, int nranks) {
  float want = (float)(nranks * (nranks - 1) / 2);
  return out[0] != want || out[count - 1] != want;
}

/* AllReduces of varying size until one fails, stopAfter calls (-1: no limit) or 20 s. */
static weftResult_t allReduceLoop(weftComm_t comm, struct rankReport *me, int rank, int nranks,
                                  long stopAfter) {
  float *in = malloc(BIG_COUNT * sizeof *in), *out = malloc(BIG_COUNT * sizeof *out);
  for (size_t i = 0; i < BIG_COUNT; i++) in[i] = (float)rank;
  weftResult_t rc = weftSuccess;
  for (int64_t end = netnsNowMs() + 20000; rc == weftSuccess && netnsNowMs() < end;) {
    if (stopAfter >= 0 && me->iters >= stopAfter) break;
    size_t count = me->iters % 32 == 31 ? BIG_COUNT : 1 + (size_t)(me->iters % 1024);
    rc = weftAllReduce(in, out, count, weftFloat32, weftSum, comm, NULL);
    me->iters++;
    if (rc != weftSuccess) report(me, rc);
    else if (resultWrong(out, count, nranks)) {
      snprintf(me->msg, sizeof me->msg, "call %ld: wrong result %g", me->iters, out[0]);
      rc = me->rc = -1;
    }
  }
  free(in);
  free(out);
  return rc;
}

/* Five good calls, then the victim's call differs in count, datatype or op. */
static weftResult_t mismatchCalls(const struct shared *sh, weftComm_t comm, struct rankReport *me,
                                  int rank) {
  float in[GOOD_COUNT + 1] = {0}, out[GOOD_COUNT + 1];
  weftResult_t rc = weftSuccess;
  for (int i = 0; i < 5 && rc == weftSuccess; i++, me->iters++)
    rc = weftAllReduce(in, out, GOOD_COUNT, weftFloat32, weftSum, comm, NULL);
  if (rc == weftSuccess) {
    int odd = rank == sh->victim;
    size_t count = odd && sh->mismatch == MISMATCH_COUNT ? GOOD_COUNT + 1 : GOOD_COUNT;
    weftDataType_t type = odd && sh->mismatch == MISMATCH_TYPE ? weftInt32 : weftFloat32;
    weftRedOp_t op = odd && sh->mismatch == MISMATCH_OP ? weftMax : weftSum;
    rc = weftAllReduce(in, out, count, type, op, comm, NULL);
    me->iters++;
  }
  if (rc != weftSuccess) report(me, rc);
  else snprintf(me->msg, sizeof me->msg, "the mismatched call succeeded");
  return rc;
}

struct worker {
  weftComm_t comm;
  struct rankReport *me;
  int rank, nranks;
};

static void *loopThread(void *p) {
  struct worker *w = p;
  allReduceLoop(w->comm, w->me, w->rank, w->nranks, -1);
  return NULL;
}

static void waitFlag(volatile int *flag, int64_t timeoutMs) {
  for (int64_t end = netnsNowMs() + timeoutMs; !*flag && netnsNowMs() < end;) usleep(1000);
}

/* The aborter: its collective blocks in another thread (the victim no longer calls), then
 * this thread aborts. The communicator is gone afterwards. */
static void abortFromMain(struct shared *sh, weftComm_t comm, struct rankReport *me, int rank,
                          int nranks) {
  struct worker w = {comm, me, rank, nranks};
  pthread_t tid;
  pthread_create(&tid, NULL, loopThread, &w);
  waitFlag(&sh->victimStopped, 20000);
  /* iters == stopAfter: the worker is in (or entering) the call that cannot complete */
  for (int64_t end = netnsNowMs() + 5000; me->iters < sh->stopAfter && netnsNowMs() < end;)
    usleep(1000);
  usleep((useconds_t)sh->abortDelayMs * 1000);
  me->abortCallMs = netnsNowMs();
  weftCommAbort(comm);
  me->abortReturnMs = netnsNowMs();
  sh->abortDone = 1;
  pthread_join(tid, NULL);
}

/* The victim: stops after stopAfter calls; once the aborter is done, one more call, which
 * must fail rather than wait. */
static weftResult_t victimOfAbort(struct shared *sh, weftComm_t comm, struct rankReport *me,
                                  int rank, int nranks) {
  weftResult_t rc = allReduceLoop(comm, me, rank, nranks, sh->stopAfter);
  sh->victimStopped = 1;
  if (rc != weftSuccess) return rc;
  waitFlag(&sh->abortDone, 20000);
  return allReduceLoop(comm, me, rank, nranks, sh->stopAfter + 1);
}

/* After the loop failed: recover, then 50 checked AllReduces on the survivors' communicator,
 * which replaces *comm. */
static void recoverAndGoOn(weftComm_t *comm, struct rankReport *me, int mode, int victim) {
  weftComm_t survivors = NULL;
  int gone[MAX_RANKS] = {victim}, nGone = 1, rank = 0, count = 0;
  if (mode == MODE_SHRINK) /* the application knows who died (its launcher told it, say) */
    me->recoverRc = weftCommShrink(*comm, gone, 1, &survivors, NULL, WEFT_SHRINK_ABORT);
  else
    me->recoverRc = weftCommRecover(*comm, &survivors, NULL, gone, &nGone);
  me->recoveredMs = netnsNowMs();
  if (me->recoverRc != weftSuccess) {
    snprintf(me->msg, sizeof me->msg, "recover: %s", weftGetLastError(*comm));
    return;
  }
  weftCommDestroy(*comm);
  *comm = survivors;
  weftCommUserRank(survivors, &rank);
  weftCommCount(survivors, &count);
  me->newRank = rank;
  me->newCount = count;
  me->nGone = nGone;
  for (int i = 0; i < nGone && i < MAX_RANKS; i++) me->gone[i] = gone[i];
  /* The loop's sizes follow its call count, which differs between survivors that failed at
   * different calls: the new communicator starts from 0 on every rank. */
  me->iters = 0;
  me->rc = allReduceLoop(survivors, me, rank, count, 50);
  me->itersAfter = me->iters;
}

/* Runs the scenario's collectives; *comm becomes NULL when it was aborted. */
static void runCollectives(struct shared *sh, weftComm_t *comm, int rank, int nranks) {
  struct rankReport *me = &sh->r[rank];
  const char *algo = "?";
  if (weftCommGetAlgorithm(*comm, 1024, weftFloat32, &algo) == weftSuccess)
    snprintf(me->algo, sizeof me->algo, "%s", algo);
  if (sh->mode == MODE_MISMATCH) {
    mismatchCalls(sh, *comm, me, rank);
  } else if (sh->mode == MODE_ABORT && rank == sh->aborter) {
    abortFromMain(sh, *comm, me, rank, nranks);
    *comm = NULL;
  } else if (sh->mode == MODE_ABORT && rank == sh->victim) {
    victimOfAbort(sh, *comm, me, rank, nranks);
  } else if (sh->mode == MODE_RECOVER || sh->mode == MODE_SHRINK) {
    if (allReduceLoop(*comm, me, rank, nranks, -1) != weftSuccess)
      recoverAndGoOn(comm, me, sh->mode, sh->victim);
  } else {
    allReduceLoop(*comm, me, rank, nranks, -1);
  }
}

static int rankMain(int rank, int nranks, weftUniqueId id, void *arg) {
  struct shared *sh = arg;
  struct rankReport *me = &sh->r[rank];
  gethostname(me->host, sizeof me->host - 1);
  me->fdsBefore = countOpenFds();
  me->threadsBefore = countThreads();
  me->initStartMs = netnsNowMs();
  me->phase = PHASE_INIT;
  weftComm_t comm = NULL;
  weftResult_t rc = weftCommInitRank(&comm, nranks, id, rank);
  me->initEndMs = netnsNowMs();
  me->initRc = rc;
  if (rc != weftSuccess) {
    report(me, rc);
  } else {
    me->phase = PHASE_COLL;
    runCollectives(sh, &comm, rank, nranks);
  }
  me->phase = PHASE_CLEANUP;
  me->returned = 1;
  for (int r = 0; sh->holdDestroy && r < nranks; r++)
    if (r != sh->victim) waitFlag(&sh->r[r].returned, 10000);
  if (comm != NULL) weftCommDestroy(comm);
  me->fdsAfter = countOpenFds();
  me->threadsAfter = countThreadsSettled(me->threadsBefore, 1000);
  me->mapsAfter = countWeftMappings();
  me->done = 1;
  waitFlag(&sh->release, 60000);
  return 0;
}

/* ---- the test's side ---- */

struct config {
  int hosts, perHost;
  const char *algos[4]; /* NULL: the tuner */
  int nalgos;
};
static const struct config hosts3x1 = {3, 1, {"ring", "tree", NULL}, 3};
static const struct config hosts2x2 = {2, 2, {"ring", "tree", "hier", NULL}, 4};

static struct netnsCluster cluster;
static struct netnsJob job;
static unsigned rng;

static const char *algoName(const char *algo) { return algo ? algo : "tuner"; }

/* Every test: hosts up (or skipped with the reason), the seed printed. */
static void hostsUp(const struct config *cfg, const char *test) {
  char why[512] = "";
  int rc = netnsClusterUp(&cluster, cfg->hosts, why, sizeof why);
  if (rc == NETNS_SKIP) cr_skip_test("cannot make emulated hosts: %s", why);
  cr_assert_eq(rc, 0, "cluster.sh up %d: %s", cfg->hosts, why);
  const char *seed = getenv("WEFT_TEST_SEED");
  rng = seed && *seed ? (unsigned)strtoul(seed, NULL, 0) : (unsigned)(getpid() ^ netnsNowMs());
  fprintf(stderr, "%s: %d hosts x %d ranks (%s), seed %u (WEFT_TEST_SEED=%u repeats it)\n", test,
          cfg->hosts, cfg->perHost, cluster.prefix, rng, rng);
}

/* .fini of every test, so that a failed assertion also removes the hosts. */
static void hostsDown(void) {
  netnsReapRanks(&job);
  netnsClusterDown(&cluster);
}

/* The last step of every test: the hosts are gone, with nothing left behind. */
static void expectHostsRemoved(void) {
  char prefix[sizeof cluster.prefix];
  snprintf(prefix, sizeof prefix, "%s", cluster.prefix);
  int left = netnsClusterDown(&cluster);
  cr_expect_eq(left, 0, "%d namespaces/links named %s-* left after cluster.sh down", left, prefix);
}

static int pick(int n) { return (int)(rand_r(&rng) % (unsigned)n); }

/* Deaths and aborts are seen in ms (docs/fault-tolerance.md); the bounds, 10x a loaded
 * machine's worst, tell that from a hang or a missed detection (timeouts here are 20 s). */
#define DETECT_BOUND_MS 10000
#define ABORT_BOUND_MS 5000

static struct shared *startJob(const struct config *cfg, const struct shared *scenario,
                               const char *algo, int timeoutMs) {
  struct shared *sh =
      mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(sh, MAP_FAILED);
  memcpy(sh, scenario, sizeof *sh);
  if (algo) setenv("WEFT_ALGO", algo, 1);
  else unsetenv("WEFT_ALGO");
  char ms[32];
  snprintf(ms, sizeof ms, "%d", timeoutMs);
  setenv("WEFT_TIMEOUT_MS", ms, 1);
  char why[512] = "";
  int rc = netnsStartRanks(&job, &cluster, cfg->perHost, rankMain, sh, why, sizeof why);
  cr_assert_eq(rc, 0, "starting the ranks: %s", why);
  return sh;
}

/* Waits until every rank but `except` is past `phase` (or done); 0 if one did not get there. */
static int awaitPhase(struct shared *sh, int n, int except, int phase, int64_t timeoutMs) {
  int64_t end = netnsNowMs() + timeoutMs;
  for (int r = 0; r < n; r++)
    while (r != except && sh->r[r].phase < phase && !sh->r[r].done && netnsNowMs() < end)
      usleep(1000);
  for (int r = 0; r < n; r++)
    if (r != except && (sh->r[r].phase < phase || sh->r[r].done)) return 0;
  return 1;
}

static void awaitDone(struct shared *sh, int n, int except, int64_t timeoutMs) {
  int64_t end = netnsNowMs() + timeoutMs;
  for (int r = 0; r < n; r++)
    while (r != except && !sh->r[r].done && netnsNowMs() < end) usleep(1000);
}

/* Every rank that returned left no descriptor, thread or mapping behind; then every rank is
 * reaped, and no weft segment of any of them is left. */
static void finishJob(struct shared *sh, const char *what) {
  int n = job.nranks;
  for (int r = 0; r < n; r++) {
    const struct rankReport *rep = &sh->r[r];
    if (!rep->done) continue;
    cr_expect_eq(rep->fdsAfter, rep->fdsBefore, "%s: rank %d: %d descriptors before init, %d after",
                 what, r, rep->fdsBefore, rep->fdsAfter);
    cr_expect_eq(rep->threadsAfter, rep->threadsBefore, "%s: rank %d: %d threads before init, %d after",
                 what, r, rep->threadsBefore, rep->threadsAfter);
    cr_expect_eq(rep->mapsAfter, 0, "%s: rank %d still maps %d weft segments", what, r, rep->mapsAfter);
  }
  pid_t pids[NETNS_MAX_RANKS];
  memcpy(pids, job.pids, sizeof pids);
  sh->release = 1;
  netnsReapRanks(&job);
  char names[512];
  int left = takeSegmentsOf(pids, n, names, sizeof names);
  cr_expect_eq(left, 0, "%s: %d weft segments left in /dev/shm:%s", what, left, names);
  munmap(sh, sizeof *sh);
}

static int hostOf(const struct config *cfg, int rank) { return rank / cfg->perHost; }

static void printOutcome(const char *what, const struct shared *sh, int n, int64_t since) {
  for (int r = 0; r < n; r++) {
    const struct rankReport *rep = &sh->r[r];
    if (r == sh->victim && sh->mode == MODE_LOOP) continue;
    fprintf(stderr, "  %s: rank %d (%s, %s): rc %d %s after %lld ms: %.300s\n", what, r,
            rep->host, rep->algo, rep->rc, rep->done ? "" : "(not returned)",
            (long long)(rep->atMs - since), rep->msg);
  }
}

static int verbose(void) { return getenv("WEFT_TEST_VERBOSE") != NULL; }

/* ---- dead_peer: SIGKILL in a loop of AllReduces ---- */

/* Whether rank r's message names rank `who` with its host, by name or address, inside the
 * parentheses that follow it: "rank 2 (host h2, 10.0.0.2:4000)", "rank 2 (pid 9 on host h2)",
 * "rank 2 (10.0.0.2:4000)". */
static int namesRank(const struct config *cfg, const struct shared *sh, int r, int who) {
  char needle[32], addr[NETNS_NAME_MAX + 1];
  snprintf(needle, sizeof needle, "rank %d (", who);
  snprintf(addr, sizeof addr, "%s:", cluster.addr[hostOf(cfg, who)]);
  const char *host = cluster.ns[hostOf(cfg, who)];
  for (const char *p = strstr(sh->r[r].msg, needle); p != NULL; p = strstr(p + 1, needle)) {
    char inside[160];
    snprintf(inside, sizeof inside, "%.*s", (int)strcspn(p, ")"), p);
    if (strstr(inside, host) != NULL || strstr(inside, addr) != NULL) return 1;
  }
  return 0;
}

/* Every survivor names the victim and its host. */
static void expectNamesVictim(const struct config *cfg, const struct shared *sh, const char *what) {
  int n = cfg->hosts * cfg->perHost;
  for (int r = 0; r < n; r++)
    if (r != sh->victim)
      cr_expect(namesRank(cfg, sh, r, sh->victim), "%s: rank %d's message does not name rank %d on %s: %s",
                what, r, sh->victim, cluster.ns[hostOf(cfg, sh->victim)], sh->r[r].msg);
}

static void killInLoop(const struct config *cfg, const char *algo, int rep) {
  int n = cfg->hosts * cfg->perHost;
  struct shared scenario = {.mode = MODE_LOOP, .victim = pick(n)};
  int delayMs = 20 + pick(300);
  char what[96];
  snprintf(what, sizeof what, "%s %dx%d rep %d: kill rank %d after %d ms", algoName(algo),
           cfg->hosts, cfg->perHost, rep, scenario.victim, delayMs);
  struct shared *sh = startJob(cfg, &scenario, algo, 20000);
  cr_assert(awaitPhase(sh, n, -1, PHASE_COLL, 30000), "%s: not every rank initialized: %s", what,
            sh->r[0].msg);
  usleep((useconds_t)delayMs * 1000);
  int64_t killedAt = netnsNowMs();
  kill(job.pids[sh->victim], SIGKILL); /* not reaped yet: a zombie to its host's ranks */
  awaitDone(sh, n, sh->victim, DETECT_BOUND_MS + 5000);
  int64_t worst = 0;
  for (int r = 0; r < n; r++) {
    const struct rankReport *rep = &sh->r[r];
    if (r == sh->victim) continue;
    int64_t took = rep->atMs - killedAt;
    worst = took > worst ? took : worst;
    cr_expect(rep->done, "%s: rank %d never returned", what, r);
    cr_expect_eq(rep->rc, weftRemoteError, "%s: rank %d got %d after %ld calls: %s", what, r,
                 rep->rc, rep->iters, rep->msg);
    cr_expect_lt(took, DETECT_BOUND_MS, "%s: rank %d took %lld ms", what, r, (long long)took);
  }
  expectNamesVictim(cfg, sh, what);
  fprintf(stderr, "%s: survivors failed within %lld ms\n", what, (long long)worst);
  if (verbose()) printOutcome(what, sh, n, killedAt);
  finishJob(sh, what);
}

static void deadPeer(const struct config *cfg, const char *algo, const char *test) {
  hostsUp(cfg, test);
  for (int rep = 0; rep < 3; rep++) killInLoop(cfg, algo, rep);
  expectHostsRemoved();
}

Test(dead_peer, ring_3x1, .timeout = 120, .fini = hostsDown) { deadPeer(&hosts3x1, "ring", "dead_peer/ring_3x1"); }
Test(dead_peer, tree_3x1, .timeout = 120, .fini = hostsDown) { deadPeer(&hosts3x1, "tree", "dead_peer/tree_3x1"); }
Test(dead_peer, tuner_3x1, .timeout = 120, .fini = hostsDown) { deadPeer(&hosts3x1, NULL, "dead_peer/tuner_3x1"); }
Test(dead_peer, ring_2x2, .timeout = 120, .fini = hostsDown) { deadPeer(&hosts2x2, "ring", "dead_peer/ring_2x2"); }
Test(dead_peer, tree_2x2, .timeout = 120, .fini = hostsDown) { deadPeer(&hosts2x2, "tree", "dead_peer/tree_2x2"); }
Test(dead_peer, hier_2x2, .timeout = 120, .fini = hostsDown) { deadPeer(&hosts2x2, "hier", "dead_peer/hier_2x2"); }
Test(dead_peer, tuner_2x2, .timeout = 120, .fini = hostsDown) { deadPeer(&hosts2x2, NULL, "dead_peer/tuner_2x2"); }

/* ---- recover: SIGKILL in a loop, then weftCommRecover and go on ---- */

/* The survivors agree that the victim is gone, renumber in order, and their new
 * communicator computes right. */
static void killAndRecover(const struct config *cfg, const char *algo, int rep, int mode) {
  int n = cfg->hosts * cfg->perHost;
  struct shared scenario = {.mode = mode, .victim = pick(n)};
  int delayMs = 20 + pick(300);
  char what[96];
  snprintf(what, sizeof what, "%s %s %dx%d rep %d: kill rank %d after %d ms",
           mode == MODE_SHRINK ? "shrink" : "recover", algoName(algo), cfg->hosts, cfg->perHost,
           rep, scenario.victim, delayMs);
  struct shared *sh = startJob(cfg, &scenario, algo, 20000);
  cr_assert(awaitPhase(sh, n, -1, PHASE_COLL, 30000), "%s: not every rank initialized: %s", what,
            sh->r[0].msg);
  usleep((useconds_t)delayMs * 1000);
  int64_t killedAt = netnsNowMs();
  kill(job.pids[sh->victim], SIGKILL);
  awaitDone(sh, n, sh->victim, 30000);
  int64_t worst = 0;
  for (int r = 0; r < n; r++) {
    const struct rankReport *rep = &sh->r[r];
    if (r == sh->victim) continue;
    worst = rep->recoveredMs - killedAt > worst ? rep->recoveredMs - killedAt : worst;
    cr_expect(rep->done, "%s: rank %d never returned", what, r);
    cr_expect_eq(rep->recoverRc, weftSuccess, "%s: rank %d: %s", what, r, rep->msg);
    cr_expect(rep->nGone == 1 && rep->gone[0] == sh->victim, "%s: rank %d says %d gone (first %d)",
              what, r, rep->nGone, rep->gone[0]);
    cr_expect(rep->newCount == n - 1 && rep->newRank == r - (r > sh->victim),
              "%s: rank %d became rank %d of %d", what, r, rep->newRank, rep->newCount);
    cr_expect(rep->rc == weftSuccess && rep->itersAfter == 50,
              "%s: rank %d: %ld good calls after recovering: %s", what, r, rep->itersAfter, rep->msg);
  }
  fprintf(stderr, "%s: survivors recovered within %lld ms of the kill\n", what, (long long)worst);
  finishJob(sh, what);
}

static void recoverAfterKill(const struct config *cfg, const char *algo, const char *test, int mode) {
  hostsUp(cfg, test);
  for (int rep = 0; rep < 3; rep++) killAndRecover(cfg, algo, rep, mode);
  expectHostsRemoved();
}

Test(recover, tuner_3x1, .timeout = 120, .fini = hostsDown) { recoverAfterKill(&hosts3x1, NULL, "recover/tuner_3x1", MODE_RECOVER); }
Test(recover, ring_2x2, .timeout = 120, .fini = hostsDown) { recoverAfterKill(&hosts2x2, "ring", "recover/ring_2x2", MODE_RECOVER); }
Test(recover, tuner_2x2, .timeout = 120, .fini = hostsDown) { recoverAfterKill(&hosts2x2, NULL, "recover/tuner_2x2", MODE_RECOVER); }
Test(shrink, tuner_3x1, .timeout = 120, .fini = hostsDown) { recoverAfterKill(&hosts3x1, NULL, "shrink/tuner_3x1", MODE_SHRINK); }
Test(shrink, tuner_2x2, .timeout = 120, .fini = hostsDown) { recoverAfterKill(&hosts2x2, NULL, "shrink/tuner_2x2", MODE_SHRINK); }

/* ---- init_death: SIGKILL 0-300 ms after the ranks get the unique id ---- */

#define INIT_TIMEOUT_MS 4000 /* long enough that a failure at the timeout shows as one */

/* Kills a random rank during init; returns the scenario with the reports (finishJob frees). */
static struct shared *killInInit(const struct config *cfg, const char *algo, int rep, char *what,
                                 size_t len, int64_t *killedAt) {
  int n = cfg->hosts * cfg->perHost;
  struct shared scenario = {.mode = MODE_LOOP, .victim = pick(n)};
  /* Stratified, so every run also hits the first milliseconds (registration with the root) */
  static const int from[] = {0, 5, 100}, to[] = {5, 100, 301};
  int delayMs = from[rep % 3] + pick(to[rep % 3] - from[rep % 3]);
  struct shared *sh = startJob(cfg, &scenario, algo, INIT_TIMEOUT_MS);
  int64_t at = job.idSentMs + delayMs;
  while (netnsNowMs() < at) usleep(500);
  int phase = sh->r[sh->victim].phase;
  *killedAt = netnsNowMs();
  kill(job.pids[sh->victim], SIGKILL);
  snprintf(what, len, "%s %dx%d rep %d: kill rank %d %d ms after the id (%s, %lld ms into it)",
           algoName(algo), cfg->hosts, cfg->perHost, rep, sh->victim, delayMs, phaseNames[phase],
           (long long)(phase == PHASE_FORKED ? 0 : *killedAt - sh->r[sh->victim].initStartMs));
  awaitDone(sh, n, sh->victim, INIT_TIMEOUT_MS + 8000);
  return sh;
}

/* Where and when each survivor failed, for the report. */
static void printInitOutcome(const char *what, const struct shared *sh, int n, int64_t killedAt) {
  fprintf(stderr, "%s:\n", what);
  for (int r = 0; r < n; r++) {
    const struct rankReport *rep = &sh->r[r];
    if (r == sh->victim && rep->returned)
      fprintf(stderr, "  rank %d (the victim) had returned before the kill: rc %d: %.240s\n", r,
              rep->rc, rep->msg);
    if (r == sh->victim) continue;
    fprintf(stderr, "  rank %d (%s): %s, rc %d after %lld ms (init %s): %.240s\n", r, rep->host,
            rep->initRc != weftSuccess ? "init failed" : "a collective failed", rep->rc,
            (long long)(rep->atMs - killedAt), rep->initRc == weftSuccess ? "done" : "failed",
            rep->msg);
  }
}

/* Every survivor fails instead of hanging and keeps nothing: no descriptor, thread or mapping;
 * no segment is left in /dev/shm, not even one the victim made and nobody mapped (a
 * survivor's failed init sweeps those). Once the victim had registered with the bootstrap
 * root, that is weftRemoteError within 2 s naming it; before (killed at once), a dead rank
 * cannot be told from a slow one, and the survivors time out with "had not registered". */
static void initDeath(const struct config *cfg, const char *test) {
  hostsUp(cfg, test);
  int n = cfg->hosts * cfg->perHost;
  for (int rep = 0; rep < 3; rep++) {
    char what[192];
    int64_t killedAt;
    struct shared *sh = killInInit(cfg, cfg->algos[rep % cfg->nalgos], rep, what, sizeof what, &killedAt);
    printInitOutcome(what, sh, n, killedAt);
    for (int r = 0; r < n; r++) {
      const struct rankReport *rp = &sh->r[r];
      if (r == sh->victim) continue;
      cr_expect(rp->done, "%s: rank %d never returned", what, r);
      cr_expect(rp->rc != weftSuccess, "%s: rank %d reports success", what, r);
      if (rp->rc == weftTimeout) {
        cr_expect(strstr(rp->msg, "had not registered") != NULL,
                  "%s: rank %d timed out, not for an unregistered rank: %s", what, r, rp->msg);
        cr_expect_lt(rp->atMs - killedAt, INIT_TIMEOUT_MS + 3000, "%s: rank %d took %lld ms",
                     what, r, (long long)(rp->atMs - killedAt));
      } else {
        cr_expect_eq(rp->rc, weftRemoteError, "%s: rank %d got %d: %s", what, r, rp->rc, rp->msg);
        cr_expect_lt(rp->atMs - killedAt, DETECT_BOUND_MS, "%s: rank %d took %lld ms", what, r,
                     (long long)(rp->atMs - killedAt));
        cr_expect(namesRank(cfg, sh, r, sh->victim), "%s: rank %d does not name rank %d: %s",
                  what, r, sh->victim, rp->msg);
      }
    }
    finishJob(sh, what);
  }
  expectHostsRemoved();
}

Test(init_death, any_error_3x1, .timeout = 120, .fini = hostsDown) { initDeath(&hosts3x1, "init_death/any_error_3x1"); }
Test(init_death, any_error_2x2, .timeout = 120, .fini = hostsDown) { initDeath(&hosts2x2, "init_death/any_error_2x2"); }

/* ---- stuck_peer: SIGSTOP ---- */

#define STUCK_TIMEOUT_MS 1500

/* Each survivor's own wait ends with weftTimeout, naming whom it waited for and the
 * operation; at least the ranks waiting on the stopped one name it (a rank waiting on a rank
 * that waits in turn names that rank: timeouts do not travel, docs/fault-tolerance.md). The
 * ranks destroy only once all have returned, so no rank's result is a peer's closing. */
static void stopInLoop(const struct config *cfg, const char *algo, int rep) {
  int n = cfg->hosts * cfg->perHost;
  struct shared scenario = {.mode = MODE_LOOP, .victim = pick(n), .holdDestroy = 1};
  int delayMs = 20 + pick(300);
  char what[96];
  snprintf(what, sizeof what, "%s %dx%d rep %d: stop rank %d after %d ms", algoName(algo),
           cfg->hosts, cfg->perHost, rep, scenario.victim, delayMs);
  struct shared *sh = startJob(cfg, &scenario, algo, STUCK_TIMEOUT_MS);
  cr_assert(awaitPhase(sh, n, -1, PHASE_COLL, 30000), "%s: not every rank initialized", what);
  usleep((useconds_t)delayMs * 1000);
  int64_t stoppedAt = netnsNowMs();
  kill(job.pids[sh->victim], SIGSTOP);
  awaitDone(sh, n, sh->victim, 10000);
  char needle[32];
  snprintf(needle, sizeof needle, "rank %d ", sh->victim);
  for (int r = 0; r < n; r++) {
    const struct rankReport *rp = &sh->r[r];
    if (r == sh->victim) continue;
    int64_t took = rp->atMs - stoppedAt;
    char op[48];
    snprintf(op, sizeof op, "operation %ld)", rp->iters); /* the call that timed out */
    const char *waited = strstr(rp->msg, "waiting for ");
    cr_expect(rp->done, "%s: rank %d never returned", what, r);
    cr_expect_eq(rp->rc, weftTimeout, "%s: rank %d got %d: %s", what, r, rp->rc, rp->msg);
    cr_expect(took >= STUCK_TIMEOUT_MS - 100 && took < STUCK_TIMEOUT_MS + 3500,
              "%s: rank %d returned after %lld ms", what, r, (long long)took);
    cr_expect(waited != NULL && strstr(waited, " rank ") && strstr(rp->msg, op),
              "%s: rank %d's message names no rank it waited for, or not its %s: %s", what, r, op,
              rp->msg);
    cr_expect(strstr(rp->msg, needle) != NULL, "%s: rank %d does not name rank %d: %s", what, r,
              sh->victim, rp->msg);
  }
  if (verbose()) printOutcome(what, sh, n, stoppedAt);
  finishJob(sh, what);
}

static void stuckPeer(const struct config *cfg, const char *test) {
  hostsUp(cfg, test);
  for (int rep = 0; rep < cfg->nalgos; rep++) stopInLoop(cfg, cfg->algos[rep], rep);
  expectHostsRemoved();
}

Test(stuck_peer, algos_3x1, .timeout = 120, .fini = hostsDown) { stuckPeer(&hosts3x1, "stuck_peer/algos_3x1"); }
Test(stuck_peer, algos_2x2, .timeout = 120, .fini = hostsDown) { stuckPeer(&hosts2x2, "stuck_peer/algos_2x2"); }

/* ---- abort: from another thread, while the collective is blocked ---- */

static void expectAbortOutcome(const struct shared *sh, int n, const char *what) {
  const struct rankReport *ab = &sh->r[sh->aborter];
  cr_expect_eq(ab->rc, weftRemoteError, "%s: the aborted call got %d: %s", what, ab->rc, ab->msg);
  cr_expect(strstr(ab->msg, "aborted") != NULL, "%s: the aborted call says: %s", what, ab->msg);
  cr_expect_lt(ab->atMs - ab->abortCallMs, ABORT_BOUND_MS, "%s: the blocked call returned %lld ms after the abort",
               what, (long long)(ab->atMs - ab->abortCallMs));
  cr_expect_lt(ab->abortReturnMs - ab->abortCallMs, ABORT_BOUND_MS, "%s: weftCommAbort took %lld ms", what,
               (long long)(ab->abortReturnMs - ab->abortCallMs));
  for (int r = 0; r < n; r++) {
    const struct rankReport *rep = &sh->r[r];
    if (r == sh->aborter) continue;
    cr_expect(rep->done, "%s: rank %d never returned", what, r);
    cr_expect_eq(rep->rc, weftRemoteError, "%s: rank %d got %d: %s", what, r, rep->rc, rep->msg);
    cr_expect_lt(rep->atMs - ab->abortCallMs, DETECT_BOUND_MS, "%s: rank %d failed %lld ms after the abort",
                 what, r, (long long)(rep->atMs - ab->abortCallMs));
  }
}

static void abortBlocked(const struct config *cfg, const char *algo, int rep) {
  int n = cfg->hosts * cfg->perHost;
  struct shared scenario = {.mode = MODE_ABORT, .victim = pick(n), .stopAfter = 1 + pick(100),
                            .abortDelayMs = 50 + pick(250)};
  scenario.aborter = (scenario.victim + 1 + pick(n - 1)) % n;
  char what[128];
  snprintf(what, sizeof what, "%s %dx%d rep %d: rank %d stops after %d calls, rank %d aborts",
           algoName(algo), cfg->hosts, cfg->perHost, rep, scenario.victim, scenario.stopAfter,
           scenario.aborter);
  struct shared *sh = startJob(cfg, &scenario, algo, 20000);
  awaitDone(sh, n, -1, 30000);
  fprintf(stderr, "%s: blocked call returned %lld ms after the abort, which took %lld ms\n", what,
          (long long)(sh->r[scenario.aborter].atMs - sh->r[scenario.aborter].abortCallMs),
          (long long)(sh->r[scenario.aborter].abortReturnMs - sh->r[scenario.aborter].abortCallMs));
  if (verbose()) printOutcome(what, sh, n, sh->r[scenario.aborter].abortCallMs);
  expectAbortOutcome(sh, n, what);
  finishJob(sh, what);
}

static void abortTest(const struct config *cfg, const char *test) {
  hostsUp(cfg, test);
  for (int rep = 0; rep < cfg->nalgos; rep++) abortBlocked(cfg, cfg->algos[rep], rep);
  expectHostsRemoved();
}

Test(abort, blocked_3x1, .timeout = 120, .fini = hostsDown) { abortTest(&hosts3x1, "abort/blocked_3x1"); }
Test(abort, blocked_2x2, .timeout = 120, .fini = hostsDown) { abortTest(&hosts2x2, "abort/blocked_2x2"); }

/* ---- mismatch ---- */

/* "AllReduce(count C, type, op)" as the library prints a signature. */
static void signature(char *buf, size_t len, size_t count, weftDataType_t type, weftRedOp_t op) {
  snprintf(buf, len, "AllReduce(count %zu, %s, %s)", count, weftTypeName(type), weftOpName(op));
}

static void mismatchOnce(const struct config *cfg, const char *algo, int kind, int rep) {
  static const char *const kinds[] = {"count", "datatype", "op"};
  int n = cfg->hosts * cfg->perHost;
  struct shared scenario = {.mode = MODE_MISMATCH, .victim = pick(n), .mismatch = kind};
  char what[96], good[96], odd[96];
  snprintf(what, sizeof what, "%s %dx%d rep %d: rank %d's %s differs", algoName(algo), cfg->hosts,
           cfg->perHost, rep, scenario.victim, kinds[kind]);
  signature(good, sizeof good, GOOD_COUNT, weftFloat32, weftSum);
  signature(odd, sizeof odd, kind == MISMATCH_COUNT ? GOOD_COUNT + 1 : GOOD_COUNT,
            kind == MISMATCH_TYPE ? weftInt32 : weftFloat32, kind == MISMATCH_OP ? weftMax : weftSum);
  int64_t start = netnsNowMs();
  struct shared *sh = startJob(cfg, &scenario, algo, 20000);
  awaitDone(sh, n, -1, 15000);
  if (verbose()) printOutcome(what, sh, n, start);
  int both = 0;
  for (int r = 0; r < n; r++) {
    const struct rankReport *rp = &sh->r[r];
    int shows = strstr(rp->msg, good) && strstr(rp->msg, odd);
    both += shows;
    cr_expect(rp->done, "%s: rank %d never returned", what, r);
    cr_expect_eq(rp->rc, weftInvalidUsage, "%s: rank %d got %d: %s", what, r, rp->rc, rp->msg);
    cr_expect(strstr(rp->msg, "mismatched") != NULL, "%s: rank %d: %s", what, r, rp->msg);
    cr_expect(shows, "%s: rank %d's message lacks \"%s\" or \"%s\": %s", what, r, good, odd,
              rp->msg);
  }
  cr_expect_eq(both, n, "%s: %d of %d ranks show both signatures", what, both, n);
  cr_expect_lt(netnsNowMs() - start, 10000, "%s: took %lld ms", what, (long long)(netnsNowMs() - start));
  finishJob(sh, what);
}

static void mismatchTest(const struct config *cfg, int kind, const char *test) {
  hostsUp(cfg, test);
  for (int rep = 0; rep < cfg->nalgos; rep++) mismatchOnce(cfg, cfg->algos[rep], kind, rep);
  expectHostsRemoved();
}

Test(mismatch, count_3x1, .timeout = 120, .fini = hostsDown) { mismatchTest(&hosts3x1, MISMATCH_COUNT, "mismatch/count_3x1"); }
Test(mismatch, datatype_3x1, .timeout = 120, .fini = hostsDown) { mismatchTest(&hosts3x1, MISMATCH_TYPE, "mismatch/datatype_3x1"); }
Test(mismatch, op_3x1, .timeout = 120, .fini = hostsDown) { mismatchTest(&hosts3x1, MISMATCH_OP, "mismatch/op_3x1"); }
Test(mismatch, count_2x2, .timeout = 120, .fini = hostsDown) { mismatchTest(&hosts2x2, MISMATCH_COUNT, "mismatch/count_2x2"); }
Test(mismatch, datatype_2x2, .timeout = 120, .fini = hostsDown) { mismatchTest(&hosts2x2, MISMATCH_TYPE, "mismatch/datatype_2x2"); }
Test(mismatch, op_2x2, .timeout = 120, .fini = hostsDown) { mismatchTest(&hosts2x2, MISMATCH_OP, "mismatch/op_2x2"); }
