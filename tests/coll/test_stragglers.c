/* The live straggler report (WEFT_STRAGGLER_REPORT, docs/stragglers.md), 4 ranks as forked
 * processes on one host running 8-byte AllReduces: a rank that sleeps 2 ms before each call,
 * or that the test stops (SIGSTOP) for 3 ms out of every 6, is named within 100 operations
 * by every rank (weftCommGetStragglers) and in rank 0's printed report; nobody is named when
 * nobody is slow; a dead rank still fails the others (no hang in the report's exchange); the
 * verdict's thresholds on made-up records (absolute and relative to the others' wait); the
 * call's argument errors. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "forked.h"
#include "straggler.h"

TestSuite(stragglers, .timeout = 60);

#define NRANKS 4
#define WINDOW 50
#define OPS 200
#define SLOW_RANK 2

struct rankOut {
  volatile int started, done;
  int rc;
  int namedAt;      /* first operation after which SLOW_RANK was named, 0 never */
  int wrongAt;      /* first operation after which another rank was named, 0 never */
  int wrongRank;
  double lateUs;    /* median lateness the first verdict naming SLOW_RANK gave */
  char msg[512];
};
struct shared {
  int slowRank;     /* sleeps before each call; -1 none */
  int gapUs;        /* every rank sleeps this long before each call (compute) */
  int earlyRank;    /* skips that sleep, so it waits in every call; -1 none */
  int killRank;     /* exits (SIGKILL itself) after 20 operations; -1 none */
  char logPath[64]; /* rank 0's stderr */
  struct rankOut out[NRANKS];
};

static void sleepUs(long us) {
  struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* After a window: who the verdict names. */
static void lookAtVerdict(weftComm_t comm, struct rankOut *me, int op) {
  weftStraggler_t v[NRANKS];
  int n = -1;
  if (weftCommGetStragglers(comm, v, NRANKS, &n) != weftSuccess) {
    me->rc = -1;
    snprintf(me->msg, sizeof me->msg, "weftCommGetStragglers: %s", weftGetLastError(comm));
    return;
  }
  for (int i = 0; i < n; i++) {
    if (v[i].rank == SLOW_RANK && me->namedAt == 0) me->namedAt = op, me->lateUs = v[i].medianLateUs;
    if (v[i].rank != SLOW_RANK && me->wrongAt == 0) me->wrongAt = op, me->wrongRank = v[i].rank;
  }
}

static void rankMain(void *shared, weftUniqueId id, int rank, int nranks) {
  struct shared *sh = shared;
  struct rankOut *me = &sh->out[rank];
  if (rank == 0) {
    int fd = open(sh->logPath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) dup2(fd, 2), close(fd);
  }
  weftComm_t comm = NULL;
  weftResult_t rc = weftCommInitRank(&comm, nranks, id, rank);
  me->started = 1;
  double buf = 1;
  for (int op = 1; rc == weftSuccess && op <= OPS; op++) {
    if (rank == sh->killRank && op == 20) kill(getpid(), SIGKILL);
    if (sh->gapUs > 0 && rank != sh->earlyRank) sleepUs(sh->gapUs);
    if (rank == sh->slowRank) sleepUs(2000);
    rc = weftAllReduce(&buf, &buf, 1, weftFloat64, weftSum, comm, NULL);
    if (rc == weftSuccess && op % WINDOW == 0) lookAtVerdict(comm, me, op);
  }
  if (me->rc == 0) me->rc = rc;
  if (rc != weftSuccess) snprintf(me->msg, sizeof me->msg, "%s", weftGetLastError(comm));
  if (comm != NULL) weftCommDestroy(comm);
  me->done = 1;
  _exit(0);
}

static struct shared *runEarly(const char *algo, int slowRank, int gapUs, int stopRank,
                               int killRank, int earlyRank) {
  struct shared *sh = forkedShared(sizeof *sh);
  sh->slowRank = slowRank;
  sh->gapUs = gapUs;
  sh->earlyRank = earlyRank;
  sh->killRank = killRank;
  snprintf(sh->logPath, sizeof sh->logPath, "/tmp/weft-strag-%d.log", (int)getpid());
  char window[16];
  snprintf(window, sizeof window, "%d", WINDOW);
  setenv("WEFT_STRAGGLER_REPORT", window, 1);
  setenv("WEFT_TIMEOUT_MS", "30000", 1);
  if (algo != NULL) setenv("WEFT_ALGO", algo, 1);
  pid_t pids[NRANKS];
  forkedLaunch(NRANKS, rankMain, sh, pids);
  unsetenv("WEFT_STRAGGLER_REPORT");
  unsetenv("WEFT_ALGO");
  if (stopRank >= 0) { /* stopped 3 ms of every 6 while it runs */
    while (!sh->out[stopRank].started) sleepUs(1000);
    for (int64_t end = forkedNowMs() + 20000; !sh->out[stopRank].done && forkedNowMs() < end;) {
      kill(pids[stopRank], SIGSTOP);
      sleepUs(3000);
      kill(pids[stopRank], SIGCONT);
      sleepUs(3000);
    }
  }
  forkedReap(pids, NRANKS, 40000);
  return sh;
}

static struct shared *run(const char *algo, int slowRank, int gapUs, int stopRank, int killRank) {
  return runEarly(algo, slowRank, gapUs, stopRank, killRank, -1);
}

/* alsoOthers: whether another rank may be named too (a rank stopped in the middle of a wait
 * counts the stop as waiting, so whoever arrived last in that collective can look late: see
 * docs/stragglers.md). */
static void expectNamed(struct shared *sh, int alsoOthers) {
  for (int r = 0; r < NRANKS; r++) {
    struct rankOut *o = &sh->out[r];
    cr_assert(o->done, "rank %d did not finish", r);
    cr_assert_eq(o->rc, weftSuccess, "rank %d: %s", r, o->msg);
    cr_expect(o->namedAt > 0 && o->namedAt <= 100, "rank %d: rank %d named after op %d (0: never)",
              r, SLOW_RANK, o->namedAt);
    if (!alsoOthers)
      cr_expect_eq(o->wrongAt, 0, "rank %d: rank %d named after op %d", r, o->wrongRank, o->wrongAt);
  }
  FILE *f = fopen(sh->logPath, "r");
  cr_assert(f != NULL, "rank 0's stderr %s", sh->logPath);
  char line[2048], want[64];
  snprintf(want, sizeof want, ": rank %d last in ", SLOW_RANK);
  int printed = 0, verdicts = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    if (strstr(line, "WEFT stragglers in the 50 collectives") == NULL) continue;
    if (getenv("WEFT_TEST_VERBOSE") != NULL) fprintf(stderr, "%s", line);
    verdicts++;
    printed += strstr(line, want) != NULL;
  }
  fclose(f);
  unlink(sh->logPath);
  cr_expect_eq(verdicts, OPS / WINDOW, "rank 0 printed %d verdicts", verdicts);
  cr_expect(printed > 0, "rank 0 never printed rank %d", SLOW_RANK);
}

