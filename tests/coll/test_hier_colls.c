/* The hierarchical algorithm's Broadcast, Reduce, AllGather and ReduceScatter (and its
 * AllReduce as Reduce + Broadcast where hosts differ in size or hold one rank), forced with
 * WEFT_ALGO=hier, on emulated hosts (WEFT_HOSTID per rank process: shm inside a host, tcp
 * between hosts) of every shape it must handle: 2 x 2, 3 x 1, 3 + 1 ranks, 2 x 3, a host's ranks
 * interleaved with another's (0 1 0 1), and three hosts of 2, 2 and 1 ranks placed out of order.
 * - results: counts {0, 1, 2, 7, 1021, 4099} with 4 KiB slots (so parts cross pieces, a block
 *   several windows), and 40009 and 100003 with default slots (pieces smaller than a slot), a few types including fp16, bf16 and both fp8 formats, every op, every
 *   root, in place and out of place, each checked exactly (tests/common/pattern.c: inputs whose
 *   results do not round); AllGather's parts must land at recvbuff + rank * count whatever the
 *   placement; off the root, Reduce must leave recvbuff alone;
 * - order: Reduce, ReduceScatter and AllReduce of floats that round at every step give the same
 *   bits in three calls, ranks arriving in a different order each time, and are within
 *   n * eps * sum |x| of the exact result;
 * - faults: a rank killed in a loop of the four collectives: every survivor gets
 *   weftRemoteError naming it, well before the timeout;
 * - tuner: with one rank per host hier is the ring again, and the tuner never picks it. */
#include <criterion/criterion.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "algo.h"
#include "caps.h"
#include "collcases.h"
#include "forked.h"
#include "harness.h"
#include "reduce.h"
#include "topofix.h"

TestSuite(hier_colls, .timeout = 300);
TestSuite(hier_order, .timeout = 120);
TestSuite(hier_faults, .timeout = 60);
TestSuite(hier_tuner, .timeout = 60);

#define POISON 0xA5
#define MAX_RANKS 8

struct layout {
  const char *name;
  int n;
  int hostOf[MAX_RANKS];
};
static const struct layout hosts2x1 = {"2 x 1", 2, {0, 1}};
static const struct layout hosts2x2 = {"2 x 2", 4, {0, 0, 1, 1}};
static const struct layout hosts3x1 = {"3 x 1", 3, {0, 1, 2}};
static const struct layout uneven31 = {"3 + 1", 4, {0, 0, 0, 1}};
static const struct layout hosts2x3 = {"2 x 3", 6, {0, 0, 0, 1, 1, 1}};
static const struct layout interleaved = {"0 1 0 1", 4, {0, 1, 0, 1}};
static const struct layout scattered = {"1 0 0 2 1", 5, {1, 0, 0, 2, 1}};

static long onLayout(const struct layout *l, rankBody body, void *arg, int timeoutSec) {
  return runRanksOnHostMap(l->n, l->hostOf, body, arg, timeoutSec);
}

/* ---- results ---- */

static const size_t counts[] = {0, 1, 2, 7, 1021, 4099};
static const weftDataType_t types[] = {weftInt32, weftFloat16, weftBfloat16, weftFloat8e4m3,
                                       weftFloat8e5m2, weftFloat64};
#define MAX_COUNT 4099

struct bufs {
  char *send, *recv, *want;
};

static int untouched(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)p[i] != POISON) return 0;
  return 1;
}

static int sameAs(const char *got, size_t count, weftDataType_t type, int rank, char *want) {
  fillInput(want, count, type, weftSum, rank);
  return count == 0 || memcmp(got, want, count * weftTypeSize(type)) == 0;
}

