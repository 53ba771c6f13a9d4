/* The direct algorithm's trials of its two paths (algorithms/direct_learn.c), on states made
 * here (no segment, no peers): the trial schedule for every WEFT_DIRECT_CMA_TRIALS (T timed
 * calls of each path, each after a call of its own path, in an order a linear drift of the
 * machine's speed weighs on alike), and the choice: the faster path (made faster here by
 * sleeping in the other's trials, and only where it is 10% faster than the estimate's path)
 * published by rank 0, taken by rank 0 and another rank from
 * the second call after the trials and not before, and never for threads of one process or
 * calls too small to read in place. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../algorithms/direct.h"

TestSuite(direct_learn_unit, .timeout = 60);

Test(direct_learn_unit, schedule_times_each_path_after_its_own) {
  for (int T = 1; T <= DIRECT_LEARN_MAX_TRIALS; T++) {
    int timed, prev = -1, count[2] = {0, 0};
    long at[2] = {0, 0};
    uint32_t k = 0;
    for (int path; (path = weftDirectTrialAt(T, k, &timed)) >= 0; k++) {
      cr_assert(path == 0 || path == 1, "T %d call %u: path %d", T, k, path);
      if (timed) {
        cr_assert_eq(path, prev, "T %d: timed call %u follows a call of the other path", T, k);
        count[path]++, at[path] += (long)k;
      }
      prev = path;
    }
    cr_expect_eq(count[0], T, "T %d: %d timed staged calls", T, count[0]);
    cr_expect_eq(count[1], T, "T %d: %d timed in-place calls", T, count[1]);
    cr_expect(timed, "T %d: the last trial call is not timed", T);
    /* ABBA: with an even T the timed calls' mean positions coincide */
    if (T % 2 == 0) cr_expect_eq(at[0], at[1], "T %d: staged at %ld, in place at %ld", T, at[0], at[1]);
    cr_expect_eq(k, (uint32_t)(3 * T + 1), "T %d: %u trial calls (direct_learn.c says 3T + 1)", T, k);
  }
  int timed;
  cr_expect_eq(weftDirectTrialAt(2, 0, &timed), 0);
  cr_expect_eq(timed, 0);
  cr_expect_eq(weftDirectTrialAt(2, 7, &timed), -1, "T 2: 7 trial calls");
}

/* A state of rank me of two processes that may read each other in place from 64 KiB. */
static struct directState *makeState(int me, struct directCtrl *ctrl) {
  struct directState *s = calloc(1, sizeof *s);
  s->n = 2, s->me = me, s->cmaOk = 1, s->cmaMinBytes = 64 << 10, s->peerCopySpeed = 0.5;
  s->cmaTrials = 2, s->trialClass = -1, s->ctrl = ctrl;
  s->learn = calloc(DIRECT_LEARN_CLASSES, sizeof *s->learn);
  return s;
}

static void freeState(struct directState *s) {
  free(s->learn);
  free(s);
}

/* One call on rank 0 and rank 1 with the estimate `estimate` (1: in place cheaper); rank 0's
 * trials of path `slow` sleep 3 ms. Returns both ranks' paths (they must agree). */
static int callBoth(struct directState *r0, struct directState *r1, const struct weftCollArgs *a,
                    int estimate, int slow) {
  double inPlace = estimate ? 1.0 : 2.0, staged = estimate ? 2.0 : 1.0;
  int p0 = weftDirectRunsInPlace(r0, a, a->bytes, inPlace, staged);
  if (r0->trialClass >= 0) {
    if (p0 == slow) usleep(3000);
    weftDirectTrialEnd(r0, a);
  }
  int p1 = weftDirectRunsInPlace(r1, a, a->bytes, inPlace, staged);
  cr_assert_lt(r1->trialClass, 0, "rank 1 times a trial");
  cr_assert_eq(p0, p1, "ranks 0 and 1 take different paths");
  return p0;
}

