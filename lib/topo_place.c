/* A rank's placement on its host (the PUs it may run on, as cores, NUMA node and package), and
 * the ring order inside a host that follows the packages. */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "param.h"
#include "topo.h"

static int bitSet(const uint8_t *m, size_t bytes, int i) {
  return i >= 0 && (size_t)i / 8 < bytes && (m[i / 8] >> (i % 8)) & 1;
}

/* A GB/s setting in MB/s (checked positive at the API; fallback otherwise). */
static int32_t settingMBps(const char *value, double fallback) {
  double gbs;
  if (weftParseNumber(value, &gbs) != 0 || !(gbs > 0)) gbs = fallback;
  return gbs * 1e3 > INT32_MAX ? INT32_MAX : (int32_t)(gbs * 1e3);
}

void weftTopoPlaceOfCpus(const struct weftTopoHost *host, const uint8_t *cpus, size_t bytes,
                         struct weftTopoPlace *place) {
  memset(place, 0, sizeof *place);
  place->core = place->numa = place->package = place->gpu = -1;
  place->npackages = host->npackages;
  place->nnuma = host->nnuma;
  place->hostCores = host->ncores;
  place->ngpus = host->ngpus;
  place->nnics = host->nnics;
  place->packageMBps = settingMBps(weftParamTopoPackageBwGbps(), 16);
  place->numaMBps = settingMBps(weftParamTopoNumaBwGbps(), 32);
  int pus = 0, numa = -2, package = -2;
  uint8_t *seen = calloc((size_t)host->ncores + 1, 1); /* cores counted (NULL: count PUs) */
  for (int p = 0; p < host->puMax && (size_t)p / 8 < bytes; p++) {
    if (!bitSet(cpus, bytes, p) || host->puCore[p] < 0) continue;
    if (p / 8 < WEFT_TOPO_CPUSET_BYTES) place->cpuset[p / 8] |= (uint8_t)(1u << (p % 8));
    pus++;
    int c = host->puCore[p];
    const struct weftTopoLoc *l = &host->cores[c].loc;
    if (place->core < 0) place->core = c;
    if (seen == NULL || !seen[c]) place->ncores++;
    if (seen != NULL) seen[c] = 1;
    numa = numa == -2 || numa == l->numa ? l->numa : -1;
    package = package == -2 || package == l->package ? l->package : -1;
  }
  free(seen);
  place->numa = numa >= 0 ? numa : -1;
  place->package = package >= 0 ? package : -1;
  place->bound = pus > 0 && pus < host->npus;
}

void weftTopoPlaceSelf(const struct weftTopoHost *host, struct weftTopoPlace *place) {
  cpu_set_t set;
  uint8_t cpus[WEFT_TOPO_CPUSET_BYTES] = {0};
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int p = 0; p < CPU_SETSIZE && p / 8 < WEFT_TOPO_CPUSET_BYTES; p++)
      if (CPU_ISSET(p, &set)) cpus[p / 8] |= (uint8_t)(1u << (p % 8));
  } else {
    memset(cpus, 0xff, sizeof cpus);
  }
  weftTopoPlaceOfCpus(host, cpus, sizeof cpus, place);
}

static int32_t clampIndex(int32_t v) { return v < -1 || v > (1 << 20) ? -1 : v; }

void weftTopoPlaceSanitize(struct weftTopoPlace *p) {
  p->core = clampIndex(p->core);
  p->numa = clampIndex(p->numa);
  p->package = clampIndex(p->package);
  p->gpu = clampIndex(p->gpu);
  p->bound = p->bound != 0;
  int32_t *counts[] = {&p->ncores, &p->hostCores, &p->npackages, &p->nnuma, &p->ngpus, &p->nnics};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
    if (*counts[i] < 0 || *counts[i] > (1 << 20)) *counts[i] = 0;
  if (p->packageMBps < 0) p->packageMBps = 0;
  if (p->numaMBps < 0) p->numaMBps = 0;
}

