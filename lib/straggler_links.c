/* The straggler report's slow-link verdict (see straggler.h). A rank behind a slow link
 * calls on time, so arrival order cannot name it: in a ring every rank then waits about as
 * long as every other, each for its predecessor. What a slow link does change is how a
 * slot comes in: its bytes trickle in over the link's time, where a fast link delivers them
 * at once, however late they were sent. So each receiver's transport meters, per peer, the
 * bytes received and the time they spent trickling in (lib/transport.h). A shaper's burst
 * can carry a whole small message at once, though; then the link shows in what the receiver
 * waited per byte from that peer, where the algorithm is not a ring. A link far above the
 * typical link in either is slow, and the rank whose links are slow, in both directions
 * and (nearly) all of them (the host whose NIC or cable is slow), is named. */
#include <stdlib.h>

#include "straggler.h"

/* A link is weighed only once it carried this much in the window (KiB)... */
#define LINK_MIN_KIB 64
/* ...and is slow when, per byte, it trickled or was waited on this many times longer than
 * the typical link (the lower quartile of the measured links: a ring's links are half slow
 * when one host is), for long enough in all to matter (the lateness threshold in a tenth of
 * the window). */
#define SLOW_FACTOR 4
/* A rank is named when at least this share of its links is slow (and no rank's share is
 * larger). */
#define NAMED_SHARE_NUM 3
#define NAMED_SHARE_DEN 4

struct link {
  int from, to;
  uint32_t trickleUs, waitUs;
  double tricklePerKiB, waitPerKiB, mbps; /* mbps: of a slow link only */
  int slow;
};

static int cmpDouble(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The links that carried enough to weigh, into l (n * (n - 1) at most); their count. */
static int measuredLinks(const uint32_t *rec, int nranks, int ops, struct link *l) {
  size_t stride = WEFT_STRAGGLER_REC_WORDS(ops, nranks), n = (size_t)nranks;
  int m = 0;
  for (int q = 0; q < nranks; q++) {
    const uint32_t *row = rec + (size_t)q * stride;
    for (int p = 0; p < nranks; p++) {
      uint32_t kib = row[WEFT_STRAGGLER_KIB_AT(ops, n) + (size_t)p];
      uint32_t us = row[WEFT_STRAGGLER_TRICKLE_AT(ops, n) + (size_t)p];
      uint32_t wait = row[WEFT_STRAGGLER_WAIT_AT(ops, n) + (size_t)p];
      if (p == q || kib < LINK_MIN_KIB) continue;
      l[m++] = (struct link){p, q, us, wait, (double)us / kib, (double)wait / kib, 0, 0};
    }
  }
  return m;
}

/* The lower quartile of one per-byte cost over the m links (cost: scratch of m). */
static double typicalCost(const struct link *l, int m, int wait, double *cost) {
  for (int i = 0; i < m; i++) cost[i] = wait ? l[i].waitPerKiB : l[i].tricklePerKiB;
  qsort(cost, (size_t)m, sizeof *cost, cmpDouble);
  return cost[(m - 1) / 4];
}

/* Marks the slow links; counts, per rank, those into it (in) and out of it (out). */
static void markSlow(struct link *l, int m, double *cost, double enough, int *in, int *out) {
  double trickle = typicalCost(l, m, 0, cost), wait = typicalCost(l, m, 1, cost);
  for (int i = 0; i < m; i++) {
    int trickled = l[i].trickleUs >= enough && l[i].tricklePerKiB > SLOW_FACTOR * trickle;
    l[i].slow = trickled || (l[i].waitUs >= enough && l[i].waitPerKiB > SLOW_FACTOR * wait);
    if (!l[i].slow) continue;
    out[l[i].from]++, in[l[i].to]++;
    /* Its rate: over the time it trickled, or else over the time it was waited for. */
    l[i].mbps = 1024.0 / (trickled ? l[i].tricklePerKiB : l[i].waitPerKiB);
  }
}

/* Whether rank a's share of slow links is above (> 0), equal to (0) or below rank b's. */
static int cmpShare(const int *slow, const int *links, int a, int b) {
  long x = (long)slow[a] * links[b], y = (long)slow[b] * links[a];
  return (x > y) - (x < y);
}

/* A slow host is slow both ways, and on every one of its links: a rank late to compute is
 * waited on but waits on nobody, and a rank fed late by a slow link has fast links too. So
 * the ranks named are those with the largest share of their links slow, at least
 * NAMED_SHARE_NUM/NAMED_SHARE_DEN of them, in and out. named[r] is set for them. */
static int nameRanks(int nranks, const int *slow, const int *links, const int *in,
                     const int *out, int *named) {
  int best = -1, count = 0;
  for (int r = 0; r < nranks; r++) {
    named[r] = in[r] > 0 && out[r] > 0 && NAMED_SHARE_DEN * slow[r] >= NAMED_SHARE_NUM * links[r];
    if (named[r] && (best < 0 || cmpShare(slow, links, r, best) > 0)) best = r;
  }
  for (int r = 0; r < nranks; r++) {
    named[r] = named[r] && cmpShare(slow, links, r, best) == 0;
    count += named[r];
  }
  return count;
}

int weftStragglerSlowLinks(const uint32_t *rec, int nranks, int ops, int64_t minUs,
                           int *slowLinks, double *slowestMBps) {
  for (int r = 0; r < nranks; r++) slowLinks[r] = 0, slowestMBps[r] = 0;
  size_t cap = (size_t)nranks * (size_t)(nranks > 1 ? nranks - 1 : 1), n = (size_t)nranks;
  struct link *l = malloc(sizeof *l * cap);
  double *cost = malloc(sizeof *cost * cap);
  int *in = calloc(n, sizeof *in), *out = calloc(n, sizeof *out);
  int *links = calloc(n, sizeof *links), *named = calloc(n, sizeof *named);
  int count = -1;
  if (l == NULL || cost == NULL || in == NULL || out == NULL || links == NULL || named == NULL)
    goto done;
  int m = measuredLinks(rec, nranks, ops, l);
  count = 0;
  if (m < 3) goto done; /* nothing to compare a link with */
  markSlow(l, m, cost, (double)minUs * ops / WEFT_STRAGGLER_LAST_SHARE, in, out);
  for (int i = 0; i < m; i++) {
    links[l[i].from]++, links[l[i].to]++;
    for (int e = 0; e < 2 && l[i].slow; e++) {
      int r = e ? l[i].to : l[i].from;
      if (slowLinks[r] == 0 || l[i].mbps < slowestMBps[r]) slowestMBps[r] = l[i].mbps;
      slowLinks[r]++;
    }
  }
  count = nameRanks(nranks, slowLinks, links, in, out, named);
  /* The others: minus the slow links they share with a named rank (0: none). */
  for (int r = 0; r < nranks; r++)
    if (!named[r]) slowLinks[r] = 0;
  for (int i = 0; i < m; i++)
    if (l[i].slow && named[l[i].from] != named[l[i].to])
      slowLinks[named[l[i].from] ? l[i].to : l[i].from]--;
done:
  free(l);
  free(cost);
  free(in);
  free(out);
  free(links);
  free(named);
  return count;
}
