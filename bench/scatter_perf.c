/* scatter_perf: nccl-tests' scatter_perf for weft on host buffers (weftScatter). The size is
 * the root's send buffer: each rank receives its part, size / nranks (rounded down to 16
 * bytes); in place, a rank's result is its part of the send buffer. -r picks the root, -r all
 * each rank in turn. Ranks and flags as allreduce_perf (docs/benchmark.md). */
#include "perf_weft.h"

static void scatter(void *comm, const void *send, void *recv, size_t count, int type, int op, int root,
                 void *stream) {
  (void)op;
  weftResult_t res = weftScatter(send, recv, count, perfWeftTypes[type], root, comm, stream);
  perfWeftCheck(res, comm, "weftScatter", count, type, -1, root);
}

static const char *scatterAlgo(void *comm, size_t count, int type) {
  return perfWeftAlgo(comm, weftCollScatter, count, type);
}

static const perfBench bench = {
  .tool = "scatter_perf",
  .shape = &perfShapeScatter,
  .run = scatter,
  PERF_WEFT_RANKS,
  .algoName = scatterAlgo,
};

int main(int argc, char **argv) {
  return perfMain(argc, argv, &bench);
}