static void choosesFaster(int slow, int estimate) {
  struct directCtrl *ctrl = aligned_alloc(64, sizeof *ctrl * 2);
  memset(ctrl, 0, sizeof *ctrl * 2);
  struct directState *r0 = makeState(0, ctrl), *r1 = makeState(1, ctrl);
  struct weftCollArgs a = {.coll = weftCollAlltoAll, .bytes = 1 << 20, .count = 1 << 18,
                           .type = weftFloat32};
  int timed;
  for (uint32_t k = 0; k < 7; k++)
    cr_assert_eq(callBoth(r0, r1, &a, estimate, slow), weftDirectTrialAt(2, k, &timed), "call %u", k);
  cr_expect_eq(callBoth(r0, r1, &a, estimate, slow), estimate, "the call after the trials");
  int chosen = callBoth(r0, r1, &a, estimate, slow);
  cr_expect_eq(chosen, !slow, "in place sleeping %d: path %d chosen", slow, chosen);
  for (int k = 0; k < 3; k++) cr_expect_eq(callBoth(r0, r1, &a, estimate, slow), chosen);
  /* another size class starts its own trials: staged first */
  struct weftCollArgs b = a;
  b.bytes = 4 << 20;
  cr_expect_eq(callBoth(r0, r1, &b, estimate, slow), 0, "a new class's first trial");
  freeState(r0), freeState(r1);
  free(ctrl);
}

Test(direct_learn_unit, staged_faster_against_the_estimate) { choosesFaster(1, 1); }
Test(direct_learn_unit, in_place_faster_against_the_estimate) { choosesFaster(0, 0); }

Test(direct_learn_unit, no_trials_where_the_estimate_holds) {
  struct directCtrl *ctrl = aligned_alloc(64, sizeof *ctrl * 2);
  memset(ctrl, 0, sizeof *ctrl * 2);
  struct directState *s = makeState(0, ctrl);
  struct weftCollArgs small = {.coll = weftCollAllReduce, .bytes = 32 << 10, .type = weftFloat32};
  struct weftCollArgs big = small;
  big.bytes = 1 << 20;
  for (int k = 0; k < 10; k++) /* below WEFT_DIRECT_CMA_MIN_BYTES: staged, untimed */
    cr_expect_eq(weftDirectRunsInPlace(s, &small, small.bytes, 1.0, 2.0), 0);
  s->samePid = 1; /* threads: the estimate */
  for (int k = 0; k < 10; k++) cr_expect_eq(weftDirectRunsInPlace(s, &big, big.bytes, 1.0, 2.0), 1);
  s->samePid = 0, s->cmaTrials = 0; /* WEFT_DIRECT_CMA_TRIALS=0 */
  for (int k = 0; k < 10; k++) cr_expect_eq(weftDirectRunsInPlace(s, &big, big.bytes, 1.0, 2.0), 1);
  cr_expect_lt(s->trialClass, 0, "a trial timed");
  freeState(s);
  free(ctrl);
}

Test(direct_learn_unit, the_estimate_stands_within_ten_percent) {
  cr_expect_eq(weftDirectLearnPick(1, 95.0, 100.0), LEARNED_IN_PLACE, "staged 5 percent faster");
  cr_expect_eq(weftDirectLearnPick(1, 89.0, 100.0), LEARNED_STAGED, "staged 11 percent faster");
  cr_expect_eq(weftDirectLearnPick(0, 100.0, 95.0), LEARNED_STAGED, "in place 5 percent faster");
  cr_expect_eq(weftDirectLearnPick(0, 100.0, 89.0), LEARNED_IN_PLACE, "in place 11 percent faster");
  cr_expect_eq(weftDirectLearnPick(0, 100.0, 120.0), LEARNED_STAGED);
  cr_expect_eq(weftDirectLearnPick(1, 120.0, 100.0), LEARNED_IN_PLACE);
}
