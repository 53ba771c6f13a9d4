/* Ring AllReduce.
 * How it works: the buffer is cut into n chunks per loop (n = ring members). Reduce-scatter:
 * each rank sends one chunk to the next rank, then n-2 times receives a chunk, adds its own
 * contribution and passes it on; after n-1 steps the rank at position i holds the full
 * reduction of chunk i. All-gather: that chunk travels once around the ring (n-1 more steps),
 * each rank copying it out as it passes. Steps: 2(n-1). Bytes sent per rank: 2(n-1)/n * bytes
 * (busbw factor 2(n-1)/n). Every step is pipelined in slot-sized pieces, and a loop's chunk is
 * at most half the FIFO so the first send of every rank completes before anyone receives (no
 * deadlock). The ring is ordered by host, so it crosses between hosts once per host.
 * cost() = 2(n-1) * (slowest link latency + step overhead) + 2(n-1)/n * bytes / slowest link
 * bandwidth.
 * The reduce-scatter and all-gather halves are exported for the hierarchical algorithm. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core.h"
#include "param.h"
#include "prims.h"
#include "reduce.h"
#include "ring.h"

/* Chunk c (taken mod n) of one loop. Interleaved layout (sliceElems 0): the loop covers
 * [loopOffset, loopOffset + n * chunkCount) and chunk c is its c-th part. Sliced layout: the
 * buffer is n contiguous slices of sliceElems, and chunk c is the part of slice c that starts
 * loopOffset into it, so after all loops position c holds all of slice c in one piece. */
struct ringLoop {
  size_t count, loopOffset, chunkCount, sliceElems;
  int n;
};

static size_t chunkIndex(const struct ringLoop *l, int c) { return (size_t)(((c % l->n) + l->n) % l->n); }

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

/* After it, position r holds the reduction of chunk r in recv (final when `final`). */
static weftResult_t reduceScatterLoop(struct weftPrims *p, const struct ringLoop *l, int r,
                                      const char *send, char *recv, int final) {
  int n = l->n;
  WEFTCHECK(weftPrimsSend(p, AT(send, r - 1), chunkCount(l, r - 1)));
  for (int j = 2; j < n; j++) WEFTCHECK(weftPrimsRecvReduceSend(p, AT(send, r - j), chunkCount(l, r - j)));
  if (final) return weftPrimsRecvReduceCopy(p, AT(send, r), AT(recv, r), chunkCount(l, r));
  int divisor = p->divisor;
  p->divisor = 1;
  weftResult_t rc = weftPrimsRecvReduceCopy(p, AT(send, r), AT(recv, r), chunkCount(l, r));
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

/* The loop covering [offset, count) with at most maxChunk elements per chunk. */
static struct ringLoop loopAt(size_t count, size_t offset, size_t maxChunk, int n) {
  size_t left = count - offset, loopCount = (size_t)n * maxChunk;
  size_t chunk = left >= loopCount ? maxChunk : (left + (size_t)n - 1) / (size_t)n;
  return (struct ringLoop){count, offset, chunk, 0, n};
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
    struct ringLoop l = {count, off, maxChunk, sliceElems, ring->n};
    WEFTCHECK(reduceScatterLoop(p, &l, ring->index, send, recv, 0));
  }
  return weftSuccess;
}

weftResult_t weftRingAllGatherSlices(struct weftPrims *p, struct weftRing *ring, void *recv,
                                     size_t count, size_t sliceElems, size_t maxChunk) {
  for (size_t off = 0; off < sliceElems; off += maxChunk) {
    struct ringLoop l = {count, off, maxChunk, sliceElems, ring->n};
    WEFTCHECK(allGatherLoop(p, &l, ring->index, recv));
  }
  return weftSuccess;
}

/* With fewer elements than members, chunks are 1 element and only `count` of the n carry any:
 * an empty chunk sends no message, so a rank handles count/n of the steps' messages. Measured
 * on 4 hosts x 2 (8 B = 2 floats): the ring took 0.64x the tree's time, whose 6 hops all carry
 * data; this model predicts 3.5 step costs against the tree's 6. */
double weftRingCost(const struct weftComm *comm, const struct weftRing *ring, size_t count,
                    size_t bytes) {
  int n = ring->n;
  if (n == 1) return 0.1 + (double)bytes / 8e3;
  double lat = ring->latencyUs, bw = ring->bandwidthGBs;
  double stepUs = lat + 0.3 * (comm->oversubscribed ? 4 : 1);
  double busy = count < (size_t)n ? (double)count / n : 1.0;
  double wireBytes = 2.0 * (n - 1) / n * (double)bytes;
  return 2.0 * (n - 1) * stepUs * busy + wireBytes / (bw * 1e3);
}

static weftResult_t ringInit(struct weftComm *comm, void **state, char *why, size_t whyLen) {
  (void)comm;
  (void)why;
  (void)whyLen;
  *state = &comm->ring;
  return weftSuccess;
}

static double ringCost(void *state, const struct weftComm *comm, const struct weftCollArgs *args) {
  size_t count = args->count, bytes = args->bytes;
  return weftRingCost(comm, state, count, bytes);
}

static weftResult_t ringAllReduce(void *state, struct weftComm *comm, const struct weftCollArgs *a) {
  return weftRingAllReduceOn(comm, state, a->sendbuff, a->recvbuff, a->count, a->type, a->op,
                             comm->nranks);
}

static weftResult_t ringFinalize(void *state) {
  (void)state; /* the ring belongs to the communicator */
  return weftSuccess;
}

const struct weftAlgoOps weftAlgoRing = {
  .size = sizeof(struct weftAlgoOps),
  .name = "ring",
  .colls = WEFT_COLL_BIT(weftCollAllReduce),
  .init = ringInit,
  .cost = ringCost,
  .run = ringAllReduce,
  .finalize = ringFinalize,
};
