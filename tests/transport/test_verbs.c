/* The verbs transport beyond the conformance suite (tests/transport/test_transport.c runs
 * that over it too). Needs an RDMA device: each test skips with "[needs rdma]" and query()'s
 * reason where there is none (this machine); tests/rdma/check-rdma.sh runs them in a VM with
 * Soft-RoCE (rxe). Every collective over verbs links (the ring, the tree and hier forced in
 * turn, then the tuner; every datatype, in place and out of place, counts {0, 1, odd primes,
 * past a slot}) on 2 ranks (WEFT_TRANSPORTS=verbs on one host, each rank on its own device
 * where there are two; and two emulated hosts, where verbs is chosen by default) and on 4
 * ranks (one host; two emulated hosts of two, shm inside); several QPs per link; a peer
 * killed mid-collective gives weftRemoteError naming it; bad WEFT_IB_* values are refused;
 * WEFT_TRANSPORTS=^verbs leaves it out; nothing (descriptors, verbs objects) is left after
 * destroy or abort; ranks that sleep in their waits wake by their completion channels. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "algo.h"
#include "caps.h"
#include "collcases.h"
#include "core.h"
#include "deadline.h"
#include "harness.h"
#include "p2p.h"
#ifdef WEFT_HAVE_VERBS
#include "../../transports/verbs/verbs.h"
#endif

TestSuite(verbs, .timeout = 1800);

static int verbsIndex(void) {
  for (int t = 0; weftTransports[t] != NULL; t++)
    if (strcmp(weftTransports[t]->name, "verbs") == 0) return t;
  return -1;
}

/* Skips unless verbs is built in and finds an active RDMA port. */
static void needVerbs(void) {
  int t = verbsIndex();
  if (t < 0) cr_skip_test("[needs rdma] weft was built without libibverbs/librdmacm (libibverbs-dev, librdmacm-dev)");
  char why[256] = "";
  if (!weftTransports[t]->query(why, sizeof why)) cr_skip_test("[needs rdma] %s", why);
  /* TCG (the VM) runs 14-56x slower than the host: generous deadlines, small slots so the
   * sweeps wrap the FIFO often. */
  setenv("WEFT_TIMEOUT_MS", "120000", 1);
  setenv("WEFT_IB_SLOT_BYTES", "16384", 1);
}

struct verbsRun {
  int perHost; /* 0: one host, every link verbs; else shm inside a host, verbs between */
  const struct collSweep *sweep;
  const struct collMatrix *matrix;
};

static int linkUses(const struct weftConn *c, const struct verbsRun *run, int rank, int nranks) {
  int sameHost = run->perHost > 0 && rank / run->perHost == c->peer / run->perHost;
  const char *want = sameHost ? "shm" : "verbs";
  if (nranks == 1 || strcmp(c->ops->name, want) == 0) return 1;
  fprintf(stderr, "rank %d: the link %s rank %d uses %s, not %s\n", rank,
          c->dir == WEFT_DIR_SEND ? "to" : "from", c->peer, c->ops->name, want);
  return 0;
}

static long runBody(weftComm_t comm, int rank, int nranks, void *arg) {
  const struct verbsRun *run = arg;
  if (!linkUses(&comm->ring.send, run, rank, nranks) || !linkUses(&comm->ring.recv, run, rank, nranks))
    return 1;
  long bad = 0;
  if (run->sweep != NULL) bad += collSweepBody(comm, rank, nranks, (void *)run->sweep);
  if (run->matrix != NULL) bad += collMatrixBody(comm, rank, nranks, (void *)run->matrix);
  return bad;
}

/* 20011 elements pass a 16 KiB slot for every type (int8 included). */
static const size_t counts[] = {0, 1, 7, 1021, 20011};
static const weftDataType_t allTypes[] = {weftInt8, weftUint8, weftInt32, weftUint32, weftInt64,
                                          weftUint64, weftFloat16, weftFloat32, weftFloat64,
                                          weftBfloat16, weftFloat8e4m3, weftFloat8e5m2};
#define NTYPES ((int)(sizeof allTypes / sizeof allTypes[0]))
static const weftRedOp_t ops[] = {weftSum, weftMax, weftAvg};

