/* Which path a call of the direct algorithm takes where it could either read its peers'
 * buffers in place (cross-memory attach) or stage through the segment. The estimate from
 * init's probe (process_vm_readv's rate over memcpy's on 256 KiB) has been wrong both ways
 * here: on one boot a 4-rank AlltoAll of 8 MiB blocks read in place took 0.7 of staging's
 * time while the probe said 0.25 of memcpy, on another it was the slower path. A page pinned
 * for each copy and two cached copies are not what a large call pays. So calls between
 * processes that could take either path time both (threads of one process read each other
 * with memcpy, which the estimate knows):
 * - per class (collective, power-of-two size), calls 0 .. 2T - 1 (T: WEFT_DIRECT_CMA_TRIALS)
 *   alternate the staged path (even calls) and the in-place one (odd), each ended by a
 *   barrier round, so that every trial starts with every rank done with the last and its
 *   time is its own (a staged call's last copies would otherwise be paid in the next call);
 * - rank 0 times each trial from its start to the barrier (the time of the slowest rank) and
 *   after call 2T - 1 writes the path of the lower median into its ctrl's learned[class];
 * - call 2T takes the estimate, and from call 2T + 1 every rank reads the choice: a rank
 *   starts call 2T + 1 only after call 2T's first round, which waited for rank 0's post of
 *   it, which rank 0 made after writing, and a post releases what came before it.
 * Every rank counts the same calls: the tuner chose this algorithm for the same calls on
 * every rank, and whether a call may read in place depends on its size and on what init made
 * the same everywhere (direct.c refuses different settings). A rank called with another size
 * than its peers is a mismatch that the first round reports on every rank, and what a path
 * does before that round (staging its own data, publishing its addresses) harms nobody. */
#include <string.h>

#include "check.h"
#include "collname.h"
#include "deadline.h"
#include "direct.h"
#include "log.h"

#define DIRECT_LEARN_MIN_SHIFT 14 /* the smallest class: [16 KiB, 32 KiB) */

static int classOf(const struct weftCollArgs *a) {
  int size = 0;
  for (size_t b = a->bytes >> DIRECT_LEARN_MIN_SHIFT; b > 1 && size < DIRECT_LEARN_SIZES - 1; b >>= 1)
    size++;
  return (int)a->coll * DIRECT_LEARN_SIZES + size;
}

/* A trial costs at most 2T calls of a class once (the benchmarks' warmup holds them), a wrong
 * estimate every call after: every class whose calls can take both paths is timed. */
static int worthTrials(const struct directState *s, const struct weftCollArgs *a) {
  return s->cmaTrials > 0 && !s->samePid && (int)a->coll <= (int)weftCollAlltoAll;
}

int weftDirectRunsInPlace(struct directState *s, const struct weftCollArgs *a, size_t bytes,
                          double inPlaceUs, double stagedUs) {
  int estimate = weftDirectTakesInPlace(s, bytes, inPlaceUs, stagedUs);
  if (!weftDirectCanInPlace(s, bytes) || s->cmaAlways || !worthTrials(s, a))
    return estimate;
  int c = classOf(a);
  struct directLearn *l = &s->learn[c];
  uint32_t call = l->calls, trials = 2 * (uint32_t)s->cmaTrials;
  if (l->calls < UINT32_MAX) l->calls++;
  if (l->choice != LEARNED_NONE) return l->choice == LEARNED_IN_PLACE;
  if (call < trials) {
    l->estimateUs[0] = (float)stagedUs, l->estimateUs[1] = (float)inPlaceUs;
    s->trialClass = c;
    s->trialPath = (int)(call & 1);
    s->trialStartNs = weftNowNs();
    return s->trialPath;
  }
  if (call == trials) return estimate; /* rank 0's choice may not be visible yet */
  l->choice = atomic_load_explicit(&s->ctrl[0].learned[c], memory_order_relaxed);
  return l->choice == LEARNED_NONE ? estimate : l->choice == LEARNED_IN_PLACE;
}

static float medianOf(const float *v, int n) {
  float sorted[DIRECT_LEARN_MAX_TRIALS];
  memcpy(sorted, v, sizeof *v * (size_t)n);
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && sorted[j] < sorted[j - 1]; j--) {
      float t = sorted[j];
      sorted[j] = sorted[j - 1], sorted[j - 1] = t;
    }
  return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

/* Rank 0, after the last trial of class c: the faster path, for every rank to read. */
static void publishChoice(struct directState *s, const struct weftCollArgs *a, int c) {
  const struct directLearn *l = &s->learn[c];
  float staged = medianOf(l->us[0], s->cmaTrials), inPlace = medianOf(l->us[1], s->cmaTrials);
  uint8_t pick = inPlace < staged ? LEARNED_IN_PLACE : LEARNED_STAGED;
  atomic_store_explicit(&s->ctrl[0].learned[c], pick, memory_order_relaxed);
  size_t low = (size_t)1 << (DIRECT_LEARN_MIN_SHIFT + c % DIRECT_LEARN_SIZES);
  INFO(WEFT_TUNE, "direct: %s of %zu to %zu bytes: staged %.1f us, in place %.1f us (medians of "
       "%d trials; estimated %.1f and %.1f), so %s from its next call but one",
       weftCollName(a->coll), low, 2 * low - 1, staged, inPlace, s->cmaTrials, l->estimateUs[0],
       l->estimateUs[1], pick == LEARNED_IN_PLACE ? "in place" : "staged");
}

weftResult_t weftDirectTrialEnd(struct weftComm *comm, struct directState *s,
                                const struct weftCollArgs *a) {
  int c = s->trialClass;
  s->trialClass = -1;
  WEFTCHECK(weftDirectArrive(comm, s, a, ++s->seq, 0));
  if (s->me != 0) return weftSuccess;
  struct directLearn *l = &s->learn[c];
  uint32_t call = l->calls - 1;
  l->us[s->trialPath][call / 2] = (float)(weftNowNs() - s->trialStartNs) / 1e3f;
  if (call + 1 == 2 * (uint32_t)s->cmaTrials) publishChoice(s, a, c);
  return weftSuccess;
}
