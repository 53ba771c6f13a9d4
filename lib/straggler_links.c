/* The straggler report's slow-link verdict (see straggler.h). A rank behind a slow link
 * calls on time, so arrival order cannot name it: in a ring every rank then waits about as
 * long as every other, each for its predecessor. What a slow link does change is how a
 * slot comes in: its bytes trickle in over the link's time, where a fast link delivers them
 * at once, however late they were sent. So each receiver's transport meters, per peer, the
 * bytes received and the time they spent trickling in (lib/transport.h); a link whose
 * trickle time per byte is far above the typical link's is slow, and the rank on the most
 * slow links (the host whose NIC or cable is slow sits on both its incoming and outgoing
 * links) is named. */
#include <stdlib.h>

#include "straggler.h"

/* A link is weighed only once it carried this much in the window (KiB)... */
#define LINK_MIN_KIB 64
/* ...and is slow when it trickled this many times longer per byte than the typical link
 * (the lower quartile of the measured links: a ring's links are half slow when one host is)
 * and long enough in all to matter (the lateness threshold in a tenth of the window). */
#define SLOW_FACTOR 4

struct link {
  int from, to;
  double usPerKiB, mbps;
  uint32_t us;
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
      if (p == q || kib < LINK_MIN_KIB) continue;
      l[m++] = (struct link){p, q, (double)us / kib, us > 0 ? kib * 1024.0 / us : 0, us};
    }
  }
  return m;
}

int weftStragglerSlowLinks(const uint32_t *rec, int nranks, int ops, int64_t minUs,
                           int *slowLinks, double *slowestMBps) {
  for (int r = 0; r < nranks; r++) slowLinks[r] = 0, slowestMBps[r] = 0;
  size_t cap = (size_t)nranks * (size_t)(nranks > 1 ? nranks - 1 : 1);
  struct link *l = malloc(sizeof *l * cap);
  double *cost = malloc(sizeof *cost * cap);
  if (l == NULL || cost == NULL) {
    free(l);
    free(cost);
    return -1;
  }
  int m = measuredLinks(rec, nranks, ops, l), named = 0;
  if (m >= 3) { /* fewer: nothing to compare a link with */
    for (int i = 0; i < m; i++) cost[i] = l[i].usPerKiB;
    qsort(cost, (size_t)m, sizeof *cost, cmpDouble);
    double typical = cost[(m - 1) / 4], enough = (double)minUs * ops / WEFT_STRAGGLER_LAST_SHARE;
    int most = 0;
    for (int i = 0; i < m; i++) {
      if (l[i].us < enough || l[i].usPerKiB <= SLOW_FACTOR * typical) continue;
      for (int e = 0; e < 2; e++) {
        int r = e ? l[i].to : l[i].from;
        if (slowLinks[r] == 0 || l[i].mbps < slowestMBps[r]) slowestMBps[r] = l[i].mbps;
        if (++slowLinks[r] > most) most = slowLinks[r];
      }
    }
    /* The rank on the most slow links; a slow link alone (most == 1) names its sender. */
    for (int r = 0; r < nranks; r++) {
      int isSender = 0;
      for (int i = 0; most == 1 && i < m && !isSender; i++)
        isSender = l[i].from == r && l[i].us >= enough && l[i].usPerKiB > SLOW_FACTOR * typical;
      int keep = most >= 2 ? slowLinks[r] == most : isSender;
      if (!keep) slowLinks[r] = -slowLinks[r]; /* on a slow link, not named */
      named += keep;
    }
  }
  free(l);
  free(cost);
  return named;
}