static int algoRuns(const char *name, weftColl_t coll) {
  for (int a = 0; weftAlgos[a] != NULL; a++)
    if (strcmp(weftAlgos[a]->name, name) == 0) return (weftAlgos[a]->colls & WEFT_COLL_BIT(coll)) != 0;
  return 0;
}

/* make check-rdma's default keeps its VM boots under 10 minutes of TCG: every datatype in the
 * AllReduce matrix (sum), three (int8, float32, bfloat16) in the other collectives' sweeps,
 * counts {0, 1, 7, 20011}. WEFT_VERBS_TESTS_FULL=1 (RDMA_FULL=1 make check-rdma): every type
 * everywhere, counts {0, 1, 7, 1021, 20011}, sum, max and avg. */
static const weftDataType_t quickTypes[] = {weftInt8, weftFloat32, weftBfloat16};
static const size_t quickCounts[] = {0, 1, 7, 20011};

/* Every collective with each algorithm that runs it here, then the tuner. */
static void everyCollective(int hosts, int perHost, const char *transports) {
  needVerbs();
  int full = getenv("WEFT_VERBS_TESTS_FULL") != NULL;
  const size_t *cs = full ? counts : quickCounts;
  int nc = full ? 5 : 4;
  static const weftColl_t colls[] = {weftCollBroadcast, weftCollReduce, weftCollAllGather,
                                     weftCollReduceScatter, weftCollAllReduce};
  static const char *const algos[] = {"ring", "tree", "hier", NULL};
  if (transports != NULL) setenv("WEFT_TRANSPORTS", transports, 1);
  else unsetenv("WEFT_TRANSPORTS");
  int nranks = hosts * perHost;
  for (int a = 0; a < 4; a++) {
    char why[256];
    if (algos[a] != NULL && !algoRunsOn(algos[a], hosts, perHost, why, sizeof why)) continue;
    for (int c = 0; c < 5; c++) {
      struct collSweep sweep = {colls[c], cs, nc, full ? allTypes : quickTypes, full ? NTYPES : 3, 0};
      struct collMatrix matrix = {cs, nc, allTypes, NTYPES, ops, full ? 3 : 1};
      struct verbsRun run = {hosts > 1 ? perHost : 0, c < 4 ? &sweep : NULL, c < 4 ? NULL : &matrix};
      char spec[64] = "";
      if (algos[a] != NULL && !algoRuns(algos[a], colls[c])) continue;
      if (algos[a] != NULL) {
        snprintf(spec, sizeof spec, "%s:%s", weftCollName(colls[c]), algos[a]);
        setenv("WEFT_ALGO", spec, 1);
      } else {
        unsetenv("WEFT_ALGO");
      }
      if (run.sweep) collSweepPrepare(run.sweep, nranks);
      else collMatrixPrepare(run.matrix, nranks);
      long failures = hosts > 1 ? runRanksOnHosts(hosts, perHost, runBody, &run, 1200)
                                : runRanks(nranks, 1, runBody, &run, 1200);
      cr_expect_eq(failures, 0, "%s over %s, %d host(s) x %d, WEFT_ALGO=%s: %ld failures",
                   weftCollName(colls[c]), transports ? transports : "(default)", hosts, perHost,
                   algos[a] ? spec : "(tuner)", failures);
    }
  }
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_TRANSPORTS");
}

/* Two ranks of one host (each on its own RDMA device where there are two), every link
 * verbs; two emulated hosts of one rank, where verbs is chosen without being asked for. */
Test(verbs, every_collective_procs_2) { everyCollective(1, 2, "verbs"); }
Test(verbs, every_collective_hosts_2x1) { everyCollective(2, 1, NULL); }
/* Four ranks: one host, every link verbs; two emulated hosts of two, shm inside a host. */
Test(verbs, every_collective_procs_4) { everyCollective(1, 4, "verbs"); }
Test(verbs, every_collective_hosts_2x2) { everyCollective(2, 2, NULL); }

/* weftCommGetPeerTransport names verbs and the device, port and GID each rank uses for every
 * peer (what allreduce_perf's "# Links" prints). */