Test(stragglers, sleeper_named_direct) {
  struct shared *sh = run(NULL, SLOW_RANK, 0, -1, -1);
  expectNamed(sh, 0);
  cr_expect(sh->out[0].lateUs > 1000 && sh->out[0].lateUs < 20000,
            "median lateness %.0f us for a 2 ms sleep", sh->out[0].lateUs);
}

Test(stragglers, sleeper_named_ring) {
  struct shared *sh = run("ring", SLOW_RANK, 0, -1, -1);
  expectNamed(sh, 0);
  cr_expect(sh->out[0].lateUs > 1000 && sh->out[0].lateUs < 20000,
            "median lateness %.0f us for a 2 ms sleep", sh->out[0].lateUs);
}

Test(stragglers, stopped_rank_named) {
  expectNamed(run(NULL, -1, 1000, SLOW_RANK, -1), 0);
}

/* The stopped rank calls first, so the stops land in its waits: a stop there is absence, not
 * waiting (lib/prims.c), and it is named alone, for the tuner's choice and for the ring. */
Test(stragglers, stopped_in_its_waits_named) {
  expectNamed(runEarly(NULL, -1, 1000, SLOW_RANK, -1, SLOW_RANK), 0);
}

Test(stragglers, stopped_in_its_waits_named_ring) {
  expectNamed(runEarly("ring", -1, 1000, SLOW_RANK, -1, SLOW_RANK), 0);
}

