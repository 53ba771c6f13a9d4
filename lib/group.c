/* Group calls and point-to-point calls. Between weftGroupStart and the outermost weftGroupEnd
 * a call is checked at once and queued (per thread, as NCCL's groups are); weftGroupEnd runs
 * the queue. A communicator runs its collectives in call order, then all its Send/Recv in one
 * pass of the p2p engine (lib/p2p.c), so any pattern of them completes; small AllReduces
 * queued one after another run as one (lib/fuse.c). Several
 * communicators (ranks of this process driven by one thread) run at once, one thread each
 * beyond the first, since each one's calls wait for the others'. A Send or Recv outside a
 * group is a group of one. A non-blocking communicator runs its part in its operation thread
 * and weftGroupEnd returns weftInProgress. */
#include "group.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "check.h"
#include "commfail.h"
#include "devcoll.h"
#include "errors.h"
#include "fuse.h"
#include "reduce.h"

/* Groups of up to GROUP_INLINE calls (a SendRecv pair, a few small collectives) run from
 * storage that needs no malloc: the queue's own array and the stack; five allocations per
 * 8-byte SendRecv were measurable. */
#define GROUP_INLINE 8

struct groupQueue {
  int depth;
  struct weftTask *tasks; /* inlineTasks, or the heap once a group outgrows it */
  int n, cap;
  weftResult_t error; /* the first call refused while queued */
  struct weftTask inlineTasks[GROUP_INLINE];
};
static _Thread_local struct groupQueue group;

int weftGroupActive(void) { return group.depth > 0; }

weftResult_t weftGroupRefused(weftResult_t rc) {
  if (group.depth > 0 && group.error == weftSuccess) group.error = rc;
  return rc;
}

weftResult_t weftGroupEnqueue(const struct weftTask *task) {
  if (group.tasks == NULL) {
    group.tasks = group.inlineTasks;
    group.cap = GROUP_INLINE;
  }
  if (group.n == group.cap) {
    int cap = 2 * group.cap;
    int onHeap = group.tasks != group.inlineTasks;
    struct weftTask *t = realloc(onHeap ? group.tasks : NULL, sizeof *t * (size_t)cap);
    if (t != NULL && !onHeap) memcpy(t, group.inlineTasks, sizeof group.inlineTasks);
    if (t == NULL) {
      weftResult_t rc = weftSetError(weftSystemError, "out of memory queueing a group call");
      if (group.error == weftSuccess) group.error = rc;
      return rc;
    }
    group.tasks = t;
    group.cap = cap;
  }
  group.tasks[group.n++] = *task;
  return weftSuccess;
}

/* ---- Running a communicator's tasks ---- */

static weftResult_t runP2p(struct weftComm *comm, const struct weftTask *tasks, int n) {
  int np = 0;
  for (int i = 0; i < n; i++) np += !tasks[i].isColl;
  if (np == 0) return weftSuccess;
  struct weftP2pOp few[GROUP_INLINE];
  struct weftP2pOp *ops = np <= GROUP_INLINE ? few : malloc(sizeof *ops * (size_t)np);
  if (ops == NULL) return weftReportTo(comm, weftSetError(weftSystemError, "out of memory"));
  for (int i = 0, k = 0; i < n; i++)
    if (!tasks[i].isColl) ops[k++] = tasks[i].p2p;
  weftResult_t misuse = weftP2pCheck(comm, ops, np);
  if (misuse != weftSuccess) {
    if (ops != few) free(ops);
    return weftReportTo(comm, misuse);
  }
  atomic_store_explicit(&comm->busy, 1, memory_order_release);
  weftResult_t rc = weftP2pRun(comm, ops, np);
  if (ops != few) free(ops);
  if (rc != weftSuccess) rc = weftCommFail(comm, rc);
  rc = weftReportTo(comm, rc);
  atomic_store_explicit(&comm->busy, 0, memory_order_release);
  return rc;
}

