/* Ring: AllReduce, and Broadcast, Reduce, AllGather and ReduceScatter on the same ring.
 * - Broadcast: a chain from the root along the ring, pipelined in slot-sized pieces; each rank
 *   copies a piece out as it passes it on. n - 1 hops, every rank passes the buffer once.
 * - Reduce: a chain that ends at the root (the rank after it starts; each adds its own).
 * - AllGather: every rank's part travels once around the ring (n - 1 steps, (n-1)/n of the
 *   whole moved per rank); ReduceScatter: the reduce-scatter half of AllReduce, each part
 *   ending at the rank it belongs to (parts are placed by rank, the ring is ordered by host).
 * AllReduce, how it works: the buffer is cut into n chunks per loop (n = ring members). Reduce-scatter:
 * each rank sends one chunk to the next rank, then n-2 times receives a chunk, adds its own
 * contribution and passes it on; after n-1 steps the rank at position i holds the full
 * reduction of chunk i. All-gather: that chunk travels once around the ring (n-1 more steps),
 * each rank copying it out as it passes. Steps: 2(n-1). Bytes sent per rank: 2(n-1)/n * bytes
 * (busbw factor 2(n-1)/n). Every step is pipelined in slot-sized pieces, and a loop's chunk is
 * at most half the FIFO so the first send of every rank completes before anyone receives (no
 * deadlock). The ring is ordered by host, so it crosses between hosts once per host.
 * cost() = 2(n-1) * (slowest link latency + step overhead) + 2(n-1)/n * bytes / slowest link
 * bandwidth, where a link between two packages of a host has the share of the socket link
 * that the ring's links crossing it the same way leave it (weftRingBandwidth): a ring in rank
 * order over ranks bound round robin to 2 sockets puts n/2 links on each direction of it, the
 * package-aware order one.
 * The reduce-scatter and all-gather halves are exported for the hierarchical algorithm. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "copy.h"
#include "core.h"
#include "param.h"
#include "prims.h"
#include "reduce.h"
#include "ring.h"

/* One hop between ranks of a host on a chain that is otherwise idle: shared memory's link
 * latency (transports/shm) plus the per-step overhead weftRingCost charges every step. */
#define WEFT_RING_LOCAL_HOP_US (0.2 + 0.3)

/* Chunk c (taken mod n) of one loop. Interleaved layout (sliceElems 0): the loop covers
 * [loopOffset, loopOffset + n * chunkCount) and chunk c is its c-th part. Sliced layout: the
 * buffer is n contiguous slices of sliceElems, and chunk c is the part of slice c (or of slice
 * order[c], the rank at ring position c, when order is set) that starts loopOffset into it,
 * so after all loops position c holds all of its slice in one piece. */
struct ringLoop {
  size_t count, loopOffset, chunkCount, sliceElems;
  int n;
  const int *order;
};

static size_t chunkIndex(const struct ringLoop *l, int c) {
  size_t i = (size_t)(((c % l->n) + l->n) % l->n);
  return l->order != NULL ? (size_t)l->order[i] : i;
}

static size_t chunkOffset(const struct ringLoop *l, int c) {
  if (l->sliceElems == 0) return l->loopOffset + chunkIndex(l, c) * l->chunkCount;
  return chunkIndex(l, c) * l->sliceElems + l->loopOffset;
}

static size_t chunkCount(const struct ringLoop *l, int c) {
  size_t off = chunkOffset(l, c);
  size_t end = l->sliceElems == 0 ? l->count : (chunkIndex(l, c) + 1) * l->sliceElems;
  if (end > l->count) end = l->count;
  if (off >= end) return 0;
  return end - off < l->chunkCount ? end - off : l->chunkCount;
}

#define AT(buf, c) ((buf) + chunkOffset(l, (c)) * p->typeSize)