Test(stragglers, nobody_slow_nobody_named) {
  struct shared *sh = run(NULL, -1, 0, -1, -1);
  for (int r = 0; r < NRANKS; r++) {
    struct rankOut *o = &sh->out[r];
    cr_assert(o->done && o->rc == weftSuccess, "rank %d: %s", r, o->msg);
    cr_expect(o->namedAt == 0 && o->wrongAt == 0, "rank %d: a rank named after op %d", r,
              o->namedAt ? o->namedAt : o->wrongAt);
  }
  unlink(sh->logPath);
}

Test(stragglers, dead_rank_fails_the_others) {
  struct shared *sh = run(NULL, -1, 0, -1, 3);
  for (int r = 0; r < 3; r++) {
    cr_assert(sh->out[r].done, "rank %d hung", r);
    cr_expect_eq(sh->out[r].rc, weftRemoteError, "rank %d: rc %d: %s", r, sh->out[r].rc,
                 sh->out[r].msg);
  }
  unlink(sh->logPath);
}

/* ---- the verdict on made-up records ---- */

/* rec for 4 ranks, `ops` collectives: rank `late` waited 0 in the first `lastIn` collectives,
 * the others `lateUs`; elsewhere everybody waited 5 us. */
static uint32_t *records(int ops, int late, int lastIn, uint32_t lateUs) {
  size_t stride = WEFT_STRAGGLER_REC_WORDS(ops, NRANKS);
  uint32_t *rec = calloc(stride * NRANKS, sizeof *rec);
  for (int r = 0; r < NRANKS; r++)
    for (int k = 0; k < ops; k++) rec[r * stride + k] = k < lastIn ? (r == late ? 0 : lateUs) : 5;
  for (int r = 0; r < NRANKS; r++) rec[r * stride + ops + late] = r == late ? 0 : 7;
  return rec;
}

Test(stragglers, verdict_thresholds) {
  weftStraggler_t v[NRANKS];
  uint32_t *rec = records(100, 1, 10, 500); /* last in 10 of 100, by 500 us: named */
  cr_assert_eq(weftStragglerAnalyze(rec, NRANKS, 100, 100, v), 1);
  cr_expect(v[0].rank == 1 && v[0].lastOps == 10 && v[0].windowOps == 100);
  cr_expect_float_eq(v[0].medianLateUs, 500, 1e-9);
  cr_expect_float_eq(v[0].waitedOnUs, 21, 1e-9);
  free(rec);
  rec = records(100, 1, 9, 500); /* 9 of 100: under a tenth */
  cr_expect_eq(weftStragglerAnalyze(rec, NRANKS, 100, 100, v), 0);
  free(rec);
  rec = records(100, 1, 50, 99); /* under WEFT_STRAGGLER_MIN_US */
  cr_expect_eq(weftStragglerAnalyze(rec, NRANKS, 100, 100, v), 0);
  free(rec);
  /* Late collectives spread evenly: each rank last in a quarter of them, nobody named; one
   * with 16 of 40 (more than 1.5 x 10; 15 would not be): named alone. */
  size_t stride = WEFT_STRAGGLER_REC_WORDS(100, NRANKS);
  rec = calloc(stride * NRANKS, sizeof *rec);
  for (int k = 0; k < 40; k++)
    for (int r = 0; r < NRANKS; r++) rec[r * stride + k] = r == k % NRANKS ? 0 : 300;
  cr_expect_eq(weftStragglerAnalyze(rec, NRANKS, 100, 100, v), 0);
  for (int k = 0; k < 6; k++) /* 6 of rank 1's become rank 3's */
    for (int r = 0; r < NRANKS; r++) rec[r * stride + 4 * k + 1] = r == 3 ? 0 : 300;
  cr_expect_eq(weftStragglerAnalyze(rec, NRANKS, 100, 100, v), 1);
  cr_expect(v[0].rank == 3 && v[0].lastOps == 16, "rank %d last in %d", v[0].rank, v[0].lastOps);
  free(rec);
}

/* Lateness counts only where it is at least a quarter of what the others waited: every
 * collective waiting 4 ms (on a slow link, say), a rank 200 us "late" in 20 of 100 is noise,
 * one 2 ms late is named. */