/* One call; its result, or why it is wrong, in *what. */
static weftResult_t runCase(weftComm_t comm, int rank, int n, weftColl_t coll, size_t count,
                            weftDataType_t type, weftRedOp_t op, int root, int inPlace,
                            struct bufs *b, int *ok) {
  size_t bytes = count * weftTypeSize(type);
  weftResult_t rc;
  if (coll == weftCollBroadcast) {
    char *out = inPlace && rank == root ? b->send : b->recv;
    if (rank == root) fillInput(b->send, count, type, weftSum, root);
    rc = weftBroadcast(b->send, out, count, type, root, comm, NULL);
    *ok = sameAs(out, count, type, root, b->want);
  } else if (coll == weftCollReduce) {
    char *out = inPlace && rank == root ? b->send : b->recv;
    fillInput(b->send, count, type, op, rank);
    rc = weftReduce(b->send, out, count, type, op, root, comm, NULL);
    *ok = rank == root ? countWrong(out, count, type, op, n) == 0 : untouched(b->recv, bytes);
  } else if (coll == weftCollAllGather) {
    char *in = inPlace ? b->recv + (size_t)rank * bytes : b->send;
    fillInput(in, count, type, weftSum, rank);
    rc = weftAllGather(in, b->recv, count, type, comm, NULL);
    *ok = 1;
    for (int r = 0; r < n; r++) *ok &= sameAs(b->recv + (size_t)r * bytes, count, type, r, b->want);
  } else {
    char *out = inPlace ? b->send + (size_t)rank * bytes : b->recv;
    fillInput(b->send, count * (size_t)n, type, op, rank);
    rc = weftReduceScatter(b->send, out, count, type, op, comm, NULL);
    *ok = countWrongFrom(out, (size_t)rank * count, count, type, op, n) == 0;
  }
  return rc;
}

static long checkCase(weftComm_t comm, int rank, int n, weftColl_t coll, size_t count,
                      weftDataType_t type, weftRedOp_t op, int root, int inPlace, struct bufs *b) {
  size_t all = count * weftTypeSize(type) * (size_t)n;
  memset(b->send, POISON, all);
  memset(b->recv, POISON, all);
  int ok = 0;
  weftResult_t rc = runCase(comm, rank, n, coll, count, type, op, root, inPlace, b, &ok);
  if (rc != weftSuccess || !ok)
    fprintf(stderr, "rank %d/%d: %s %zu %s %s root %d %s: %s\n", rank, n, weftCollName(coll),
            count, weftTypeName(type), weftOpName(op), root, inPlace ? "in place" : "out of place",
            rc != weftSuccess ? weftGetLastError(comm) : "wrong result");
  return rc != weftSuccess || !ok;
}

static int reduces(weftColl_t c) { return c == weftCollReduce || c == weftCollReduceScatter; }
static int rooted(weftColl_t c) { return c == weftCollBroadcast || c == weftCollReduce; }

/* Every count x type (x op) (x root) x in place and out of place of one collective. */
static long collCases(weftComm_t comm, int rank, int n, weftColl_t coll, struct bufs *b) {
  long failures = 0;
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
      for (int o = 0; o < (reduces(coll) ? weftNumOps : 1); o++) {
        if (o == weftAvg && !weftTypeIsFloat(types[t])) continue;
        for (int root = 0; root < (rooted(coll) ? n : 1); root++)
          for (int inPlace = 0; inPlace < 2; inPlace++)
            failures += checkCase(comm, rank, n, coll, counts[c], types[t], (weftRedOp_t)o, root,
                                  inPlace, b);
      }
  return failures;
}

static long allReduceCases(weftComm_t comm, int rank, int n, struct bufs *b) {
  long failures = 0;
  for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
      for (int o = 0; o < weftNumOps; o++)
        if (o != weftAvg || weftTypeIsFloat(types[t]))
          failures += checkAllReduce(comm, rank, n, counts[c], types[t], (weftRedOp_t)o, c & 1,
                                     b->send, b->recv);
  return failures;
}