weftResult_t weftRunTasks(struct weftComm *comm, const struct weftTask *tasks, int n) {
  for (int i = 0, k; i < n; i += k) {
    k = 1;
    if (!tasks[i].isColl) continue;
    k = weftFuseCount(tasks + i, n - i); /* small AllReduces together: lib/fuse.c */
    if (k > 1) {
      WEFTCHECK(weftFuseRun(comm, tasks + i, k));
      continue;
    }
    struct weftCollArgs args = tasks[i].coll; /* weftCollRun's to use: the queued task is const */
    WEFTCHECK(weftCollRun(comm, &args));
  }
  return runP2p(comm, tasks, n);
}

static void *opThreadMain(void *arg) {
  struct weftComm *comm = arg;
  weftLogSetRank(comm->rank);
  weftClearThreadError();
  (void)weftRunTasks(comm, comm->opTasks, comm->nOpTasks); /* a failure is the sticky error */
  atomic_store_explicit(&comm->opInFlight, 0, memory_order_release);
  return NULL;
}

void weftJoinOpThread(struct weftComm *comm) {
  if (atomic_exchange(&comm->opThreadStarted, 0)) pthread_join(comm->opThread, NULL);
  free(comm->opTasks);
  comm->opTasks = NULL;
  comm->nOpTasks = 0;
}

weftResult_t weftStartTasks(struct weftComm *comm, const struct weftTask *tasks, int n,
                            const char *api) {
  if (!comm->nonblocking) return weftRunTasks(comm, tasks, n);
  weftJoinOpThread(comm); /* the previous one, done (weftCheckUsable saw it out of flight) */
  comm->opTasks = malloc(sizeof *tasks * (size_t)n);
  if (comm->opTasks == NULL) return weftReportTo(comm, weftSetError(weftSystemError, "%s: out of memory", api));
  memcpy(comm->opTasks, tasks, sizeof *tasks * (size_t)n);
  comm->nOpTasks = n;
  atomic_store(&comm->opInFlight, 1);
  int err = pthread_create(&comm->opThread, NULL, opThreadMain, comm);
  if (err != 0) {
    atomic_store(&comm->opInFlight, 0);
    return weftReportTo(comm, weftSetSysError(err, "%s: pthread_create", api));
  }
  atomic_store(&comm->opThreadStarted, 1);
  return weftInProgress;
}

/* ---- weftGroupEnd ---- */

/* One communicator's share of a group, run by a thread of its own when the group drives
 * several. */
struct commRun {
  struct weftComm *comm;
  struct weftTask *tasks;
  int n;
  weftResult_t rc;
  pthread_t thread;
  int threaded;
  int onDevice;             /* deviceRun's answer */
  struct weftDevJob *job;   /* its calls on device buffers, prepared */
};

static void *commRunMain(void *arg) {
  struct commRun *r = arg;
  weftLogSetRank(r->comm->rank);
  weftClearThreadError();
  r->rc = weftRunTasks(r->comm, r->tasks, r->n);
  return NULL;
}

/* Sorts the queue by communicator (stable: call order within each) into runs. A group of one
 * communicator (the common case: a SendRecv pair) is one run of the queue as it is. */
static int splitByComm(struct weftTask *tasks, int n, struct weftTask *sorted, struct commRun *runs) {
  int one = 1;
  for (int i = 1; i < n && one; i++) one = tasks[i].comm == tasks[0].comm;
  if (one) {
    runs[0] = (struct commRun){.comm = tasks[0].comm, .tasks = tasks, .n = n};
    return 1;
  }
  int nruns = 0, k = 0;
  for (int i = 0; i < n; i++) {
    int seen = 0;
    for (int r = 0; r < nruns && !seen; r++) seen = runs[r].comm == tasks[i].comm;
    if (seen) continue;
    runs[nruns] = (struct commRun){.comm = tasks[i].comm, .tasks = sorted + k};
    for (int j = i; j < n; j++)
      if (tasks[j].comm == tasks[i].comm) sorted[k++] = tasks[j], runs[nruns].n++;
    nruns++;
  }
  return nruns;
}