static long peerTransportBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  long bad = 0;
  for (int p = 0; p < n; p++) {
    const char *t = NULL;
    char dev[256] = "";
    if (weftCommGetPeerTransport(comm, p, &t, dev, sizeof dev) != weftSuccess) return 1;
    if (p != rank && (strcmp(t, "verbs") != 0 || strstr(dev, " port ") == NULL ||
                      strstr(dev, "GID index") == NULL)) {
      fprintf(stderr, "rank %d: peer %d over %s (%s), expected verbs with its device\n", rank, p, t, dev);
      bad++;
    }
  }
  return bad;
}

Test(verbs, peer_transport_names_the_device) {
  needVerbs();
  setenv("WEFT_TRANSPORTS", "verbs", 1);
  cr_expect_eq(runRanks(2, 1, peerTransportBody, NULL, 300), 0);
  unsetenv("WEFT_TRANSPORTS");
}

/* The network interface under RDMA device dev's port 1 (its GID 0's), into ndev. */
static int netdevOf(const char *dev, char *ndev, size_t len) {
  char path[256];
  snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/1/gid_attrs/ndevs/0", dev);
  FILE *f = fopen(path, "r");
  int ok = f != NULL && fgets(ndev, (int)len, f) != NULL;
  if (f != NULL) fclose(f);
  if (ok) ndev[strcspn(ndev, "\n")] = '\0';
  return ok && ndev[0] != '\0';
}

static void setLink(const char *ndev, const char *state) {
  char cmd[128];
  snprintf(cmd, sizeof cmd, "ip link set dev %s %s", ndev, state);
  if (system(cmd) != 0) fprintf(stderr, "'%s' failed\n", cmd);
}

/* Rank 0 takes its device's network interface down in a loop of AllReduces over verbs: every
 * rank must fail with weftRemoteError, rank 0 within 30 s saying its port went down (the
 * device's IBV_EVENT_PORT_ERR); the interface comes back up after. */
static long portDownBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)n, (void)arg;
  const char *t = NULL;
  char dev[256] = "", name[64] = "", ndev[64] = "";
  if (weftCommGetPeerTransport(comm, 1 - rank, &t, dev, sizeof dev) != weftSuccess) return 1;
  if (sscanf(dev, "%63s", name) != 1 || (rank == 0 && !netdevOf(name, ndev, sizeof ndev))) {
    fprintf(stderr, "rank %d: no network interface under '%s'\n", rank, dev);
    return 1;
  }
  float buf[256] = {0};
  weftResult_t rc = weftSuccess;
  int64_t start = weftNowMs(), downAt = 0;
  for (int i = 0; rc == weftSuccess && weftNowMs() - start < 120000; i++) {
    if (rank == 0 && i == 20) setLink(ndev, "down"), downAt = weftNowMs();
    rc = weftAllReduce(buf, buf, 256, weftFloat32, weftSum, comm, NULL);
  }
  int64_t took = weftNowMs() - downAt;
  if (rank == 0) setLink(ndev, "up");
  const char *msg = weftGetLastError(comm);
  int ok = rc == weftRemoteError && (rank != 0 || (strstr(msg, "went down") != NULL && took < 30000));
  if (!ok || getenv("WEFT_TEST_VERBOSE"))
    fprintf(stderr, "rank %d: rc %d%s%lld ms: %s\n", rank, rc, rank == 0 ? " after the down, " : ", ",
            (long long)(rank == 0 ? took : weftNowMs() - start), msg);
  return !ok;
}

Test(verbs, port_down_fails_every_link) {
  needVerbs();
  setenv("WEFT_TRANSPORTS", "verbs", 1);
  setenv("WEFT_ALGO", "ring", 1); /* direct would share memory, not use the links */
  cr_expect_eq(runRanks(2, 1, portDownBody, NULL, 300), 0);
  unsetenv("WEFT_TRANSPORTS");
  unsetenv("WEFT_ALGO");
}

/* Several QPs per link (slots round-robin over them, more slots than QPs and not a
 * multiple): the AllReduce matrix over the ring. */
Test(verbs, qps_per_connection_3) {
  needVerbs();
  setenv("WEFT_TRANSPORTS", "verbs", 1);
  setenv("WEFT_IB_QPS_PER_CONNECTION", "3", 1);
  setenv("WEFT_ALGO", "allreduce:ring", 1);
  struct collMatrix matrix = {quickCounts, 4, allTypes, NTYPES, ops, 1};
  struct verbsRun run = {0, NULL, &matrix};
  long failures = runRanks(2, 1, runBody, &run, 600);
  unsetenv("WEFT_IB_QPS_PER_CONNECTION");
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_TRANSPORTS");
  cr_expect_eq(failures, 0, "%ld failures", failures);
}