/* arg: non-NULL to check the AllReduce too. */
static long everyCollBody(weftComm_t comm, int rank, int n, void *arg) {
  struct bufs b;
  size_t cap = (size_t)MAX_COUNT * 8 * (size_t)n + 64;
  b.send = malloc(cap), b.recv = malloc(cap), b.want = malloc(cap);
  static const weftColl_t colls[] = {weftCollBroadcast, weftCollReduce, weftCollAllGather,
                                     weftCollReduceScatter};
  long failures = 0;
  for (size_t i = 0; i < sizeof colls / sizeof colls[0]; i++)
    failures += collCases(comm, rank, n, colls[i], &b);
  if (arg != NULL) failures += allReduceCases(comm, rank, n, &b);
  free(b.send), free(b.recv), free(b.want);
  return failures;
}

/* WEFT_ALGO=hier with 4 KiB slots on every link, on the layout. */
static void everyColl(const struct layout *l, int withAllReduce) {
  setenv("WEFT_ALGO", "hier", 1);
  setenv("WEFT_SHM_SLOT_BYTES", "4096", 1);
  setenv("WEFT_TCP_SLOT_BYTES", "4096", 1);
  long failures = onLayout(l, everyCollBody, withAllReduce ? (void *)l : NULL, 240);
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_SHM_SLOT_BYTES");
  unsetenv("WEFT_TCP_SLOT_BYTES");
  cr_expect_eq(failures, 0, "hosts %s: %ld failures", l->name, failures);
  char names[512];
  int left = segmentsLeft(names, sizeof names);
  cr_expect_eq(left, 0, "%d weft segments left in /dev/shm:%s", left, names);
}

Test(hier_colls, hosts_2x2) { everyColl(&hosts2x2, 0); }
Test(hier_colls, hosts_3x1) { everyColl(&hosts3x1, 1); }
Test(hier_colls, uneven_3_1) { everyColl(&uneven31, 1); }
Test(hier_colls, hosts_2x3) { everyColl(&hosts2x3, 0); }
Test(hier_colls, interleaved_2x2) { everyColl(&interleaved, 0); }
Test(hier_colls, scattered_2_2_1) { everyColl(&scattered, 1); }
/* Windows of one piece: every step of a loop moves one slot, a block's runs cross windows. */
Test(hier_colls, scattered_one_slot_windows) {
  setenv("WEFT_RING_CHUNK_SLOTS", "1", 1);
  everyColl(&scattered, 0);
  unsetenv("WEFT_RING_CHUNK_SLOTS");
}

/* Slots of their default size, counts whose blocks are a few slots: pieces shrink below a
 * slot so the largest block fills a window (hier_blocks.c), every link cutting alike. */
static long shrunkPiecesBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  static const size_t big[] = {40009, 100003};
  static const weftDataType_t some[] = {weftInt32, weftBfloat16};
  static const weftColl_t colls[] = {weftCollAllGather, weftCollReduceScatter};
  struct bufs b;
  size_t cap = (size_t)100003 * 8 * (size_t)n + 64;
  b.send = malloc(cap), b.recv = malloc(cap), b.want = malloc(cap);
  long failures = 0;
  for (int c = 0; c < 2; c++)
    for (int k = 0; k < 2; k++)
      for (int t = 0; t < 2; t++)
        for (int o = 0; o < (colls[c] == weftCollReduceScatter ? weftNumOps : 1); o++)
          for (int inPlace = 0; inPlace < 2; inPlace++)
            if (o != weftAvg || weftTypeIsFloat(some[t]))
              failures += checkCase(comm, rank, n, colls[c], big[k], some[t], (weftRedOp_t)o, 0,
                                    inPlace, &b);
  free(b.send), free(b.recv), free(b.want);
  return failures;
}

static void shrunkPieces(const struct layout *l) {
  setenv("WEFT_ALGO", "hier", 1);
  long failures = onLayout(l, shrunkPiecesBody, NULL, 120);
  unsetenv("WEFT_ALGO");
  cr_expect_eq(failures, 0, "hosts %s: %ld failures", l->name, failures);
}

/* Ranks bound so that each host's packages alternate (process p on CPU p % 2, package p % 2 of
 * the injected 2-socket fixture): the layout chains hosts' ranks 0 2 1 and 4 3 5 and leads
 * with 0 and 4 (test_topo_cost checks that order), so leaders, local indexes and the chains
 * all differ from rank order, and every collective must still be exact. */
