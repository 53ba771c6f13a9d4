/* reduce_perf: nccl-tests' reduce_perf for weft on host buffers (weftReduce; in place send ==
 * recv). -r picks the root, -r all each rank in turn; the other ranks' receive buffers must
 * come back untouched. Ranks and flags as allreduce_perf (docs/benchmark.md). */
#include "perf_weft.h"

static void reduce(void *comm, const void *send, void *recv, size_t count, int type, int op, int root,
                 void *stream) {
  weftResult_t res = weftReduce(send, recv, count, perfWeftTypes[type], perfWeftOps[op], root, comm, stream);
  perfWeftCheck(res, comm, "weftReduce", count, type, op, root);
}

static const char *reduceAlgo(void *comm, size_t count, int type) {
  return perfWeftAlgo(comm, weftCollReduce, count, type);
}

static const perfBench bench = {
  .tool = "reduce_perf",
  .shape = &perfShapeReduce,
  .run = reduce,
  PERF_WEFT_RANKS,
  .supported = perfWeftSupportedReduce,
  .algoName = reduceAlgo,
};

int main(int argc, char **argv) {
  return perfMain(argc, argv, &bench);
}
