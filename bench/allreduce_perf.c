/* allreduce_perf: nccl-tests' all_reduce_perf for weft on host (CPU) buffers, through the public
 * API only. Ranks are -t threads in each process; under mpirun there is one such process per
 * MPI rank (rank = worldRank * threads + thread), and MPI carries nothing but the unique id and
 * the benchmark's own barriers and timings. Without mpirun it runs as one process, without MPI.
 *   build/bench/allreduce_perf -t 4 -b 8 -e 64M -f 2
 *   mpirun --allow-run-as-root --oversubscribe -np 4 build/bench/allreduce_perf -b 8 -e 64M -f 2 */
#include "weft.h"
#include "perf_common.h"

/* perf_common's type and op indices, in weft's terms. */
static const weftDataType_t weftTypes[PERF_NTYPES] = {
  weftInt8, weftUint8, weftInt32, weftUint32, weftInt64, weftUint64,
  weftFloat16, weftFloat32, weftFloat64, weftBfloat16,
};
static const weftRedOp_t weftOps[PERF_NOPS] = {weftSum, weftProd, weftMax, weftMin, weftAvg};

static void weftColl(void *ctx, const void *send, void *recv, size_t count, int type, int op) {
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

typedef struct {
  perfRank r;
  weftUniqueId id;
  pthread_t thread;
} rankThread;

/* Each rank owns its buffers and communicator, as a process-per-rank application would. */
static void *rankMain(void *arg) {
  rankThread *t = arg;
  perfRank *r = &t->r;
  weftComm_t comm;
  perfRankAlloc(r);
  weftResult_t res = weftCommInitRank(&comm, r->nRanks, t->id, r->rank);
  if (res != weftSuccess) {
    perfFatal("rank %d: weftCommInitRank: %s: %s", r->rank, weftGetErrorString(res), weftGetLastError(NULL));
  }
  r->collCtx = comm;
  if (r->printer) perfPrintTableHeader(r->opts);
  perfRunAll(r);
  res = weftCommDestroy(comm);
  if (res != weftSuccess) perfFatal("rank %d: weftCommDestroy: %s", r->rank, weftGetErrorString(res));
  perfRankFree(r);
  return NULL;
}

static void printVersion(void) {
  int v = 0;
  weftResult_t res = weftGetVersion(&v);
  if (res != weftSuccess) perfFatal("weftGetVersion: %s", weftGetErrorString(res));
  printf("# weft version %d.%d.%d\n", v / 10000, v / 100 % 100, v % 100);
}

/* World rank 0 creates the id (and with it the bootstrap root); MPI hands it to the others. */
static weftUniqueId shareUniqueId(const perfWorld *w) {
  weftUniqueId id;
  memset(&id, 0, sizeof(id));
  if (w->rank == 0) {
    weftResult_t res = weftGetUniqueId(&id);
    if (res != weftSuccess) perfFatal("weftGetUniqueId: %s: %s", weftGetErrorString(res), weftGetLastError(NULL));
  }
  if (perfUseMpi) MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  return id;
}

/* Thread 0 runs on the main thread: it is the one that calls MPI (MPI_THREAD_FUNNELED). */
static int runRanks(const perfOpts *o, const perfWorld *w, perfTeam *team, weftUniqueId id) {
  rankThread *ts = calloc((size_t)o->nThreads, sizeof(*ts));
  if (!ts) perfFatal("out of memory");
  for (int i = 0; i < o->nThreads; i++) {
    ts[i].id = id;
    ts[i].r = (perfRank){.opts = o, .team = team, .tid = i, .rank = w->rank * o->nThreads + i,
                         .nRanks = w->size * o->nThreads, .printer = w->rank == 0 && i == 0,
                         .coll = weftColl, .supported = weftSupported,
                         .algoName = weftAlgoName};
    if (i > 0 && pthread_create(&ts[i].thread, NULL, rankMain, &ts[i]) != 0)
      perfFatal("cannot start thread %d", i);
  }
  rankMain(&ts[0]);
  for (int i = 1; i < o->nThreads; i++) pthread_join(ts[i].thread, NULL);
  /* Every rank holds the same global counts: rank 0's are the job's. */
  if (ts[0].r.printer) perfPrintFooter(ts[0].r.errors, ts[0].r.bwSum, ts[0].r.bwCount);
  int errors = ts[0].r.errors;
  free(ts);
  return errors;
}

int main(int argc, char **argv) {
  perfOpts o;
  perfWorld w;
  perfTeam team;
  setvbuf(stdout, NULL, _IOLBF, 0);
  int rc = perfParseArgs(argc, argv, &o, "allreduce_perf");
  if (rc <= 0) return rc < 0;
  perfWorldInit(&w, perfEnvUnderMpi(), &argc, &argv);
  if (w.rank == 0) {
    printVersion();
    perfPrintHeader(&o);
  }
  perfPrintDevices(o.nThreads, w.rank, w.size);
  weftUniqueId id = shareUniqueId(&w);
  perfTeamInit(&team, o.nThreads, w.size * o.nThreads, perfUseMpi);
  int errors = runRanks(&o, &w, &team, id);
  perfTeamFree(&team);
  perfWorldFinalize();
  return errors ? 1 : 0;
}