/* After it, position r holds the reduction of chunk r at out (final when `final`). */
static weftResult_t reduceScatterLoop(struct weftPrims *p, const struct ringLoop *l, int r,
                                      const char *send, char *out, int final) {
  int n = l->n;
  WEFTCHECK(weftPrimsSend(p, AT(send, r - 1), chunkCount(l, r - 1)));
  for (int j = 2; j < n; j++) WEFTCHECK(weftPrimsRecvReduceSend(p, AT(send, r - j), chunkCount(l, r - j)));
  if (final) return weftPrimsRecvReduceCopy(p, AT(send, r), out, chunkCount(l, r));
  int divisor = p->divisor;
  p->divisor = 1;
  weftResult_t rc = weftPrimsRecvReduceCopy(p, AT(send, r), out, chunkCount(l, r));
  p->divisor = divisor;
  return rc;
}

/* Position r starts with chunk r in recv; after it every chunk is there. */
static weftResult_t allGatherLoop(struct weftPrims *p, const struct ringLoop *l, int r, char *recv) {
  int n = l->n;
  WEFTCHECK(weftPrimsSend(p, AT(recv, r), chunkCount(l, r)));
  for (int j = 1; j < n - 1; j++) WEFTCHECK(weftPrimsRecvCopySend(p, AT(recv, r - j), chunkCount(l, r - j)));
  return weftPrimsRecv(p, AT(recv, r + 1), chunkCount(l, r + 1));
}

static weftResult_t allReduceLoop(struct weftPrims *p, const struct ringLoop *l, int r,
                                  const char *send, char *recv) {
  int n = l->n;
  WEFTCHECK(weftPrimsSend(p, AT(send, r - 1), chunkCount(l, r - 1)));
  for (int j = 2; j < n; j++) WEFTCHECK(weftPrimsRecvReduceSend(p, AT(send, r - j), chunkCount(l, r - j)));
  WEFTCHECK(weftPrimsRecvReduceCopySend(p, AT(send, r), AT(recv, r), chunkCount(l, r)));
  for (int j = 1; j < n - 1; j++) WEFTCHECK(weftPrimsRecvCopySend(p, AT(recv, r - j), chunkCount(l, r - j)));
  return weftPrimsRecv(p, AT(recv, r + 1), chunkCount(l, r + 1));
}
#undef AT

size_t weftRingMaxChunk(const struct weftPrims *p) {
  int64_t slots = weftParamRingChunkSlots();
  if (slots < 1) slots = 1;
  return (size_t)slots * p->pieceCount;
}

weftResult_t weftRingCallToken(struct weftComm *comm, const struct weftCollArgs *a, int send) {
  struct weftPrims p;
  weftPrimsInit(&p, comm, send ? &comm->ring.send : NULL, send ? NULL : &comm->ring.recv, a->type,
                a->op);
  return send ? weftPrimsSendToken(&p) : weftPrimsRecvToken(&p);
}

/* The loop covering [offset, count) with at most maxChunk elements per chunk. */
static struct ringLoop loopAt(size_t count, size_t offset, size_t maxChunk, int n) {
  size_t left = count - offset, loopCount = (size_t)n * maxChunk;
  size_t chunk = left >= loopCount ? maxChunk : (left + (size_t)n - 1) / (size_t)n;
  return (struct ringLoop){count, offset, chunk, 0, n, NULL};
}

weftResult_t weftRingAllReduceOn(struct weftComm *comm, struct weftRing *ring, const void *send,
                                 void *recv, size_t count, weftDataType_t type, weftRedOp_t op,
                                 int divisor) {
  if (ring->n == 1) {
    weftReduceFinalCopy(recv, send, count, type, op, divisor);
    return weftSuccess;
  }
  struct weftPrims p;
  struct weftConn *s = &ring->send, *r = &ring->recv;
  weftPrimsInitMulti(&p, comm, &s, 1, &r, 1, type, op, divisor);
  weftPrimsSetPiece(&p, ring->pieceBytes);
  size_t maxChunk = weftRingMaxChunk(&p);
  for (size_t off = 0; off < count; off += (size_t)ring->n * maxChunk) {
    struct ringLoop l = loopAt(count, off, maxChunk, ring->n);
    WEFTCHECK(allReduceLoop(&p, &l, ring->index, send, recv));
  }
  return weftSuccess;
}

