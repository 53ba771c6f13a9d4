/* AllReduce correctness: every registered algorithm forced in turn (and the tuner's choice) x
 * rank counts 1-8 x counts {0, 1, 2, primes, not a multiple of a slot, up to 64 MiB} x every
 * datatype and op x in-place and out-of-place, ranks as threads, as processes, mixed, and on
 * emulated hosts. Every result is checked exactly (tests/common/pattern.c). An algorithm that
 * cannot run on a shape (tests/common/harness.c: algoRunsOn) must be refused there. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "core.h"
#include "harness.h"
#include "reduce.h"

TestSuite(every_type_op, .timeout = 600);
TestSuite(new_shapes, .timeout = 600);
TestSuite(large, .timeout = 600);
TestSuite(back_to_back, .timeout = 300);
TestSuite(emulated_hosts, .timeout = 600);

/* Forces algorithm a of the registry (a == weftAlgoCount(): the tuner decides); its name. */
static const char *forceAlgo(int a) {
  if (weftAlgos[a] == NULL) {
    unsetenv("WEFT_ALGO");
    return "tuner";
  }
  setenv("WEFT_ALGO", weftAlgos[a]->name, 1);
  return weftAlgos[a]->name;
}

/* Runs the matrix with every registered algorithm and the tuner on hosts x procs x threads
 * ranks (hosts > 0: emulated hosts, one thread per process); an algorithm that cannot run on
 * the shape must be refused by every rank. */
static void runEveryAlgo(int hosts, int procs, int threads, const struct collMatrix *m) {
  int perHost = hosts > 0 ? procs : procs * threads, nHosts = hosts > 0 ? hosts : 1;
  collMatrixPrepare(m, perHost * nHosts);
  for (int a = 0; a <= weftAlgoCount(); a++) {
    const char *name = forceAlgo(a);
    char why[160];
    int runs = a == weftAlgoCount() || algoRunsOn(name, nHosts, perHost, why, sizeof why);
    expectRefusal(!runs);
    long failures = hosts > 0 ? runRanksOnHosts(hosts, procs, collMatrixBody, (void *)m, 600)
                              : runRanks(procs, threads, collMatrixBody, (void *)m, 600);
    expectRefusal(0);
    cr_assert_eq(failures, 0, "%ld failures with %d host(s) x %d x %d ranks, WEFT_ALGO=%s%s%s",
                 failures, nHosts, procs, threads, name, runs ? "" : " (must be refused: ",
                 runs ? "" : why);
  }
  unsetenv("WEFT_ALGO");
  char names[512];
  int left = segmentsLeft(names, sizeof names);
  cr_assert_eq(left, 0, "%d weft segments left in /dev/shm:%s", left, names);
}

static void runMatrix(int procs, int threads, const struct collMatrix *m) {
  runEveryAlgo(0, procs, threads, m);
}

static const weftDataType_t allTypes[] = {weftInt8,  weftUint8,   weftInt32,   weftUint32,
                                          weftInt64, weftUint64,  weftFloat16, weftFloat32,
                                          weftFloat64, weftBfloat16, weftFloat8e4m3,
                                          weftFloat8e5m2};
static const weftRedOp_t allOps[] = {weftSum, weftProd, weftMax, weftMin, weftAvg};
static const size_t smallCounts[] = {0, 1, 2, 3, 7, 31, 1021, 4099, 65537};

static const struct collMatrix everyTypeAndOp = {smallCounts, 9, allTypes, 12, allOps, 5};

#define EVERY_TYPE_TEST(name, procs, threads) \
  Test(every_type_op, name) { runMatrix(procs, threads, &everyTypeAndOp); }

EVERY_TYPE_TEST(threads_1, 1, 1)
EVERY_TYPE_TEST(threads_2, 1, 2)
EVERY_TYPE_TEST(threads_3, 1, 3)
EVERY_TYPE_TEST(threads_4, 1, 4)
EVERY_TYPE_TEST(threads_8, 1, 8)
EVERY_TYPE_TEST(procs_2, 2, 1)
EVERY_TYPE_TEST(procs_3, 3, 1)
EVERY_TYPE_TEST(procs_4, 4, 1)
EVERY_TYPE_TEST(procs_8, 8, 1)
EVERY_TYPE_TEST(mixed_2x2, 2, 2)

/* WEFT_NT_COPY_BYTES=1: every copy into recvbuff that a large AllReduce streams past the cache
 * (lib/copy.h) streams at every count, type and op (the large suite below streams at the
 * default threshold). */
static void streamingMatrix(int procs, int threads) {
  setenv("WEFT_NT_COPY_BYTES", "1", 1);
  runMatrix(procs, threads, &everyTypeAndOp);
  unsetenv("WEFT_NT_COPY_BYTES");
}

