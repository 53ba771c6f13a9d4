/* The hierarchical AllReduce's NUMA level (algorithms/hier_numa.c, WEFT_ALGO=hiernuma) on
 * hosts of two NUMA nodes: the injected fixture topo-1s2n-2pu.xml (one package, PU 0 on NUMA
 * node 0 and PU 1 on node 1) with rank process p bound to CPU p % 2
 * (WEFT_TEST_BIND_ROUND_ROBIN), so a host's ranks alternate between its two nodes and every
 * level's ring differs from rank order.
 * - results: every type and op, counts 0, 1, primes and past a slot, in and out of place
 *   (checkAllReduce's exact references), on 1 host of 2 x 2 (processes; processes x threads),
 *   2 x 3 and 2 x 4 ranks, and on 2 emulated hosts of 2 x 2;
 * - fallback: where the layout is not g >= 2 NUMA nodes of m >= 2 ranks on every host (one NUMA
 *   node; nodes of different sizes; one rank per node) forcing it is refused at init;
 * - tuner: on the fixture the tuner picks it for a large AllReduce on one host of 2 x 4. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caps.h"
#include "harness.h"
#include "topofix.h"

TestSuite(hier_numa, .timeout = 300);

static const size_t counts[] = {0, 1, 2, 7, 1021, 4099, 40009};
static const weftDataType_t types[] = {weftInt8,    weftUint8,    weftInt32,       weftUint32,
                                       weftInt64,   weftUint64,   weftFloat16,     weftFloat32,
                                       weftFloat64, weftBfloat16, weftFloat8e4m3, weftFloat8e5m2};
static const weftRedOp_t ops[] = {weftSum, weftProd, weftMax, weftMin, weftAvg};
static const struct collMatrix matrix = {counts, 7, types, 12, ops, 5};

/* Ranks check that hiernuma is what runs the matrix, then run it. */
static long numaBody(weftComm_t comm, int rank, int n, void *arg) {
  const char *name = NULL;
  weftResult_t rc = weftCommGetCollAlgorithm(comm, weftCollAllReduce, 1 << 20, weftFloat32, &name);
  if (rc != weftSuccess || name == NULL || strcmp(name, "hiernuma") != 0) {
    fprintf(stderr, "rank %d: AllReduce runs on %s (%s)\n", rank, name ? name : "?",
            weftGetLastError(comm));
    return 1;
  }
  return collMatrixBody(comm, rank, n, arg);
}

static void onFixture(const char *algo) {
  setenv("WEFT_TOPO_FILE", topoFixturePath("topo-1s2n-2pu.xml"), 1);
  setenv("WEFT_TEST_BIND_ROUND_ROBIN", "2", 1);
  if (algo != NULL) setenv("WEFT_ALGO", algo, 1);
  setenv("WEFT_SHM_SLOT_BYTES", "4096", 1); /* 40009 elements cross many pieces */
}

static void offFixture(void) {
  unsetenv("WEFT_TOPO_FILE");
  unsetenv("WEFT_TEST_BIND_ROUND_ROBIN");
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_SHM_SLOT_BYTES");
  unsetenv("WEFT_TCP_SLOT_BYTES");
}

static void numaMatrix(int hosts, int procs, int threads) {
  SKIP_UNLESS("cpu01"); /* processes bind to CPUs 0 and 1 */
  onFixture("hiernuma");
  setenv("WEFT_TCP_SLOT_BYTES", "4096", 1);
  collMatrixPrepare(&matrix, (hosts > 1 ? hosts : 1) * procs * threads);
  long failures = hosts > 1 ? runRanksOnHosts(hosts, procs, numaBody, (void *)&matrix, 240)
                            : runRanks(procs, threads, numaBody, (void *)&matrix, 240);
  offFixture();
  cr_expect_eq(failures, 0, "%d host(s) of %d x %d ranks: %ld failures", hosts, procs, threads,
               failures);
  char names[512];
  int left = segmentsLeft(names, sizeof names);
  cr_expect_eq(left, 0, "%d weft segments left in /dev/shm:%s", left, names);
}

Test(hier_numa, one_host_2x2) { numaMatrix(1, 4, 1); }
/* process 0 (CPU 0) holds ranks 0 and 1, process 1 (CPU 1) ranks 2 and 3 */
Test(hier_numa, one_host_procs_x_threads) { numaMatrix(1, 2, 2); }
Test(hier_numa, one_host_2x3) { numaMatrix(1, 6, 1); }
Test(hier_numa, one_host_2x4) { numaMatrix(1, 8, 1); }
Test(hier_numa, two_hosts_2x2) { numaMatrix(2, 4, 1); }

/* Forcing hiernuma where it cannot run is refused at init (test_settings checks the reason
 * on one NUMA node); nothing of the refused communicator stays behind. */
static void refused(int procs, int withFixture) {
  if (withFixture) onFixture("hiernuma");
  else setenv("WEFT_ALGO", "hiernuma", 1);
  expectRefusal(1);
  long failures = runRanks(procs, 1, NULL, NULL, 60);
  expectRefusal(0);
  offFixture();
  cr_expect_eq(failures, 0, "%d ranks: %ld inits not refused as expected", procs, failures);
  char names[512];
  int left = segmentsLeft(names, sizeof names);
  cr_expect_eq(left, 0, "%d weft segments left in /dev/shm:%s", left, names);
}

Test(hier_numa, refused_on_one_numa_node) { refused(4, 0); }
/* 3 ranks: 2 on node 0, 1 on node 1 */
Test(hier_numa, refused_on_uneven_nodes) {
  SKIP_UNLESS("cpu01");
  refused(3, 1);
}
/* 2 ranks, one per node: hier's or the ring's case */
Test(hier_numa, refused_with_one_rank_per_node) {
  SKIP_UNLESS("cpu01");
  refused(2, 1);
}

/* Without WEFT_ALGO, the tuner's choice on the fixture for a large AllReduce on one host. */
static long tunedBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)n;
  const char *name = NULL;
  size_t count = *(const size_t *)arg;
  weftResult_t rc = weftCommGetCollAlgorithm(comm, weftCollAllReduce, count, weftFloat32, &name);
  if (rc != weftSuccess || name == NULL || strcmp(name, "hiernuma") != 0) {
    fprintf(stderr, "rank %d: the tuner picks %s for %zu floats\n", rank, name ? name : "?", count);
    return 1;
  }
  return 0;
}

Test(hier_numa, tuner_picks_it_for_large_calls) {
  SKIP_UNLESS("cpu01");
  onFixture(NULL);
  unsetenv("WEFT_SHM_SLOT_BYTES");
  static const size_t count = (size_t)16 << 20;
  long failures = runRanks(8, 1, tunedBody, (void *)&count, 120);
  offFixture();
  cr_expect_eq(failures, 0, "%ld ranks did not choose hiernuma", failures);
}
