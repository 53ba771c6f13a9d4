/* The direct algorithm's choice between reading peers in place and staging through the
 * segment, made from timed trials (algorithms/direct_learn.c), between processes
 * (WEFT_DIRECT_CMA=1, the default):
 * - every collective with both paths (AllReduce, Broadcast, Reduce, AllGather, ReduceScatter,
 *   AlltoAll), called often enough to run its trials (7 calls of a size class with
 *   WEFT_DIRECT_CMA_TRIALS=2) and then on the choice: every call's result is exact, and rank 0
 *   alone reports one choice per collective, with both paths' times;
 * - WEFT_DIRECT_CMA_TRIALS=0: the same calls exact, and no trial reported;
 * - ranks with different WEFT_DIRECT_CMA_TRIALS: init fails on every rank with
 *   weftInvalidUsage naming the setting (they would take different paths), and no segment is
 *   left behind. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "caps.h"
#include "collcases.h"
#include "collname.h"
#include "forked.h"
#include "harness.h"
#include "ranklogs.h"

TestSuite(direct_learn, .timeout = 300);

#define NPROCS 3
#define CALLS_PER_CLASS 10 /* past the default trials (7 calls) and the call between */

/* 50021 int32 (195 KiB a rank): one size class per collective, above the one-round size. */
static const size_t learnCounts[] = {50021};
static const weftDataType_t learnTypes[] = {weftInt32};
static const weftRedOp_t learnOps[] = {weftSum};
static const struct collMatrix allReduceMatrix = {learnCounts, 1, learnTypes, 1, learnOps, 1};

/* Each sweep's calls (ops x roots x in place and out) repeated to CALLS_PER_CLASS at least. */
static const struct learnCase {
  struct collSweep sweep;
  int reps;
} cases[] = {
  {{weftCollBroadcast, learnCounts, 1, learnTypes, 1, 0}, 2},     /* 3 roots x 2 */
  {{weftCollReduce, learnCounts, 1, learnTypes, 1, 0}, 1},        /* 4 ops x 3 roots x 2 */
  {{weftCollAllGather, learnCounts, 1, learnTypes, 1, 0}, 5},     /* 2 */
  {{weftCollReduceScatter, learnCounts, 1, learnTypes, 1, 0}, 2}, /* 4 ops x 2 */
  {{weftCollAlltoAll, learnCounts, 1, learnTypes, 1, 0}, 10},     /* 1 */
};
#define NCASES (sizeof cases / sizeof cases[0])

static long learnBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  long failures = 0;
  for (int rep = 0; rep < CALLS_PER_CLASS / 2; rep++) /* in place and out */
    failures += collMatrixBody(comm, rank, n, (void *)&allReduceMatrix);
  for (size_t c = 0; c < NCASES; c++)
    for (int rep = 0; rep < cases[c].reps; rep++)
      failures += collSweepBody(comm, rank, n, (void *)&cases[c].sweep);
  return failures;
}

/* Runs the body on NPROCS processes with WEFT_DIRECT_CMA_TRIALS=trials; returns the choices
 * reported per collective (by coll) in reported. */
