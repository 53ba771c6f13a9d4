/* Communicator life cycle: init (bootstrap, topology, transports, ring, algorithms), queries,
 * destroy, abort. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "api.h"
#include "bootstrap.h"
#include "check.h"
#include "copy.h"
#include "core.h"
#include "deadline.h"
#include "devcoll.h"
#include "errors.h"
#include "liveness.h"
#include "p2p.h"
#include "param.h"
#include "redop.h"
#include "settings.h"
#include "shmseg.h"
#include "socket.h"
#include "straggler.h"

WEFT_PUBLIC weftResult_t weftGetVersion(int *version) {
  if (version == NULL) return weftSetError(weftInvalidArgument, "weftGetVersion: version is NULL");
  *version = WEFT_VERSION_CODE;
  return weftSuccess;
}
WEFT_PROFILING_ALIAS(weftGetVersion);

WEFT_PUBLIC weftResult_t weftGetUniqueId(weftUniqueId *uniqueId) {
  weftLogInit();
  weftClearThreadError();
  if (uniqueId == NULL) return weftSetError(weftInvalidArgument, "weftGetUniqueId: uniqueId is NULL");
  WEFTCHECK(weftSettingsCheck("weftGetUniqueId"));
  return weftBootstrapGetUniqueId(uniqueId);
}
WEFT_PROFILING_ALIAS(weftGetUniqueId);

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
  comm->oversubscribed = 0; /* from the all-gathered peer table, so every rank agrees */
  for (int r = 0; r < comm->nranks; r++) {
    int sameHost = 0;
    for (int q = 0; q < comm->nranks; q++) sameHost += comm->peers[q].hostHash == comm->peers[r].hostHash;
    if (sameHost > comm->peers[r].cpus) comm->oversubscribed = 1;
  }
  comm->cpuBound = comm->oversubscribed;
  for (int r = 0; r < comm->nranks; r++) {
    uint64_t kernel = comm->peers[r].kernelHash;
    int sameKernel = 0;
    for (int q = 0; q < comm->nranks && kernel != 0; q++) sameKernel += comm->peers[q].kernelHash == kernel;
    if (sameKernel > comm->peers[r].cpus) comm->cpuBound = 1;
  }
  comm->spinMax = comm->nLocalRanks > cpus ? 0 : (int)weftParamSpinIters();
  comm->spinIters = comm->spinMax;
  comm->yieldIters = (int)weftParamYieldIters();
  INFO(WEFT_INIT, "%d ranks on this host, %d CPUs: %d spins then %d yields before sleeping%s",
       comm->nLocalRanks, cpus, comm->spinIters, comm->yieldIters,
       comm->cpuBound ? " (costs: some machine has more ranks than CPUs)" : "");
}

static weftResult_t exchangePeerInfo(struct weftComm *comm) {
  comm->peers = calloc((size_t)comm->nranks, sizeof *comm->peers);
  if (comm->peers == NULL) return weftSetError(weftSystemError, "out of memory");
  WEFTCHECK(weftTopoHostGet(&comm->topoHost));
  WEFTCHECK(weftTopoFillPeerInfo(&comm->peers[comm->rank], comm->rank, comm->topoHost));
  WEFTCHECK(weftBootstrapAllGather(comm->boot, comm->peers, sizeof *comm->peers, weftDeadline(comm)));
  for (int r = 0; r < comm->nranks; r++) weftTopoParsePeerInfo(&comm->peers[r]);
  return weftSuccess;
}

static weftResult_t algosInit(struct weftComm *comm) {
  for (int a = 0; weftAlgos[a] != NULL; a++) {
    char *why = comm->algoWhy[a];
    why[0] = '\0';
    WEFTCHECK(weftAlgos[a]->init(comm, &comm->algoState[a], why, sizeof comm->algoWhy[a]));
    if (comm->algoState[a] == NULL && why[0] == '\0') snprintf(why, sizeof comm->algoWhy[a], "no reason given");
    if (comm->algoState[a] == NULL) INFO(WEFT_INIT, "algorithm %s unavailable: %s", weftAlgos[a]->name, why);
  }
  return weftSuccess;
}

