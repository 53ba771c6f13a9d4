/* mpi_allreduce_perf: the baseline for allreduce_perf. Same flags, same table, same data and
 * checks (bench/perf_*.c), but timing MPI_Allreduce on host buffers, one rank per MPI
 * process. Run it under mpirun, e.g.
 *   mpirun --allow-run-as-root --oversubscribe --mca btl self,vader -np 4 \
 *          build/bench/mpi_allreduce_perf -b 8 -e 256M -f 2 */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "perf_run.h"

static MPI_Datatype mpiType(int type) {
  switch (type) {
  case PERF_INT8: return MPI_INT8_T;
  case PERF_UINT8: return MPI_UINT8_T;
  case PERF_INT32: return MPI_INT32_T;
  case PERF_UINT32: return MPI_UINT32_T;
  case PERF_INT64: return MPI_INT64_T;
  case PERF_UINT64: return MPI_UINT64_T;
  case PERF_FLOAT32: return MPI_FLOAT;
  case PERF_DOUBLE: return MPI_DOUBLE;
  default: return MPI_DATATYPE_NULL; /* MPI has no half or bfloat16 */
  }
}

static MPI_Op mpiOp(int op) {
  switch (op) {
  case PERF_SUM: return MPI_SUM;
  case PERF_PROD: return MPI_PROD;
  case PERF_MAX: return MPI_MAX;
  case PERF_MIN: return MPI_MIN;
  default: return MPI_OP_NULL; /* MPI has no average */
  }
}

static int mpiSupported(int type, int op) {
  return mpiType(type) != MPI_DATATYPE_NULL && mpiOp(op) != MPI_OP_NULL;
}

static void mpiColl(void *ctx, const void *send, void *recv, size_t count, int type, int op, int root) {
  (void)ctx;
  (void)root;
  if (count > INT_MAX) perfFatal("count %zu exceeds MPI's int count", count);
  int rc = MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)count, mpiType(type),
                         mpiOp(op), MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    perfFatal("MPI_Allreduce(count %zu, %s, %s): %s", count, perfTypes[type].name, perfOpNames[op], msg);
  }
}

/* Only what the options ask explicitly is an error; "all" skips what MPI lacks. */
static const char *mpiCheckOpts(const perfOpts *o) {
  if (o->nThreads != 1) return "-t must be 1: MPI ranks are processes";
  if (o->type == PERF_HALF || o->type == PERF_BF16) return "MPI has no half / bfloat16 datatype";
  if (o->op == PERF_AVG) return "MPI has no avg reduction";
  return NULL;
}

/* "Open MPI v4.1.4, package: ..." -> "MPI library: Open MPI v4.1.4" */
static const char *mpiLibrary(void) {
  static char line[MPI_MAX_LIBRARY_VERSION_STRING + 16];
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(v, &len);
  v[strcspn(v, ",\n")] = '\0';
  snprintf(line, sizeof(line), "MPI library: %s", v);
  return line;
}

static const perfBench mpiBench = {
  .tool = "mpi_allreduce_perf",
  .shape = &perfShapeAllReduce,
  .run = mpiColl,
  .alwaysMpi = 1,
  .library = mpiLibrary,
  .note = "MPI has no half/bfloat16 type nor avg op: -d all / -o all skip them",
  .checkOpts = mpiCheckOpts,
  .supported = mpiSupported,
};

int main(int argc, char **argv) {
  return perfMain(argc, argv, &mpiBench);
}