static void runLearning(const char *trials, int reported[weftCollAlltoAll + 1]) {
  char base[64];
  snprintf(base, sizeof base, "weft-direct-learn-%d", (int)getpid());
  setenv("WEFT_ALGO", "direct", 1);
  setenv("WEFT_DIRECT_CMA", "1", 1);
  setenv("WEFT_DIRECT_CMA_MIN_BYTES", "0", 1);
  setenv("WEFT_DIRECT_CMA_TRIALS", trials, 1);
  setenv("WEFT_DEBUG", "INFO", 1);
  setenv("WEFT_DEBUG_SUBSYS", "TUNE", 1);
  rankLogsTo(base);
  collMatrixPrepare(&allReduceMatrix, NPROCS);
  for (size_t c = 0; c < NCASES; c++) collSweepPrepare(&cases[c].sweep, NPROCS);
  long failures = runRanks(NPROCS, 1, learnBody, NULL, 240);
  unsetenv("WEFT_DEBUG");
  unsetenv("WEFT_DEBUG_SUBSYS");
  unsetenv("WEFT_DEBUG_FILE");
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_DIRECT_CMA");
  unsetenv("WEFT_DIRECT_CMA_MIN_BYTES");
  unsetenv("WEFT_DIRECT_CMA_TRIALS");
  cr_expect_eq(failures, 0, "WEFT_DIRECT_CMA_TRIALS=%s: %ld failures", trials, failures);
  for (int c = 0; c <= weftCollAlltoAll; c++) {
    char needle[64], line[1024] = "";
    snprintf(needle, sizeof needle, "direct: %s of ", weftCollName((weftColl_t)c));
    reported[c] = rankLogLines(base, needle, line, sizeof line, NULL, 0);
    double staged = 0, inPlace = 0;
    const char *times = strstr(line, "bytes: staged ");
    if (reported[c] > 0)
      cr_expect(times != NULL && sscanf(times, "bytes: staged %lf us, in place %lf us", &staged,
                                        &inPlace) == 2 && staged > 0 && inPlace > 0,
                "%s: a choice without both paths' times: %s", needle, line);
  }
  rankLogLines(base, "", NULL, 0, NULL, 1);
}

Test(direct_learn, trials_choose_once_per_class) {
  SKIP_UNLESS("cma");
  int reported[weftCollAlltoAll + 1];
  runLearning("2", reported);
  for (int c = 0; c <= weftCollAlltoAll; c++)
    cr_expect_eq(reported[c], 1, "%s: %d choices reported (rank 0 alone reports its one class)",
                 weftCollName((weftColl_t)c), reported[c]);
}

Test(direct_learn, no_trials) {
  SKIP_UNLESS("cma");
  int reported[weftCollAlltoAll + 1];
  runLearning("0", reported);
  for (int c = 0; c <= weftCollAlltoAll; c++)
    cr_expect_eq(reported[c], 0, "%s: %d choices reported with WEFT_DIRECT_CMA_TRIALS=0",
                 weftCollName((weftColl_t)c), reported[c]);
}

/* ---- different settings ---- */

struct initReport {
  volatile int done, rc;
  char msg[512];
};

static void initWithOwnTrials(void *arg, weftUniqueId id, int rank, int nranks) {
  struct initReport *me = (struct initReport *)arg + rank;
  setenv("WEFT_DIRECT_CMA_TRIALS", rank == 1 ? "3" : "2", 1);
  weftComm_t comm;
  me->rc = weftCommInitRank(&comm, nranks, id, rank);
  snprintf(me->msg, sizeof me->msg, "%s", weftGetLastError(me->rc == weftSuccess ? comm : NULL));
  if (me->rc == weftSuccess) weftCommDestroy(comm);
  me->done = 1;
  _exit(0);
}

Test(direct_learn, different_trials_refused_on_every_rank) {
  setenv("WEFT_ALGO", "direct", 1);
  setenv("WEFT_TIMEOUT_MS", "20000", 1);
  struct initReport *r = forkedShared(sizeof *r * NPROCS);
  pid_t pids[NPROCS];
  forkedLaunch(NPROCS, initWithOwnTrials, r, pids);
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_TIMEOUT_MS");
  forkedReap(pids, NPROCS, 30000);
  for (int k = 0; k < NPROCS; k++) {
    cr_expect(r[k].done, "rank %d did not return from init", k);
    cr_expect_eq(r[k].rc, weftInvalidUsage, "rank %d: init gave %d: %s", k, r[k].rc, r[k].msg);
    cr_expect(strstr(r[k].msg, "WEFT_DIRECT_CMA_TRIALS must be the same on every rank") != NULL,
              "rank %d's message does not name the setting: %s", k, r[k].msg);
  }
  munmap(r, sizeof *r * NPROCS);
  char names[512];
  int left = segmentsLeft(names, sizeof names);
  cr_expect_eq(left, 0, "%d weft segments left in /dev/shm:%s", left, names);
}