/* Rank 1 leaves (_exit, its QPs torn down by the kernel) in the middle of a loop of
 * AllReduces; rank 0 must get weftRemoteError naming it, not a hang. */
static long dieBody(weftComm_t comm, int rank, int nranks, void *arg) {
  (void)nranks, (void)arg;
  static float buf[4096];
  for (int i = 0; i < 100000; i++) {
    if (rank == 1 && i == 20) _exit(0);
    weftResult_t rc = weftAllReduce(buf, buf, 4096, weftFloat32, weftSum, comm, NULL);
    if (rc != weftSuccess) {
      const char *msg = weftGetLastError(comm);
      if (rank == 0 && rc == weftRemoteError && strstr(msg, "rank 1") != NULL) return 0;
      fprintf(stderr, "rank %d: call %d: got %s: %s\n", rank, i, weftGetErrorString(rc), msg);
      return 1;
    }
  }
  fprintf(stderr, "rank %d: no error although rank 1 left\n", rank);
  return 1;
}

Test(verbs, peer_killed_mid_collective) {
  needVerbs();
  setenv("WEFT_TRANSPORTS", "verbs", 1);
  setenv("WEFT_ALGO", "allreduce:ring", 1);
  long failures = runRanks(2, 1, dieBody, NULL, 300);
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_TRANSPORTS");
  cr_expect_eq(failures, 0, "%ld failures (see stderr)", failures);
}

static uint64_t channelWakes(const struct weftConn *c) {
#ifdef WEFT_HAVE_VERBS
  return weftVerbsChannelWakes(c);
#else
  (void)c;
  return 0; /* not reached: without verbs needVerbs() skips */
#endif
}

/* A held-back sender wakes by the channel only where the peer's credit comes while it sleeps,
 * not while it looks at its links between two sleeps (the credit is then taken by that look):
 * under the VM's emulation the sender woke so 1 to 3 times in a run of 4 rounds (14 runs
 * counted), and 1 of 26 runs, like a CI run of 2026-12-07, saw no such wake at all. Six
 * rounds that hold back each rank (20 of 20 runs passed) make that rare; a channel that never
 * wakes still fails every run. */
enum { SLEEPER_COUNT = 100003, SLEEPER_ROUNDS = 12 };

/* Round r's call failed or left a wrong element: its count of failures. */
static long sleeperRound(weftComm_t comm, int rank, int r, const char *what, weftResult_t rc,
                         const int32_t *buf, int check) {
  if (rc != weftSuccess) {
    fprintf(stderr, "rank %d: %s %d: %s\n", rank, what, r, weftGetLastError(comm));
    return 1;
  }
  for (int i = 0; i < SLEEPER_COUNT && check; i++)
    if (buf[i] != i * 7 + r) {
      fprintf(stderr, "rank %d: %s %d: element %d is %d, not %d\n", rank, what, r, i, buf[i], i * 7 + r);
      return 1;
    }
  return 0;
}

/* The link this rank waited on woke its wait by the completion channel at least once. */
static long sleeperWoke(int rank, const struct weftConn *waited) {
  if (channelWakes(waited) > 0) return 0;
  fprintf(stderr, "rank %d: its waits never woke by the completion channel (%s link: %s)\n", rank,
          rank == 0 ? "sending" : "receiving", waited->ops != NULL ? waited->ops->name : "none");
  return 1;
}

/* Ranks that sleep at once in their waits (no spin, no yields), each kept waiting in turn: the
 * receiver while its root holds back 100 ms before a Broadcast, the root while the receiver
 * does (400 KB, past the link's slots, so the root waits for credits). Both links' waits
 * sleep on their CQ's completion channel and wake by it, and every element is right. With
 * arg set, the same with Send/Recv from rank 0 to rank 1: the point-to-point engine's wait
 * sleeps on the link of the transfer it waits for (lib/p2p.c). */
