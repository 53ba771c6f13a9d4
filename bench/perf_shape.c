/* The collectives' shapes (see perf_shape.h), each as nccl-tests defines it. */
#include "perf_shape.h"

/* nccl-tests' per-rank part of count: count / nRanks, rounded down to whole 16 bytes. */
static size_t perfPerRank(size_t count, size_t esize, int nRanks) {
  return (count / (size_t)nRanks) & ~(16 / esize - 1);
}

static perfPart perfPartOf(int what, int rank, size_t first, size_t count) {
  return (perfPart){.what = what, .rank = rank, .first = first, .count = count};
}

/* Bus factors (nccl-tests' doc/PERFORMANCE.md): what each rank's link must carry, per byte of
 * the size column, in the best schedule. */
/* Broadcast, Reduce: all data leaves or reaches the root through its one link; SendRecv: each
 * link carries one message. */
static double perfFactorOne(int nRanks) {
  (void)nRanks;
  return 1.0;
}

static double perfFactorParts(int nRanks) {
  return (double)(nRanks - 1) / nRanks; /* each rank sends or receives all parts but its own */
}

/* ---------------------------------------------------------------------------------------------
 * AllReduce: count each, in place in the same buffer; every rank gets the reduction. */

static void perfAllReduceCounts(size_t count, size_t esize, int nRanks, perfCounts *c) {
  (void)esize;
  (void)nRanks;
  *c = (perfCounts){.sendCount = count, .recvCount = count, .paramCount = count};
}

static double perfAllReduceFactor(int nRanks) {
  return 2.0 * (nRanks - 1) / nRanks; /* ReduceScatter then AllGather */
}

static int perfAllReduceResult(const perfCounts *c, int rank, int nRanks, int root, perfPart *p) {
  (void)rank, (void)nRanks, (void)root;
  p[0] = perfPartOf(PERF_PART_REDUCED, -1, 0, c->recvCount);
  return 1;
}

const perfShape perfShapeAllReduce = {
  .name = "AllReduce", .counts = perfAllReduceCounts, .busFactor = perfAllReduceFactor,
  .result = perfAllReduceResult, .opLoop = 1, .reduces = 1, .inPlace = 1,
};

/* ---------------------------------------------------------------------------------------------
 * Broadcast and Reduce: count each, in place in the same buffer. */

static int perfBroadcastResult(const perfCounts *c, int rank, int nRanks, int root, perfPart *p) {
  (void)rank, (void)nRanks;
  p[0] = perfPartOf(PERF_PART_INPUT, root, 0, c->recvCount);
  return 1;
}

const perfShape perfShapeBroadcast = {
  .name = "Broadcast", .counts = perfAllReduceCounts, .busFactor = perfFactorOne,
  .result = perfBroadcastResult, .rooted = 1, .inPlace = 1,
};

static int perfReduceResult(const perfCounts *c, int rank, int nRanks, int root, perfPart *p) {
  (void)nRanks;
  p[0] = perfPartOf(rank == root ? PERF_PART_REDUCED : PERF_PART_UNCHANGED, -1, 0, c->recvCount);
  return 1;
}

const perfShape perfShapeReduce = {
  .name = "Reduce", .counts = perfAllReduceCounts, .busFactor = perfFactorOne,
  .result = perfReduceResult, .rooted = 1, .opLoop = 1, .reduces = 1, .inPlace = 1,
};

/* ---------------------------------------------------------------------------------------------
 * AllGather: each rank sends its part (count / n), every rank receives all n in rank order;
 * in place, a rank's part sits at its place in the receive buffer. The size is the receive
 * buffer's. */

static void perfAllGatherCounts(size_t count, size_t esize, int nRanks, perfCounts *c) {
  size_t part = perfPerRank(count, esize, nRanks);
  *c = (perfCounts){.sendCount = part, .recvCount = part * (size_t)nRanks, .paramCount = part,
                    .sendInplaceOffset = part};
}

static int perfAllGatherResult(const perfCounts *c, int rank, int nRanks, int root, perfPart *p) {
  (void)rank, (void)root;
  for (int j = 0; j < nRanks; j++) p[j] = perfPartOf(PERF_PART_INPUT, j, 0, c->paramCount);
  return nRanks;
}

const perfShape perfShapeAllGather = {
  .name = "AllGather", .counts = perfAllGatherCounts, .busFactor = perfFactorParts,
  .result = perfAllGatherResult, .inPlace = 1,
};

