/* The shape of each collective, as nccl-tests' <coll>.cu files define it (getCollByteCount,
 * getBw, initData): for count (the size swept divided by the element size), the elements each
 * rank sends and receives and the count passed to the call; the in-place buffers as offsets
 * (times the rank) into the receive buffer; busbw = algbw * busFactor, algbw = the size column
 * (the larger of the send and receive bytes) per second; and where each part of a rank's
 * result comes from, which is what the check compares it with. Every rank sends its own input
 * (perf_data.h) from index 0 on. */
#ifndef WEFT_BENCH_PERF_SHAPE_H_
#define WEFT_BENCH_PERF_SHAPE_H_

#include <stddef.h>

typedef struct {
  size_t sendCount, recvCount, paramCount;     /* elements */
  size_t sendInplaceOffset, recvInplaceOffset; /* elements, times the rank */
} perfCounts;

/* One part of a rank's result, in order from the start of its receive buffer. */
enum {
  PERF_PART_INPUT,    /* rank's input, from index first */
  PERF_PART_REDUCED,  /* the reduction over all ranks' inputs, from index first */
  PERF_PART_UNCHANGED /* what the receive buffer held before the call (a rank the call does
                         not write to: Reduce's and Gather's non-roots) */
};
typedef struct {
  int what, rank;
  size_t first, count;
} perfPart;

typedef struct {
  const char *name; /* "AllReduce" */
  void (*counts)(size_t count, size_t esize, int nRanks, perfCounts *c);
  double (*busFactor)(int nRanks);
  /* The parts of rank's result (at most nRanks of them) for counts c and root; returns how
   * many. The parts cover c->recvCount elements. */
  int (*result)(const perfCounts *c, int rank, int nRanks, int root, perfPart *parts);
  int rooted;         /* -r picks the root (or every root); the root column shows it, else -1 */
  int opLoop;         /* -o picks the op(s), named in the redop column; else one pass, "none" */
  int reduces;        /* the result is a reduction: compared by value (avg's tolerance) */
  /* 0: no in-place form (AlltoAll, SendRecv: NCCL has none, weft refuses buffers that overlap
   * otherwise): the in-place columns are N/A. nccl-tests times such a call with send == recv,
   * whose result it cannot check. */
  int inPlace;
} perfShape;

extern const perfShape perfShapeAllReduce, perfShapeBroadcast, perfShapeReduce, perfShapeAllGather,
  perfShapeReduceScatter, perfShapeAlltoAll, perfShapeGather, perfShapeScatter, perfShapeSendRecv;

#endif