static long sleeperBody(weftComm_t comm, int rank, int nranks, void *arg) {
  (void)nranks;
  int p2p = arg != NULL;
  const char *what = !p2p ? "broadcast" : rank == 0 ? "send" : "receive";
  int32_t *buf = malloc(SLEEPER_COUNT * sizeof *buf);
  if (buf == NULL) return 1;
  long bad = 0;
  for (int r = 0; r < SLEEPER_ROUNDS && bad == 0; r++) {
    for (int i = 0; i < SLEEPER_COUNT; i++) buf[i] = rank == 0 ? i * 7 + r : -1;
    if (rank == r % 2) usleep(100000); /* the other one is asleep in its wait meanwhile */
    weftResult_t rc = !p2p     ? weftBroadcast(buf, buf, SLEEPER_COUNT, weftInt32, 0, comm, NULL)
                      : rank == 0 ? weftSend(buf, SLEEPER_COUNT, weftInt32, 1, comm, NULL)
                                  : weftRecv(buf, SLEEPER_COUNT, weftInt32, 0, comm, NULL);
    bad += sleeperRound(comm, rank, r, what, rc, buf, !p2p || rank == 1);
  }
  /* rank 0 sends to rank 1 and waits for its credits; rank 1 waits for rank 0's slots */
  const struct weftConn *waited = !p2p ? (rank == 0 ? &comm->ring.send : &comm->ring.recv)
                                  : rank == 0 ? &comm->p2p->send[1].conn : &comm->p2p->recv[0].conn;
  if (bad == 0) bad += sleeperWoke(rank, waited);
  free(buf);
  return bad;
}

static void runSleepers(void *p2p, const char *algo) {
  needVerbs();
  setenv("WEFT_TRANSPORTS", "verbs", 1);
  if (algo != NULL) setenv("WEFT_ALGO", algo, 1);
  setenv("WEFT_SPIN_ITERS", "0", 1);
  setenv("WEFT_YIELD_ITERS", "0", 1);
  long failures = runRanks(2, 1, sleeperBody, p2p, 300);
  unsetenv("WEFT_YIELD_ITERS");
  unsetenv("WEFT_SPIN_ITERS");
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_TRANSPORTS");
  cr_expect_eq(failures, 0, "%ld failures (see stderr)", failures);
}

Test(verbs, sleeping_ranks_wake_by_completion) { runSleepers(NULL, "broadcast:ring"); }
static int p2pMode = 1;
Test(verbs, sleeping_p2p_ranks_wake_by_completion) { runSleepers(&p2pMode, NULL); }

/* Malformed WEFT_IB_* values are refused before anything acts on them; a WEFT_IB_HCA that
 * matches no device fails init with the reason. */
Test(verbs, bad_values_refused) {
  static const char *const bad[][2] = {{"WEFT_IB_QPS_PER_CONNECTION", "0"},
                                       {"WEFT_IB_QPS_PER_CONNECTION", "9"},
                                       {"WEFT_IB_GID_INDEX", "abc"},
                                       {"WEFT_IB_HCA", "rxe0,,rxe1"},
                                       {"WEFT_TRANSPORTS", "^verbs,nonesuch"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv(bad[i][0], bad[i][1], 1);
    weftUniqueId id;
    weftResult_t rc = weftGetUniqueId(&id);
    unsetenv(bad[i][0]);
    cr_expect_eq(rc, weftInvalidArgument, "%s=%s: rc %d", bad[i][0], bad[i][1], rc);
    cr_expect(strstr(weftGetLastError(NULL), bad[i][0]) != NULL, "%s", weftGetLastError(NULL));
  }
  needVerbs();
  setenv("WEFT_TRANSPORTS", "verbs", 1);
  setenv("WEFT_IB_HCA", "=nonesuch_0", 1);
  weftUniqueId id;
  weftComm_t comm = NULL;
  cr_assert_eq(weftGetUniqueId(&id), weftSuccess);
  weftResult_t rc = weftCommInitRank(&comm, 1, id, 0);
  unsetenv("WEFT_IB_HCA");
  unsetenv("WEFT_TRANSPORTS");
  cr_expect_eq(rc, weftInvalidArgument, "WEFT_IB_HCA=\"=nonesuch_0\": init rc %d", rc);
  cr_expect(strstr(weftGetLastError(NULL), "WEFT_IB_HCA") != NULL, "%s", weftGetLastError(NULL));
  if (rc == weftSuccess) weftCommDestroy(comm);
}

/* WEFT_TRANSPORTS=^verbs leaves verbs out: emulated hosts talk over tcp. */
static long tcpBody(weftComm_t comm, int rank, int nranks, void *arg) {
  (void)arg;
  return nranks > 1 && (strcmp(comm->ring.send.ops->name, "tcp") != 0 ||
                        strcmp(comm->ring.recv.ops->name, "tcp") != 0) &&
         fprintf(stderr, "rank %d: ring over %s/%s\n", rank, comm->ring.send.ops->name,
                 comm->ring.recv.ops->name) > 0;
}

Test(verbs, excluded_by_caret) {
  needVerbs();
  setenv("WEFT_TRANSPORTS", "^verbs,ucx", 1);
  long failures = runRanksOnHosts(2, 1, tcpBody, NULL, 120);
  unsetenv("WEFT_TRANSPORTS");
  cr_expect_eq(failures, 0, "WEFT_TRANSPORTS=^verbs,ucx did not leave verbs out");
}

/* Open descriptors on /dev/infiniband (uverbs contexts, rdma_cm channels). */
static int countRdmaFds(void) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  if (d == NULL) return -1;
  struct dirent *e;
  char path[320], target[256];
  while ((e = readdir(d)) != NULL) {
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t len = readlink(path, target, sizeof target - 1);
    if (len <= 0) continue;
    target[len] = '\0';
    n += strncmp(target, "/dev/infiniband/", 16) == 0;
  }
  closedir(d);
  return n;
}