/* ---------------------------------------------------------------------------------------------
 * ReduceScatter: each rank sends n parts, rank r receives the reduction of part r; in place,
 * the result is part r of the send buffer. The size is the send buffer's. */

static void perfReduceScatterCounts(size_t count, size_t esize, int nRanks, perfCounts *c) {
  size_t part = perfPerRank(count, esize, nRanks);
  *c = (perfCounts){.sendCount = part * (size_t)nRanks, .recvCount = part, .paramCount = part,
                    .recvInplaceOffset = part};
}

static int perfReduceScatterResult(const perfCounts *c, int rank, int nRanks, int root, perfPart *p) {
  (void)nRanks, (void)root;
  p[0] = perfPartOf(PERF_PART_REDUCED, -1, (size_t)rank * c->paramCount, c->paramCount);
  return 1;
}

const perfShape perfShapeReduceScatter = {
  .name = "ReduceScatter", .counts = perfReduceScatterCounts, .busFactor = perfFactorParts,
  .result = perfReduceScatterResult, .opLoop = 1, .reduces = 1, .inPlace = 1,
};

/* ---------------------------------------------------------------------------------------------
 * AlltoAll: each rank sends n parts of count / n, part j to rank j; rank r receives part r of
 * every rank, in rank order. No in-place form. */

static void perfAlltoAllCounts(size_t count, size_t esize, int nRanks, perfCounts *c) {
  size_t part = perfPerRank(count, esize, nRanks);
  *c = (perfCounts){.sendCount = part * (size_t)nRanks, .recvCount = part * (size_t)nRanks,
                    .paramCount = part};
}

static int perfAlltoAllResult(const perfCounts *c, int rank, int nRanks, int root, perfPart *p) {
  (void)root;
  for (int j = 0; j < nRanks; j++)
    p[j] = perfPartOf(PERF_PART_INPUT, j, (size_t)rank * c->paramCount, c->paramCount);
  return nRanks;
}

const perfShape perfShapeAlltoAll = {
  .name = "AlltoAll", .counts = perfAlltoAllCounts, .busFactor = perfFactorParts,
  .result = perfAlltoAllResult,
};

/* ---------------------------------------------------------------------------------------------
 * Gather and Scatter: AllGather's and ReduceScatter's buffers, with a root. nccl-tests gives
 * both AllGather's bus factor: the root's link carries all parts but its own. */

static int perfGatherResult(const perfCounts *c, int rank, int nRanks, int root, perfPart *p) {
  if (rank != root) {
    p[0] = perfPartOf(PERF_PART_UNCHANGED, -1, 0, c->recvCount);
    return 1;
  }
  for (int j = 0; j < nRanks; j++) p[j] = perfPartOf(PERF_PART_INPUT, j, 0, c->paramCount);
  return nRanks;
}

const perfShape perfShapeGather = {
  .name = "Gather", .counts = perfAllGatherCounts, .busFactor = perfFactorParts,
  .result = perfGatherResult, .rooted = 1, .inPlace = 1,
};

static int perfScatterResult(const perfCounts *c, int rank, int nRanks, int root, perfPart *p) {
  (void)nRanks;
  p[0] = perfPartOf(PERF_PART_INPUT, root, (size_t)rank * c->paramCount, c->paramCount);
  return 1;
}

const perfShape perfShapeScatter = {
  .name = "Scatter", .counts = perfReduceScatterCounts, .busFactor = perfFactorParts,
  .result = perfScatterResult, .rooted = 1, .inPlace = 1,
};

/* ---------------------------------------------------------------------------------------------
 * SendRecv: each rank sends count to rank + 1 and receives count from rank - 1 (a ring of
 * pairs); algbw is one direction's. nccl-tests runs it once per -o op (though nothing is
 * reduced). No in-place form. */

static int perfSendRecvResult(const perfCounts *c, int rank, int nRanks, int root, perfPart *p) {
  (void)root;
  p[0] = perfPartOf(PERF_PART_INPUT, (rank + nRanks - 1) % nRanks, 0, c->recvCount);
  return 1;
}

const perfShape perfShapeSendRecv = {
  .name = "SendRecv", .counts = perfAllReduceCounts, .busFactor = perfFactorOne,
  .result = perfSendRecvResult, .opLoop = 1,
};
