/* The cores of the fabric's cpu line (docs/scale.md "The model", Cores): each pool (a host's,
 * or the machine's) holds `cores` cores, each a list of the busy intervals booked on it, in
 * time order. Work is booked when the engine learns of it, which may be ahead of when it can
 * start (a receiver's copy waits for its bytes to come off a busy link), so a core is not
 * "free from its last booking on": later work that is ready earlier fills the gaps before
 * such a booking, as a scheduler would run whatever is runnable. */
#include <stdlib.h>
#include <string.h>

#include "sim.h"

struct simCore {
  double *start, *end; /* booked intervals, by start, not overlapping */
  size_t head, len, cap;
};

int simCoresInit(struct simCores *c, int pools, int cores) {
  c->pools = pools;
  c->cores = cores;
  c->core = calloc((size_t)pools * (size_t)cores, sizeof *c->core);
  return c->core == NULL ? -1 : 0;
}

void simCoresFree(struct simCores *c) {
  if (c->core != NULL)
    for (int i = 0; i < c->pools * c->cores; i++) {
      free(c->core[i].start);
      free(c->core[i].end);
    }
  free(c->core);
  c->core = NULL;
}

/* Drops the intervals over by `now`: no work booked from now on can start before it. */
static void prune(struct simCore *k, double now) {
  while (k->len > 0 && k->end[k->head] <= now) k->head++, k->len--;
}

/* The earliest start at or after `ready` with `us` free on k, and the index it goes in at. */
static double earliestFit(const struct simCore *k, double ready, double us, size_t *at) {
  double t = ready;
  size_t i = k->head;
  for (; i < k->head + k->len; i++) {
    if (k->end[i] <= t) continue;
    if (k->start[i] >= t + us) break;
    t = k->end[i];
  }
  *at = i;
  return t;
}

static int book(struct simCore *k, size_t at, double start, double end) {
  if (k->head + k->len == k->cap) {
    if (k->head > 0) { /* slide the live intervals down to reuse the dropped ones' room */
      memmove(k->start, k->start + k->head, k->len * sizeof *k->start);
      memmove(k->end, k->end + k->head, k->len * sizeof *k->end);
      at -= k->head;
      k->head = 0;
    } else {
      size_t cap = k->cap ? 2 * k->cap : 16;
      double *s = realloc(k->start, cap * sizeof *s);
      if (s == NULL) return -1;
      k->start = s;
      double *e = realloc(k->end, cap * sizeof *e);
      if (e == NULL) return -1;
      k->end = e;
      k->cap = cap;
    }
  }
  size_t tail = k->head + k->len - at;
  memmove(k->start + at + 1, k->start + at, tail * sizeof *k->start);
  memmove(k->end + at + 1, k->end + at, tail * sizeof *k->end);
  k->start[at] = start;
  k->end[at] = end;
  k->len++;
  return 0;
}

int simCoresTake(struct simCores *c, int pool, double now, double ready, double us, double *start,
                 double *end) {
  struct simCore *cores = c->core + (size_t)pool * (size_t)c->cores, *best = NULL;
  size_t bestAt = 0;
  double bestStart = 0;
  for (int i = 0; i < c->cores; i++) {
    prune(&cores[i], now);
    size_t at;
    double t = earliestFit(&cores[i], ready, us, &at);
    if (best == NULL || t < bestStart) best = &cores[i], bestAt = at, bestStart = t;
  }
  if (book(best, bestAt, bestStart, bestStart + us) != 0) return -1;
  if (start != NULL) *start = bestStart;
  *end = bestStart + us;
  return 0;
}
