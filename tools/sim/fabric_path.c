/* The links of a fabric and the path of a message between two ranks.
 * Links, each one way with its own bandwidth (a message occupies every link of its path for
 * its bytes over that link's bandwidth, docs/scale.md "The model"):
 * - per rank: its scale-up port out and in (the host's switch is non-blocking);
 * - per host and NIC: out and in, each behind a token bucket where the fabric gives a burst;
 * - per leaf (leafspine, rail): its uplinks to the spines and its downlinks from them, each
 *   bundle as one link of the leaf's downward capacity over the oversubscription (ECMP spread
 *   perfectly: the model has no adaptive routing nor hash collisions).
 * Accelerator g of a host uses NIC g * nics / gpus. leafspine: every NIC of a host on the
 * host's leaf; rail: NIC r of every host of a group of hosts_per_leaf on that group's leaf of
 * rail r, so traffic between rails, or between groups, crosses the spines. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

static int railOf(const struct simFabric *f, int rank) {
  return f->nics >= f->gpus ? rank % f->gpus : (rank % f->gpus) * f->nics / f->gpus;
}

int simLinksInit(struct simLinks *L, const struct simFabric *f, int nranks, int fold,
                 char *err, size_t errLen) {
  memset(L, 0, sizeof *L);
  L->f = f;
  L->nranks = nranks;
  L->fold = fold;
  L->nhosts = (nranks + f->gpus - 1) / f->gpus;
  int hpl = f->net == SIM_NET_FLAT ? L->nhosts : f->hostsPerLeaf;
  int groups = (L->nhosts + hpl - 1) / hpl;
  L->nleaves = f->net == SIM_NET_FLAT ? 0 : f->net == SIM_NET_LEAFSPINE ? groups : groups * f->nics;
  int ranks = fold ? f->gpus : nranks, hosts = fold ? 1 : L->nhosts;
  int leaves = fold ? (f->net == SIM_NET_RAIL ? f->nics : L->nleaves > 0) : L->nleaves;
  L->nlinks = 2 * ranks + 2 * hosts * f->nics + 2 * leaves;
  L->GBs = malloc(sizeof(double) * (size_t)L->nlinks);
  L->burst = calloc((size_t)L->nlinks, sizeof(double));
  if (L->GBs == NULL || L->burst == NULL) {
    simLinksFree(L);
    snprintf(err, errLen, "out of memory for %d links", L->nlinks);
    return -1;
  }
  int i = 0;
  for (; i < 2 * ranks; i++) L->GBs[i] = f->suGBs;
  for (; i < 2 * ranks + 2 * hosts * f->nics; i++) {
    L->GBs[i] = f->nicGBs;
    L->burst[i] = f->nicBurstBytes;
  }
  /* a leaf's downward capacity: its hosts' NICs on it */
  double down = (double)hpl * (f->net == SIM_NET_RAIL ? 1 : f->nics) * f->nicGBs;
  double bundle = down / f->oversub;
  if (fold) bundle /= hpl; /* every host of the leaf sends alike: host 0 gets its share */
  for (; i < L->nlinks; i++) L->GBs[i] = bundle;
  return 0;
}

void simLinksFree(struct simLinks *L) {
  free(L->GBs);
  free(L->burst);
  L->GBs = NULL;
  L->burst = NULL;
}

/* Link numbers: ranks' ports, hosts' NICs, leaves' bundles; folded onto host 0 when fold. */
static int suOut(const struct simLinks *L, int r) { return 2 * (L->fold ? r % L->f->gpus : r); }
static int suIn(const struct simLinks *L, int r) { return suOut(L, r) + 1; }
static int ranksLinks(const struct simLinks *L) { return 2 * (L->fold ? L->f->gpus : L->nranks); }
static int nicOut(const struct simLinks *L, int host, int rail) {
  return ranksLinks(L) + 2 * ((L->fold ? 0 : host) * L->f->nics + rail);
}
static int nicIn(const struct simLinks *L, int host, int rail) { return nicOut(L, host, rail) + 1; }
static int leafUp(const struct simLinks *L, int leaf) {
  int hosts = L->fold ? 1 : L->nhosts;
  int folded = L->fold ? (L->f->net == SIM_NET_RAIL ? leaf % L->f->nics : 0) : leaf;
  return ranksLinks(L) + 2 * hosts * L->f->nics + 2 * folded;
}
static int leafDown(const struct simLinks *L, int leaf) { return leafUp(L, leaf) + 1; }

/* Hosts hold contiguous ranks, gpus each. */
int simHostOf(const struct simFabric *f, int rank) { return rank / f->gpus; }

static int leafOf(const struct simLinks *L, int host, int rail) {
  int group = host / L->f->hostsPerLeaf;
  return L->f->net == SIM_NET_RAIL ? group * L->f->nics + rail : group;
}

static void add(const struct simLinks *L, struct simPath *p, int link) {
  p->link[p->nlinks++] = link;
  if (L->GBs[link] < p->minGBs) p->minGBs = L->GBs[link];
}

void simPathOf(const struct simLinks *L, int src, int dst, struct simPath *p) {
  const struct simFabric *f = L->f;
  p->nlinks = 0;
  p->minGBs = 1e300;
  int hs = simHostOf(f, src), hd = simHostOf(f, dst);
  if (hs == hd) {
    add(L, p, suOut(L, src));
    add(L, p, suIn(L, dst));
    p->latUs = f->suLatUs;
    return;
  }
  int rs = railOf(f, src), rd = railOf(f, dst);
  add(L, p, nicOut(L, hs, rs));
  p->latUs = f->nicLatUs;
  if (f->net != SIM_NET_FLAT) {
    int ls = leafOf(L, hs, rs), ld = leafOf(L, hd, rd);
    if (ls != ld) {
      add(L, p, leafUp(L, ls));
      add(L, p, leafDown(L, ld));
      p->latUs += 2 * f->hopUs;
    }
  }
  add(L, p, nicIn(L, hd, rd));
}
