/* mpi_scatter_perf: the baseline for scatter_perf, timing MPI_Scatter (flags, table, data and
 * checks as every *_perf; one rank per MPI process). NCCL's in-place form (the root's result
 * is its own part of its send buffer) is MPI_IN_PLACE on the root; the other ranks pass no
 * send buffer, which MPI reads on the root only. */
#include "perf_mpi.h"

static void scatter(void *ctx, const void *send, void *recv, size_t count, int type, int op, int root,
                 void *stream) {
  (void)stream; /* host buffers only: no stream */
  (void)op;
  const perfWorld *w = ctx;
  int n = perfMpiCount(count, "MPI_Scatter");
  MPI_Datatype t = perfMpiType(type, 0);
  int rc;
  if (w->rank != root) rc = MPI_Scatter(NULL, 0, t, recv, n, t, root, MPI_COMM_WORLD);
  else if (recv == (const char *)send + (size_t)root * count * perfTypes[type].size)
    rc = MPI_Scatter(send, n, t, MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, root, MPI_COMM_WORLD);
  else rc = MPI_Scatter(send, n, t, recv, n, t, root, MPI_COMM_WORLD);
  perfMpiCheck(rc, "MPI_Scatter", count, type, -1, root);
}

static const perfBench bench = {
  .tool = "mpi_scatter_perf",
  .shape = &perfShapeScatter,
  .run = scatter,
  PERF_MPI_RANKS,
  .checkOpts = perfMpiCheckOptsMove,
};

int main(int argc, char **argv) {
  return perfMain(argc, argv, &bench);
}
