/* mpi_reduce_perf: the baseline for reduce_perf, timing MPI_Reduce (flags, table, data and
 * checks as every *_perf; one rank per MPI process). In place is MPI_IN_PLACE on the root;
 * the other ranks pass no receive buffer, which MPI reads on the root only. */
#include "perf_mpi.h"

static void reduce(void *ctx, const void *send, void *recv, size_t count, int type, int op, int root,
                 void *stream) {
  (void)stream; /* host buffers only: no stream */
  const perfWorld *w = ctx;
  int isRoot = w->rank == root;
  int rc = MPI_Reduce(isRoot && send == recv ? MPI_IN_PLACE : send, isRoot ? recv : NULL,
                      perfMpiCount(count, "MPI_Reduce"), perfMpiType(type, 1), perfMpiOp(op), root,
                      MPI_COMM_WORLD);
  perfMpiCheck(rc, "MPI_Reduce", count, type, op, root);
}

static const perfBench bench = {
  .tool = "mpi_reduce_perf",
  .shape = &perfShapeReduce,
  .run = reduce,
  PERF_MPI_RANKS,
  .note = PERF_MPI_NOTE_REDUCE,
  .checkOpts = perfMpiCheckOptsReduce,
  .supported = perfMpiSupportedReduce,
};

int main(int argc, char **argv) {
  return perfMain(argc, argv, &bench);
}
