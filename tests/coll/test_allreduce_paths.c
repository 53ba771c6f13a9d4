/* AllReduce properties beyond the right values (test_allreduce.c checks those):
 * - every rank gets bit-identical results, with inputs whose sums round at every step, from
 *   every registered algorithm (docs/algorithms.md promises it for each) and the tuner, on
 *   one host and on emulated hosts;
 * - both data paths of the direct algorithm between processes run and are right: reading
 *   peers' buffers in place (cross-memory attach, WEFT_DIRECT_CMA=2) and staging through the
 *   shared segment (WEFT_DIRECT_CMA=0), each confirmed by the algorithm's INIT log; by
 *   default (1, each call by cost) every rank holds the same measured peer copy speed. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "algo.h"
#include "caps.h"
#include "core.h"
#include "harness.h"
#include "ranklogs.h"

TestSuite(identical_bits, .timeout = 600);
TestSuite(direct_paths, .timeout = 300);

/* Below and above the direct algorithm's one-synchronisation size and its 1 MiB in-place
 * threshold (WEFT_DIRECT_CMA_MIN_BYTES), not multiples of a slot. */
static const size_t bitsCounts[] = {1021, 65537, 300007};
static const weftDataType_t floatTypes[] = {weftFloat16, weftFloat32, weftFloat64, weftBfloat16};
static const weftRedOp_t roundingOps[] = {weftSum, weftProd, weftAvg};
static const struct collMatrix bitsMatrix = {bitsCounts, 3, floatTypes, 4, roundingOps, 3};

/* hosts 0: procs x threads ranks on this host; else hosts x procs processes. */
static void identicalOnEveryRank(int hosts, int procs, int threads) {
  int nranks = hosts > 0 ? hosts * procs : procs * threads;
  int nHosts = hosts > 0 ? hosts : 1, perHost = nranks / nHosts;
  for (int a = 0; a <= weftAlgoCount(); a++) {
    const char *name = a < weftAlgoCount() ? weftAlgos[a]->name : "tuner";
    char why[160];
    if (a < weftAlgoCount() && !algoRunsOn(name, nHosts, perHost, why, sizeof why)) continue;
    if (a < weftAlgoCount()) setenv("WEFT_ALGO", name, 1);
    else unsetenv("WEFT_ALGO");
    struct bitsRun run = {&bitsMatrix, bitsBoardNew(nranks, bitsBoardCases(&bitsMatrix))};
    cr_assert_not_null(run.board);
    long failures = hosts > 0 ? runRanksOnHosts(hosts, procs, identicalBitsBody, &run, 300)
                              : runRanks(procs, threads, identicalBitsBody, &run, 300);
    char msg[2048];
    int differ = bitsBoardCheck(run.board, &bitsMatrix, msg, sizeof msg);
    bitsBoardFree(run.board);
    cr_assert_eq(failures, 0, "WEFT_ALGO=%s: %ld failures", name, failures);
    cr_assert_eq(differ, 0, "WEFT_ALGO=%s, %d host(s) x %d ranks: ranks got different bits in %d cases:%s",
                 name, nHosts, perHost, differ, msg);
  }
  unsetenv("WEFT_ALGO");
}

Test(identical_bits, threads_4) { identicalOnEveryRank(0, 1, 4); }
Test(identical_bits, procs_3) { identicalOnEveryRank(0, 3, 1); }
Test(identical_bits, procs_3_staged) {
  setenv("WEFT_DIRECT_CMA", "0", 1);
  identicalOnEveryRank(0, 3, 1);
}
Test(identical_bits, mixed_2x2) { identicalOnEveryRank(0, 2, 2); }
Test(identical_bits, hosts_2x2) { identicalOnEveryRank(2, 2, 1); }
Test(identical_bits, hosts_3x1) { identicalOnEveryRank(3, 1, 1); }

/* ---- the direct algorithm's two paths between processes ---- */

/* Counts from below the in-place threshold to several chunks past it, every op on floats and
 * integers: exact results (tests/common/pattern.c) on both paths. */
static const size_t directCounts[] = {4099, 262147, (1u << 20) + 3};
static const weftDataType_t directTypes[] = {weftInt32, weftFloat32, weftBfloat16, weftFloat64};
static const weftRedOp_t directOps[] = {weftSum, weftMax, weftAvg};
static const struct collMatrix directMatrix = {directCounts, 3, directTypes, 4, directOps, 3};

static void directPath(const char *cma, const char *expectLog, int *differ) {
  char base[64];
  snprintf(base, sizeof base, "weft-direct-path-%d", (int)getpid());
  setenv("WEFT_ALGO", "direct", 1);
  setenv("WEFT_DIRECT_CMA", cma, 1);
  setenv("WEFT_DEBUG", "INFO", 1);
  setenv("WEFT_DEBUG_SUBSYS", "SHM", 1);
  rankLogsTo(base);
  collMatrixPrepare(&directMatrix, 3);
  long failures = runRanks(3, 1, collMatrixBody, (void *)&directMatrix, 300);
  unsetenv("WEFT_DEBUG");
  unsetenv("WEFT_DEBUG_FILE");
  int lines = rankLogLines(base, expectLog, NULL, 0, differ, 1);
  cr_assert_eq(failures, 0, "WEFT_DIRECT_CMA=%s: %ld failures", cma, failures);
  cr_assert_eq(lines, 3, "WEFT_DIRECT_CMA=%s: %d of 3 ranks logged \"%s\"", cma, lines, expectLog);
}

Test(direct_paths, cross_memory_attach) {
  SKIP_UNLESS("cma");
  directPath("2", "direct: 3 ranks, cross-memory attach", NULL);
}

Test(direct_paths, staged) { directPath("0", "direct: 3 ranks, staging only", NULL); }

/* By default each call takes the path its cost picks at the copy speed measured at init: every
 * rank must hold the same speed (the slowest rank's), or ranks would take different paths. */
Test(direct_paths, by_cost_every_rank_agrees) {
  SKIP_UNLESS("cma");
  int differ = 0;
  directPath("1", "cross-memory attach (peer copies at", &differ);
  cr_assert_eq(differ, 0, "%d ranks logged another peer copy speed than the first", differ);
}
