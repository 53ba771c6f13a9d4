/* mpi_alltoall_perf: the baseline for alltoall_perf, timing MPI_Alltoall (flags, table, data
 * and checks as every *_perf; one rank per MPI process). Out of place only, as alltoall_perf
 * (NCCL has no in-place AlltoAll). */
#include "perf_mpi.h"

static void alltoAll(void *ctx, const void *send, void *recv, size_t count, int type, int op, int root,
                 void *stream) {
  (void)stream; /* host buffers only: no stream */
  (void)ctx, (void)op, (void)root;
  int n = perfMpiCount(count, "MPI_Alltoall");
  MPI_Datatype t = perfMpiType(type, 0);
  int rc = MPI_Alltoall(send, n, t, recv, n, t, MPI_COMM_WORLD);
  perfMpiCheck(rc, "MPI_Alltoall", count, type, -1, -1);
}

static const perfBench bench = {
  .tool = "mpi_alltoall_perf",
  .shape = &perfShapeAlltoAll,
  .run = alltoAll,
  PERF_MPI_RANKS,
  .checkOpts = perfMpiCheckOptsMove,
};

int main(int argc, char **argv) {
  return perfMain(argc, argv, &bench);
}
