/* Communicator life cycle: init (bootstrap, topology, transports, ring, algorithms), queries,
 * destroy, and the error reporting API. */
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "check.h"
#include "core.h"
#include "param.h"

int64_t weftDeadline(const struct weftComm *comm) { return weftNowMs() + comm->timeoutMs; }

/* Copies this thread's last error to the communicator, where weftGetLastError(comm) finds it. */
weftResult_t weftReportTo(struct weftComm *comm, weftResult_t rc) {
  if (rc != weftSuccess && comm != NULL && weftCommIsLive(comm))
    snprintf(comm->lastError, sizeof comm->lastError, "%s", weftThreadLastError());
  return rc;
}

weftResult_t weftGetVersion(int *version) {
  if (version == NULL) return weftSetError(weftInvalidArgument, "weftGetVersion: version is NULL");
  *version = WEFT_VERSION_CODE;
  return weftSuccess;
}

weftResult_t weftGetUniqueId(weftUniqueId *uniqueId) {
  weftLogInit();
  if (uniqueId == NULL) return weftSetError(weftInvalidArgument, "weftGetUniqueId: uniqueId is NULL");
  return weftBootstrapGetUniqueId(uniqueId);
}

static weftResult_t findLocalRanks(struct weftComm *comm) {
  uint64_t mine = comm->peers[comm->rank].hostHash;
  comm->localRanks = malloc(sizeof(int) * (size_t)comm->nranks);
  if (comm->localRanks == NULL) return weftSetError(weftSystemError, "out of memory");
  comm->nLocalRanks = 0;
  comm->nHosts = 0;
  for (int r = 0; r < comm->nranks; r++) {
    int firstOfHost = 1;
    for (int q = 0; q < r && firstOfHost; q++) firstOfHost = comm->peers[q].hostHash != comm->peers[r].hostHash;
    comm->nHosts += firstOfHost;
    if (comm->peers[r].hostHash != mine) continue;
    if (r == comm->rank) comm->localRank = comm->nLocalRanks;
    comm->localRanks[comm->nLocalRanks++] = r;
  }
  return weftSuccess;
}

/* Spinning only helps when every rank of this host has a core; otherwise a spinning rank
 * holds the core its peer needs, for a whole scheduler tick. */
static void chooseWaitStrategy(struct weftComm *comm) {
  int cpus = weftTopoCpuCount();
  comm->spinMax = comm->nLocalRanks > cpus ? 0 : (int)weftParamSpinIters();
  comm->spinIters = comm->spinMax;
  comm->yieldIters = (int)weftParamYieldIters();
  INFO(WEFT_INIT, "%d ranks on this host, %d CPUs: %d spins then %d yields before sleeping",
       comm->nLocalRanks, cpus, comm->spinIters, comm->yieldIters);
}

static weftResult_t exchangePeerInfo(struct weftComm *comm) {
  comm->peers = calloc((size_t)comm->nranks, sizeof *comm->peers);
  if (comm->peers == NULL) return weftSetError(weftSystemError, "out of memory");
  WEFTCHECK(weftTopoFillPeerInfo(&comm->peers[comm->rank], comm->rank));
  WEFTCHECK(weftBootstrapAllGather(comm->boot, comm->peers, sizeof *comm->peers, weftDeadline(comm)));
  for (int r = 0; r < comm->nranks; r++) comm->peers[r].hostId[WEFT_HOSTID_BYTES - 1] = '\0';
  return weftSuccess;
}

static weftResult_t algosInit(struct weftComm *comm) {
  for (int a = 0; weftAlgos[a] != NULL; a++) {
    char why[256] = "";
    WEFTCHECK(weftAlgos[a]->init(comm, &comm->algoState[a], why, sizeof why));
    if (comm->algoState[a] == NULL) INFO(WEFT_INIT, "algorithm %s unavailable: %s", weftAlgos[a]->name, why);
  }
  return weftSuccess;
}

static void commFree(struct weftComm *comm) {
  for (int a = 0; weftAlgos[a] != NULL; a++)
    if (comm->algoState[a] != NULL) weftAlgos[a]->finalize(comm->algoState[a]);
  weftRingClose(&comm->ring);
  weftTransportsFinalize(comm);
  if (comm->boot != NULL) weftBootstrapClose(comm->boot);
  free(comm->localRanks);
  free(comm->peers);
  comm->magic = 0;
  free(comm);
}

