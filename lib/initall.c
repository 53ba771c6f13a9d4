/* weftCommInitAll, NCCL's ncclCommInitAll: the ndev ranks of one communicator in this process,
 * made from one unique id by one thread per rank, each running the library's own init
 * (pweftCommInitRank: a profiler's weftCommInitRank does not see them as calls of the
 * program).
 *
 * The threads wait at a gate until every one of them exists: an init starts only when all
 * ndev will, so a thread that cannot be created makes the call fail at once instead of the
 * others waiting for it until the timeout (the id's root thread, which no rank reached, then
 * ends at its own timeout, as after an unused weftGetUniqueId). On any rank's failure every
 * communicator made is destroyed and comms is left as it was. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "bootstrap.h"
#include "check.h"
#include "core.h"
#include "log.h"
#include "settings.h"

enum gateState { GATE_CLOSED, GATE_OPEN, GATE_CANCELLED };

struct gate {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  enum gateState state;
};

struct rankJob {
  pthread_t tid;
  struct gate *gate;
  weftUniqueId id;
  int rank, nranks;
  weftComm_t comm;
  weftResult_t rc;
  char error[1024];
};

static void *rankMain(void *arg) {
  struct rankJob *job = arg;
  pthread_mutex_lock(&job->gate->lock);
  while (job->gate->state == GATE_CLOSED) pthread_cond_wait(&job->gate->cond, &job->gate->lock);
  int go = job->gate->state == GATE_OPEN;
  pthread_mutex_unlock(&job->gate->lock);
  if (!go) return NULL;
  job->rc = pweftCommInitRank(&job->comm, job->nranks, job->id, job->rank);
  if (job->rc != weftSuccess) snprintf(job->error, sizeof job->error, "%s", weftGetLastError(NULL));
  return NULL;
}

static void setGate(struct gate *g, enum gateState state) {
  pthread_mutex_lock(&g->lock);
  g->state = state;
  pthread_cond_broadcast(&g->cond);
  pthread_mutex_unlock(&g->lock);
}

/* Host memory has no devices to bind: devlist is checked as NCCL users write it (distinct
 * device numbers, none negative) and otherwise carries no meaning here. */
static weftResult_t checkDevlist(const int *devlist, int ndev) {
  if (devlist == NULL) return weftSuccess;
  for (int i = 0; i < ndev; i++) {
    if (devlist[i] < 0)
      return weftSetError(weftInvalidArgument, "weftCommInitAll: devlist[%d] = %d is negative", i,
                          devlist[i]);
    for (int j = 0; j < i; j++)
      if (devlist[j] == devlist[i])
        return weftSetError(weftInvalidArgument,
                            "weftCommInitAll: devlist[%d] and devlist[%d] are both device %d", j, i,
                            devlist[i]);
  }
  return weftSuccess;
}

/* Starts every thread behind the closed gate; on a failure, those started leave unrun. */
static weftResult_t startAll(struct rankJob *jobs, int ndev, struct gate *gate) {
  for (int r = 0; r < ndev; r++) {
    int err = pthread_create(&jobs[r].tid, NULL, rankMain, &jobs[r]);
    if (err == 0) continue;
    setGate(gate, GATE_CANCELLED);
    for (int q = 0; q < r; q++) pthread_join(jobs[q].tid, NULL);
    return weftSetSysError(err, "weftCommInitAll: thread of rank %d of %d: pthread_create", r, ndev);
  }
  setGate(gate, GATE_OPEN);
  for (int r = 0; r < ndev; r++) pthread_join(jobs[r].tid, NULL);
  return weftSuccess;
}

/* The first rank that failed (all its peers fail too, often because of it), with its message;
 * every communicator made is destroyed. */
static weftResult_t collect(struct rankJob *jobs, int ndev, weftComm_t *comms) {
  int failed = -1;
  for (int r = 0; r < ndev && failed < 0; r++)
    if (jobs[r].rc != weftSuccess) failed = r;
  if (failed < 0) {
    for (int r = 0; r < ndev; r++) comms[r] = jobs[r].comm;
    return weftSuccess;
  }
  for (int r = 0; r < ndev; r++)
    if (jobs[r].rc == weftSuccess) pweftCommDestroy(jobs[r].comm);
  return weftSetError(jobs[failed].rc, "weftCommInitAll: rank %d of %d: %s", failed, ndev,
                      jobs[failed].error);
}

WEFT_PUBLIC weftResult_t weftCommInitAll(weftComm_t *comms, int ndev, const int *devlist) {
  weftLogInit();
  weftClearThreadError();
  if (comms == NULL) return weftSetError(weftInvalidArgument, "weftCommInitAll: comms is NULL");
  if (ndev <= 0) return weftSetError(weftInvalidArgument, "weftCommInitAll: ndev %d < 1", ndev);
  WEFTCHECK(checkDevlist(devlist, ndev));
  WEFTCHECK(weftSettingsCheck("weftCommInitAll"));
  struct rankJob *jobs = calloc((size_t)ndev, sizeof *jobs);
  if (jobs == NULL) return weftSetError(weftSystemError, "weftCommInitAll: out of memory");
  struct gate gate = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, GATE_CLOSED};
  weftUniqueId id;
  weftResult_t rc = weftBootstrapGetUniqueId(&id);
  for (int r = 0; rc == weftSuccess && r < ndev; r++)
    jobs[r] = (struct rankJob){.gate = &gate, .id = id, .rank = r, .nranks = ndev};
  if (rc == weftSuccess) rc = startAll(jobs, ndev, &gate);
  if (rc == weftSuccess) rc = collect(jobs, ndev, comms);
  explicit_bzero(&id, sizeof id);
  explicit_bzero(jobs, (size_t)ndev * sizeof *jobs); /* copies of the id's secret */
  free(jobs);
  pthread_mutex_destroy(&gate.lock);
  pthread_cond_destroy(&gate.cond);
  return rc;
}
WEFT_PROFILING_ALIAS(weftCommInitAll);
