/* Hierarchical AllReduce with a NUMA level ("hiernuma"), for hosts with several NUMA nodes:
 * the same slices as hier's AllReduce (hier.c), one level deeper. Where every host holds g >= 2
 * NUMA nodes of m >= 2 ranks each (h >= 1 hosts, n = h * g * m):
 * 1. reduce-scatter on the ring of my NUMA node's ranks: local index i holds the node's sum of
 *    slice i (count / m elements) in one piece;
 * 2. reduce-scatter of that slice on the cross ring, the ranks of my host with my index on
 *    every NUMA node: node j's rank holds the host's sum of piece j (count / (m g));
 * 3. AllReduce of the piece on the ring of the ranks with my node and index on every host
 *    (nothing on one host, but the division of avg);
 * 4. all-gather back on the cross ring, then on the NUMA ring.
 * What crosses between NUMA nodes is then 2(g-1)/g * bytes / m per rank, spread over m cross
 * links side by side, where the flat ring sends its whole 2(n-1)/n * bytes over the few links
 * that cross; and a small call waits for 2(m-1) + 2(g-1) + 2(h-1) steps, not 2(n-1). Bytes per
 * rank are the flat ring's: 2(m-1)/m + 2(g-1)/(g m) = 2(gm-1)/(gm).
 * cost() = 2(m-1) * local step + 2(g-1) * cross step + 2(h-1) * network step
 *          + 2(m-1)/m * bytes / NUMA ring bandwidth
 *          + 2(g-1)/g * bytes/m / cross link bandwidth (its share of the NUMA or socket link)
 *          + 2(h-1)/h * bytes / network bandwidth (the m g rings of a host share its NIC).
 * Across hosts the steps are hier's (a step inside a host counts HIER_LOCAL_STEP_WEIGHT
 * network steps); on one host, the flat ring's (link latency + the step overhead). Only the
 * AllReduce so far (docs/algorithms.md): hier, the ring and the tree run the others. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "hier.h"
#include "hier_numa.h"
#include "prims.h"
#include "reduce.h"
#include "ring.h"
#include "topo.h"

void weftNumaLayoutFree(struct numaLayout *L) {
  free(L->rankAt);
  free(L->hostOf);
  memset(L, 0, sizeof *L);
}

/* Hosts in order of their first rank: hostOf[r], and their number. */
static int numberHosts(const struct weftComm *comm, int *hostOf, int *first) {
  int h = 0;
  for (int r = 0; r < comm->nranks; r++) {
    int k = 0;
    while (k < h && comm->peers[first[k]].hostHash != comm->peers[r].hostHash) k++;
    if (k == h) first[h++] = r;
    hostOf[r] = k;
  }
  return h;
}

/* Host k's ranks into out (package, NUMA node, core order); g and m of that host, or -1 with
 * why when they are not one NUMA node each or not alike. */
static int hostShape(const struct weftComm *comm, const int *hostOf, int k, int *out, int *g,
                     int *m, char *why, size_t whyLen) {
  int cnt = 0;
  for (int r = 0; r < comm->nranks; r++) {
    if (hostOf[r] != k) continue;
    if (comm->peers[r].place.numa < 0) {
      snprintf(why, whyLen, "rank %d is not bound inside one NUMA node", r);
      return -1;
    }
    out[cnt++] = r;
  }
  struct weftTopoPlace *places = malloc(sizeof *places * (size_t)comm->nranks);
  if (places == NULL) return -2;
  for (int r = 0; r < comm->nranks; r++) places[r] = comm->peers[r].place;
  weftTopoOrderHost(places, out, cnt);
  free(places);
  int nodes = 1, run = 1, size = 0;
  for (int i = 1; i <= cnt; i++) {
    if (i < cnt && comm->peers[out[i]].place.numa == comm->peers[out[i - 1]].place.numa) {
      run++;
      continue;
    }
    if (size != 0 && run != size) {
      snprintf(why, whyLen, "the NUMA nodes of host %d hold different numbers of ranks", k);
      return -1;
    }
    size = run, run = 1, nodes += i < cnt;
  }
  *g = nodes, *m = size;
  return 0;
}

static int checkShape(const struct numaLayout *L, int g, int m, int k, char *why, size_t whyLen) {
  if (g < 2) snprintf(why, whyLen, "host %d's ranks share one NUMA node", k);
  else if (m < 2) snprintf(why, whyLen, "host %d has one rank per NUMA node (hier's or the ring's case)", k);
  else if (k > 0 && (g != L->g || m != L->m))
    snprintf(why, whyLen, "host %d holds %d NUMA nodes of %d ranks, host 0 %d of %d", k, g, m,
             L->g, L->m);
  else return 0;
  return -1;
}