weftResult_t weftRingReduceScatterSlices(struct weftPrims *p, struct weftRing *ring,
                                         const void *send, void *recv, size_t count,
                                         size_t sliceElems, size_t maxChunk) {
  for (size_t off = 0; off < sliceElems; off += maxChunk) {
    struct ringLoop l = {count, off, maxChunk, sliceElems, ring->n, NULL};
    char *out = (char *)recv + chunkOffset(&l, ring->index) * p->typeSize;
    WEFTCHECK(reduceScatterLoop(p, &l, ring->index, send, out, 0));
  }
  return weftSuccess;
}

weftResult_t weftRingAllGatherSlices(struct weftPrims *p, struct weftRing *ring, void *recv,
                                     size_t count, size_t sliceElems, size_t maxChunk) {
  for (size_t off = 0; off < sliceElems; off += maxChunk) {
    struct ringLoop l = {count, off, maxChunk, sliceElems, ring->n, NULL};
    WEFTCHECK(allGatherLoop(p, &l, ring->index, recv));
  }
  return weftSuccess;
}

weftResult_t weftRingAllGatherParts(struct weftPrims *p, struct weftRing *ring, void *recv,
                                    const struct weftRingParts *parts, size_t maxChunk) {
  size_t total = parts->nparts * parts->partCount;
  for (size_t off = 0; off < parts->partCount; off += maxChunk) {
    struct ringLoop l = {total, off, maxChunk, parts->partCount, ring->n, parts->order};
    WEFTCHECK(allGatherLoop(p, &l, ring->index, recv));
  }
  return weftSuccess;
}

weftResult_t weftRingReduceScatterParts(struct weftPrims *p, struct weftRing *ring,
                                        const void *send, void *recv,
                                        const struct weftRingParts *parts, size_t maxChunk,
                                        int final) {
  size_t total = parts->nparts * parts->partCount;
  for (size_t off = 0; off < parts->partCount; off += maxChunk) {
    struct ringLoop l = {total, off, maxChunk, parts->partCount, ring->n, parts->order};
    char *out = (char *)recv + off * p->typeSize;
    WEFTCHECK(reduceScatterLoop(p, &l, ring->index, send, out, final));
  }
  return weftSuccess;
}

double weftRingBandwidth(const struct weftRing *ring) {
  double bw = ring->bandwidthGBs;
  return ring->crossGBs > 0 && ring->crossGBs < bw ? ring->crossGBs : bw;
}

/* The latency part of an AllReduce of fewer elements than members across hosts: chunks are 1
 * element and only `count` of the n carry any (an empty chunk sends no message).
 * - With more ranks than cores on a machine (comm->cpuBound, emulated hosts included), the
 *   cores are the bottleneck: what costs is the messages a rank handles, count/n of the
 *   steps'. Measured on 4 emulated hosts x 2 on 2 cores (8 B = 2 floats): the ring took 0.64x
 *   the tree's time, whose 6 hops all carry data; this predicts 3.5 step costs against 6.
 * - With a core per rank, a chunk that carries data still passes the n - 1 ranks in series
 *   each way: one network hop per host it crosses and a shared-memory hop for the rest. The
 *   discount alone predicted 13 us for 8 B at 4,096 ranks where weft-sim's schedule took
 *   21.6 ms against the tree's 154 us (docs/scale.md).
 * On one host neither holds: a hop there costs the scheduling of the next rank, so the full
 * 2(n - 1) steps are charged: 8 B on 8 ranks of one 2-core host took 28-36 us by the ring
 * (19.6 predicted), against 5.6-7.3 us for one flag exchange (direct's small path, 5.6). */
static double sparseRingLatencyUs(const struct weftComm *comm, int n, size_t count,
                                  double stepUs) {
  if (comm->cpuBound) return 2.0 * (n - 1) * stepUs * (double)count / n;
  int crossings = comm->nHosts < n - 1 ? comm->nHosts : n - 1;
  double localStepUs = WEFT_RING_LOCAL_HOP_US;
  return 2.0 * (crossings * stepUs + (n - 1 - crossings) * localStepUs);
}

