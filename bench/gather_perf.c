/* gather_perf: nccl-tests' gather_perf for weft on host buffers (weftGather). The size is the
 * root's receive buffer: each rank sends size / nranks (rounded down to 16 bytes); in place,
 * a rank's part sits at its place in the receive buffer; the other ranks' receive buffers must
 * come back untouched. -r picks the root, -r all each rank in turn. Ranks and flags as
 * allreduce_perf (docs/benchmark.md). */
#include "perf_weft.h"

static void gather(void *comm, const void *send, void *recv, size_t count, int type, int op, int root,
                 void *stream) {
  (void)op;
  weftResult_t res = weftGather(send, recv, count, perfWeftTypes[type], root, comm, stream);
  perfWeftCheck(res, comm, "weftGather", count, type, -1, root);
}

static const char *gatherAlgo(void *comm, size_t count, int type) {
  return perfWeftAlgo(comm, weftCollGather, count, type);
}

static const perfBench bench = {
  .tool = "gather_perf",
  .shape = &perfShapeGather,
  .run = gather,
  PERF_WEFT_RANKS,
  .algoName = gatherAlgo,
};

int main(int argc, char **argv) {
  return perfMain(argc, argv, &bench);
}