/* 1 when every call of the run is on device buffers, 0 when none is, -1 for a mix. */
static int deviceRun(const struct commRun *run) {
  int on = 0;
  for (int i = 0; i < run->n; i++) on += run->tasks[i].onDevice;
  return on == 0 ? 0 : on == run->n ? 1 : -1;
}

/* Enqueues the inputs of every run on device buffers (its job, launched later) or refuses a
 * run that mixes device and host buffers. */
static void prepareDeviceRuns(struct commRun *runs, int nruns) {
  for (int r = 0; r < nruns; r++) {
    struct weftComm *comm = runs[r].comm;
    runs[r].onDevice = deviceRun(&runs[r]);
    if (runs[r].onDevice > 0)
      runs[r].rc = weftReportTo(comm, weftDevPrepare(comm, runs[r].tasks, runs[r].n,
                                                    "weftGroupEnd", &runs[r].job));
    else if (runs[r].onDevice < 0)
      runs[r].rc = weftReportTo(comm, weftSetError(weftInvalidUsage, "weftGroupEnd: rank %d: "
                                "the group's calls on this communicator mix device and host "
                                "buffers: a communicator's share of a group must be all one or "
                                "all the other", comm->rank));
  }
}

/* Runs on device buffers are enqueued on their streams (lib/devcoll.h). Non-blocking
 * communicators start in their own threads; of the blocking ones, all but the
 * first get a thread and the first runs here. */
static weftResult_t runGroup(struct commRun *runs, int nruns) {
  int here = -1;
  weftResult_t rc = weftSuccess, first = weftSuccess;
  prepareDeviceRuns(runs, nruns);
  for (int r = 0; r < nruns; r++) {
    struct weftComm *comm = runs[r].comm;
    if (runs[r].onDevice != 0) {
      if (runs[r].job != NULL) runs[r].rc = weftReportTo(comm, weftDevLaunch(comm, runs[r].job));
      continue;
    }
    weftDevDrain(comm); /* its calls on device buffers before the group run first */
    if (comm->nonblocking) {
      runs[r].rc = weftStartTasks(comm, runs[r].tasks, runs[r].n, "weftGroupEnd");
    } else if (here < 0) {
      here = r;
    } else {
      int err = pthread_create(&runs[r].thread, NULL, commRunMain, &runs[r]);
      runs[r].threaded = err == 0;
      if (err != 0) runs[r].rc = weftReportTo(comm, weftSetSysError(err, "weftGroupEnd: pthread_create"));
    }
  }
  if (here >= 0) runs[here].rc = weftRunTasks(runs[here].comm, runs[here].tasks, runs[here].n);
  for (int r = 0; r < nruns; r++) {
    if (runs[r].threaded) pthread_join(runs[r].thread, NULL);
    rc = runs[r].rc;
    if (rc != weftSuccess && rc != weftInProgress && first == weftSuccess) first = rc;
    if (rc == weftInProgress && first == weftSuccess) first = weftInProgress;
  }
  return first;
}

/* A heap queue is not kept between groups: a thread that ends after its last group would
 * leak it (thread-local storage has no destructor here); the inline one stays. */
static void queueFree(void) {
  if (group.tasks != group.inlineTasks) free(group.tasks);
  group.tasks = NULL;
  group.cap = 0;
}

WEFT_PUBLIC weftResult_t weftGroupStart(void) {
  if (group.depth == 0) group.error = weftSuccess;
  group.depth++;
  return weftSuccess;
}
WEFT_PROFILING_ALIAS(weftGroupStart);

