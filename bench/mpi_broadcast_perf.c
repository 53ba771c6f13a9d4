/* mpi_broadcast_perf: the baseline for broadcast_perf, timing MPI_Bcast (flags, table, data
 * and checks as every *_perf; one rank per MPI process). MPI_Bcast has one buffer: out of
 * place, the root first copies its send buffer into its receive buffer, as weftBroadcast's
 * root does, so that both leave the result in every rank's receive buffer. */
#include <string.h>

#include "perf_mpi.h"

static void broadcast(void *ctx, const void *send, void *recv, size_t count, int type, int op, int root,
                 void *stream) {
  (void)stream; /* host buffers only: no stream */
  (void)op;
  const perfWorld *w = ctx;
  int n = perfMpiCount(count, "MPI_Bcast");
  if (w->rank == root && send != recv) memcpy(recv, send, count * perfTypes[type].size);
  int rc = MPI_Bcast(recv, n, perfMpiType(type, 0), root, MPI_COMM_WORLD);
  perfMpiCheck(rc, "MPI_Bcast", count, type, -1, root);
}

static const perfBench bench = {
  .tool = "mpi_broadcast_perf",
  .shape = &perfShapeBroadcast,
  .run = broadcast,
  PERF_MPI_RANKS,
  .checkOpts = perfMpiCheckOptsMove,
};

int main(int argc, char **argv) {
  return perfMain(argc, argv, &bench);
}