int weftNumaLayoutInit(const struct weftComm *comm, struct numaLayout *L, char *why,
                       size_t whyLen) {
  int n = comm->nranks, rc = 0;
  memset(L, 0, sizeof *L);
  int *first = malloc(sizeof(int) * (size_t)n);
  L->hostOf = malloc(sizeof(int) * (size_t)n);
  L->rankAt = malloc(sizeof(int) * (size_t)n);
  if (first == NULL || L->hostOf == NULL || L->rankAt == NULL) rc = -2;
  if (rc == 0) L->h = numberHosts(comm, L->hostOf, first);
  for (int k = 0, at = 0; rc == 0 && k < L->h; k++) {
    int g = 0, m = 0;
    rc = hostShape(comm, L->hostOf, k, L->rankAt + at, &g, &m, why, whyLen);
    if (rc == 0) rc = checkShape(L, g, m, k, why, whyLen);
    if (rc == 0) L->g = g, L->m = m, at += g * m;
  }
  free(first);
  if (rc != 0) weftNumaLayoutFree(L);
  return rc;
}

void weftNumaCrossOrder(const struct numaLayout *L, int *order) {
  int g = L->g, m = L->m, at = 0;
  for (int k = 0; k < L->h; k++)
    for (int i = 0; i < m; i++)
      for (int j = 0; j < g; j++) order[at++] = L->rankAt[(k * g + j) * m + i];
}

/* My host, NUMA node and index in it. */
static void whereAmI(const struct numaLayout *L, int rank, int *k, int *j, int *i) {
  for (int at = 0; at < L->h * L->g * L->m; at++)
    if (L->rankAt[at] == rank) {
      *i = at % L->m, *j = at / L->m % L->g, *k = at / (L->m * L->g);
      return;
    }
}

static weftResult_t buildRings(struct weftComm *comm, struct numaState *s) {
  const struct numaLayout *L = &s->L;
  int k = 0, j = 0, i = 0, g = L->g, m = L->m, h = L->h;
  whereAmI(L, comm->rank, &k, &j, &i);
  int *order = malloc(sizeof(int) * (size_t)comm->nranks);
  if (order == NULL) return weftSetError(weftSystemError, "out of memory");
  weftResult_t rc;
  for (int x = 0; x < m; x++) order[x] = L->rankAt[(k * g + j) * m + x];
  WEFTCHECKGOTO(weftRingSetup(comm, &s->numa, order, m, WEFT_TAG_NUMA_RING), rc, out);
  for (int x = 0; x < g; x++) order[x] = L->rankAt[(k * g + x) * m + i];
  WEFTCHECKGOTO(weftRingSetup(comm, &s->cross, order, g, WEFT_TAG_CROSS_RING), rc, out);
  for (int x = 0; x < h; x++) order[x] = L->rankAt[(x * g + j) * m + i];
  WEFTCHECKGOTO(weftRingSetup(comm, &s->inter, order, h, WEFT_TAG_NUMA_INTER_RING), rc, out);
  struct weftTopoPlace *places = malloc(sizeof *places * (size_t)comm->nranks);
  if (places == NULL) {
    rc = weftSetError(weftSystemError, "out of memory");
    goto out;
  }
  for (int r = 0; r < comm->nranks; r++) places[r] = comm->peers[r].place;
  weftNumaCrossOrder(L, order);
  s->cross.crossGBs = weftTopoRingCrossGBs(places, L->hostOf, order, comm->nranks);
  free(places);
out:
  free(order);
  return rc;
}

static weftResult_t numaFinalize(void *state);

static weftResult_t numaInit(struct weftComm *comm, void **state, char *why, size_t whyLen) {
  *state = NULL;
  struct numaState *s = calloc(1, sizeof *s);
  if (s == NULL) return weftSetError(weftSystemError, "out of memory");
  int shape = weftNumaLayoutInit(comm, &s->L, why, whyLen);
  if (shape != 0) {
    free(s);
    return shape == -2 ? weftSetError(weftSystemError, "out of memory") : weftSuccess;
  }
  weftResult_t rc = buildRings(comm, s);
  if (rc != weftSuccess) {
    numaFinalize(s);
    return rc;
  }
  *state = s;
  return weftSuccess;
}

