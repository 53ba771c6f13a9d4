/* Hierarchical schedules, for ranks spread over several hosts: the work inside a host goes
 * over shared memory, and only one step's worth per host crosses the network, so fewer hops
 * wait in series than on the flat ring. Runs on every layout of 2 or more hosts (hosts may hold
 * different numbers of ranks, placed anywhere); Broadcast and Reduce are in hier_rooted.c,
 * AllGather and ReduceScatter in hier_blocks.c, the layout in hier_layout.c.
 * AllReduce, where every host holds the same m >= 2 ranks (h hosts), over slices: the buffer
 * is cut into m contiguous slices. Reduce-scatter on the ring of this host's ranks (shared
 * memory, pipelined in loops of one chunk per slice), so local rank l holds the host's sum of
 * slice l in one piece; AllReduce of that slice on the ring of the ranks with local index l on
 * every host (the inter-host phase: every rank's network path carries a slice, not one leader
 * per host, and the slice is pipelined as a whole, so the link stays busy); all-gather on the
 * host ring.
 * Steps: 2(m-1) per local loop + 2(h-1) per inter-host loop. Bytes per rank: 2(m-1)/m * bytes
 * over shared memory, 2(h-1)/h * bytes/m over the network; the m inter-host rings of a host
 * share its interface, which so carries 2(h-1)/h * bytes (the host-aware flat ring: 2(n-1)/n
 * * bytes).
 * cost() = (2 * 2(m-1) + 2(h-1)) * inter-host step + 2(m-1)/m * bytes / local bandwidth
 *          + 2(h-1)/h * bytes / inter-host bandwidth.
 * AllReduce elsewhere (hosts of different sizes, or one rank per host): the hierarchical
 * Reduce to rank 0, then its Broadcast; cost() is the sum of theirs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "hier.h"
#include "param.h"
#include "prims.h"
#include "reduce.h"
#include "ring.h"

/* The ring of my host's ranks, and the inter-host ring (see struct hierState). */
static weftResult_t buildRings(struct weftComm *comm, struct hierState *s) {
  const struct hierLayout *L = &s->L;
  int me = comm->rank, k = L->hostOf[me], li = L->localIndex[me];
  int *local = malloc(sizeof(int) * (size_t)L->size[k]), *inter = malloc(sizeof(int) * (size_t)L->h);
  weftResult_t rc = weftSuccess;
  if (local == NULL || inter == NULL) {
    rc = weftSetError(weftSystemError, "out of memory");
    goto out;
  }
  int nl = L->size[k], ni = L->h;
  memcpy(local, L->byHost + L->hostFirst[k], sizeof(int) * (size_t)nl);
  for (int j = 0; j < L->h; j++) inter[j] = L->byHost[L->hostFirst[j] + (s->slices ? li : 0)];
  if (!s->slices && li != 0) inter[0] = me, ni = 1;
  WEFTCHECKGOTO(weftRingSetup(comm, &s->local, local, nl, WEFT_TAG_LOCAL_RING), rc, out);
  WEFTCHECKGOTO(weftRingSetup(comm, &s->inter, inter, ni, WEFT_TAG_INTER_RING), rc, out);
out:
  free(local);
  free(inter);
  return rc;
}

/* What every rank must agree on for its costs and piece sizes (collective). */
static weftResult_t agreeOnLinks(struct weftComm *comm, struct hierState *s) {
  struct weftLinkSummary local = {0, 0, 0}, inter = {0, 0, 0}, all;
  weftLinkSummaryAdd(&local, &s->local.send);
  weftLinkSummaryAdd(&local, &s->local.recv);
  weftLinkSummaryAdd(&inter, &s->inter.send);
  weftLinkSummaryAdd(&inter, &s->inter.recv);
  all = inter;
  if (local.slotBytes > 0 && (all.slotBytes == 0 || local.slotBytes < all.slotBytes))
    all.slotBytes = local.slotBytes;
  WEFTCHECK(weftLinkSummaryAgree(comm, &local, NULL, 0));
  WEFTCHECK(weftLinkSummaryAgree(comm, &all, NULL, 0));
  WEFTCHECK(weftLinkSummaryAgree(comm, &inter, s->L.leader, s->L.h));
  int64_t chunkSlots = weftParamRingChunkSlots();
  s->slots = (size_t)(chunkSlots < 1 ? 1 : chunkSlots);
  s->pieceBytes = all.slotBytes;
  s->netLatencyUs = inter.latencyUs;
  s->netBandwidthGBs = inter.bandwidthGBs;
  /* a host of one rank has no local link; then none is slower than the network's */
  s->localBandwidthGBs = local.bandwidthGBs > 0 ? local.bandwidthGBs : inter.bandwidthGBs;
  s->scratch = malloc(s->slots * s->pieceBytes);
  if (s->scratch == NULL) return weftSetError(weftSystemError, "out of memory");
  return weftSuccess;
}

static weftResult_t hierFinalize(void *state);

static weftResult_t hierInit(struct weftComm *comm, void **state, char *why, size_t whyLen) {
  *state = NULL;
  struct hierState *s = calloc(1, sizeof *s);
  if (s == NULL) return weftSetError(weftSystemError, "out of memory");
  weftResult_t rc = weftHierLayoutInit(comm, &s->L);
  if (rc != weftSuccess) {
    free(s);
    return rc;
  }
  if (s->L.h < 2) {
    snprintf(why, whyLen, "it needs 2 or more hosts, and all %d ranks share one host", comm->nranks);
    hierFinalize(s);
    return weftSuccess;
  }
  s->slices = s->L.minSize == s->L.maxSize && s->L.minSize >= 2;
  rc = buildRings(comm, s);
  if (rc == weftSuccess) rc = agreeOnLinks(comm, s);
  if (rc != weftSuccess) {
    hierFinalize(s);
    return rc;
  }
  *state = s;
  return weftSuccess;
}