Test(hier_colls, package_order_2x3) {
  SKIP_UNLESS("cpu01"); /* processes bind to CPUs 0 and 1 */
  setenv("WEFT_TOPO_FILE", topoFixturePath("topo-2s-2pu.xml"), 1);
  setenv("WEFT_TEST_BIND_ROUND_ROBIN", "2", 1);
  everyColl(&hosts2x3, 1);
  unsetenv("WEFT_TOPO_FILE");
  unsetenv("WEFT_TEST_BIND_ROUND_ROBIN");
}

Test(hier_colls, shrunk_pieces_2x3) { shrunkPieces(&hosts2x3); }
Test(hier_colls, shrunk_pieces_interleaved) { shrunkPieces(&interleaved); }

/* ---- order ---- */

/* Elements of got (elements first.. of the reduction over n ranks) farther from the exact
 * value than n rounding errors of the type allow: n * eps * (sum |x|), or for prod
 * n * eps * |product|. */
static size_t outOfTolerance(const void *got, size_t first, size_t count, weftDataType_t type,
                             weftRedOp_t op, int n) {
  double eps = type == weftFloat32 ? 0x1p-24 : 0x1p-53;
  size_t bad = 0;
  for (size_t i = 0; i < count; i++) {
    long double exact = op == weftProd ? 1 : 0, mag = 0;
    for (int r = 0; r < n; r++) {
      float xf = (float)roundingInput(first + i, r, op);
      double x = type == weftFloat32 ? (double)xf : roundingInput(first + i, r, op);
      exact = op == weftProd ? exact * x : exact + x;
      mag += fabs(x);
    }
    if (op == weftProd) mag = fabsl(exact);
    double v = type == weftFloat32 ? ((const float *)got)[i] : ((const double *)got)[i];
    bad += fabsl((long double)v - exact) > (long double)(n * eps) * mag;
  }
  return bad;
}

static weftResult_t orderCall(weftComm_t comm, weftColl_t coll, const char *send, char *recv,
                              size_t count, weftDataType_t type, weftRedOp_t op, int root) {
  if (coll == weftCollReduce) return weftReduce(send, recv, count, type, op, root, comm, NULL);
  if (coll == weftCollReduceScatter)
    return weftReduceScatter(send, recv, count, type, op, comm, NULL);
  return weftAllReduce(send, recv, count, type, op, comm, NULL);
}

/* Three calls of one case, each rank waiting a different while before each: the same bits
 * every time, within tolerance. 1 if not (or a call failed). */
static long orderCase(weftComm_t comm, int rank, int n, weftColl_t coll, size_t count,
                      weftDataType_t type, weftRedOp_t op, int root, char *send, char *recv,
                      char *first) {
  size_t parts = coll == weftCollReduceScatter ? (size_t)n : 1, bytes = count * weftTypeSize(type);
  int holds = coll != weftCollReduce || rank == root, differs = 0;
  fillRoundingFrom(send, 0, count * parts, type, op, rank);
  for (int call = 0; call < 3; call++) { /* all three, whatever: the ranks stay in step */
    usleep((useconds_t)(((unsigned)rank * 7 + (unsigned)call * 3) % 5) * 1000);
    weftResult_t rc = orderCall(comm, coll, send, call == 0 ? first : recv, count, type, op, root);
    if (rc != weftSuccess) {
      fprintf(stderr, "rank %d: %s failed: %s\n", rank, weftCollName(coll), weftGetLastError(comm));
      return 1;
    }
    if (call > 0 && holds && memcmp(first, recv, bytes) != 0) {
      fprintf(stderr, "rank %d/%d: %s %s %s root %d: call %d gave other bits than the first\n",
              rank, n, weftCollName(coll), weftTypeName(type), weftOpName(op), root, call);
      differs = 1;
    }
  }
  if (differs) return 1;
  size_t off = coll == weftCollReduceScatter ? (size_t)rank * count : 0;
  size_t bad = holds ? outOfTolerance(first, off, count, type, op, n) : 0;
  if (bad > 0)
    fprintf(stderr, "rank %d/%d: %s %s %s root %d: %zu of %zu elements out of tolerance\n", rank,
            n, weftCollName(coll), weftTypeName(type), weftOpName(op), root, bad, count);
  return bad > 0;
}