static void commFree(struct weftComm *comm) {
  for (int a = 0; weftAlgos[a] != NULL; a++)
    if (comm->algoState[a] != NULL) weftAlgos[a]->finalize(comm->algoState[a]);
  weftRingClose(&comm->ring);
  weftP2pClose(comm);
  weftTransportsFinalize(comm);
  if (comm->boot != NULL) weftBootstrapClose(comm->boot);
  free(comm->localRanks);
  free(comm->peers);
  free(comm->nics);
  weftTopoHostPut(comm->topoHost);
  weftSplitFree(comm->split);
  free(comm->watchSeen);
  weftRedOpsFree(comm->redOps);
  weftStragglerFree(comm);
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

/* Everything of init that talks to peers; on failure the caller frees with commFree. A
 * communicator made by weftCommShrink/weftCommRecover splits its parent's bootstrap instead
 * of meeting at a root. */
static weftResult_t commInitBody(struct weftComm *comm) {
  if (comm->split != NULL)
    WEFTCHECK(weftSplitBootstrap(comm));
  else
    WEFTCHECK(weftBootstrapInit(&comm->initId, comm->rank, comm->nranks, weftDeadline(comm), &comm->boot));
  WEFTCHECK(exchangePeerInfo(comm));
  WEFTCHECK(findLocalRanks(comm));
  WEFTCHECK(weftTopoJobInit(comm));
  chooseWaitStrategy(comm);
  comm->streamFromBytes = weftCopyStreamFrom(comm->nLocalRanks);
  WEFTCHECK(weftTransportsInit(comm));
  WEFTCHECK(weftRingConnect(comm));
  WEFTCHECK(algosInit(comm));
  WEFTCHECK(weftStragglerInit(comm));
  WEFTCHECK(weftTuneInit(comm));
  WEFTCHECK(weftTopoGraphDump(comm));
  comm->initDone = 1;
  INFO(WEFT_INIT, "rank %d of %d ready: %d hosts, %d ranks on this host", comm->rank, comm->nranks,
       comm->nHosts, comm->nLocalRanks);
  return weftSuccess;
}


/* Segments of processes killed during an earlier init go first, and those of peers killed
 * during this one when it fails (lib/shmseg.h). */
static weftResult_t commInit(struct weftComm *comm) {
  weftShmSweepDead();
  weftResult_t rc = commInitBody(comm);
  if (rc == weftSuccess) return rc;
  /* A bad argument or usage is this rank's own finding (every rank makes it, and may leave
   * before the others look): it stays what it is. */
  if (rc != weftTimeout && rc != weftInvalidArgument && rc != weftInvalidUsage)
    rc = weftCommNameGone(comm, rc);
  weftShmSweepDead();
  return rc;
}

/* A non-blocking init: the body in its own thread; the result lands in asyncError. */
static void *initThreadMain(void *arg) {
  struct weftComm *comm = arg;
  weftLogSetRank(comm->rank);
  weftClearThreadError();
  weftThreadAbortFlag = &comm->abortFlag;
  weftResult_t rc = commInit(comm);
  if (rc != weftSuccess && weftCommAborted(comm)) rc = weftAbortedError(comm);
  if (rc != weftSuccess) snprintf(comm->lastError, sizeof comm->lastError, "%s", weftThreadLastError());
  weftThreadAbortFlag = NULL;
  atomic_store(&comm->asyncError, rc);
  return NULL;
}

weftResult_t weftConfigRead(const weftConfig_t *config, int *blocking, int64_t *timeoutMs) {
  if (config == NULL) return weftSuccess;
  if (config->size != sizeof(weftConfig_t) || config->magic != WEFT_CONFIG_MAGIC)
    return weftSetError(weftInvalidArgument,
                        "weftCommInitRankConfig: config was not made from WEFT_CONFIG_INITIALIZER "
                        "(size %zu, magic 0x%x)", config->size, config->magic);
  if (config->blocking != WEFT_CONFIG_UNDEF_INT) {
    if (config->blocking != 0 && config->blocking != 1)
      return weftSetError(weftInvalidArgument, "weftCommInitRankConfig: blocking=%d is not 0 or 1",
                          config->blocking);
    *blocking = config->blocking;
  }
  if (config->timeoutMs != WEFT_CONFIG_UNDEF_INT) *timeoutMs = config->timeoutMs;
  return weftSuccess;
}

WEFT_PUBLIC weftResult_t weftCommInitRankConfig(weftComm_t *out, int nranks, weftUniqueId commId,
                                                int rank, weftConfig_t *config) {
  weftLogInit();
  weftClearThreadError();
  WEFTCHECK(weftSettingsCheck("weftCommInitRank"));
  int64_t timeoutMs = weftParamTimeoutMs();
  int blocking = 1;
  WEFTCHECK(weftConfigRead(config, &blocking, &timeoutMs));
  WEFTCHECK(checkInitArgs(out, nranks, rank, timeoutMs));
  weftLogSetRank(rank);
  struct weftComm *comm = weftCommAlloc(rank, nranks, timeoutMs);
  if (comm == NULL) return weftSetError(weftSystemError, "out of memory");
  comm->initId = commId;
  comm->nonblocking = !blocking;
  return weftCommStartInit(comm, blocking, out);
}
WEFT_PROFILING_ALIAS(weftCommInitRankConfig);

/* The waits' hook into the algorithms (struct weftComm's watchAlgos). */
static weftResult_t watchAlgorithms(struct weftComm *comm) {
  for (int a = 0; weftAlgos[a] != NULL; a++)
    if (weftAlgos[a]->watch != NULL && comm->algoState[a] != NULL)
      WEFTCHECK(weftAlgos[a]->watch(comm->algoState[a], comm));
  return weftSuccess;
}

struct weftComm *weftCommAlloc(int rank, int nranks, int64_t timeoutMs) {
  struct weftComm *comm = calloc(1, sizeof *comm);
  if (comm == NULL) return NULL;
  comm->magic = WEFT_COMM_MAGIC;
  comm->rank = rank;
  comm->nranks = nranks;
  comm->timeoutMs = timeoutMs;
  comm->spinIters = comm->spinMax = 0;
  comm->yieldIters = 1000;
  comm->streamFromBytes = SIZE_MAX; /* until init knows the host's ranks */
  comm->watchAlgos = watchAlgorithms;
  return comm;
}

weftResult_t weftCommStartInit(struct weftComm *comm, int blocking, weftComm_t *out) {
  weftResult_t rc;
  if (blocking) {
    WEFTCHECKGOTO(commInit(comm), rc, fail);
    WEFTCHECKGOTO(weftCommRegisterLive(comm), rc, fail);
    *out = comm;
    return weftSuccess;
  }
  /* Live from the start, so that GetAsyncError, Abort and Destroy accept the handle. */
  atomic_store(&comm->asyncError, weftInProgress);
  WEFTCHECKGOTO(weftCommRegisterLive(comm), rc, fail);
  int err = pthread_create(&comm->initThread, NULL, initThreadMain, comm);
  if (err != 0) {
    weftCommUnregisterLive(comm);
    rc = weftSetSysError(err, "weftCommInitRankConfig: pthread_create");
    goto fail;
  }
  atomic_store(&comm->initThreadStarted, 1);
  *out = comm;
  return weftInProgress;
fail:
  commFree(comm);
  return rc;
}

WEFT_PUBLIC weftResult_t weftCommInitRank(weftComm_t *out, int nranks, weftUniqueId commId,
                                          int rank) {
  return weftCommInitRankConfig(out, nranks, commId, rank, NULL);
}
WEFT_PROFILING_ALIAS(weftCommInitRank);

static void joinInitThread(struct weftComm *comm) {
  if (atomic_exchange(&comm->initThreadStarted, 0)) pthread_join(comm->initThread, NULL);
}

WEFT_PUBLIC weftResult_t weftCommDestroy(weftComm_t comm) {
  if (comm == NULL) return weftSuccess; /* as NCCL's, and as weftCommAbort(NULL) */
  if (!weftCommIsLive(comm))
    return weftSetError(weftInvalidUsage, "weftCommDestroy: comm %p is not live (destroyed twice?)",
                        (void *)comm);
  joinInitThread(comm);
  weftJoinOpThread(comm); /* a non-blocking collective completes first */
  weftDevClose(comm);     /* so do the calls on device buffers */
  weftCommUnregisterLive(comm);
  /* A communicator that worked to the end leaves no connection in TIME_WAIT; after an error
   * its links close in order, so that the peers see who left. */
  if (atomic_load(&comm->asyncError) == weftSuccess && comm->boot != NULL)
    weftBootstrapCloseRingQuietly(comm->boot);
  commFree(comm);
  return weftSuccess;
}
WEFT_PROFILING_ALIAS(weftCommDestroy);

WEFT_PUBLIC weftResult_t weftCommAbort(weftComm_t comm) {
  if (comm == NULL) return weftSuccess;
  if (!weftCommIsLive(comm))
    return weftSetError(weftInvalidUsage, "weftCommAbort: comm %p is not live (destroyed twice?)",
                        (void *)comm);
  atomic_store(&comm->abortFlag, 1);
  joinInitThread(comm);
  weftJoinOpThread(comm); /* its waits see the flag and return */
  weftDevClose(comm);     /* calls on device buffers not yet run are skipped */
  /* Calls in other threads see the flag at their next wait and leave. A call that starts
   * while abort runs is a use after free by contract; the grace period only makes a call
   * that had just started visible here. */
  struct timespec grace = {0, 1000000};
  nanosleep(&grace, NULL);
  while (atomic_load(&comm->busy) > 0) {
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
  }
  INFO(WEFT_INIT, "rank %d: communicator aborted", comm->rank);
  weftCommUnregisterLive(comm);
  commFree(comm);
  return weftSuccess;
}
WEFT_PROFILING_ALIAS(weftCommAbort);

WEFT_PUBLIC weftResult_t weftCommGetAsyncError(weftComm_t comm, weftResult_t *asyncError) {
  WEFTCHECK(weftCheckComm(comm, "weftCommGetAsyncError"));
  if (asyncError == NULL)
    return weftReportTo(comm, weftSetError(weftInvalidArgument, "weftCommGetAsyncError: asyncError is NULL"));
  weftResult_t rc = (weftResult_t)atomic_load(&comm->asyncError);
  if (rc != weftInProgress) joinInitThread(comm); /* done: reap it now */
  if (rc != weftInProgress && atomic_load(&comm->opInFlight)) rc = weftInProgress;
  else if (rc != weftInProgress) weftJoinOpThread(comm);
  *asyncError = rc;
  return weftSuccess;
}
WEFT_PROFILING_ALIAS(weftCommGetAsyncError);

WEFT_PUBLIC weftResult_t weftCommFinalize(weftComm_t comm) {
  WEFTCHECK(weftCheckComm(comm, "weftCommFinalize"));
  weftResult_t state = (weftResult_t)atomic_load(&comm->asyncError);
  if (state == weftInProgress || atomic_load(&comm->opInFlight)) return weftInProgress;
  weftJoinOpThread(comm);
  weftDevDrain(comm);
  comm->finalized = 1;
  return weftSuccess;
}
WEFT_PROFILING_ALIAS(weftCommFinalize);

WEFT_PUBLIC weftResult_t weftCommCount(const weftComm_t comm, int *count) {
  WEFTCHECK(weftCheckComm(comm, "weftCommCount"));
  if (count == NULL) return weftReportTo(comm, weftSetError(weftInvalidArgument, "weftCommCount: count is NULL"));
  *count = comm->nranks;
  return weftSuccess;
}
WEFT_PROFILING_ALIAS(weftCommCount);

WEFT_PUBLIC weftResult_t weftCommUserRank(const weftComm_t comm, int *rank) {
  WEFTCHECK(weftCheckComm(comm, "weftCommUserRank"));
  if (rank == NULL) return weftReportTo(comm, weftSetError(weftInvalidArgument, "weftCommUserRank: rank is NULL"));
  *rank = comm->rank;
  return weftSuccess;
}
WEFT_PROFILING_ALIAS(weftCommUserRank);