WEFT_PUBLIC weftResult_t weftGroupEnd(void) {
  if (group.depth == 0)
    return weftSetError(weftInvalidUsage, "weftGroupEnd without a matching weftGroupStart");
  if (--group.depth > 0) return weftSuccess;
  int n = group.n;
  weftResult_t rc = group.error;
  group.n = 0;
  group.error = weftSuccess;
  if (rc != weftSuccess || n == 0) { /* a refused call: the group runs nothing */
    queueFree();
    return rc;
  }
  struct weftTask fewTasks[GROUP_INLINE];
  struct commRun fewRuns[GROUP_INLINE];
  int few = n <= GROUP_INLINE;
  struct weftTask *sorted = few ? fewTasks : malloc(sizeof *sorted * (size_t)n);
  struct commRun *runs = few ? fewRuns : malloc(sizeof *runs * (size_t)n);
  if (sorted == NULL || runs == NULL) rc = weftSetError(weftSystemError, "weftGroupEnd: out of memory");
  else rc = runGroup(runs, splitByComm(group.tasks, n, sorted, runs));
  if (!few) {
    free(sorted);
    free(runs);
  }
  queueFree();
  return rc;
}
WEFT_PROFILING_ALIAS(weftGroupEnd);

/* ---- Send and Recv ---- */

static weftResult_t checkP2p(struct weftComm *comm, const char *api, const void *buff,
                             size_t count, weftDataType_t type, int peer) {
  WEFTCHECK(weftCheckComm(comm, api));
  if ((int)type < 0 || type >= weftNumTypes)
    return weftSetError(weftInvalidArgument, "%s: unknown datatype %d", api, (int)type);
  if (count > (size_t)PTRDIFF_MAX / weftTypeSize(type))
    return weftSetError(weftInvalidArgument, "%s: count %zu of %s overflows the byte size", api,
                        count, weftTypeName(type));
  if (peer < 0 || peer >= comm->nranks)
    return weftSetError(weftInvalidArgument, "%s: peer %d outside [0, %d)", api, peer, comm->nranks);
  if (count > 0 && buff == NULL)
    return weftSetError(weftInvalidArgument, "%s: buffer is NULL with count %zu", api, count);
  return weftCheckUsable(comm, api);
}

static weftResult_t p2pCall(struct weftComm *comm, const char *api, struct weftP2pOp op,
                            weftStream_t stream) {
  weftResult_t rc = checkP2p(comm, api, op.isSend ? op.sendbuff : op.recvbuff, op.count, op.type,
                             op.peer);
  if (rc != weftSuccess) return weftReportTo(comm, weftGroupRefused(rc));
  if (op.count == 0) return weftSuccess;
  struct weftTask task = {.comm = comm, .isColl = 0, .p2p = op, .stream = stream};
  rc = weftDevClassify(comm, api, &task, &task.onDevice);
  if (rc != weftSuccess) return weftReportTo(comm, weftGroupRefused(rc));
  if (weftGroupActive()) return weftReportTo(comm, weftGroupEnqueue(&task));
  if (task.onDevice) return weftReportTo(comm, weftDevSubmit(comm, &task, 1, api));
  weftDevDrain(comm);
  return weftStartTasks(comm, &task, 1, api);
}

WEFT_PUBLIC weftResult_t weftSend(const void *sendbuff, size_t count, weftDataType_t datatype,
                                  int peer, weftComm_t comm, weftStream_t stream) {
  return p2pCall(comm, "weftSend", (struct weftP2pOp){.isSend = 1, .peer = peer,
                 .sendbuff = sendbuff, .count = count, .type = datatype}, stream);
}
WEFT_PROFILING_ALIAS(weftSend);

WEFT_PUBLIC weftResult_t weftRecv(void *recvbuff, size_t count, weftDataType_t datatype, int peer,
                                  weftComm_t comm, weftStream_t stream) {
  return p2pCall(comm, "weftRecv", (struct weftP2pOp){.isSend = 0, .peer = peer,
                 .recvbuff = recvbuff, .count = count, .type = datatype}, stream);
}
WEFT_PROFILING_ALIAS(weftRecv);