#define ORDER_COUNT 5003

static long orderBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  static const weftColl_t colls[] = {weftCollReduce, weftCollReduceScatter, weftCollAllReduce};
  static const weftDataType_t ftypes[] = {weftFloat32, weftFloat64};
  static const weftRedOp_t ops[] = {weftSum, weftProd};
  char *send = malloc((size_t)ORDER_COUNT * 8 * (size_t)n), *recv = malloc(ORDER_COUNT * 8),
       *first = malloc(ORDER_COUNT * 8);
  long failures = 0;
  for (int c = 0; c < 3; c++)
    for (int t = 0; t < 2; t++)
      for (int o = 0; o < 2; o++)
        for (int root = 0; root < (colls[c] == weftCollReduce ? n : 1); root++)
          failures += orderCase(comm, rank, n, colls[c], ORDER_COUNT, ftypes[t], ops[o], root,
                                send, recv, first);
  free(send), free(recv), free(first);
  return failures;
}

static void sameBitsEveryCall(const struct layout *l) {
  setenv("WEFT_ALGO", "hier", 1);
  setenv("WEFT_SHM_SLOT_BYTES", "4096", 1);
  setenv("WEFT_TCP_SLOT_BYTES", "4096", 1);
  long failures = onLayout(l, orderBody, NULL, 100);
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_SHM_SLOT_BYTES");
  unsetenv("WEFT_TCP_SLOT_BYTES");
  cr_expect_eq(failures, 0, "hosts %s: %ld failures", l->name, failures);
}

Test(hier_order, hosts_2x3) { sameBitsEveryCall(&hosts2x3); }
Test(hier_order, scattered_2_2_1) { sameBitsEveryCall(&scattered); }

/* ---- faults ---- */

/* Detection takes milliseconds (docs/performance.md); the timeout is 60 s. */
#define DETECT_BOUND_MS 10000

struct faultRank {
  volatile int started, done, rc;
  volatile int64_t atMs;
  volatile long calls;
  char msg[512];
};
struct faultRun {
  struct faultRank r[MAX_RANKS];
  const struct layout *layout;
};

/* The four collectives in turn, each root in turn, 1 .. 4096 floats, for 20 s at most. */
static weftResult_t faultCall(weftComm_t comm, long i, int n, float *a, float *b) {
  size_t count = 1 + (size_t)(i * 37 % 4096);
  int root = (int)(i / 4 % n);
  switch (i % 4) {
    case 0: return weftBroadcast(a, b, count, weftFloat32, root, comm, NULL);
    case 1: return weftReduce(a, b, count, weftFloat32, weftSum, root, comm, NULL);
    case 2: return weftAllGather(a, b, count, weftFloat32, comm, NULL);
    default: return weftReduceScatter(b, a, count, weftFloat32, weftSum, comm, NULL);
  }
}

static void faultRank(void *shared, weftUniqueId id, int rank, int nranks) {
  struct faultRun *run = shared;
  struct faultRank *me = &run->r[rank];
  char host[32];
  snprintf(host, sizeof host, "hierfault%d", run->layout->hostOf[rank]);
  setenv("WEFT_HOSTID", host, 1);
  weftComm_t comm = NULL;
  weftResult_t rc = weftCommInitRank(&comm, nranks, id, rank);
  if (rc == weftSuccess) {
    float *a = calloc(4096 * MAX_RANKS, sizeof *a), *b = calloc(4096 * MAX_RANKS, sizeof *b);
    me->started = 1;
    for (int64_t end = forkedNowMs() + 20000; rc == weftSuccess && forkedNowMs() < end; me->calls++)
      rc = faultCall(comm, me->calls, nranks, a, b);
    free(a), free(b);
  }
  me->atMs = forkedNowMs();
  snprintf(me->msg, sizeof me->msg, "%s", weftGetLastError(rc == weftSuccess ? NULL : comm));
  me->rc = rc;
  if (comm != NULL) weftCommDestroy(comm);
  me->done = 1;
  pause(); /* until the test kills it: the victim's peers must not see it exit first */
  _exit(0);
}

