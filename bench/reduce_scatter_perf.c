/* reduce_scatter_perf: nccl-tests' reduce_scatter_perf for weft on host buffers
 * (weftReduceScatter). The size is the send buffer's: each rank receives size / nranks
 * (rounded down to 16 bytes); in place, its result is its part of the send buffer. Ranks and
 * flags as allreduce_perf (docs/benchmark.md). */
#include "perf_weft.h"

static void reduceScatter(void *comm, const void *send, void *recv, size_t count, int type, int op, int root,
                 void *stream) {
  (void)root;
  weftResult_t res = weftReduceScatter(send, recv, count, perfWeftTypes[type], perfWeftOps[op], comm, stream);
  perfWeftCheck(res, comm, "weftReduceScatter", count, type, op, -1);
}

static const char *reduceScatterAlgo(void *comm, size_t count, int type) {
  return perfWeftAlgo(comm, weftCollReduceScatter, count, type);
}

static const perfBench bench = {
  .tool = "reduce_scatter_perf",
  .shape = &perfShapeReduceScatter,
  .run = reduceScatter,
  PERF_WEFT_RANKS,
  .supported = perfWeftSupportedReduce,
  .algoName = reduceScatterAlgo,
};

int main(int argc, char **argv) {
  return perfMain(argc, argv, &bench);
}