void weftHierPrims(struct weftPrims *p, struct weftComm *comm, const struct hierState *s,
                   struct weftConn *const *sends, int nsend, struct weftConn *const *recvs,
                   int nrecv, const struct weftCollArgs *a) {
  weftPrimsInitMulti(p, comm, sends, nsend, recvs, nrecv, a->type, a->op, comm->nranks);
  weftPrimsSetPiece(p, s->pieceBytes);
}

static weftResult_t slicesAllReduce(struct hierState *s, struct weftComm *comm,
                                    const struct weftCollArgs *a) {
  struct weftPrims p;
  struct weftConn *send = &s->local.send, *recv = &s->local.recv;
  int m = s->L.maxSize;
  weftPrimsInitMulti(&p, comm, &send, 1, &recv, 1, a->type, a->op, 1);
  weftPrimsSetPiece(&p, s->local.pieceBytes);
  size_t maxChunk = weftRingMaxChunk(&p), ts = weftTypeSize(a->type);
  size_t slice = (a->count + (size_t)m - 1) / (size_t)m;
  size_t first = slice * (size_t)s->local.index;
  size_t mine = first >= a->count ? 0 : (a->count - first < slice ? a->count - first : slice);
  char *out = (char *)a->recvbuff + first * ts;
  WEFTCHECK(weftRingReduceScatterSlices(&p, &s->local, a->sendbuff, a->recvbuff, a->count, slice,
                                        maxChunk));
  WEFTCHECK(weftRingAllReduceOn(comm, &s->inter, out, out, mine, a->type, a->op, comm->nranks));
  return weftRingAllGatherSlices(&p, &s->local, a->recvbuff, a->count, slice, maxChunk);
}

/* Reduce to rank 0, then Broadcast from it: off rank 0, Reduce leaves recvbuff alone and has
 * read sendbuff (in place, the same buffer) before the Broadcast writes it. */
static weftResult_t reduceBroadcast(struct hierState *s, struct weftComm *comm,
                                    const struct weftCollArgs *a) {
  struct weftCollArgs step = *a;
  step.root = 0;
  WEFTCHECK(weftHierReduce(s, comm, &step));
  step.sendbuff = a->recvbuff;
  return weftHierBroadcast(s, comm, &step);
}

static weftResult_t hierRun(void *state, struct weftComm *comm, const struct weftCollArgs *a) {
  struct hierState *s = state;
  switch (a->coll) {
    case weftCollBroadcast: return weftHierBroadcast(s, comm, a);
    case weftCollReduce: return weftHierReduce(s, comm, a);
    case weftCollAllGather: return weftHierAllGather(s, comm, a);
    case weftCollReduceScatter: return weftHierReduceScatter(s, comm, a);
    default: return s->slices ? slicesAllReduce(s, comm, a) : reduceBroadcast(s, comm, a);
  }
}

double weftHierNetStep(const struct hierState *s, const struct weftComm *comm) {
  return s->netLatencyUs + 0.3 * (comm->oversubscribed ? 4 : 1);
}

double weftHierLocalStep(const struct hierState *s, const struct weftComm *comm) {
  return HIER_LOCAL_STEP_WEIGHT * weftHierNetStep(s, comm);
}

static double slicesCost(const struct hierState *s, const struct weftComm *comm, size_t bytes) {
  int m = s->L.maxSize, h = s->L.h;
  double overhead = 0.3 * (comm->oversubscribed ? 4 : 1);
  double step = s->inter.latencyUs + overhead, b = (double)bytes;
  return (2.0 * HIER_LOCAL_STEP_WEIGHT * (m - 1) + 2.0 * (h - 1)) * step +
         2.0 * (m - 1) / m * b / (s->local.bandwidthGBs * 1e3) +
         2.0 * (h - 1) / h * b / (s->inter.bandwidthGBs * 1e3);
}

static double hierCost(void *state, const struct weftComm *comm, const struct weftCollArgs *args) {
  const struct hierState *s = state;
  size_t bytes = args->bytes;
  switch (args->coll) {
    case weftCollBroadcast: return weftHierBroadcastCost(s, comm, bytes, args->root);
    case weftCollReduce: return weftHierReduceCost(s, comm, bytes, args->root);
    case weftCollAllGather: return weftHierAllGatherCost(s, comm, bytes);
    case weftCollReduceScatter: return weftHierReduceScatterCost(s, comm, bytes);
    default:
      if (s->slices) return slicesCost(s, comm, bytes);
      return weftHierReduceCost(s, comm, bytes, 0) + weftHierBroadcastCost(s, comm, bytes, 0);
  }
}

static weftResult_t hierFinalize(void *state) {
  struct hierState *s = state;
  weftRingClose(&s->local);
  weftRingClose(&s->inter);
  weftHierLayoutFree(&s->L);
  free(s->scratch);
  free(s);
  return weftSuccess;
}

const struct weftAlgoOps weftAlgoHier = {
  .size = sizeof(struct weftAlgoOps),
  .name = "hier",
  .colls = WEFT_COLL_BIT(weftCollAllReduce) | WEFT_COLL_BIT(weftCollBroadcast) |
           WEFT_COLL_BIT(weftCollReduce) | WEFT_COLL_BIT(weftCollAllGather) |
           WEFT_COLL_BIT(weftCollReduceScatter),
  .init = hierInit,
  .cost = hierCost,
  .run = hierRun,
  .finalize = hierFinalize,
};