static void waitAll(struct faultRun *run, int n, int except, int timeoutMs, int started) {
  int64_t end = forkedNowMs() + timeoutMs;
  for (int r = 0; r < n; r++)
    while (r != except && !run->r[r].done && !(started && run->r[r].started) && forkedNowMs() < end)
      usleep(1000);
}

static void killDuringHier(const struct layout *l) {
  setenv("WEFT_ALGO", "hier", 1);
  setenv("WEFT_TIMEOUT_MS", "60000", 1);
  struct faultRun *run = forkedShared(sizeof *run);
  run->layout = l;
  pid_t pids[MAX_RANKS];
  forkedLaunch(l->n, faultRank, run, pids);
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_TIMEOUT_MS");
  waitAll(run, l->n, -1, 20000, 1);
  unsigned seed = (unsigned)getpid() ^ (unsigned)forkedNowMs();
  int victim = (int)(seed % (unsigned)l->n);
  usleep(20000 + (seed / 7 % 200) * 1000);
  int64_t killedAt = forkedNowMs();
  kill(pids[victim], SIGKILL);
  waitAll(run, l->n, victim, DETECT_BOUND_MS + 5000, 0);
  for (int r = 0; r < l->n; r++) {
    if (r == victim) continue;
    struct faultRank *rep = &run->r[r];
    char needle[32];
    snprintf(needle, sizeof needle, "rank %d ", victim);
    if (getenv("WEFT_TEST_VERBOSE"))
      fprintf(stderr, "hier dead_peer %s: rank %d: rc %d after %lld ms, %ld calls: %s\n", l->name,
              r, rep->rc, (long long)(rep->atMs - killedAt), rep->calls, rep->msg);
    cr_expect(rep->done, "hosts %s, seed %u: rank %d never returned after rank %d was killed",
              l->name, seed, r, victim);
    cr_expect_eq(rep->rc, weftRemoteError, "hosts %s, seed %u: rank %d got %d after %ld calls: %s",
                 l->name, seed, r, rep->rc, rep->calls, rep->msg);
    cr_expect_lt(rep->atMs - killedAt, DETECT_BOUND_MS, "hosts %s: rank %d took %lld ms", l->name,
                 r, (long long)(rep->atMs - killedAt));
    cr_expect(strstr(rep->msg, needle) != NULL, "hosts %s: rank %d does not name rank %d: %s",
              l->name, r, victim, rep->msg);
  }
  for (int r = 0; r < l->n; r++) kill(pids[r], SIGKILL);
  forkedReap(pids, l->n, 5000);
  char names[512];
  int left = segmentsLeft(names, sizeof names);
  cr_expect_eq(left, 0, "%d weft segments left in /dev/shm:%s", left, names);
}

Test(hier_faults, dead_peer_2x2) { killDuringHier(&hosts2x2); }
Test(hier_faults, dead_peer_scattered_2_2_1) { killDuringHier(&scattered); }

/* Ranks that disagree on a Broadcast's or Reduce's root (the last rank says 1, the others 0).
 * A rank returns 0 when the call failed with weftInvalidUsage naming both calls, 1 when it
 * succeeded with its root's data (a rank whose part of the schedule only met ranks of its own
 * opinion) or failed with weftRemoteError (a peer that named it left), 100 for anything else
 * (wrong data, another error). The run must total at most
 * n - 1 (some rank named the mismatch, none had a wrong result) and, with 2 ranks, 0: both
 * ranks only send in the schedule (the root, or Reduce's chain start) and meet the other's
 * signature only in the token each call passes along the ring (algorithms/hier_rooted.c).
 * Nobody hangs (the harness's limit). The ring's rule (the next call fails on the ranks that
 * finished) is test_collectives.c's hier_root_mismatch_fails. */
