/* all_gather_perf: nccl-tests' all_gather_perf for weft on host buffers (weftAllGather). The
 * size is the receive buffer's: each rank sends size / nranks (rounded down to 16 bytes); in
 * place, its part sits at its place in the receive buffer. Ranks and flags as allreduce_perf
 * (docs/benchmark.md). */
#include "perf_weft.h"

static void allGather(void *comm, const void *send, void *recv, size_t count, int type, int op, int root,
                 void *stream) {
  (void)op, (void)root;
  weftResult_t res = weftAllGather(send, recv, count, perfWeftTypes[type], comm, stream);
  perfWeftCheck(res, comm, "weftAllGather", count, type, -1, -1);
}

static const char *allGatherAlgo(void *comm, size_t count, int type) {
  return perfWeftAlgo(comm, weftCollAllGather, count, type);
}

static const perfBench bench = {
  .tool = "all_gather_perf",
  .shape = &perfShapeAllGather,
  .run = allGather,
  PERF_WEFT_RANKS,
  .algoName = allGatherAlgo,
};

int main(int argc, char **argv) {
  return perfMain(argc, argv, &bench);
}
