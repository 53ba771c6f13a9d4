/* Ring AllReduce.
 * How it works: the buffer is cut into nranks chunks per loop. Reduce-scatter: each rank sends
 * one chunk to the next rank, then n-2 times receives a chunk, adds its own contribution and
 * passes it on; after n-1 steps rank i holds the full reduction of one chunk. All-gather: that
 * chunk travels once around the ring (n-1 more steps), each rank copying it out as it passes.
 * Steps: 2(n-1). Bytes sent per rank: 2(n-1)/n * bytes (busbw factor 2(n-1)/n). Every step
 * is pipelined in slot-sized pieces, and a loop's chunk is at most half the FIFO so the first
 * send of every rank completes before anyone receives (no deadlock).
 * cost() = 2(n-1) * (link latency + step overhead) + 2(n-1)/n * bytes / link bandwidth. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "core.h"
#include "param.h"
#include "prims.h"
#include "reduce.h"

struct ringState {
  size_t chunkSlots;
};

static weftResult_t ringInit(struct weftComm *comm, void **state, char *why, size_t whyLen) {
  (void)comm;
  (void)why;
  (void)whyLen;
  int64_t chunkSlots = weftParamRingChunkSlots();
  if (chunkSlots < 1 || chunkSlots > weftParamShmSlots() / 2) chunkSlots = weftParamShmSlots() / 2;
  struct ringState *s = calloc(1, sizeof *s);
  if (s == NULL) return weftSetError(weftSystemError, "out of memory");
  s->chunkSlots = (size_t)(chunkSlots > 0 ? chunkSlots : 1);
  *state = s;
  return weftSuccess;
}

static double ringCost(void *state, const struct weftComm *comm, size_t bytes) {
  (void)state;
  int n = comm->nranks;
  if (n == 1) return 0.1 + (double)bytes / 8e3;
  const struct weftLinkCaps *caps = &comm->ring.send.caps;
  double stepUs = caps->latencyUs + 0.3 * (comm->nLocalRanks > weftTopoCpuCount() ? 4 : 1);
  double wireBytes = 2.0 * (n - 1) / n * (double)bytes;
  return 2.0 * (n - 1) * stepUs + wireBytes / (caps->bandwidthGBs * 1e3);
}

#define CHUNK_OFFSET(c) (loopOffset + (size_t)(((c) % n + n) % n) * chunkCount)
#define CHUNK_COUNT(c) chunkElems(count, CHUNK_OFFSET(c), chunkCount)

static size_t chunkElems(size_t count, size_t offset, size_t chunkCount) {
  if (offset >= count) return 0;
  return count - offset < chunkCount ? count - offset : chunkCount;
}

static weftResult_t ringRunLoop(struct weftPrims *p, const char *send, char *recv, size_t count,
                                size_t loopOffset, size_t chunkCount, int n, int r) {
  size_t ts = p->typeSize;
#define SRC(c) (send + CHUNK_OFFSET(c) * ts)
#define DST(c) (recv + CHUNK_OFFSET(c) * ts)
  WEFTCHECK(weftPrimsSend(p, SRC(r - 1), CHUNK_COUNT(r - 1)));
  for (int j = 2; j < n; j++) WEFTCHECK(weftPrimsRecvReduceSend(p, SRC(r - j), CHUNK_COUNT(r - j)));
  WEFTCHECK(weftPrimsRecvReduceCopySend(p, SRC(r), DST(r), CHUNK_COUNT(r)));
  for (int j = 1; j < n - 1; j++) WEFTCHECK(weftPrimsRecvCopySend(p, DST(r - j), CHUNK_COUNT(r - j)));
  WEFTCHECK(weftPrimsRecv(p, DST(r + 1), CHUNK_COUNT(r + 1)));
#undef SRC
#undef DST
  return weftSuccess;
}

static weftResult_t ringAllReduce(void *state, struct weftComm *comm,
                                  const struct weftCollArgs *a) {
  struct ringState *s = state;
  int n = comm->nranks;
  if (n == 1) {
    weftReduceFinalCopy(a->recvbuff, a->sendbuff, a->count, a->type, a->op, 1);
    return weftSuccess;
  }
  struct weftPrims p;
  weftPrimsInit(&p, comm, &comm->ring.send, &comm->ring.recv, a->type, a->op);
  size_t maxChunk = s->chunkSlots * p.pieceCount;
  size_t loopCount = (size_t)n * maxChunk;
  for (size_t off = 0; off < a->count; off += loopCount) {
    size_t left = a->count - off;
    size_t chunkCount = left >= loopCount ? maxChunk : (left + (size_t)n - 1) / (size_t)n;
    WEFTCHECK(ringRunLoop(&p, a->sendbuff, a->recvbuff, a->count, off, chunkCount, n,
                          comm->ring.index));
  }
  return weftSuccess;
}

static weftResult_t ringFinalize(void *state) {
  free(state);
  return weftSuccess;
}

const struct weftAlgoOps weftAlgoRing = {
  .size = sizeof(struct weftAlgoOps),
  .name = "ring",
  .init = ringInit,
  .cost = ringCost,
  .allReduce = ringAllReduce,
  .finalize = ringFinalize,
};
