/* sendrecv_perf: nccl-tests' sendrecv_perf for weft on host buffers: each rank sends count
 * elements to rank + 1 and receives count from rank - 1, both in one group (weftGroupStart,
 * weftSend, weftRecv, weftGroupEnd), so that the ring of pairs cannot deadlock. As nccl-tests,
 * it runs once per -o op though nothing is reduced; no in-place form (N/A). Ranks and flags
 * as allreduce_perf (docs/benchmark.md). */
#include "perf_weft.h"

static void sendRecv(void *comm, const void *send, void *recv, size_t count, int type, int op, int root,
                 void *stream) {
  (void)op, (void)root;
  int rank = 0, n = 1;
  perfWeftCheck(weftCommUserRank(comm, &rank), comm, "weftCommUserRank", count, type, -1, -1);
  perfWeftCheck(weftCommCount(comm, &n), comm, "weftCommCount", count, type, -1, -1);
  weftDataType_t t = perfWeftTypes[type];
  perfWeftCheck(weftGroupStart(), comm, "weftGroupStart", count, type, -1, -1);
  perfWeftCheck(weftSend(send, count, t, (rank + 1) % n, comm, stream), comm, "weftSend", count, type, -1, -1);
  perfWeftCheck(weftRecv(recv, count, t, (rank + n - 1) % n, comm, stream), comm, "weftRecv", count, type, -1, -1);
  perfWeftCheck(weftGroupEnd(), comm, "weftGroupEnd", count, type, -1, -1);
}

static const perfBench bench = {
  .tool = "sendrecv_perf",
  .shape = &perfShapeSendRecv,
  .run = sendRecv,
  PERF_WEFT_RANKS,
};

int main(int argc, char **argv) {
  return perfMain(argc, argv, &bench);
}
