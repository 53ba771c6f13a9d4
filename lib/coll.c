/* Collective entry points: validate the arguments, let the tuner choose, run; record every
 * call in the flight recorder, and turn a failed collective into the communicator's sticky
 * error (weftCommFail). */
#include <stdatomic.h>
#include <stdio.h>

#include "api.h"
#include "bootstrap.h"
#include "check.h"
#include "collname.h"
#include "commfail.h"
#include "copy.h"
#include "devcoll.h"
#include "core.h"
#include "errors.h"
#include "group.h"
#include "param.h"
#include "redop.h"
#include "reduce.h"
#include "straggler.h"

/* The flight recorder's clock: CLOCK_MONOTONIC_COARSE costs ~12 ns where CLOCK_MONOTONIC
 * costs ~50, and is read once per successful collective (its start; it finished before the
 * next one started), so an 8-byte AllReduce does not notice. Its resolution (a tick, 1-4 ms)
 * is enough to see which operation hung and for how long. */
static int64_t nowUs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Refuses a communicator that cannot run a collective now, with the reason. */
weftResult_t weftCheckUsable(struct weftComm *comm, const char *api) {
  weftResult_t state = (weftResult_t)atomic_load_explicit(&comm->asyncError, memory_order_acquire);
  if (state == weftInProgress)
    return weftSetError(weftInvalidUsage,
                        "%s: rank %d: non-blocking init still in progress (poll "
                        "weftCommGetAsyncError until it reports weftSuccess)", api, comm->rank);
  if (state != weftSuccess)
    return weftSetError(state,
                        "%s: rank %d: communicator failed earlier (%s); only weftCommDestroy or "
                        "weftCommAbort remain: %s", api, comm->rank, weftGetErrorString(state),
                        comm->lastError);
  if (comm->finalized)
    return weftSetError(weftInvalidUsage, "%s: rank %d: communicator finalized", api, comm->rank);
  if (atomic_load(&comm->opInFlight))
    return weftSetError(weftInvalidUsage,
                        "%s: rank %d: the previous collective of this non-blocking communicator "
                        "is still in progress (poll weftCommGetAsyncError until it reports "
                        "weftSuccess)", api, comm->rank);
  if (weftCommAborted(comm)) return weftAbortedError(comm);
  return weftSuccess;
}

void weftFlightDump(struct weftComm *comm, const char *why) {
  uint64_t n = comm->flightNext, first = n > WEFT_FLIGHT_OPS ? n - WEFT_FLIGHT_OPS : 0;
  int64_t now = nowUs();
  fprintf(stderr, "[%d] WEFT flight recorder: %s; last %llu of %llu operations (times in us, coarse clock, "
          "before now):\n", comm->rank, why, (unsigned long long)(n - first),
          (unsigned long long)n);
  for (uint64_t i = first; i < n; i++) {
    const struct weftFlightEntry *e = &comm->flight[i % WEFT_FLIGHT_OPS];
    char end[48];
    if (e->endUs > 0) snprintf(end, sizeof end, "-%lld", (long long)(now - e->endUs));
    else if (e->endUs == 0) snprintf(end, sizeof end, "running");
    else if (i + 1 < n)
      snprintf(end, sizeof end, "<=-%lld",
               (long long)(now - comm->flight[(i + 1) % WEFT_FLIGHT_OPS].startUs));
    else snprintf(end, sizeof end, "done");
    fprintf(stderr, "[%d] WEFT flight seq %llu %s count %zu %s %s algo %s start -%lld finish %s "
            "rc %d\n", comm->rank, (unsigned long long)e->seq, e->coll, e->count,
            weftTypeName((weftDataType_t)e->type), weftOpName((weftRedOp_t)e->op), e->algo,
            (long long)(now - e->startUs), end, e->rc);
  }
  fflush(stderr);
}