/* Prims over one ring's links, cut at its pieces; nothing divided (the innermost AllReduce
 * divides by nranks). */
static size_t ringPrims(struct weftPrims *p, struct weftComm *comm, struct weftRing *ring,
                        const struct weftCollArgs *a) {
  struct weftConn *send = &ring->send, *recv = &ring->recv;
  weftPrimsInitMulti(p, comm, &send, 1, &recv, 1, a->type, a->op, 1);
  weftPrimsSetPiece(p, ring->pieceBytes);
  return weftRingMaxChunk(p);
}

/* The part of count elements cut in n slices of ceil(count / n) that position index holds. */
static size_t sliceOf(size_t count, int n, int index, size_t *first) {
  size_t slice = (count + (size_t)n - 1) / (size_t)n;
  *first = slice * (size_t)index;
  return *first >= count ? 0 : (count - *first < slice ? count - *first : slice);
}

static weftResult_t numaAllReduce(struct numaState *s, struct weftComm *comm,
                                  const struct weftCollArgs *a) {
  struct weftPrims pn, pc;
  size_t ts = weftTypeSize(a->type), at1, at2;
  int m = s->numa.n, g = s->cross.n;
  size_t chunkN = ringPrims(&pn, comm, &s->numa, a), chunkC = ringPrims(&pc, comm, &s->cross, a);
  size_t slice1 = (a->count + (size_t)m - 1) / (size_t)m;
  size_t mine1 = sliceOf(a->count, m, s->numa.index, &at1);
  char *part = (char *)a->recvbuff + at1 * ts;
  size_t slice2 = (mine1 + (size_t)g - 1) / (size_t)g;
  size_t mine2 = sliceOf(mine1, g, s->cross.index, &at2);
  char *piece = part + at2 * ts;
  WEFTCHECK(weftRingReduceScatterSlices(&pn, &s->numa, a->sendbuff, a->recvbuff, a->count, slice1,
                                        chunkN));
  WEFTCHECK(weftRingReduceScatterSlices(&pc, &s->cross, part, part, mine1, slice2, chunkC));
  WEFTCHECK(weftRingAllReduceOn(comm, &s->inter, piece, piece, mine2, a->type, a->op,
                                comm->nranks));
  WEFTCHECK(weftRingAllGatherSlices(&pc, &s->cross, part, mine1, slice2, chunkC));
  return weftRingAllGatherSlices(&pn, &s->numa, a->recvbuff, a->count, slice1, chunkN);
}

static weftResult_t numaRun(void *state, struct weftComm *comm, const struct weftCollArgs *a) {
  return numaAllReduce(state, comm, a);
}

static double stepUs(const struct weftRing *ring, const struct weftComm *comm) {
  return ring->latencyUs + 0.3 * (comm->oversubscribed ? 4 : 1);
}

static double numaCost(void *state, const struct weftComm *comm, const struct weftCollArgs *args) {
  const struct numaState *s = state;
  int m = s->L.m, g = s->L.g, h = s->L.h;
  double b = (double)args->bytes;
  double net = h > 1 ? stepUs(&s->inter, comm) : 0;
  double local = h > 1 ? HIER_LOCAL_STEP_WEIGHT * net : stepUs(&s->numa, comm);
  double cross = h > 1 ? HIER_LOCAL_STEP_WEIGHT * net : stepUs(&s->cross, comm);
  double us = 2.0 * (m - 1) * local + 2.0 * (g - 1) * cross + 2.0 * (h - 1) * net;
  us += 2.0 * (m - 1) / m * b / (weftRingBandwidth(&s->numa) * 1e3);
  us += 2.0 * (g - 1) / g * b / m / (weftRingBandwidth(&s->cross) * 1e3);
  if (h > 1) us += 2.0 * (h - 1) / h * b / (s->inter.bandwidthGBs * 1e3);
  return us;
}

static weftResult_t numaFinalize(void *state) {
  struct numaState *s = state;
  weftRingClose(&s->numa);
  weftRingClose(&s->cross);
  weftRingClose(&s->inter);
  weftNumaLayoutFree(&s->L);
  free(s);
  return weftSuccess;
}

const struct weftAlgoOps weftAlgoHierNuma = {
  .size = sizeof(struct weftAlgoOps),
  .name = "hiernuma",
  .colls = WEFT_COLL_BIT(weftCollAllReduce),
  .init = numaInit,
  .cost = numaCost,
  .run = numaRun,
  .finalize = numaFinalize,
};
