/* mpi_sendrecv_perf: the baseline for sendrecv_perf, timing MPI_Sendrecv: each rank sends to
 * rank + 1 and receives from rank - 1 (flags, table, data and checks as every *_perf; one
 * rank per MPI process). Out of place only, as sendrecv_perf. */
#include "perf_mpi.h"

static void sendRecv(void *ctx, const void *send, void *recv, size_t count, int type, int op, int root,
                 void *stream) {
  (void)stream; /* host buffers only: no stream */
  (void)op, (void)root;
  const perfWorld *w = ctx;
  int n = perfMpiCount(count, "MPI_Sendrecv");
  int next = (w->rank + 1) % w->size, prev = (w->rank + w->size - 1) % w->size;
  MPI_Datatype t = perfMpiType(type, 0);
  int rc = MPI_Sendrecv(send, n, t, next, 0, recv, n, t, prev, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  perfMpiCheck(rc, "MPI_Sendrecv", count, type, -1, -1);
}

static const perfBench bench = {
  .tool = "mpi_sendrecv_perf",
  .shape = &perfShapeSendRecv,
  .run = sendRecv,
  PERF_MPI_RANKS,
  .checkOpts = perfMpiCheckOptsMove,
};

int main(int argc, char **argv) {
  return perfMain(argc, argv, &bench);
}
