/* Where the ranks of a communicator are, for the hierarchical schedules: hosts, their sizes,
 * leaders and runs of consecutive ranks, and the windows that cut a host's block of parts. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "hier.h"

void weftHierLayoutFree(struct hierLayout *L) {
  free(L->hostOf);
  free(L->localIndex);
  free(L->size);
  free(L->leader);
  free(L->byHost);
  free(L->hostFirst);
  free(L->runStart);
  free(L->runs);
  memset(L, 0, sizeof *L);
}

/* Hosts in order of their first rank. */
static void numberHosts(const struct weftComm *comm, struct hierLayout *L, uint64_t *hashes) {
  for (int r = 0; r < comm->nranks; r++) {
    int k = 0;
    while (k < L->h && hashes[k] != comm->peers[r].hostHash) k++;
    if (k == L->h) {
      hashes[L->h] = comm->peers[r].hostHash;
      L->leader[L->h++] = r;
    }
    L->hostOf[r] = k;
    L->localIndex[r] = L->size[k]++;
  }
}

/* Each host's ranks, and its runs of consecutive ranks, host after host. */
static void groupByHost(struct hierLayout *L) {
  int nruns = 0, placed = 0;
  for (int k = 0; k < L->h; k++) {
    L->runStart[k] = nruns;
    L->hostFirst[k] = placed;
    for (int r = 0; r < L->nranks; r++) {
      if (L->hostOf[r] != k) continue;
      L->byHost[placed++] = r;
      if (r > 0 && L->hostOf[r - 1] == k) L->runs[nruns - 1].nparts++;
      else L->runs[nruns++] = (struct hierRun){r, 1};
    }
  }
  L->runStart[L->h] = nruns;
}

/* Each host's ranks in the order of the communicator's ring inside a host (package, NUMA node,
 * core: weftTopoOrderHost), so the host's chain and ring cross between packages once per
 * boundary; local indexes and leaders follow that order. The runs stay in rank order: they
 * say where a host's parts lie in a buffer, not who passes them on. */
static weftResult_t orderHosts(const struct weftComm *comm, struct hierLayout *L) {
  struct weftTopoPlace *places = malloc(sizeof *places * (size_t)L->nranks);
  if (places == NULL) return weftSetError(weftSystemError, "out of memory");
  for (int r = 0; r < L->nranks; r++) places[r] = comm->peers[r].place;
  for (int k = 0; k < L->h; k++) {
    int *members = L->byHost + L->hostFirst[k];
    weftTopoOrderHost(places, members, L->size[k]);
    for (int i = 0; i < L->size[k]; i++) L->localIndex[members[i]] = i;
    L->leader[k] = members[0];
  }
  free(places);
  return weftSuccess;
}

weftResult_t weftHierLayoutInit(const struct weftComm *comm, struct hierLayout *L) {
  int n = comm->nranks;
  memset(L, 0, sizeof *L);
  L->nranks = n;
  L->hostOf = malloc(sizeof(int) * (size_t)n);
  L->localIndex = malloc(sizeof(int) * (size_t)n);
  L->size = calloc((size_t)n, sizeof(int));
  L->leader = malloc(sizeof(int) * (size_t)n);
  L->runStart = malloc(sizeof(int) * (size_t)(n + 1));
  L->runs = malloc(sizeof(struct hierRun) * (size_t)n);
  L->byHost = malloc(sizeof(int) * (size_t)n);
  L->hostFirst = malloc(sizeof(int) * (size_t)n);
  uint64_t *hashes = malloc(sizeof(uint64_t) * (size_t)n);
  if (!L->hostOf || !L->localIndex || !L->size || !L->leader || !L->runStart || !L->runs ||
      !L->byHost || !L->hostFirst || !hashes) {
    free(hashes);
    weftHierLayoutFree(L);
    return weftSetError(weftSystemError, "out of memory");
  }
  numberHosts(comm, L, hashes);
  free(hashes);
  groupByHost(L);
  weftResult_t rc = orderHosts(comm, L);
  if (rc != weftSuccess) {
    weftHierLayoutFree(L);
    return rc;
  }
  L->minSize = L->maxSize = L->size[0];
  for (int k = 1; k < L->h; k++) {
    if (L->size[k] < L->minSize) L->minSize = L->size[k];
    if (L->size[k] > L->maxSize) L->maxSize = L->size[k];
  }
  return weftSuccess;
}

static size_t piecesOf(size_t elems, size_t pieceCount) {
  return (elems + pieceCount - 1) / pieceCount;
}

size_t weftHierWindows(const struct hierLayout *L, const struct hierCut *cut, int k) {
  size_t pieces = 0;
  for (int i = L->runStart[k]; i < L->runStart[k + 1]; i++)
    pieces += piecesOf((size_t)L->runs[i].nparts * cut->partCount, cut->pieceCount);
  return (pieces + cut->slots - 1) / cut->slots;
}

int weftHierWindowSegs(const struct hierLayout *L, const struct hierCut *cut, int k, size_t w,
                       struct hierSeg *segs) {
  size_t lo = w * cut->slots, hi = lo + cut->slots; /* the window's pieces in the block */
  size_t base = 0, pos = 0;                         /* pieces before this run; elements so far */
  int nsegs = 0;
  for (int i = L->runStart[k]; i < L->runStart[k + 1] && base < hi; i++) {
    size_t elems = (size_t)L->runs[i].nparts * cut->partCount;
    size_t pieces = piecesOf(elems, cut->pieceCount);
    size_t a = lo > base ? lo - base : 0, b = hi - base < pieces ? hi - base : pieces;
    if (a < b) {
      size_t first = a * cut->pieceCount, end = b * cut->pieceCount < elems ? b * cut->pieceCount : elems;
      segs[nsegs++] = (struct hierSeg){(size_t)L->runs[i].first * cut->partCount + first,
                                       end - first, pos};
      pos += end - first;
    }
    base += pieces;
  }
  return nsegs;
}
