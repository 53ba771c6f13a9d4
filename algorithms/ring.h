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
/* Reduce-scatter over n contiguous slices of sliceElems (the last may be short): afterwards
 * position i holds the reduction of slice i (not divided), in one piece the next phase can
 * pipeline as a whole; and the matching all-gather. */
weftResult_t weftRingReduceScatterSlices(struct weftPrims *p, struct weftRing *ring,
                                         const void *send, void *recv, size_t count,
                                         size_t sliceElems, size_t maxChunk);
weftResult_t weftRingAllGatherSlices(struct weftPrims *p, struct weftRing *ring, void *recv,
                                     size_t count, size_t sliceElems, size_t maxChunk);
/* Buffers of nparts parts of partCount elements each (AllGather's output, ReduceScatter's
 * input, parts placed by rank); the member at ring position i handles part order[i] (part i
 * when order is NULL). The ring's ranks need not be contiguous. */
struct weftRingParts {
  size_t partCount, nparts;
  const int *order;
};
/* AllGather: position i starts with its part in recv; afterwards every member holds the part
 * of every position. */
weftResult_t weftRingAllGatherParts(struct weftPrims *p, struct weftRing *ring, void *recv,
                                    const struct weftRingParts *parts, size_t maxChunk);
/* ReduceScatter: position i gets the reduction of part order[i] over the members' send, in
 * recv (partCount elements), made final (divided, for avg) when `final`. */
weftResult_t weftRingReduceScatterParts(struct weftPrims *p, struct weftRing *ring,
                                        const void *send, void *recv,
                                        const struct weftRingParts *parts, size_t maxChunk,
                                        int final);
/* A token (lib/prims.h: a slot of no data, its trailer checked) from this rank to its
 * successor on the communicator's ring (comm->ring, up from init and the same whatever the
 * call), sent (send) or received (!send). For schedules whose links depend on the call (the
 * tree's and hier's Broadcast and Reduce, shaped by the root): sent at the start and received
 * at the end, it makes every two ranks next to each other on the ring meet each other's
 * signature, wherever the schedule's data go, for a slot each and no wait where they agree. */
weftResult_t weftRingCallToken(struct weftComm *comm, const struct weftCollArgs *a, int send);
/* The bandwidth (GB/s) of the ring's slowest link: the links' own figure, or less where it
 * crosses between packages (ring->crossGBs). */
double weftRingBandwidth(const struct weftRing *ring);
/* Predicted microseconds of an AllReduce of count elements (bytes in all) over ring. */
double weftRingCost(const struct weftComm *comm, const struct weftRing *ring, size_t count,
                    size_t bytes);

#endif