double weftRingCost(const struct weftComm *comm, const struct weftRing *ring, size_t count,
                    size_t bytes) {
  int n = ring->n;
  if (n == 1) return 0.1 + (double)bytes / 8e3;
  double lat = ring->latencyUs, bw = weftRingBandwidth(ring);
  double stepUs = lat + 0.3 * (comm->oversubscribed ? 4 : 1);
  double wireBytes = 2.0 * (n - 1) / n * (double)bytes;
  double latencyPart = count < (size_t)n && comm->nHosts > 1
                           ? sparseRingLatencyUs(comm, n, count, stepUs)
                           : 2.0 * (n - 1) * stepUs;
  return latencyPart + wireBytes / (bw * 1e3);
}

static weftResult_t ringInit(struct weftComm *comm, void **state, char *why, size_t whyLen) {
  (void)comm;
  (void)why;
  (void)whyLen;
  *state = &comm->ring;
  return weftSuccess;
}

/* The steps of a chain of n - 1 hops, each pipelined in slot-sized pieces (Broadcast, Reduce);
 * every rank passes the whole buffer once (busbw factor 1). The other collectives move n - 1
 * parts of `bytes` around the ring in n - 1 steps (busbw factor (n-1)/n of the whole). */
static double ringCost(void *state, const struct weftComm *comm, const struct weftCollArgs *args) {
  const struct weftRing *ring = state;
  int n = ring->n;
  double bytes = (double)args->bytes, bw = weftRingBandwidth(ring) * 1e3;
  if (args->coll == weftCollAllReduce) return weftRingCost(comm, ring, args->count, args->bytes);
  if (n == 1) return 0.1 + bytes / 8e3;
  double stepUs = ring->latencyUs + 0.3 * (comm->oversubscribed ? 4 : 1);
  if (args->coll == weftCollAllGather || args->coll == weftCollReduceScatter)
    return (n - 1) * stepUs + (n - 1) * bytes / bw;
  double piece = (double)ring->pieceBytes < bytes ? (double)ring->pieceBytes : bytes;
  return (n - 1) * stepUs + (bytes + (n - 2) * piece) / bw; /* the chain fills, then streams */
}

/* The ring position of rank. */
static int positionOf(const struct weftRing *ring, int rank) {
  for (int i = 0; i < ring->n; i++)
    if (ring->order[i] == rank) return i;
  return 0;
}

static void ringPrims(struct weftPrims *p, struct weftComm *comm, struct weftRing *ring,
                      const struct weftCollArgs *a) {
  struct weftConn *s = &ring->send, *r = &ring->recv;
  weftPrimsInitMulti(p, comm, &s, 1, &r, 1, a->type, a->op, comm->nranks);
  weftPrimsSetPiece(p, ring->pieceBytes);
}

/* Broadcast: a chain from the root along the ring; each rank copies the pieces out as it
 * passes them on, the last one only receives. */
static weftResult_t ringBroadcast(struct weftComm *comm, struct weftRing *ring,
                                  const struct weftCollArgs *a) {
  int n = ring->n, hop = (ring->index - positionOf(ring, a->root) + n) % n;
  if (hop == 0 && a->recvbuff != a->sendbuff) weftCopyOut(a->recvbuff, a->sendbuff, a->bytes, comm->opStreamsOut);
  if (n == 1) return weftSuccess;
  struct weftPrims p;
  ringPrims(&p, comm, ring, a);
  if (hop == 0) {
    WEFTCHECK(weftPrimsSend(&p, a->sendbuff, a->count));
    return weftPrimsRecvToken(&p); /* posted by the last rank at its start: no wait in a run */
  }
  if (hop < n - 1) return weftPrimsRecvCopySend(&p, a->recvbuff, a->count);
  WEFTCHECK(weftPrimsSendToken(&p)); /* to the root, my next: a root that is not one meets it */
  return weftPrimsRecv(&p, a->recvbuff, a->count);
}

