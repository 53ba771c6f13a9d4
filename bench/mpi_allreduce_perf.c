/* mpi_allreduce_perf: the baseline for allreduce_perf. Same flags, same table, same data and
 * checks (bench/perf_*.c), but timing MPI_Allreduce on host buffers, one rank per MPI
 * process. Run it under mpirun, e.g.
 *   mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 4 \
 *          build/bench/mpi_allreduce_perf -b 8 -e 256M -f 2 */
#include "perf_mpi.h"

static void allReduce(void *ctx, const void *send, void *recv, size_t count, int type, int op, int root,
                 void *stream) {
  (void)stream; /* host buffers only: no stream */
  (void)ctx, (void)root;
  int rc = MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, perfMpiCount(count, "MPI_Allreduce"),
                         perfMpiType(type, 1), perfMpiOp(op), MPI_COMM_WORLD);
  perfMpiCheck(rc, "MPI_Allreduce", count, type, op, -1);
}

static const perfBench bench = {
  .tool = "mpi_allreduce_perf",
  .shape = &perfShapeAllReduce,
  .run = allReduce,
  PERF_MPI_RANKS,
  .note = PERF_MPI_NOTE_REDUCE,
  .checkOpts = perfMpiCheckOptsReduce,
  .supported = perfMpiSupportedReduce,
};

int main(int argc, char **argv) {
  return perfMain(argc, argv, &bench);
}