/* Tunes, records and runs one validated collective (its PreMulSum input scaled first). */
weftResult_t weftCollRunAlgo(struct weftComm *comm, struct weftCollArgs *args) {
  weftResult_t rc;
  if (args->op == WEFT_OP_PREMULSUM && (rc = weftRedOpApply(comm, args)) != weftSuccess)
    return weftReportTo(comm, weftCommFail(comm, rc)); /* scaled, it runs as a Sum */
  int algo = weftTuneChoose(comm, args);
  if (algo < 0) return weftReportTo(comm, weftTuneNoAlgorithm(comm, args->coll));
  args->seq = ++comm->opSeq;
  INFO(WEFT_COLL, "%s: opCount %llu sendbuff %p recvbuff %p count %zu datatype %s op %s root %d "
       "comm %p [nranks=%d] algorithm %s", weftCollName(args->coll), (unsigned long long)args->seq,
       args->sendbuff, args->recvbuff, args->count, weftTypeName(args->type), weftOpName(args->op),
       args->root, (void *)comm, comm->nranks, weftAlgos[algo]->name);
  comm->opSig[0] = args->seq;
  comm->opSig[1] = (uint64_t)args->count << 16 | (uint64_t)args->type << 8 | (uint64_t)args->op;
  comm->opSig[2] = weftSigWhat(args->coll, args->root);
  struct weftFlightEntry *e = &comm->flight[comm->flightNext++ % WEFT_FLIGHT_OPS];
  *e = (struct weftFlightEntry){args->seq, weftCollName(args->coll), weftAlgos[algo]->name,
                                args->count, args->type, args->op, nowUs(), 0, 0};
  for (int a = 0; weftAlgos[a] != NULL; a++)
    if (weftAlgos[a]->begin != NULL && comm->algoState[a] != NULL)
      weftAlgos[a]->begin(comm->algoState[a], args);
  struct weftCallBuffers bufs = weftCallBuffersOf(args, comm->rank, comm->nranks);
  comm->opStreamsOut = bufs.needRecv && weftCommStreamsOut(comm, bufs.recvBytes);
  rc = weftAlgos[algo]->run(comm->algoState[algo], comm, args);
  comm->opStreamsOut = 0;
  e->endUs = rc == weftSuccess ? -1 : nowUs();
  e->rc = rc;
  if (rc != weftSuccess) {
    if (rc == weftTimeout && weftParamFlightRecorder()) weftFlightDump(comm, weftThreadLastError());
    rc = weftCommFail(comm, rc);
  }
  return weftReportTo(comm, rc);
}

/* Runs one validated collective to its end, in the caller's thread or a non-blocking
 * communicator's operation thread. */
weftResult_t weftCollRun(struct weftComm *comm, struct weftCollArgs *args) {
  /* A plain store, not a locked add: one thread calls collectives on a communicator, and
   * weftCommAbort only has to see calls that are already waiting (see weftCommAbort). */
  atomic_store_explicit(&comm->busy, 1, memory_order_release);
  if (comm->stragglers != NULL) weftStragglerOpBegin(comm);
  weftResult_t rc = weftCollRunAlgo(comm, args);
  if (comm->stragglers != NULL) rc = weftStragglerOpEnd(comm, rc);
  atomic_store_explicit(&comm->busy, 0, memory_order_release);
  return rc;
}

/* Every collective's entry: validate, then run (or start, on a non-blocking communicator, or
 * enqueue on the stream, on device buffers: lib/devcoll.h). The task is the caller's compound
 * literal, used in place: a copy of it (or a struct passed by value) reads with wide loads the
 * fields just stored narrow, and where the store before them missed (the eager slot a peer read
 * in the last call) each such load waits for that miss: ~10% of a 2-rank 8-byte Broadcast. */
static weftResult_t collCall(const char *api, struct weftTask *task) {
  weftComm_t comm = task->comm;
  WEFTCHECK(weftGroupRefused(weftCheckComm(comm, api)));
  task->coll.seq = comm->opSeq;
  weftResult_t rc = weftCheckCall(comm, &task->coll);
  if (rc == weftSuccess) rc = weftCheckUsable(comm, api);
  if (rc != weftSuccess) return weftReportTo(comm, weftGroupRefused(rc));
  if (task->coll.count == 0) return weftSuccess;
  rc = weftDevClassify(comm, api, task, &task->onDevice);
  if (rc != weftSuccess) return weftReportTo(comm, weftGroupRefused(rc));
  rc = weftRedOpBegin(comm, &task->coll); /* a PreMulSum op's scalar, read now */
  if (rc != weftSuccess) return weftReportTo(comm, weftGroupRefused(rc));
  if (task->onDevice)
    return weftReportTo(comm, weftGroupActive() ? weftGroupEnqueue(task) : weftDevSubmit(comm, task, 1, api));
  if (weftGroupActive()) return weftReportTo(comm, weftGroupEnqueue(task));
  weftDevDrain(comm); /* calls on device buffers before this one run first */
  return comm->nonblocking ? weftStartTasks(comm, task, 1, api) : weftCollRun(comm, &task->coll);
}