/* Reduce: a chain along the ring that ends at the root: the rank after it starts, each rank
 * adds its own and passes the pieces on, the root adds its own last (and divides, for avg). */
static weftResult_t ringReduce(struct weftComm *comm, struct weftRing *ring,
                               const struct weftCollArgs *a) {
  int n = ring->n, hop = (ring->index - positionOf(ring, a->root) + n) % n;
  if (n == 1) {
    weftReduceFinalCopy(a->recvbuff, a->sendbuff, a->count, a->type, a->op, 1);
    return weftSuccess;
  }
  struct weftPrims p;
  ringPrims(&p, comm, ring, a);
  if (hop == 1) {
    WEFTCHECK(weftPrimsSend(&p, a->sendbuff, a->count));
    return weftPrimsRecvToken(&p); /* the root's, posted at its start */
  }
  if (hop != 0) return weftPrimsRecvReduceSend(&p, a->sendbuff, a->count);
  WEFTCHECK(weftPrimsSendToken(&p)); /* to the chain's start, my next */
  return weftPrimsRecvReduceCopy(&p, a->sendbuff, a->recvbuff, a->count);
}

/* AllGather: recvbuff is n slices of count, slice r rank r's; each position starts with its
 * own slice and passes every slice once around (n - 1 steps per loop). */
static weftResult_t ringAllGather(struct weftComm *comm, struct weftRing *ring,
                                  const struct weftCollArgs *a) {
  char *recv = a->recvbuff, *own = recv + (size_t)comm->rank * a->bytes;
  if (own != a->sendbuff) weftCopyOut(own, a->sendbuff, a->bytes, comm->opStreamsOut);
  if (ring->n == 1) return weftSuccess;
  struct weftPrims p;
  ringPrims(&p, comm, ring, a);
  struct weftRingParts parts = {a->count, (size_t)comm->nranks, ring->order};
  return weftRingAllGatherParts(&p, ring, recv, &parts, weftRingMaxChunk(&p));
}

/* ReduceScatter: sendbuff is n slices of count; slice r is reduced around the ring so that it
 * ends at rank r, in its recvbuff (n - 1 steps per loop). */
static weftResult_t ringReduceScatter(struct weftComm *comm, struct weftRing *ring,
                                      const struct weftCollArgs *a) {
  if (ring->n == 1) {
    weftReduceFinalCopy(a->recvbuff, a->sendbuff, a->count, a->type, a->op, 1);
    return weftSuccess;
  }
  struct weftPrims p;
  ringPrims(&p, comm, ring, a);
  struct weftRingParts parts = {a->count, (size_t)ring->n, ring->order};
  return weftRingReduceScatterParts(&p, ring, a->sendbuff, a->recvbuff, &parts,
                                    weftRingMaxChunk(&p), 1);
}

static weftResult_t ringRun(void *state, struct weftComm *comm, const struct weftCollArgs *a) {
  struct weftRing *ring = state;
  switch (a->coll) {
    case weftCollBroadcast: return ringBroadcast(comm, ring, a);
    case weftCollReduce: return ringReduce(comm, ring, a);
    case weftCollAllGather: return ringAllGather(comm, ring, a);
    case weftCollReduceScatter: return ringReduceScatter(comm, ring, a);
    default:
      return weftRingAllReduceOn(comm, ring, a->sendbuff, a->recvbuff, a->count, a->type, a->op,
                                 comm->nranks);
  }
}

static weftResult_t ringFinalize(void *state) {
  (void)state; /* the ring belongs to the communicator */
  return weftSuccess;
}

const struct weftAlgoOps weftAlgoRing = {
  .size = sizeof(struct weftAlgoOps),
  .name = "ring",
  .colls = WEFT_COLL_BIT(weftCollAllReduce) | WEFT_COLL_BIT(weftCollBroadcast) |
           WEFT_COLL_BIT(weftCollReduce) | WEFT_COLL_BIT(weftCollAllGather) |
           WEFT_COLL_BIT(weftCollReduceScatter),
  .init = ringInit,
  .cost = ringCost,
  .run = ringRun,
  .finalize = ringFinalize,
};
