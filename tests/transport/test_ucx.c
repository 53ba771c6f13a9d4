/* The UCX transport beyond the conformance suite (tests/transport/test_transport.c runs that
 * over it too): every collective over UCX links (WEFT_TRANSPORTS=ucx: every pair of ranks on
 * one host; shm,ucx on two emulated hosts: UCX between them), the ring and the tree forced in
 * turn, counts {0, 1, odd primes, past a slot}; that it is not chosen unless asked for where
 * UCX has only TCP sockets; and that a communicator's UCX resources (descriptors, threads)
 * are gone after destroy. Dead, stopped and mismatched peers over UCX: tests/coll/test_faults.c. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "caps.h"
#include "collcases.h"
#include "core.h"
#include "harness.h"
#include "algo.h"

TestSuite(ucx, .timeout = 300);

static int ucxIndex(void) {
  for (int t = 0; weftTransports[t] != NULL; t++)
    if (strcmp(weftTransports[t]->name, "ucx") == 0) return t;
  return -1;
}

/* Skips unless UCX is built in and usable once asked for. */
static void needUcx(void) {
  int t = ucxIndex();
  if (t < 0) cr_skip_test("[needs ucx] weft was built without UCX (libucx-dev)");
  setenv("WEFT_TRANSPORTS", "ucx", 1);
  char why[256] = "";
  int ok = weftTransports[t]->query(why, sizeof why);
  unsetenv("WEFT_TRANSPORTS");
  if (!ok) cr_skip_test("[needs ucx] %s", why);
}

/* Which transport each link of the ring uses must be the one the test asked for. */
struct ucxRun {
  const char *want;     /* the ring's links between hosts (or all links on one host) */
  int perHost;          /* 0: one host */
  const struct collSweep *sweep;
  const struct collMatrix *matrix;
};

static int linkUses(const struct weftConn *c, const struct ucxRun *run, int rank, int nranks) {
  int peer = c->peer, sameHost = run->perHost > 0 && rank / run->perHost == peer / run->perHost;
  const char *want = run->perHost == 0 ? run->want : sameHost ? "shm" : run->want;
  if (nranks == 1 || strcmp(c->ops->name, want) == 0) return 1;
  fprintf(stderr, "rank %d: the link %s rank %d uses %s, not %s\n", rank,
          c->dir == WEFT_DIR_SEND ? "to" : "from", peer, c->ops->name, want);
  return 0;
}

static long runBody(weftComm_t comm, int rank, int nranks, void *arg) {
  const struct ucxRun *run = arg;
  if (!linkUses(&comm->ring.send, run, rank, nranks) || !linkUses(&comm->ring.recv, run, rank, nranks))
    return 1;
  long bad = 0;
  if (run->sweep != NULL) bad += collSweepBody(comm, rank, nranks, (void *)run->sweep);
  if (run->matrix != NULL) bad += collMatrixBody(comm, rank, nranks, (void *)run->matrix);
  return bad;
}

static const size_t counts[] = {0, 1, 7, 1021, 131101};
static const weftDataType_t types[] = {weftInt8, weftInt32, weftFloat16, weftFloat32, weftFloat64};
static const weftRedOp_t ops[] = {weftSum, weftMax, weftAvg};
static const struct collMatrix allreduce = {counts, 5, types, 5, ops, 3};

/* Whether the algorithm of that name runs the collective. */
static int algoRuns(const char *name, weftColl_t coll) {
  for (int a = 0; weftAlgos[a] != NULL; a++)
    if (strcmp(weftAlgos[a]->name, name) == 0) return (weftAlgos[a]->colls & WEFT_COLL_BIT(coll)) != 0;
  return 0;
}

