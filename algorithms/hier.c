/* Hierarchical AllReduce, for ranks spread over several hosts with the same number of ranks
 * on each (m ranks per host, h hosts).
 * How it works: the buffer is cut into m contiguous slices. Reduce-scatter on the ring of this
 * host's ranks (shared memory, pipelined in loops of one chunk per slice), so local rank l
 * holds the host's sum of slice l in one piece; AllReduce of that slice on the ring of the
 * ranks with local index l on every host (the inter-host phase: every rank's network path
 * carries a slice, not one leader per host, and the slice is pipelined as a whole, so the
 * link stays busy); all-gather on the host ring.
 * Steps: 2(m-1) per local loop + 2(h-1) per inter-host loop. Bytes per rank: 2(m-1)/m * bytes
 * over shared memory, 2(h-1)/h * bytes/m over the network; the m inter-host rings of a host
 * share its interface, which so carries 2(h-1)/h * bytes (the host-aware flat ring: 2(n-1)/n
 * * bytes).
 * cost() = (2 * 2(m-1) + 2(h-1)) * inter-host step + 2(m-1)/m * bytes / local bandwidth
 *          + 2(h-1)/h * bytes / inter-host bandwidth. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core.h"
#include "param.h"
#include "prims.h"
#include "reduce.h"
#include "ring.h"

struct hierState {
  struct weftRing local, inter;
  int m, h;
  double loopBytes; /* bytes per loop (m chunks), the same on every rank (agreed at init) */
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
    if (h < 0)
      snprintf(why, whyLen, "it needs every host to hold the same number of ranks, and the hosts "
               "of these %d ranks hold different numbers", comm->nranks);
    else if (h < 2)
      snprintf(why, whyLen, "it needs 2 or more hosts, and all %d ranks share one host",
               comm->nranks);
    else
      snprintf(why, whyLen, "it needs 2 or more ranks per host, and each of the %d hosts holds one",
               h);
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
  /* The loop size depends on the local rings' slots: every rank takes the smallest of all
   * hosts', so every rank's cost() is the same. */
  struct weftLinkSummary slots = {0, 0, s->local.pieceBytes};
  if (rc == weftSuccess) rc = weftLinkSummaryAgree(comm, &slots, NULL, 0);
  int64_t chunkSlots = weftParamRingChunkSlots();
  s->loopBytes = (double)s->m * (double)(chunkSlots < 1 ? 1 : chunkSlots) * (double)slots.slotBytes;
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
  size_t slice = (a->count + (size_t)s->m - 1) / (size_t)s->m;
  size_t first = slice * (size_t)s->local.index;
  size_t mine = first >= a->count ? 0 : (a->count - first < slice ? a->count - first : slice);
  char *out = (char *)a->recvbuff + first * ts;
  WEFTCHECK(weftRingReduceScatterSlices(&p, &s->local, a->sendbuff, a->recvbuff, a->count, slice,
                                        maxChunk));
  WEFTCHECK(weftRingAllReduceOn(comm, &s->inter, out, out, mine, a->type, a->op, comm->nranks));
  return weftRingAllGatherSlices(&p, &s->local, a->recvbuff, a->count, slice, maxChunk);
}

/* A local step waits for the slowest rank of the host, which on a busy host is a scheduler
 * round trip behind the network progress threads: measured on 4 emulated hosts x 2 ranks,
 * hier's small-size time is (2(m-1) + 2(h-1)) network steps, so local steps are charged as
 * network steps (once: the loops of a local phase pipeline, they do not wait for the network).
 * With that, it loses to the tree below ~40 KiB and is within 10% of the ring or ahead of it
 * above (docs/performance.md, "Several hosts"). */
/* Measured on 4 emulated hosts x 2 (medians of 3, docs/performance.md): hier's small-size time
 * is 1.7x the tree's 6 network steps, i.e. ~10 steps for its 2(m-1) + 2(h-1) = 8: a local step
 * costs about two network steps (a round trip through the scheduler on each side). This puts
 * the tree/hier crossover at ~54 KiB, between the measured 32 KiB and 128 KiB. */
#define HIER_LOCAL_STEP_WEIGHT 2.0

static double hierCost(void *state, const struct weftComm *comm, const struct weftCollArgs *args) {
  size_t count = args->count, bytes = args->bytes;
  (void)count;
  const struct hierState *s = state;
  double overhead = 0.3 * (comm->oversubscribed ? 4 : 1);
  double step = s->inter.latencyUs + overhead, b = (double)bytes;
  return (2.0 * HIER_LOCAL_STEP_WEIGHT * (s->m - 1) + 2.0 * (s->h - 1)) * step +
         2.0 * (s->m - 1) / s->m * b / (s->local.bandwidthGBs * 1e3) +
         2.0 * (s->h - 1) / s->h * b / (s->inter.bandwidthGBs * 1e3);
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
  .colls = WEFT_COLL_BIT(weftCollAllReduce),
  .init = hierInit,
  .cost = hierCost,
  .run = hierAllReduce,
  .finalize = hierFinalize,
};
