/* The hierarchical algorithm's Broadcast, Reduce, AllGather and ReduceScatter (and its
 * AllReduce as Reduce + Broadcast where hosts differ in size or hold one rank), forced with
 * WEFT_ALGO=hier, on emulated hosts (WEFT_HOSTID per rank process: shm inside a host, tcp
 * between hosts) of every shape it must handle: 2 x 2, 3 x 1, 3 + 1 ranks, 2 x 3, a host's ranks
 * interleaved with another's (0 1 0 1), and three hosts of 2, 2 and 1 ranks placed out of order.
 * - results: counts {0, 1, 2, 7, 1021, 4099} with 4 KiB slots (so parts cross pieces, a block
 *   several windows), a few types including fp16, bf16 and both fp8 formats, every op, every
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
#include "forked.h"
#include "harness.h"
#include "reduce.h"

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
