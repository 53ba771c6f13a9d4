/* Which path a call of the direct algorithm takes where it could either read its peers'
 * buffers in place (cross-memory attach) or stage through the segment. The estimate from
 * init's probe (process_vm_readv's rate over memcpy's on 256 KiB) has been wrong both ways
 * here: on one boot a 4-rank AlltoAll of 8 MiB blocks read in place took 0.7 of staging's
 * time while the probe said 0.25 of memcpy, on another it was the slower path. A page pinned
 * for each copy and two cached copies are not what a large call pays. So calls between
 * processes that could take either path time both (threads of one process read each other
 * with memcpy, which the estimate knows):
 * - per class (collective, power-of-two size), the first calls are trials: T timed calls of
 *   each path (T: WEFT_DIRECT_CMA_TRIALS), in the order staged, in place, in place, staged,
 *   staged, ... (so a drift of the machine's speed weighs on both alike), and the first call
 *   of each run of one path untimed: a path's call pays for the one before it (a staged call
 *   leaves its last copies to its peers, which the next call waits for; a first call touches
 *   the buffers' new pages), so only a call after one of its own path is its steady cost.
 *   T = 2: staged, staged*, in place, in place*, in place*, staged, staged* (* timed);
 * - rank 0 times them, from the start of its call to its end, and after the last writes the
 *   path of the lower median, where it is 10% below the other's (else the estimate's), into
 *   its ctrl's learned[class];
 * - the call after the trials takes the estimate, and from the next one every rank reads the
 *   choice: a rank starts that one only after the first round of the call before, which
 *   waited for rank 0's post of it, which rank 0 made after writing, and a post releases what
 *   came before it.
 * Every rank counts the same calls: the tuner chose this algorithm for the same calls on
 * every rank, and whether a call may read in place depends on its size and on what init made
 * the same everywhere (direct.c refuses different settings). A rank called with another size
 * than its peers is a mismatch that the first round reports on every rank, and what a path
 * does before that round (staging its own data, publishing its addresses) harms nobody. */
#include <string.h>

#include "collname.h"
#include "deadline.h"
#include "direct.h"
#include "log.h"

#define DIRECT_LEARN_MIN_SHIFT 14 /* the smallest class: [16 KiB, 32 KiB) */
/* The trials overrule the estimate where the other path took at most this share of its time:
 * at 8 ranks on 2 cores the two paths of an AlltoAll ran within 10% of each other and the
 * trials' pick changed from run to run with the noise, where the estimate's stays put. */
#define DIRECT_LEARN_MARGIN 0.9

static int classOf(const struct weftCollArgs *a) {
  int size = 0;
  for (size_t b = a->bytes >> DIRECT_LEARN_MIN_SHIFT; b > 1 && size < DIRECT_LEARN_SIZES - 1; b >>= 1)
    size++;
  return (int)a->coll * DIRECT_LEARN_SIZES + size;
}

/* The trials cost a class's first 3T + 1 calls once (2T timed, T + 1 untimed; a benchmark's
 * warm-up at that size holds them), a wrong estimate every call after: every class whose calls
 * can take both paths is timed. */
static int worthTrials(const struct directState *s, const struct weftCollArgs *a) {
  return s->cmaTrials > 0 && !s->samePid && (int)a->coll <= (int)weftCollAlltoAll;
}

/* Timed sample j (of 2T) takes path ((j + 1) / 2) % 2. */
int weftDirectTrialAt(int T, uint32_t k, int *timed) {
  uint32_t call = 0;
  for (int j = 0; j < 2 * T; j++) {
    int path = ((j + 1) >> 1) & 1, before = (j >> 1) & 1; /* sample j - 1's */
    if ((j == 0 || path != before) && call++ == k) return *timed = 0, path;
    if (call++ == k) return *timed = 1, path;
  }
  return -1;
}

static uint32_t trialCalls(int T) {
  uint32_t k = 0;
  for (int timed; weftDirectTrialAt(T, k, &timed) >= 0;) k++;
  return k;
}

int weftDirectRunsInPlace(struct directState *s, const struct weftCollArgs *a, size_t bytes,
                          double inPlaceUs, double stagedUs) {
  int estimate = weftDirectTakesInPlace(s, bytes, inPlaceUs, stagedUs);
  if (!weftDirectCanInPlace(s, bytes) || s->cmaAlways || !worthTrials(s, a)) return estimate;
  int c = classOf(a), timed;
  struct directLearn *l = &s->learn[c];
  uint32_t call = l->calls;
  if (l->calls < UINT32_MAX) l->calls++;
  if (l->choice != LEARNED_NONE) return l->choice == LEARNED_IN_PLACE;
  int path = weftDirectTrialAt(s->cmaTrials, call, &timed);
  if (path >= 0) {
    l->estimateUs[0] = (float)stagedUs, l->estimateUs[1] = (float)inPlaceUs;
    if (timed && s->me == 0) s->trialClass = c, s->trialPath = path, s->trialStartNs = weftNowNs();
    return path;
  }
  if (call == trialCalls(s->cmaTrials)) return estimate; /* rank 0's choice may not be visible yet */
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

uint8_t weftDirectLearnPick(int estimateInPlace, double stagedUs, double inPlaceUs) {
  if (estimateInPlace) return stagedUs < inPlaceUs * DIRECT_LEARN_MARGIN ? LEARNED_STAGED : LEARNED_IN_PLACE;
  return inPlaceUs < stagedUs * DIRECT_LEARN_MARGIN ? LEARNED_IN_PLACE : LEARNED_STAGED;
}

/* Rank 0, after the last trial of class c: the faster path, for every rank to read. */
static void publishChoice(struct directState *s, const struct weftCollArgs *a, int c) {
  const struct directLearn *l = &s->learn[c];
  float staged = medianOf(l->us[0], l->samples[0]), inPlace = medianOf(l->us[1], l->samples[1]);
  uint8_t pick = weftDirectLearnPick(l->estimateUs[1] < l->estimateUs[0], staged, inPlace);
  atomic_store_explicit(&s->ctrl[0].learned[c], pick, memory_order_relaxed);
  size_t low = (size_t)1 << (DIRECT_LEARN_MIN_SHIFT + c % DIRECT_LEARN_SIZES);
  int estimate = l->estimateUs[1] < l->estimateUs[0] ? LEARNED_IN_PLACE : LEARNED_STAGED;
  INFO(WEFT_TUNE, "direct: %s of %zu to %zu bytes: staged %.1f us, in place %.1f us (medians of "
       "%d timed calls each; estimated %.1f and %.1f), so %s (%s) from its next call but one",
       weftCollName(a->coll), low, 2 * low - 1, staged, inPlace, s->cmaTrials, l->estimateUs[0],
       l->estimateUs[1], pick == LEARNED_IN_PLACE ? "in place" : "staged",
       pick == estimate ? "the estimate's path" : "overruling the estimate");
}

void weftDirectTrialEnd(struct directState *s, const struct weftCollArgs *a) {
  int c = s->trialClass;
  s->trialClass = -1;
  struct directLearn *l = &s->learn[c];
  if (l->samples[s->trialPath] < DIRECT_LEARN_MAX_TRIALS)
    l->us[s->trialPath][l->samples[s->trialPath]++] = (float)(weftNowNs() - s->trialStartNs) / 1e3f;
  if (l->calls == trialCalls(s->cmaTrials)) publishChoice(s, a, c); /* the last is timed */
}