static long rootMismatchNamedBody(weftComm_t comm, int rank, int n, void *arg) {
  weftColl_t coll = *(const weftColl_t *)arg;
  float send[64], recv[64];
  for (int i = 0; i < 64; i++) send[i] = (float)(rank + 1), recv[i] = -1;
  int root, named;
  weftResult_t rc = rootDisagreeingCall(comm, rank, n, coll, send, recv, &root, &named);
  if (named) return 0;
  if (rc == weftRemoteError) return 1; /* a peer that named it left: fine for this rank */
  int right = rc == weftSuccess;
  float want = coll == weftCollBroadcast ? (float)(root + 1) : (float)(n * (n + 1) / 2);
  for (int i = 0; i < 64 && right && (coll == weftCollBroadcast || rank == root); i++)
    right = recv[i] == want;
  if (!right)
    fprintf(stderr, "rank %d: %s with root %d: rc %d: %s\n", rank, weftCollName(coll), root, rc,
            weftGetLastError(comm));
  return right ? 1 : 100;
}

Test(hier_faults, root_mismatch_fails) {
  setenv("WEFT_ALGO", "hier", 1);
  setenv("WEFT_TIMEOUT_MS", "20000", 1);
  static const weftColl_t rootedColls[] = {weftCollBroadcast, weftCollReduce};
  const struct layout *layouts[] = {&hosts2x1, &hosts2x2, &hosts3x1, &uneven31, &scattered};
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
      long total = onLayout(layouts[i], rootMismatchNamedBody, (void *)&rootedColls[k], 60);
      cr_expect(total >= 0 && total <= (layouts[i]->n == 2 ? 0 : layouts[i]->n - 1),
                "%s, %s: %ld (0 per rank that named the mismatch, 1 per rank right by its root)",
                layouts[i]->name, weftCollName(rootedColls[k]), total);
    }
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_TIMEOUT_MS");
}

/* ---- tuner ---- */

static const weftColl_t tunedColls[] = {weftCollAllReduce, weftCollBroadcast, weftCollReduce,
                                        weftCollAllGather, weftCollReduceScatter};

/* arg NULL: hier must never be the choice; else the name of the collective it is forced for
 * (WEFT_ALGO=<that>:hier), which must always get it. */
static long choicesBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)n;
  const char *forced = arg;
  long bad = 0;
  for (size_t c = 0; c < sizeof tunedColls / sizeof tunedColls[0]; c++)
    for (size_t count = 2; count <= ((size_t)64 << 20); count *= 4) {
      const char *name = NULL;
      weftColl_t coll = tunedColls[c];
      if (weftCommGetCollAlgorithm(comm, coll, count, weftFloat32, &name) != weftSuccess) return 1;
      int isForced = forced != NULL && strcmp(forced, weftCollName(coll)) == 0;
      int hier = strcmp(name, "hier") == 0;
      if ((forced == NULL && hier) || (isForced && !hier)) {
        if (rank == 0)
          fprintf(stderr, "%s of %zu floats: the tuner picks %s (WEFT_ALGO=%s)\n",
                  weftCollName(coll), count, name, getenv("WEFT_ALGO"));
        bad++;
      }
    }
  return bad;
}

/* One rank per host: every hier schedule is the ring's (the leaders are every rank), and the
 * tuner must not prefer it. */
Test(hier_tuner, one_rank_per_host_never_hier) {
  unsetenv("WEFT_ALGO");
  cr_expect_eq(onLayout(&hosts3x1, choicesBody, NULL, 60), 0);
}

/* WEFT_ALGO=allgather:hier forces it for AllGather at every size. */
Test(hier_tuner, forced_for_one_collective) {
  setenv("WEFT_ALGO", "allgather:hier", 1);
  cr_expect_eq(onLayout(&hosts2x2, choicesBody, (void *)"AllGather", 60), 0);
  unsetenv("WEFT_ALGO");
}
