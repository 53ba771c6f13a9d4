/* allreduce_perf: nccl-tests' all_reduce_perf for weft on host (CPU) buffers, through the public
 * API only. Ranks are -t threads in each process; under mpirun there is one such process per
 * MPI rank (rank = worldRank * threads + thread), and MPI carries nothing but the unique id and
 * the benchmark's own barriers and timings. Without mpirun it runs as one process, without MPI.
 *   build/bench/allreduce_perf -t 4 -b 8 -e 64M -f 2
 *   mpirun --allow-run-as-root --oversubscribe -np 4 build/bench/allreduce_perf -b 8 -e 64M -f 2
 * The options, table and timing loop are bench/perf_*.c's (docs/benchmark.md). */
#include <stdio.h>
#include <string.h>

#include "perf_run.h"
#include "weft.h"

/* perf_data's type and op indices, in weft's terms. */
static const weftDataType_t weftTypes[PERF_NTYPES] = {
  weftInt8, weftUint8, weftInt32, weftUint32, weftInt64, weftUint64,
  weftFloat16, weftFloat32, weftFloat64, weftBfloat16,
};
static const weftRedOp_t weftOps[PERF_NOPS] = {weftSum, weftProd, weftMax, weftMin, weftAvg};

static void weftColl(void *ctx, const void *send, void *recv, size_t count, int type, int op, int root) {
  (void)root;
  weftComm_t comm = ctx;
  weftResult_t res = weftAllReduce(send, recv, count, weftTypes[type], weftOps[op], comm, NULL);
  if (res != weftSuccess) {
    perfFatal("weftAllReduce(count %zu, %s, %s): %s: %s", count, perfTypes[type].name,
              perfOpNames[op], weftGetErrorString(res), weftGetLastError(comm));
  }
}

/* -A 1: the tuner's choice (or WEFT_ALGO's), through weft's extension weftCommGetAlgorithm. */
static const char *weftAlgoName(void *ctx, size_t count, int type) {
  const char *name = "?";
  weftResult_t res = weftCommGetAlgorithm(ctx, count, weftTypes[type], &name);
  if (res != weftSuccess) perfFatal("weftCommGetAlgorithm: %s: %s", weftGetErrorString(res), weftGetLastError(ctx));
  return name;
}

/* weft reduces avg for floating-point types only (weftInvalidArgument otherwise). */
static int weftSupported(int type, int op) {
  return op != PERF_AVG || perfTypes[type].kind == PERF_FLOAT;
}

static const char *weftLibrary(void) {
  static char line[64];
  int v = 0;
  weftResult_t res = weftGetVersion(&v);
  if (res != weftSuccess) perfFatal("weftGetVersion: %s", weftGetErrorString(res));
  snprintf(line, sizeof(line), "weft version %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
  return line;
}

/* World rank 0 creates the id (and with it the bootstrap root); MPI hands it to the others. */
static weftUniqueId uniqueId;

static void *weftSetup(const perfWorld *w) {
  memset(&uniqueId, 0, sizeof(uniqueId));
  if (w->rank == 0) {
    weftResult_t res = weftGetUniqueId(&uniqueId);
    if (res != weftSuccess) perfFatal("weftGetUniqueId: %s: %s", weftGetErrorString(res), weftGetLastError(NULL));
  }
  if (perfUseMpi) MPI_Bcast(&uniqueId, (int)sizeof(uniqueId), MPI_BYTE, 0, MPI_COMM_WORLD);
  return &uniqueId;
}

/* Each rank owns its buffers and communicator, as a process-per-rank application would. */
static void *weftRankInit(void *shared, int rank, int nRanks) {
  weftComm_t comm;
  weftResult_t res = weftCommInitRank(&comm, nRanks, *(const weftUniqueId *)shared, rank);
  if (res != weftSuccess) {
    perfFatal("rank %d: weftCommInitRank: %s: %s", rank, weftGetErrorString(res), weftGetLastError(NULL));
  }
  return comm;
}

static void weftRankFini(void *ctx) {
  weftResult_t res = weftCommDestroy(ctx);
  if (res != weftSuccess) perfFatal("weftCommDestroy: %s", weftGetErrorString(res));
}

static const perfBench weftBench = {
  .tool = "allreduce_perf",
  .shape = &perfShapeAllReduce,
  .run = weftColl,
  .library = weftLibrary,
  .setup = weftSetup,
  .rankInit = weftRankInit,
  .rankFini = weftRankFini,
  .supported = weftSupported,
  .algoName = weftAlgoName,
};

int main(int argc, char **argv) {
  return perfMain(argc, argv, &weftBench);
}
