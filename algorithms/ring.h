/* Ring schedules shared by the algorithms that run a ring over a subset of ranks. */
#ifndef WEFT_ALGO_RING_H_
#define WEFT_ALGO_RING_H_

#include "core.h"
#include "prims.h"

/* AllReduce of count elements over ring; final steps divide by divisor for weftAvg. */
weftResult_t weftRingAllReduceOn(struct weftComm *comm, struct weftRing *ring, const void *send,
                                 void *recv, size_t count, weftDataType_t type, weftRedOp_t op,
                                 int divisor);
/* Largest chunk (elements) of one ring step for prims p: half a FIFO at most. */
size_t weftRingMaxChunk(const struct weftPrims *p);
/* One loop of a reduce-scatter starting at offset (loops advance by ring->n * maxChunk):
 * afterwards recv[*myFirst, *myFirst + *myCount) holds this position's reduced chunk (not
 * divided: weftAvg divides later). */
weftResult_t weftRingReduceScatterLoop(struct weftPrims *p, struct weftRing *ring, const void *send,
                                       void *recv, size_t count, size_t offset, size_t maxChunk,
                                       size_t *myFirst, size_t *myCount);
/* The matching all-gather loop: every position's chunk ends up in every recv. */
weftResult_t weftRingAllGatherLoop(struct weftPrims *p, struct weftRing *ring, void *recv,
                                   size_t count, size_t offset, size_t maxChunk);
/* Predicted microseconds of an AllReduce of bytes over ring. */
double weftRingCost(const struct weftComm *comm, const struct weftRing *ring, size_t bytes);

#endif
