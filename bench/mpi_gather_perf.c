/* mpi_gather_perf: the baseline for gather_perf, timing MPI_Gather (flags, table, data and
 * checks as every *_perf; one rank per MPI process). NCCL's in-place form (the root's part at
 * its place in its receive buffer) is MPI_IN_PLACE on the root; the other ranks pass no
 * receive buffer, which MPI reads on the root only. */
#include "perf_mpi.h"

static void gather(void *ctx, const void *send, void *recv, size_t count, int type, int op, int root,
                 void *stream) {
  (void)stream; /* host buffers only: no stream */
  (void)op;
  const perfWorld *w = ctx;
  int n = perfMpiCount(count, "MPI_Gather");
  MPI_Datatype t = perfMpiType(type, 0);
  int rc;
  if (w->rank != root) rc = MPI_Gather(send, n, t, NULL, 0, t, root, MPI_COMM_WORLD);
  else if (send == (const char *)recv + (size_t)root * count * perfTypes[type].size)
    rc = MPI_Gather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n, t, root, MPI_COMM_WORLD);
  else rc = MPI_Gather(send, n, t, recv, n, t, root, MPI_COMM_WORLD);
  perfMpiCheck(rc, "MPI_Gather", count, type, -1, root);
}

static const perfBench bench = {
  .tool = "mpi_gather_perf",
  .shape = &perfShapeGather,
  .run = gather,
  PERF_MPI_RANKS,
  .checkOpts = perfMpiCheckOptsMove,
};

int main(int argc, char **argv) {
  return perfMain(argc, argv, &bench);
}
