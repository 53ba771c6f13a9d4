/* Communicator life cycle: init (bootstrap, topology, transports, ring, algorithms), queries,
 * destroy, abort. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "bootstrap.h"
#include "check.h"
#include "core.h"
#include "deadline.h"
#include "errors.h"
#include "p2p.h"
#include "param.h"
#include "redop.h"
#include "settings.h"
#include "shmseg.h"
#include "socket.h"

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
  weftSplitFree(comm->split);
  free(comm->watchSeen);
  weftRedOpsFree(comm->redOps);
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
  chooseWaitStrategy(comm);
  WEFTCHECK(weftTransportsInit(comm));
  WEFTCHECK(weftRingConnect(comm));
  WEFTCHECK(algosInit(comm));
  WEFTCHECK(weftTuneInit(comm));
  comm->initDone = 1;
  INFO(WEFT_INIT, "rank %d of %d ready: %d hosts, %d ranks on this host", comm->rank, comm->nranks,
       comm->nHosts, comm->nLocalRanks);
  return weftSuccess;
}


/* An init that failed because a peer died usually fails with what this rank saw (a closed
 * connection, a segment gone), often at a neighbour of the dead rank: name the dead. Ranks of
 * this host by their process, the others by their bootstrap listener. */
/* How long a rank of another host may take to accept a connection before it counts as gone
 * in an error message. */
#define GONE_PROBE_MS 200

/* Whether rank r is judged by its process (it shares this host and its pid is known), else by
 * its bootstrap listener. */
static int byProcess(const struct weftComm *comm, int r) {
  const struct weftPeerInfo *p = &comm->peers[r], *me = &comm->peers[comm->rank];
  return p->pid > 0 && p->hostHash == me->hostHash;
}

void weftCommMarkGone(struct weftComm *comm, char *gone, int64_t probeMs) {
  for (int r = 0; r < comm->nranks; r++) {
    if (gone[r] || r == comm->rank) continue;
    if (byProcess(comm, r))
      gone[r] = comm->peers[r].pid != (int)getpid() && weftProcessGone(comm->peers[r].pid);
    else
      gone[r] = !weftBootstrapProbe(comm->boot, r, probeMs);
  }
}

/* "rank 2 (pid 9 on host h)" for gone ranks judged by their process (byProc 1), "rank 5
 * (10.0.0.3:4000)" for those judged by their listener (byProc 0). */
static int describeGone(const struct weftComm *comm, const char *gone, int byProc, char *buf,
                        size_t len) {
  int found = 0;
  size_t o = 0;
  buf[0] = '\0';
  for (int r = 0; r < comm->nranks; r++) {
    if (!gone[r] || byProcess(comm, r) != byProc || o >= len) continue;
    char where[WEFT_SOCK_NAME_MAX + 96];
    const union weftSockAddr *addr = weftBootstrapPeerAddr(comm->boot, r);
    if (byProc)
      snprintf(where, sizeof where, "pid %d on host %s", comm->peers[r].pid, comm->peers[r].hostname);
    else if (addr != NULL)
      weftSockAddrName(addr, where);
    else
      snprintf(where, sizeof where, "address unknown");
    o += (size_t)snprintf(buf + o, len - o, "%srank %d (%s)", found++ ? ", " : "", r, where);
  }
  return found;
}

