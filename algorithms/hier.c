/* Hierarchical AllReduce, for ranks spread over several hosts with the same number of ranks
 * on each (m ranks per host, h hosts).
 * How it works, per loop of m chunks: reduce-scatter on the ring of this host's ranks (shared
 * memory), so local rank l holds the host's sum of chunk l; AllReduce of that chunk on the ring
 * of the ranks with local index l on every host (the inter-host step: every rank's network
 * link carries a slice, not one leader per host); all-gather on the host ring.
 * Steps per loop: 2(m-1) local + 2(h-1) inter-host. Bytes per rank: 2(m-1)/m * bytes over
 * shared memory, 2(h-1)/h * bytes/m over the network (the flat ring sends 2(n-1)/n * bytes
 * over its slowest link).
 * cost() = local ring phases over shared memory + the inter-host ring cost of bytes/m. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core.h"
#include "prims.h"
#include "reduce.h"
#include "ring.h"

struct hierState {
  struct weftRing local, inter;
  int m, h;
};

/* Hosts in order of their first rank; *hostOf[r] = index of r's host. Returns hosts, or -1
 * when hosts hold different numbers of ranks. */
static int hostLayout(const struct weftComm *comm, int *hostOf, int *perHost) {
  int h = 0;
  uint64_t *hashes = malloc(sizeof(uint64_t) * (size_t)comm->nranks);
  int *count = calloc((size_t)comm->nranks, sizeof(int));
  for (int r = 0; r < comm->nranks; r++) {
    int k = 0;
    while (k < h && hashes[k] != comm->peers[r].hostHash) k++;
    if (k == h) hashes[h++] = comm->peers[r].hostHash;
    hostOf[r] = k;
    count[k]++;
  }
  *perHost = count[0];
  for (int k = 1; k < h; k++)
    if (count[k] != count[0]) h = -1;
  free(hashes);
  free(count);
  return h;
}

static weftResult_t buildRings(struct weftComm *comm, struct hierState *s, const int *hostOf) {
  int myHost = hostOf[comm->rank], n = comm->nranks;
  int *local = malloc(sizeof(int) * (size_t)s->m), *inter = malloc(sizeof(int) * (size_t)s->h);
  int *seen = calloc((size_t)s->h, sizeof(int));
  weftResult_t rc = weftSuccess;
  if (local == NULL || inter == NULL || seen == NULL) {
    rc = weftSetError(weftSystemError, "out of memory");
    goto out;
  }
  int nl = 0;
  for (int r = 0; r < n; r++)
    if (hostOf[r] == myHost) local[nl++] = r;
  for (int r = 0; r < n; r++) /* rank r is local index seen[host] of its host */
    if (seen[hostOf[r]]++ == comm->localRank) inter[hostOf[r]] = r;
  WEFTCHECKGOTO(weftRingSetup(comm, &s->local, local, s->m, WEFT_TAG_LOCAL_RING), rc, out);
  WEFTCHECKGOTO(weftRingSetup(comm, &s->inter, inter, s->h, WEFT_TAG_INTER_RING), rc, out);
out:
  free(local);
  free(inter);
  free(seen);
  return rc;
}

static weftResult_t hierFinalize(void *state);

static weftResult_t hierInit(struct weftComm *comm, void **state, char *why, size_t whyLen) {
  *state = NULL;
  int *hostOf = malloc(sizeof(int) * (size_t)comm->nranks);
  if (hostOf == NULL) return weftSetError(weftSystemError, "out of memory");
  int m = 0, h = hostLayout(comm, hostOf, &m);
  if (h < 2 || m < 2) {
    snprintf(why, whyLen, h < 0 ? "hosts hold different numbers of ranks"
                                : h < 2 ? "one host" : "one rank per host");
    free(hostOf);
    return weftSuccess;
  }
  struct hierState *s = calloc(1, sizeof *s);
  if (s == NULL) {
    free(hostOf);
    return weftSetError(weftSystemError, "out of memory");
  }
  s->m = m;
  s->h = h;
  weftResult_t rc = buildRings(comm, s, hostOf);
  free(hostOf);
  if (rc != weftSuccess) {
    hierFinalize(s);
    return rc;
  }
  *state = s;
  return weftSuccess;
}

static weftResult_t hierAllReduce(void *state, struct weftComm *comm, const struct weftCollArgs *a) {
  struct hierState *s = state;
  struct weftPrims p;
  struct weftConn *send = &s->local.send, *recv = &s->local.recv;
  weftPrimsInitMulti(&p, comm, &send, 1, &recv, 1, a->type, a->op, 1);
  weftPrimsSetPiece(&p, s->local.pieceBytes);
  size_t maxChunk = weftRingMaxChunk(&p), ts = weftTypeSize(a->type);
  char *out = a->recvbuff;
  for (size_t off = 0; off < a->count; off += (size_t)s->m * maxChunk) {
    size_t first, n;
    WEFTCHECK(weftRingReduceScatterLoop(&p, &s->local, a->sendbuff, out, a->count, off, maxChunk,
                                        &first, &n));
    WEFTCHECK(weftRingAllReduceOn(comm, &s->inter, out + first * ts, out + first * ts, n, a->type,
                                  a->op, comm->nranks));
    WEFTCHECK(weftRingAllGatherLoop(&p, &s->local, out, a->count, off, maxChunk));
  }
  return weftSuccess;
}

static double hierCost(void *state, const struct weftComm *comm, size_t bytes) {
  const struct hierState *s = state;
  double localStep = s->local.latencyUs + 0.3 * (comm->nLocalRanks > weftTopoCpuCount() ? 4 : 1);
  double local = 2.0 * (s->m - 1) * localStep +
                 2.0 * (s->m - 1) / s->m * (double)bytes / (s->local.bandwidthGBs * 1e3);
  return local + weftRingCost(comm, &s->inter, bytes / (size_t)s->m);
}

static weftResult_t hierFinalize(void *state) {
  struct hierState *s = state;
  weftRingClose(&s->local);
  weftRingClose(&s->inter);
  free(s);
  return weftSuccess;
}

const struct weftAlgoOps weftAlgoHier = {
  .size = sizeof(struct weftAlgoOps),
  .name = "hier",
  .init = hierInit,
  .cost = hierCost,
  .allReduce = hierAllReduce,
  .finalize = hierFinalize,
};
