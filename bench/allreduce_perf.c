/* allreduce_perf: nccl-tests' all_reduce_perf for weft on host or device buffers (-g 1, -B:
 * bench/perf_device.h, which allocates through lib/device.h), through the public API
 * otherwise. Ranks are -t threads in each process; under mpirun there is one such process per
 * MPI rank (rank = worldRank * threads + thread), and MPI carries nothing but the unique id and
 * the benchmark's own barriers and timings. Without mpirun it runs as one process, without MPI.
 *   build/bench/allreduce_perf -t 4 -b 8 -e 64M -f 2
 *   mpirun --allow-run-as-root --oversubscribe -np 4 build/bench/allreduce_perf -b 8 -e 64M -f 2
 * The options, table and timing loop are bench/perf_*.c's (docs/benchmark.md). */
#include "perf_weft.h"

static void allReduce(void *comm, const void *send, void *recv, size_t count, int type, int op, int root,
                 void *stream) {
  (void)root;
  weftResult_t res = weftAllReduce(send, recv, count, perfWeftTypes[type], perfWeftOps[op], comm, stream);
  perfWeftCheck(res, comm, "weftAllReduce", count, type, op, -1);
}

static const char *allReduceAlgo(void *comm, size_t count, int type) {
  return perfWeftAlgo(comm, weftCollAllReduce, count, type);
}

static const perfBench bench = {
  .tool = "allreduce_perf",
  .shape = &perfShapeAllReduce,
  .run = allReduce,
  PERF_WEFT_RANKS,
  .supported = perfWeftSupportedReduce,
  .algoName = allReduceAlgo,
};

int main(int argc, char **argv) {
  return perfMain(argc, argv, &bench);
}