Test(stragglers, verdict_lateness_relative_to_the_wait) {
  weftStraggler_t v[NRANKS];
  uint32_t *rec = records(100, 1, 20, 4000);
  size_t stride = WEFT_STRAGGLER_REC_WORDS(100, NRANKS);
  for (int k = 0; k < 20; k++) rec[1 * stride + k] = 3800;
  cr_expect_eq(weftStragglerAnalyze(rec, NRANKS, 100, 100, v), 0, "200 us against 4 ms named");
  for (int k = 0; k < 20; k++) rec[1 * stride + k] = 2000;
  cr_assert_eq(weftStragglerAnalyze(rec, NRANKS, 100, 100, v), 1, "2 ms against 4 ms not named");
  cr_expect(v[0].rank == 1 && v[0].lastOps == 20, "rank %d last in %d", v[0].rank, v[0].lastOps);
  free(rec);
}

/* A 4-rank ring's links (r-1 -> r) on made-up records: each carried `kib` in the window and
 * trickled `fastUs`, except those to and from rank `slow`, which trickled `slowUs`. */
static void ringLinks(uint32_t *rec, int ops, int slow, uint32_t kib, uint32_t fastUs,
                      uint32_t slowUs) {
  size_t stride = WEFT_STRAGGLER_REC_WORDS(ops, NRANKS);
  for (int r = 0; r < NRANKS; r++) {
    int prev = (r + NRANKS - 1) % NRANKS;
    uint32_t *row = rec + r * stride;
    row[WEFT_STRAGGLER_KIB_AT(ops, NRANKS) + prev] = kib;
    row[WEFT_STRAGGLER_TRICKLE_AT(ops, NRANKS) + prev] = r == slow || prev == slow ? slowUs : fastUs;
  }
}

/* Every rank received 1600 KiB from every other in the window (no trickle) and waited per
 * peer: onLast for rank NRANKS - 1, byLast what that rank waited on each other, other
 * between the rest. */
static void allToAllWaits(uint32_t *rec, int ops, uint32_t onLast, uint32_t byLast,
                          uint32_t other) {
  size_t stride = WEFT_STRAGGLER_REC_WORDS(ops, NRANKS);
  for (int q = 0; q < NRANKS; q++)
    for (int p = 0; p < NRANKS; p++) {
      if (p == q) continue;
      uint32_t *row = rec + q * stride;
      row[WEFT_STRAGGLER_KIB_AT(ops, NRANKS) + p] = 1600;
      row[WEFT_STRAGGLER_WAIT_AT(ops, NRANKS) + p] =
          p == NRANKS - 1 ? onLast : q == NRANKS - 1 ? byLast : other;
    }
}

Test(stragglers, slow_link_verdict) {
  weftStraggler_t v[NRANKS];
  /* Everybody waits alike (5 us) except rank 0, last in every collective by 300 us: the
   * successor of rank 3, whose links (3 -> 0 and 2 -> 3) trickle 40 us per KiB (25 MB/s). */
  uint32_t *rec = records(50, 0, 50, 300);
  ringLinks(rec, 50, 3, 4800, 20, 192000);
  cr_assert_eq(weftStragglerAnalyze(rec, NRANKS, 50, 100, v), 1);
  cr_expect(v[0].rank == 3 && v[0].slowLinks == 2, "rank %d on %d slow links", v[0].rank,
            v[0].slowLinks);
  cr_expect_float_eq(v[0].slowestLinkMBps, 4800 * 1024.0 / 192000, 1e-9);
  /* Slow by less than 4 times the typical link: nobody on links, rank 0 as last. */
  ringLinks(rec, 50, 3, 4800, 20000, 79000);
  cr_assert_eq(weftStragglerAnalyze(rec, NRANKS, 50, 100, v), 1);
  cr_expect(v[0].rank == 0 && v[0].slowLinks == 0 && v[0].lastOps == 50);
  /* Slow per byte but too short in all to matter (under 100 us x 50 / 10). */
  ringLinks(rec, 50, 3, 4800, 0, 499);
  cr_assert_eq(weftStragglerAnalyze(rec, NRANKS, 50, 100, v), 1);
  cr_expect(v[0].rank == 0 && v[0].slowLinks == 0);
  /* Too little data to weigh (under 64 KiB a link). */
  ringLinks(rec, 50, 3, 63, 0, 192000);
  cr_assert_eq(weftStragglerAnalyze(rec, NRANKS, 50, 100, v), 1);
  cr_expect(v[0].rank == 0 && v[0].slowLinks == 0);
  free(rec);
  /* One slow link alone (1 -> 2), nobody late: no rank is slow both ways, nobody named. */
  rec = records(50, 0, 0, 0);
  ringLinks(rec, 50, -1, 4800, 20, 20);
  size_t stride = WEFT_STRAGGLER_REC_WORDS(50, NRANKS);
  rec[2 * stride + WEFT_STRAGGLER_TRICKLE_AT(50, NRANKS) + 1] = 192000;
  cr_expect_eq(weftStragglerAnalyze(rec, NRANKS, 50, 100, v), 0);
  /* Waited on per byte, not trickling (a shaper's burst carried each message): rank 3's
   * links in both directions, with every rank receiving from every other. */
  free(rec);
  rec = records(50, 0, 0, 0);
  allToAllWaits(rec, 50, 90000, 90000, 10000);
  cr_assert_eq(weftStragglerAnalyze(rec, NRANKS, 50, 100, v), 1);
  cr_expect(v[0].rank == 3 && v[0].slowLinks == 6, "rank %d on %d slow links", v[0].rank,
            v[0].slowLinks);
  free(rec);
  /* A rank late to compute (rank 3, last in every collective by 300 us) is waited on but
   * waits on nobody: named as last, not on links. */
  rec = records(50, 3, 50, 300);
  allToAllWaits(rec, 50, 15000, 0, 100);
  cr_assert_eq(weftStragglerAnalyze(rec, NRANKS, 50, 100, v), 1);
  cr_expect(v[0].rank == 3 && v[0].slowLinks == 0 && v[0].lastOps == 50, "rank %d on %d slow "
            "links, last in %d", v[0].rank, v[0].slowLinks, v[0].lastOps);
  free(rec);
}