/* Every collective with the ring and the tree where they run it, then the tuner. */
static void everyCollective(int hosts, int perHost, const char *transports) {
  needUcx();
  if (hosts > 1) SKIP_UNLESS("netns");
  static const weftColl_t colls[] = {weftCollBroadcast, weftCollReduce, weftCollAllGather,
                                     weftCollReduceScatter};
  static const char *const algos[] = {"ring", "tree", NULL};
  setenv("WEFT_TRANSPORTS", transports, 1);
  setenv("WEFT_TIMEOUT_MS", "60000", 1);
  for (int a = 0; a < 3; a++) {
    for (int c = 0; c < 5; c++) {
      struct collSweep sweep = {c < 4 ? colls[c] : weftCollAllReduce, counts, 5, types, 5, 0};
      struct ucxRun run = {"ucx", hosts > 1 ? perHost : 0, c < 4 ? &sweep : NULL,
                           c < 4 ? NULL : &allreduce};
      char spec[64] = "";
      if (algos[a] != NULL && !algoRuns(algos[a], sweep.coll)) continue;
      if (algos[a] != NULL) {
        snprintf(spec, sizeof spec, "%s:%s", weftCollName(sweep.coll), algos[a]);
        setenv("WEFT_ALGO", spec, 1);
      } else {
        unsetenv("WEFT_ALGO");
      }
      if (run.sweep) collSweepPrepare(run.sweep, hosts * perHost);
      else collMatrixPrepare(run.matrix, hosts * perHost);
      long failures = hosts > 1 ? runRanksOnHosts(hosts, perHost, runBody, &run, 240)
                                : runRanks(perHost, 1, runBody, &run, 240);
      cr_expect_eq(failures, 0, "%s over %s, %d host(s) x %d, WEFT_ALGO=%s: %ld failures",
                   weftCollName(sweep.coll), transports, hosts, perHost,
                   algos[a] ? spec : "(tuner)", failures);
    }
  }
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_TRANSPORTS");
  unsetenv("WEFT_TIMEOUT_MS");
  char names[512];
  int left = segmentsLeft(names, sizeof names);
  cr_expect_eq(left, 0, "%d weft segments left in /dev/shm:%s", left, names);
}

Test(ucx, every_collective_procs_3) { everyCollective(1, 3, "ucx"); }
Test(ucx, every_collective_hosts_2x2) { everyCollective(2, 2, "shm,ucx"); }

/* Point-to-point patterns in groups, AlltoAll, Gather and Scatter over UCX links. */
Test(ucx, point_to_point_procs_3) {
  needUcx();
  setenv("WEFT_TRANSPORTS", "ucx", 1);
  setenv("WEFT_TIMEOUT_MS", "60000", 1);
  long failures = runRanks(3, 1, p2pPatternsBody, NULL, 240);
  unsetenv("WEFT_TRANSPORTS");
  unsetenv("WEFT_TIMEOUT_MS");
  cr_expect_eq(failures, 0, "%ld failures", failures);
}

/* Not asked for, UCX links ranks of different hosts only where it has a network faster than
 * TCP sockets; with only sockets under it (this machine) it links nothing, and the emulated
 * hosts talk over weft's own tcp transport. */
static long defaultBody(weftComm_t comm, int rank, int nranks, void *arg) {
  struct ucxRun run = {arg, 1, NULL, NULL};
  return !linkUses(&comm->ring.send, &run, rank, nranks) || !linkUses(&comm->ring.recv, &run, rank, nranks);
}

Test(ucx, chosen_between_hosts_only_for_a_fast_network) {
  needUcx();
  SKIP_UNLESS("netns");
  unsetenv("WEFT_TRANSPORTS");
  char why[256] = "";
  int fast = weftTransports[ucxIndex()]->query(why, sizeof why);
  if (!fast) cr_expect(strstr(why, "WEFT_TRANSPORTS=ucx") != NULL, "query() says: %s", why);
  cr_expect_eq(runRanksOnHosts(2, 1, defaultBody, fast ? "ucx" : "tcp", 120), 0);
}

/* Twenty communicators over UCX made and destroyed in this process: no descriptor and no
 * thread of UCX's (or of the transport's progress thread) outlives its communicator. */
Test(ucx, nothing_left_after_destroy) {
  needUcx();
  setenv("WEFT_TRANSPORTS", "ucx", 1);
  struct ucxRun run = {"ucx", 0, NULL, &allreduce};
  static const struct collMatrix one = {counts + 3, 1, types + 3, 1, ops, 1};
  run.matrix = &one;
  cr_assert_eq(runRanks(1, 2, runBody, &run, 120), 0); /* UCX's one-time setup, then count */
  int fds = countOpenFds(), threads = countThreadsSettled(1000, 0);
  for (int i = 0; i < 20; i++) cr_assert_eq(runRanks(1, 2, runBody, &run, 120), 0);
  unsetenv("WEFT_TRANSPORTS");
  for (int i = 0; i < 300 && countOpenFds() != fds; i++) usleep(10000);
  cr_expect_eq(countOpenFds(), fds, "descriptors leaked: %d before, %d after", fds, countOpenFds());
  cr_expect_leq(countThreadsSettled(threads, 3000), threads, "threads left behind");
}