Test(every_type_op, streaming_threads_3) { streamingMatrix(1, 3); }
Test(every_type_op, streaming_procs_3) { streamingMatrix(3, 1); }

/* 5, 6 and 7 ranks and a 3 x 2 mix, on a subset that keeps what differs with the rank count
 * (chunks that do not divide evenly, tree shapes, slices of the direct algorithm): one type of
 * each size and kind, every op, counts below, at and past the slot and staging sizes. */
static const weftDataType_t someTypes[] = {weftInt8, weftUint32, weftInt64, weftFloat16,
                                           weftFloat32, weftFloat64, weftBfloat16,
                                           weftFloat8e4m3};
static const size_t someCounts[] = {0, 1, 7, 1021, 65537};
static const struct collMatrix someTypesAndOps = {someCounts, 5, someTypes, 8, allOps, 5};

#define NEW_SHAPE_TEST(name, procs, threads) \
  Test(new_shapes, name) { runMatrix(procs, threads, &someTypesAndOps); }

NEW_SHAPE_TEST(threads_5, 1, 5)
NEW_SHAPE_TEST(threads_6, 1, 6)
NEW_SHAPE_TEST(threads_7, 1, 7)
NEW_SHAPE_TEST(procs_5, 5, 1)
NEW_SHAPE_TEST(procs_6, 6, 1)
NEW_SHAPE_TEST(procs_7, 7, 1)
NEW_SHAPE_TEST(mixed_3x2, 3, 2)

/* Large buffers: beyond the staging chunk, the ring's loop, and up to 64 MiB. */
static const size_t largeCounts[] = {262147, (1u << 20) + 3, 16u << 20};
static const weftDataType_t largeTypes[] = {weftFloat32, weftInt8, weftBfloat16};
static const weftRedOp_t largeOps[] = {weftSum};
static const struct collMatrix large = {largeCounts, 3, largeTypes, 3, largeOps, 1};
static const weftRedOp_t avgOps[] = {weftAvg, weftMax};
static const weftDataType_t doubleType[] = {weftFloat64};
static const size_t midCounts[] = {(1u << 20) + 7};
static const struct collMatrix mid = {midCounts, 1, doubleType, 1, avgOps, 2};

Test(large, procs_2) { runMatrix(2, 1, &large); runMatrix(2, 1, &mid); }
Test(large, procs_3) { runMatrix(3, 1, &large); }
Test(large, procs_4) { runMatrix(4, 1, &mid); }
Test(large, threads_4) { runMatrix(1, 4, &large); }
Test(large, threads_8) { runMatrix(1, 8, &mid); }

/* 10,000 back-to-back small AllReduces, each checked. */
static long backToBackBody(weftComm_t comm, int rank, int nranks, void *arg) {
  (void)arg;
  long failures = 0;
  for (int it = 0; it < 10000; it++) {
    int32_t v[2] = {rank + it, it}, out[2];
    if (weftAllReduce(v, out, 2, weftInt32, weftSum, comm, NULL) != weftSuccess) return failures + 1;
    int32_t expect0 = nranks * it + nranks * (nranks - 1) / 2;
    failures += out[0] != expect0 || out[1] != nranks * it;
  }
  return failures;
}

Test(back_to_back, small_10000) {
  for (int a = 0; a <= weftAlgoCount(); a++) {
    const char *name = forceAlgo(a);
    char why[160];
    if (a < weftAlgoCount() && !algoRunsOn(name, 1, 4, why, sizeof why)) continue; /* the matrix checks the refusal */
    cr_assert_eq(runRanks(4, 1, backToBackBody, NULL, 300), 0, "processes, WEFT_ALGO=%s", name);
    cr_assert_eq(runRanks(1, 3, backToBackBody, NULL, 300), 0, "threads, WEFT_ALGO=%s", name);
  }
  unsetenv("WEFT_ALGO");
}

/* Several "hosts" on this machine (WEFT_HOSTID differs per process): every algorithm over
 * shared memory inside a host and TCP between hosts, and the tuner. */
static const size_t hostCounts[] = {0, 1, 2, 31, 4099, 300007};
static const weftDataType_t hostTypes[] = {weftInt8, weftUint32, weftInt64, weftFloat16,
                                           weftFloat32, weftFloat64, weftBfloat16,
                                           weftFloat8e5m2};
static const struct collMatrix hostMatrix = {hostCounts, 6, hostTypes, 8, allOps, 5};

Test(emulated_hosts, hosts_2x1) { runEveryAlgo(2, 1, 1, &hostMatrix); }
Test(emulated_hosts, hosts_2x2) { runEveryAlgo(2, 2, 1, &hostMatrix); }
Test(emulated_hosts, hosts_3x2) { runEveryAlgo(3, 2, 1, &hostMatrix); }