void weftTopoPlaceLoc(const struct weftTopoHost *host, const struct weftTopoPlace *place,
                      struct weftTopoLoc *loc) {
  *loc = (struct weftTopoLoc){place->package, place->numa, -1, -1, -1, -1};
  if (place->core < 0 || place->core >= host->ncores) return;
  const struct weftTopoLoc *c = &host->cores[place->core].loc;
  if (place->ncores == 1) *loc = *c; /* bound to several cores: their common NUMA node, package */
}

/* Sort key: placed ranks by package, NUMA node, core; unplaced ones after, all by rank last. */
static int before(const struct weftTopoPlace *places, int a, int b) {
  const struct weftTopoPlace *x = &places[a], *y = &places[b];
  int64_t kx[3] = {x->package < 0 ? INT32_MAX : x->package, x->numa < 0 ? INT32_MAX : x->numa,
                   x->core < 0 ? INT32_MAX : x->core};
  int64_t ky[3] = {y->package < 0 ? INT32_MAX : y->package, y->numa < 0 ? INT32_MAX : y->numa,
                   y->core < 0 ? INT32_MAX : y->core};
  for (int i = 0; i < 3; i++)
    if (kx[i] != ky[i]) return kx[i] < ky[i];
  return a < b;
}

void weftTopoOrderHost(const struct weftTopoPlace *places, int *members, int n) {
  for (int i = 1; i < n; i++) { /* insertion sort: a host has few ranks, and it is stable */
    int v = members[i], j = i;
    for (; j > 0 && before(places, v, members[j - 1]); j--) members[j] = members[j - 1];
    members[j] = v;
  }
}

int weftTopoPackageCrossings(const struct weftTopoPlace *places, const int *hostOf,
                             const int *order, int n) {
  int crossings = 0;
  for (int i = 0; i < n && n > 1; i++) {
    int a = order[i], b = order[(i + 1) % n];
    if (hostOf[a] != hostOf[b]) continue;
    int pa = places[a].package, pb = places[b].package;
    crossings += pa != pb;
  }
  return crossings;
}

/* One ring link that crosses inside a host between packages (kind 0: from and to are
 * packages) or between NUMA nodes of one package (kind 1: NUMA nodes). */
struct crossing {
  int host, kind, from, to, mbps;
};

static int crossingCmp(const void *a, const void *b) {
  const struct crossing *x = a, *y = b;
  if (x->host != y->host) return x->host < y->host ? -1 : 1;
  if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
  if (x->from != y->from) return x->from < y->from ? -1 : 1;
  return x->to < y->to ? -1 : x->to > y->to;
}

/* Links that cross in the same direction between the same two packages of a host run
 * side by side through one direction of the socket link, and a ring is as fast as its
 * slowest link: each gets its share. Likewise links between two NUMA nodes of one package
 * share the package's fabric between them (numaMBps). */
double weftTopoRingCrossGBs(const struct weftTopoPlace *places, const int *hostOf,
                            const int *order, int n) {
  struct crossing *c = malloc(sizeof *c * (size_t)(n > 0 ? n : 1));
  if (c == NULL) return 0;
  int k = 0;
  for (int i = 0; i < n && n > 1; i++) {
    int a = order[i], b = order[(i + 1) % n];
    int pa = places[a].package, pb = places[b].package, na = places[a].numa, nb = places[b].numa;
    if (hostOf[a] != hostOf[b] || pa < 0 || pb < 0) continue;
    if (pa != pb)
      c[k++] = (struct crossing){hostOf[a], 0, pa, pb, places[a].packageMBps};
    else if (na >= 0 && nb >= 0 && na != nb)
      c[k++] = (struct crossing){hostOf[a], 1, na, nb, places[a].numaMBps};
  }
  qsort(c, (size_t)k, sizeof *c, crossingCmp);
  double least = 0;
  for (int i = 0, run = 1; i < k; i++, run++) {
    if (i + 1 < k && crossingCmp(&c[i], &c[i + 1]) == 0) continue;
    double share = c[i].mbps / 1e3 / run;
    if (share > 0 && (least == 0 || share < least)) least = share;
    run = 0;
  }
  free(c);
  return least;
}
