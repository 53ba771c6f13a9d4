/* mpi_all_gather_perf: the baseline for all_gather_perf, timing MPI_Allgather (flags, table,
 * data and checks as every *_perf; one rank per MPI process). NCCL's in-place form (the send
 * part at its place in the receive buffer) is MPI's MPI_IN_PLACE. */
#include "perf_mpi.h"

static void allGather(void *ctx, const void *send, void *recv, size_t count, int type, int op, int root,
                 void *stream) {
  (void)stream; /* host buffers only: no stream */
  (void)op, (void)root;
  const perfWorld *w = ctx;
  int n = perfMpiCount(count, "MPI_Allgather");
  MPI_Datatype t = perfMpiType(type, 0);
  int inPlace = send == (const char *)recv + (size_t)w->rank * count * perfTypes[type].size;
  int rc = inPlace ? MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, n, t, MPI_COMM_WORLD)
                   : MPI_Allgather(send, n, t, recv, n, t, MPI_COMM_WORLD);
  perfMpiCheck(rc, "MPI_Allgather", count, type, -1, -1);
}

static const perfBench bench = {
  .tool = "mpi_all_gather_perf",
  .shape = &perfShapeAllGather,
  .run = allGather,
  PERF_MPI_RANKS,
  .checkOpts = perfMpiCheckOptsMove,
};

int main(int argc, char **argv) {
  return perfMain(argc, argv, &bench);
}