static weftResult_t checkInitArgs(weftComm_t *out, int nranks, int rank, int64_t timeoutMs) {
  if (out == NULL) return weftSetError(weftInvalidArgument, "weftCommInitRank: comm is NULL");
  if (nranks < 1) return weftSetError(weftInvalidArgument, "weftCommInitRank: nranks %d < 1", nranks);
  if (rank < 0 || rank >= nranks)
    return weftSetError(weftInvalidArgument, "weftCommInitRank: rank %d outside [0, %d)", rank, nranks);
  if (timeoutMs <= 0)
    return weftSetError(weftInvalidArgument, "WEFT_TIMEOUT_MS=%lld must be positive",
                        (long long)timeoutMs);
  return weftSuccess;
}

weftResult_t weftCommInitRank(weftComm_t *out, int nranks, weftUniqueId commId, int rank) {
  weftLogInit();
  weftClearThreadError();
  int64_t timeoutMs = weftParamTimeoutMs();
  WEFTCHECK(checkInitArgs(out, nranks, rank, timeoutMs));
  weftLogSetRank(rank);
  struct weftComm *comm = calloc(1, sizeof *comm);
  if (comm == NULL) return weftSetError(weftSystemError, "out of memory");
  comm->magic = WEFT_COMM_MAGIC;
  comm->rank = rank;
  comm->nranks = nranks;
  comm->timeoutMs = timeoutMs;
  comm->spinIters = comm->spinMax = 0;
  comm->yieldIters = 1000;
  comm->forcedAlgo = -1;
  weftResult_t rc;
  WEFTCHECKGOTO(weftBootstrapInit(&commId, rank, nranks, weftDeadline(comm), &comm->boot), rc, fail);
  WEFTCHECKGOTO(exchangePeerInfo(comm), rc, fail);
  WEFTCHECKGOTO(findLocalRanks(comm), rc, fail);
  chooseWaitStrategy(comm);
  WEFTCHECKGOTO(weftTransportsInit(comm), rc, fail);
  WEFTCHECKGOTO(weftRingConnect(comm), rc, fail);
  WEFTCHECKGOTO(algosInit(comm), rc, fail);
  WEFTCHECKGOTO(weftTuneInit(comm), rc, fail);
  WEFTCHECKGOTO(weftCommRegisterLive(comm), rc, fail);
  INFO(WEFT_INIT, "rank %d of %d ready: %d hosts, %d ranks on this host", rank, nranks,
       comm->nHosts, comm->nLocalRanks);
  *out = comm;
  return weftSuccess;
fail:
  commFree(comm);
  return rc;
}

weftResult_t weftCommDestroy(weftComm_t comm) {
  if (comm == NULL) return weftSetError(weftInvalidArgument, "weftCommDestroy: comm is NULL");
  if (!weftCommIsLive(comm))
    return weftSetError(weftInvalidUsage, "weftCommDestroy: comm %p is not live (destroyed twice?)",
                        (void *)comm);
  weftCommUnregisterLive(comm);
  commFree(comm);
  return weftSuccess;
}

weftResult_t weftCommCount(const weftComm_t comm, int *count) {
  WEFTCHECK(weftCheckComm(comm, "weftCommCount"));
  if (count == NULL) return weftReportTo(comm, weftSetError(weftInvalidArgument, "weftCommCount: count is NULL"));
  *count = comm->nranks;
  return weftSuccess;
}

weftResult_t weftCommUserRank(const weftComm_t comm, int *rank) {
  WEFTCHECK(weftCheckComm(comm, "weftCommUserRank"));
  if (rank == NULL) return weftReportTo(comm, weftSetError(weftInvalidArgument, "weftCommUserRank: rank is NULL"));
  *rank = comm->rank;
  return weftSuccess;
}

const char *weftGetErrorString(weftResult_t result) {
  switch (result) {
    case weftSuccess: return "no error";
    case weftUnhandledCudaError: return "unhandled cuda error";
    case weftSystemError: return "unhandled system error (run with WEFT_DEBUG=INFO for details)";
    case weftInternalError: return "internal error - please report this issue to the weft developers";
    case weftInvalidArgument: return "invalid argument (run with WEFT_DEBUG=WARN for details)";
    case weftInvalidUsage: return "invalid usage (run with WEFT_DEBUG=WARN for details)";
    case weftRemoteError: return "remote process exited or there was a network error";
    case weftInProgress: return "operation in progress";
    case weftTimeout: return "operation timed out (see WEFT_TIMEOUT_MS)";
    default: return "unknown result code";
  }
}

const char *weftGetLastError(weftComm_t comm) {
  if (comm != NULL && weftCommIsLive(comm)) return comm->lastError;
  return weftThreadLastError();
}