static weftResult_t nameDeadPeers(struct weftComm *comm, weftResult_t rc) {
  if (comm->peers == NULL || comm->boot == NULL || weftCommAborted(comm)) return rc;
  char *gone = calloc((size_t)comm->nranks, 1);
  if (gone == NULL) return rc;
  weftBootstrapCloseRing(comm->boot);
  int listeners = 0;
  for (int r = 0; r < comm->nranks; r++) listeners += r != comm->rank && !byProcess(comm, r);
  if (listeners > 0) weftBootstrapSettle();
  weftCommMarkGone(comm, gone, GONE_PROBE_MS);
  char dead[512], closed[512], was[1024];
  int nDead = describeGone(comm, gone, 1, dead, sizeof dead);
  int nClosed = describeGone(comm, gone, 0, closed, sizeof closed);
  free(gone);
  if (nDead > 0 && strstr(weftThreadLastError(), dead) != NULL) nDead = 0; /* said already */
  if (nDead == 0 && nClosed == 0) return rc;
  snprintf(was, sizeof was, "%s", weftThreadLastError());
  return weftSetError(weftRemoteError, "%s; %s%s%s%s%s", was, nDead ? "dead: " : "", nDead ? dead : "",
                      nDead && nClosed ? "; " : "",
                      nClosed ? "ranks of other hosts whose listener is closed (dead or destroyed): " : "",
                      nClosed ? closed : "");
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
    rc = nameDeadPeers(comm, rc);
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

struct weftComm *weftCommAlloc(int rank, int nranks, int64_t timeoutMs) {
  struct weftComm *comm = calloc(1, sizeof *comm);
  if (comm == NULL) return NULL;
  comm->magic = WEFT_COMM_MAGIC;
  comm->rank = rank;
  comm->nranks = nranks;
  comm->timeoutMs = timeoutMs;
  comm->spinIters = comm->spinMax = 0;
  comm->yieldIters = 1000;
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
  comm->finalized = 1;
  return weftSuccess;
}
WEFT_PROFILING_ALIAS(weftCommFinalize);

int weftProcessGone(int pid) {
  if (kill(pid, 0) != 0) return errno == ESRCH;
  char path[64], stat[256];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "re");
  if (f == NULL) return 0;
  size_t n = fread(stat, 1, sizeof stat - 1, f);
  fclose(f);
  stat[n] = '\0';
  const char *end = strrchr(stat, ')');
  if (end == NULL || end[1] != ' ') return 0;
  if (end[2] == 'Z' || end[2] == 'X') return 1;
  /* A killed process closes its descriptors before it becomes a zombie: peers see its
   * connections close while it still looks alive, unless one reads PF_EXITING (0x4) in the
   * flags, the 7th field after the name. */
  unsigned long flags = 0;
  return sscanf(end + 2, "%*c %*d %*d %*d %*d %*d %lu", &flags) == 1 && (flags & 0x4) != 0;
}


weftResult_t weftCommFail(struct weftComm *comm, weftResult_t rc) {
  int expected = weftSuccess;
  atomic_compare_exchange_strong(&comm->asyncError, &expected, (int)rc);
  if (weftCommAborted(comm)) return rc;
  /* The others time out by themselves; the notes of lasting waits may show who is missing. */
  if (rc == weftTimeout) return weftSigWatchOnTimeout(comm, rc);
  weftCommCloseLinks(comm, rc);
  /* After the links are closed, so the failure spreads while this rank looks: is it a
   * mismatch another host found, and who is dead. */
  return rc == weftRemoteError && expected == weftSuccess ? nameDeadPeers(comm, rc) : rc;
}

void weftCommCloseLinks(struct weftComm *comm, weftResult_t rc) {
  /* Closing every link makes the peers blocked on them fail at once (a shm peer sees the
   * closed flag, a tcp peer the end of stream): the error spreads along the schedule. */
  weftConnCloseReason = rc == weftInvalidUsage ? weftInvalidUsage : 0;
  for (int a = 0; weftAlgos[a] != NULL; a++)
    if (comm->algoState[a] != NULL && comm->algoState[a] != (void *)&comm->ring) {
      weftAlgos[a]->finalize(comm->algoState[a]);
      comm->algoState[a] = NULL;
    }
  weftRingClose(&comm->ring);
  weftP2pClose(comm);
  weftConnCloseReason = 0;
  for (int a = 0; weftAlgos[a] != NULL; a++) comm->algoState[a] = NULL;
}

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
