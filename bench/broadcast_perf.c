/* broadcast_perf: nccl-tests' broadcast_perf for weft on host buffers (weftBroadcast; in place
 * send == recv). -r picks the root, -r all each rank in turn. Ranks and flags as allreduce_perf
 * (docs/benchmark.md). */
#include "perf_weft.h"

static void broadcast(void *comm, const void *send, void *recv, size_t count, int type, int op, int root,
                 void *stream) {
  (void)op;
  weftResult_t res = weftBroadcast(send, recv, count, perfWeftTypes[type], root, comm, stream);
  perfWeftCheck(res, comm, "weftBroadcast", count, type, -1, root);
}

static const char *broadcastAlgo(void *comm, size_t count, int type) {
  return perfWeftAlgo(comm, weftCollBroadcast, count, type);
}

static const perfBench bench = {
  .tool = "broadcast_perf",
  .shape = &perfShapeBroadcast,
  .run = broadcast,
  PERF_WEFT_RANKS,
  .algoName = broadcastAlgo,
};

int main(int argc, char **argv) {
  return perfMain(argc, argv, &bench);
}
