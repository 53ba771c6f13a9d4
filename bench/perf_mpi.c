/* What the MPI baselines share (see perf_mpi.h). */
#include "perf_mpi.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

MPI_Datatype perfMpiType(int type, int reduces) {
  switch (type) {
  case PERF_INT8: return MPI_INT8_T;
  case PERF_UINT8: return MPI_UINT8_T;
  case PERF_INT32: return MPI_INT32_T;
  case PERF_UINT32: return MPI_UINT32_T;
  case PERF_INT64: return MPI_INT64_T;
  case PERF_UINT64: return MPI_UINT64_T;
  case PERF_FLOAT32: return MPI_FLOAT;
  case PERF_DOUBLE: return MPI_DOUBLE;
  default: return reduces ? MPI_DATATYPE_NULL : MPI_UINT16_T; /* half, bfloat16 */
  }
}

MPI_Op perfMpiOp(int op) {
  switch (op) {
  case PERF_SUM: return MPI_SUM;
  case PERF_PROD: return MPI_PROD;
  case PERF_MAX: return MPI_MAX;
  case PERF_MIN: return MPI_MIN;
  default: return MPI_OP_NULL;
  }
}

int perfMpiSupportedReduce(int type, int op) {
  return perfMpiType(type, 1) != MPI_DATATYPE_NULL && perfMpiOp(op) != MPI_OP_NULL;
}

const char *perfMpiCheckOptsMove(const perfOpts *o) {
  return o->nThreads != 1 ? "-t must be 1: MPI ranks are processes" : NULL;
}

const char *perfMpiCheckOptsReduce(const perfOpts *o) {
  if (o->type == PERF_HALF || o->type == PERF_BF16) return "MPI has no half / bfloat16 datatype";
  if (o->op == PERF_AVG) return "MPI has no avg reduction";
  return perfMpiCheckOptsMove(o);
}

/* "Open MPI v4.1.4, package: ..." -> "MPI library: Open MPI v4.1.4" */
const char *perfMpiLibrary(void) {
  static char line[MPI_MAX_LIBRARY_VERSION_STRING + 16];
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(v, &len);
  v[strcspn(v, ",\n")] = '\0';
  snprintf(line, sizeof(line), "MPI library: %s", v);
  return line;
}

void *perfMpiSetup(const perfWorld *w) {
  static perfWorld world;
  world = *w;
  return &world;
}

int perfMpiCount(size_t count, const char *call) {
  if (count > INT_MAX) perfFatal("%s: count %zu exceeds MPI's int count", call, count);
  return (int)count;
}

void perfMpiCheck(int rc, const char *call, size_t count, int type, int op, int root) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING], opPart[16] = "", rootPart[24] = "";
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  if (op >= 0) snprintf(opPart, sizeof(opPart), ", %s", perfOpNames[op]);
  if (root >= 0) snprintf(rootPart, sizeof(rootPart), ", root %d", root);
  perfFatal("%s(count %zu, %s%s%s): %s", call, count, perfTypes[type].name, opPart, rootPart, msg);
}
