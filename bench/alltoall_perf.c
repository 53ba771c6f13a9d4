/* alltoall_perf: nccl-tests' alltoall_perf for weft on host buffers (weftAlltoAll). The size is
 * each buffer's: n parts of size / n (rounded down to 16 bytes), part j to rank j; no in-place
 * form (N/A). Ranks and flags as allreduce_perf (docs/benchmark.md). */
#include "perf_weft.h"

static void alltoAll(void *comm, const void *send, void *recv, size_t count, int type, int op, int root,
                 void *stream) {
  (void)op, (void)root;
  weftResult_t res = weftAlltoAll(send, recv, count, perfWeftTypes[type], comm, stream);
  perfWeftCheck(res, comm, "weftAlltoAll", count, type, -1, -1);
}

static const char *alltoAllAlgo(void *comm, size_t count, int type) {
  return perfWeftAlgo(comm, weftCollAlltoAll, count, type);
}

static const perfBench bench = {
  .tool = "alltoall_perf",
  .shape = &perfShapeAlltoAll,
  .run = alltoAll,
  PERF_WEFT_RANKS,
  .algoName = alltoAllAlgo,
};

int main(int argc, char **argv) {
  return perfMain(argc, argv, &bench);
}