/* ---- arguments ---- */

Test(stragglers, argument_errors) {
  weftComm_t comm = NULL;
  setenv("WEFT_STRAGGLER_REPORT", "-1", 1);
  cr_assert_neq(weftCommInitAll(&comm, 1, NULL), weftSuccess, "WEFT_STRAGGLER_REPORT=-1 accepted");
  cr_expect(strstr(weftGetLastError(NULL), "WEFT_STRAGGLER_REPORT") != NULL, "%s",
            weftGetLastError(NULL));
  setenv("WEFT_STRAGGLER_REPORT", "3", 1);
  cr_assert_eq(weftCommInitAll(&comm, 1, NULL), weftSuccess, "%s", weftGetLastError(NULL));
  unsetenv("WEFT_STRAGGLER_REPORT");
  weftStraggler_t v[2];
  int n = -7;
  cr_expect_eq(weftCommGetStragglers(NULL, v, 2, &n), weftInvalidArgument);
  cr_expect_eq(weftCommGetStragglers(comm, v, 2, NULL), weftInvalidArgument);
  cr_expect(strstr(weftGetLastError(comm), "count is NULL") != NULL, "%s", weftGetLastError(comm));
  cr_expect_eq(weftCommGetStragglers(comm, v, -1, &n), weftInvalidArgument);
  cr_expect(strstr(weftGetLastError(comm), "capacity -1") != NULL, "%s", weftGetLastError(comm));
  cr_expect_eq(weftCommGetStragglers(comm, NULL, 2, &n), weftInvalidArgument);
  cr_expect_eq(n, -7, "count written on failure");
  cr_expect_eq(weftCommGetStragglers(comm, NULL, 0, &n), weftSuccess, "%s", weftGetLastError(comm));
  cr_expect_eq(n, 0);
  double x = 1;
  for (int i = 0; i < 3; i++)
    cr_assert_eq(weftAllReduce(&x, &x, 1, weftFloat64, weftSum, comm, NULL), weftSuccess);
  cr_expect_eq(weftCommGetStragglers(comm, v, 2, &n), weftSuccess, "%s", weftGetLastError(comm));
  cr_expect_eq(n, 0, "a rank alone is nobody's straggler");
  weftCommDestroy(comm);
  cr_assert_eq(weftCommInitAll(&comm, 1, NULL), weftSuccess, "%s", weftGetLastError(NULL));
  n = -7;
  cr_expect_eq(weftCommGetStragglers(comm, v, 2, &n), weftInvalidUsage);
  cr_expect(strstr(weftGetLastError(comm), "WEFT_STRAGGLER_REPORT") != NULL, "%s",
            weftGetLastError(comm));
  cr_expect_eq(n, -7);
  weftCommDestroy(comm);
}
