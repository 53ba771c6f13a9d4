/* mpi_reduce_scatter_perf: the baseline for reduce_scatter_perf, timing
 * MPI_Reduce_scatter_block (flags, table, data and checks as every *_perf; one rank per MPI
 * process). In place, NCCL's result is rank r's part of the send buffer, MPI's (MPI_IN_PLACE)
 * the buffer's start: the result is then moved to part r, a copy of 1/n of the data that the
 * in-place column's time includes. */
#include <string.h>

#include "perf_mpi.h"

static void reduceScatter(void *ctx, const void *send, void *recv, size_t count, int type, int op, int root,
                 void *stream) {
  (void)stream; /* host buffers only: no stream */
  (void)root;
  const perfWorld *w = ctx;
  int n = perfMpiCount(count, "MPI_Reduce_scatter_block");
  MPI_Datatype t = perfMpiType(type, 1);
  size_t bytes = count * perfTypes[type].size;
  int rc;
  if (recv == (const char *)send + (size_t)w->rank * bytes) {
    rc = MPI_Reduce_scatter_block(MPI_IN_PLACE, (void *)send, n, t, perfMpiOp(op), MPI_COMM_WORLD);
    if (rc == MPI_SUCCESS && recv != send) memmove(recv, send, bytes);
  } else {
    rc = MPI_Reduce_scatter_block(send, recv, n, t, perfMpiOp(op), MPI_COMM_WORLD);
  }
  perfMpiCheck(rc, "MPI_Reduce_scatter_block", count, type, op, -1);
}

static const perfBench bench = {
  .tool = "mpi_reduce_scatter_perf",
  .shape = &perfShapeReduceScatter,
  .run = reduceScatter,
  PERF_MPI_RANKS,
  .note = PERF_MPI_NOTE_REDUCE,
  .checkOpts = perfMpiCheckOptsReduce,
  .supported = perfMpiSupportedReduce,
};

int main(int argc, char **argv) {
  return perfMain(argc, argv, &bench);
}