/* Two ranks as threads of this process: init, one AllReduce, then destroy or abort. */
struct pairRank {
  weftUniqueId id;
  int rank, abort;
  long failures;
};

static void *pairMain(void *arg) {
  struct pairRank *p = arg;
  weftComm_t comm = NULL;
  static float bufs[2][1021];
  if (weftCommInitRank(&comm, 2, p->id, p->rank) != weftSuccess) {
    p->failures = 1;
    return NULL;
  }
  if (strcmp(comm->ring.send.ops->name, "verbs") != 0) p->failures++;
  if (weftAllReduce(bufs[p->rank], bufs[p->rank], 1021, weftFloat32, weftSum, comm, NULL) != weftSuccess)
    p->failures++;
  if ((p->abort ? weftCommAbort(comm) : weftCommDestroy(comm)) != weftSuccess) p->failures++;
  return NULL;
}

static long runPair(int abort) {
  struct pairRank r[2];
  pthread_t th[2];
  if (weftGetUniqueId(&r[0].id) != weftSuccess) return 1;
  for (int i = 0; i < 2; i++) {
    r[i] = (struct pairRank){r[0].id, i, abort, 0};
    pthread_create(&th[i], NULL, pairMain, &r[i]);
  }
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  return r[0].failures + r[1].failures;
}

/* Ten communicators over verbs (ranks as threads of this process) made, used and destroyed,
 * and ten aborted after a collective: no descriptor and no device context outlives them
 * (finalize releases each PD and context; every QP, CQ and MR goes with its link). */
Test(verbs, nothing_left_after_destroy_and_abort) {
  needVerbs();
  setenv("WEFT_TRANSPORTS", "verbs", 1);
  cr_assert_eq(runPair(0), 0); /* one-time setup, then count */
  int fds = countOpenFds(), rdma = countRdmaFds();
  for (int i = 0; i < 10; i++) cr_assert_eq(runPair(0), 0);
  for (int i = 0; i < 300 && countOpenFds() != fds; i++) usleep(10000);
  cr_expect_eq(countOpenFds(), fds, "descriptors leaked after destroy: %d before, %d after", fds, countOpenFds());
  cr_expect_eq(countRdmaFds(), rdma, "RDMA descriptors after destroy: %d before, %d after", rdma, countRdmaFds());
  for (int i = 0; i < 10; i++) cr_assert_eq(runPair(1), 0);
  for (int i = 0; i < 300 && countOpenFds() != fds; i++) usleep(10000);
  unsetenv("WEFT_TRANSPORTS");
  cr_expect_eq(countOpenFds(), fds, "descriptors leaked after abort: %d before, %d after", fds, countOpenFds());
  cr_expect_eq(countRdmaFds(), rdma, "RDMA descriptors after abort: %d before, %d after", rdma, countRdmaFds());
}
