/* AllReduce correctness: every algorithm forced in turn (and the tuner's choice) x rank counts
 * x counts {0, 1, 2, primes, not a multiple of a slot, up to 64 MiB} x every datatype and op x
 * in-place and out-of-place, ranks as threads, as processes, and mixed. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "reduce.h"

static const char *const algos[] = {"ring", "direct", "tree", ""};
#define NALGOS 4

static void runMatrix(int procs, int threads, const struct collMatrix *m) {
  for (int a = 0; a < NALGOS; a++) {
    setenv("WEFT_ALGO", algos[a], 1);
    if (algos[a][0] == '\0') unsetenv("WEFT_ALGO");
    long failures = runRanks(procs, threads, collMatrixBody, (void *)m, 600);
    cr_assert_eq(failures, 0, "%ld failures with %d x %d ranks, WEFT_ALGO=%s", failures, procs,
                 threads, algos[a]);
  }
  unsetenv("WEFT_ALGO");
  char names[512];
  int left = segmentsLeft(names, sizeof names);
  cr_assert_eq(left, 0, "%d weft segments left in /dev/shm:%s", left, names);
}

static const weftDataType_t allTypes[] = {weftInt8,  weftUint8,   weftInt32,   weftUint32,
                                          weftInt64, weftUint64,  weftFloat16, weftFloat32,
                                          weftFloat64, weftBfloat16};
static const weftRedOp_t allOps[] = {weftSum, weftProd, weftMax, weftMin, weftAvg};
static const size_t smallCounts[] = {0, 1, 2, 3, 7, 31, 1021, 4099, 65537};

static const struct collMatrix everyTypeAndOp = {smallCounts, 9, allTypes, 10, allOps, 5};

#define EVERY_TYPE_TEST(name, procs, threads) \
  Test(every_type_op, name, .timeout = 600) { runMatrix(procs, threads, &everyTypeAndOp); }

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

/* Large buffers: beyond the staging chunk, the ring's loop, and up to 64 MiB. */
static const size_t largeCounts[] = {262147, (1u << 20) + 3, 16u << 20};
static const weftDataType_t largeTypes[] = {weftFloat32, weftInt8, weftBfloat16};
static const weftRedOp_t largeOps[] = {weftSum};
static const struct collMatrix large = {largeCounts, 3, largeTypes, 3, largeOps, 1};
static const weftRedOp_t avgOps[] = {weftAvg, weftMax};
static const weftDataType_t doubleType[] = {weftFloat64};
static const size_t midCounts[] = {(1u << 20) + 7};
static const struct collMatrix mid = {midCounts, 1, doubleType, 1, avgOps, 2};

Test(large, procs_2, .timeout = 900) { runMatrix(2, 1, &large); runMatrix(2, 1, &mid); }
Test(large, procs_3, .timeout = 900) { runMatrix(3, 1, &large); }
Test(large, procs_4, .timeout = 900) { runMatrix(4, 1, &mid); }
Test(large, threads_4, .timeout = 900) { runMatrix(1, 4, &large); }
Test(large, threads_8, .timeout = 900) { runMatrix(1, 8, &mid); }

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

Test(back_to_back, small_10000, .timeout = 600) {
  for (int a = 0; a < NALGOS; a++) {
    setenv("WEFT_ALGO", algos[a], 1);
    if (algos[a][0] == '\0') unsetenv("WEFT_ALGO");
    cr_assert_eq(runRanks(4, 1, backToBackBody, NULL, 300), 0, "processes, WEFT_ALGO=%s", algos[a]);
    cr_assert_eq(runRanks(1, 3, backToBackBody, NULL, 300), 0, "threads, WEFT_ALGO=%s", algos[a]);
  }
  unsetenv("WEFT_ALGO");
}

/* Several "hosts" on this machine (WEFT_HOSTID differs per process): ring, tree and
 * hierarchical over shared memory inside a host and TCP between hosts, and the tuner. */
static const char *const hostAlgos[] = {"ring", "tree", "hier", ""};
static const size_t hostCounts[] = {0, 1, 2, 31, 4099, 300007};
static const weftDataType_t hostTypes[] = {weftInt8, weftUint32, weftInt64, weftFloat16,
                                           weftFloat32, weftFloat64, weftBfloat16};
static const struct collMatrix hostMatrix = {hostCounts, 6, hostTypes, 7, allOps, 5};

static void runOnHosts(int hosts, int perHost) {
  for (int a = 0; a < 4; a++) {
    if (perHost == 1 && strcmp(hostAlgos[a], "hier") == 0) continue; /* needs 2+ per host */
    setenv("WEFT_ALGO", hostAlgos[a], 1);
    if (hostAlgos[a][0] == '\0') unsetenv("WEFT_ALGO");
    long failures = runRanksOnHosts(hosts, perHost, collMatrixBody, (void *)&hostMatrix, 600);
    cr_assert_eq(failures, 0, "%ld failures on %d hosts x %d ranks, WEFT_ALGO=%s", failures, hosts,
                 perHost, hostAlgos[a]);
  }
  unsetenv("WEFT_ALGO");
  char names[512];
  int left = segmentsLeft(names, sizeof names);
  cr_assert_eq(left, 0, "%d weft segments left in /dev/shm:%s", left, names);
}

Test(emulated_hosts, hosts_2x1, .timeout = 900) { runOnHosts(2, 1); }
Test(emulated_hosts, hosts_2x2, .timeout = 900) { runOnHosts(2, 2); }
Test(emulated_hosts, hosts_3x2, .timeout = 900) { runOnHosts(3, 2); }