/* A collective call's task: the arguments, on host memory until weftDevClassify looks. */
#define COLL_TASK(comm, stream, ...) \
  (&(struct weftTask){.comm = (comm), .isColl = 1, .coll = {__VA_ARGS__}, .stream = (stream)})

WEFT_PUBLIC weftResult_t weftAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                       weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                                       weftStream_t stream) {
  return collCall("weftAllReduce", COLL_TASK(comm, stream, weftCollAllReduce, sendbuff,
                  recvbuff, count, 0, datatype, op, -1, 0, {0}));
}
WEFT_PROFILING_ALIAS(weftAllReduce);

WEFT_PUBLIC weftResult_t weftBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                       weftDataType_t datatype, int root, weftComm_t comm,
                                       weftStream_t stream) {
  return collCall("weftBroadcast", COLL_TASK(comm, stream, weftCollBroadcast, sendbuff,
                  recvbuff, count, 0, datatype, weftSum, root, 0, {0}));
}
WEFT_PROFILING_ALIAS(weftBroadcast);

WEFT_PUBLIC weftResult_t weftBcast(void *buff, size_t count, weftDataType_t datatype, int root,
                                   weftComm_t comm, weftStream_t stream) {
  return collCall("weftBcast", COLL_TASK(comm, stream, weftCollBroadcast, buff, buff, count,
                  0, datatype, weftSum, root, 0, {0}));
}
WEFT_PROFILING_ALIAS(weftBcast);

WEFT_PUBLIC weftResult_t weftReduce(const void *sendbuff, void *recvbuff, size_t count,
                                    weftDataType_t datatype, weftRedOp_t op, int root,
                                    weftComm_t comm, weftStream_t stream) {
  return collCall("weftReduce", COLL_TASK(comm, stream, weftCollReduce, sendbuff, recvbuff,
                  count, 0, datatype, op, root, 0, {0}));
}
WEFT_PROFILING_ALIAS(weftReduce);

WEFT_PUBLIC weftResult_t weftAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                       weftDataType_t datatype, weftComm_t comm,
                                       weftStream_t stream) {
  return collCall("weftAllGather", COLL_TASK(comm, stream, weftCollAllGather, sendbuff,
                  recvbuff, sendcount, 0, datatype, weftSum, -1, 0, {0}));
}
WEFT_PROFILING_ALIAS(weftAllGather);

WEFT_PUBLIC weftResult_t weftReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                           weftDataType_t datatype, weftRedOp_t op,
                                           weftComm_t comm, weftStream_t stream) {
  return collCall("weftReduceScatter", COLL_TASK(comm, stream, weftCollReduceScatter,
                  sendbuff, recvbuff, recvcount, 0, datatype, op, -1, 0, {0}));
}
WEFT_PROFILING_ALIAS(weftReduceScatter);

WEFT_PUBLIC weftResult_t weftAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                      weftDataType_t datatype, weftComm_t comm,
                                      weftStream_t stream) {
  return collCall("weftAlltoAll", COLL_TASK(comm, stream, weftCollAlltoAll, sendbuff,
                  recvbuff, count, 0, datatype, weftSum, -1, 0, {0}));
}
WEFT_PROFILING_ALIAS(weftAlltoAll);

WEFT_PUBLIC weftResult_t weftGather(const void *sendbuff, void *recvbuff, size_t count,
                                    weftDataType_t datatype, int root, weftComm_t comm,
                                    weftStream_t stream) {
  return collCall("weftGather", COLL_TASK(comm, stream, weftCollGather, sendbuff, recvbuff,
                  count, 0, datatype, weftSum, root, 0, {0}));
}
WEFT_PROFILING_ALIAS(weftGather);

WEFT_PUBLIC weftResult_t weftScatter(const void *sendbuff, void *recvbuff, size_t count,
                                     weftDataType_t datatype, int root, weftComm_t comm,
                                     weftStream_t stream) {
  return collCall("weftScatter", COLL_TASK(comm, stream, weftCollScatter, sendbuff, recvbuff,
                  count, 0, datatype, weftSum, root, 0, {0}));
}
WEFT_PROFILING_ALIAS(weftScatter);
