/* What every communicator made from a parent shares (lib/split.h): the checks of the parent,
 * the child's start, its bootstrap by kind, and naming the parent's ranks that are gone when
 * the bootstrap fails (the child knows none of its peers yet, so the init's own naming,
 * lib/comm.c, has nothing to go on). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"
#include "check.h"
#include "deadline.h"
#include "errors.h"
#include "liveness.h"
#include "log.h"
#include "settings.h"
#include "socket.h"
#include "split.h"

struct weftSplit *weftSplitNew(struct weftComm *parent, enum weftSplitKind kind) {
  struct weftSplit *s = calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  s->members = malloc(sizeof(int) * (size_t)parent->nranks);
  if (s->members == NULL) {
    free(s);
    return NULL;
  }
  s->parent = parent;
  s->kind = kind;
  s->epoch = parent->splitsBegun++;
  return s;
}

void weftSplitFree(struct weftSplit *split) {
  if (split == NULL) return;
  explicit_bzero(&split->growId, sizeof split->growId);
  free(split->members);
  free(split);
}

weftResult_t weftSplitCheckParent(struct weftComm *comm, weftComm_t *newcomm, const char *api) {
  WEFTCHECK(weftCheckComm(comm, api));
  if (newcomm == NULL)
    return weftReportTo(comm, weftSetError(weftInvalidArgument, "%s: newcomm is NULL", api));
  *newcomm = NULL;
  if (atomic_load(&comm->asyncError) == weftInProgress)
    return weftReportTo(comm, weftSetError(weftInvalidUsage, "%s: comm's init is in progress", api));
  /* A non-blocking init that failed leaves a live handle without a bootstrap to split. */
  if (!comm->initDone)
    return weftReportTo(comm, weftSetError(weftInvalidUsage, "%s: comm's init failed: %s", api,
                                           comm->lastError));
  return weftReportTo(comm, weftSettingsCheck(api));
}

weftResult_t weftSplitConfig(const struct weftComm *parent, const weftConfig_t *config,
                             int *blocking, int64_t *timeoutMs) {
  *blocking = 1;
  *timeoutMs = parent->timeoutMs;
  WEFTCHECK(weftConfigRead(config, blocking, timeoutMs));
  if (*timeoutMs <= 0)
    return weftSetError(weftInvalidArgument, "timeoutMs=%lld must be positive", (long long)*timeoutMs);
  return weftSuccess;
}

weftResult_t weftSplitStartChild(struct weftSplit *s, int rank, int nranks, int blocking,
                                 int64_t timeoutMs, weftComm_t *newcomm) {
  struct weftComm *child = weftCommAlloc(rank, nranks, timeoutMs);
  if (child == NULL) {
    weftSplitFree(s);
    return weftSetError(weftSystemError, "out of memory");
  }
  child->split = s;
  child->nonblocking = !blocking;
  return weftCommStartInit(child, blocking, newcomm);
}

static weftResult_t shrinkBootstrap(struct weftComm *comm) {
  struct weftSplit *s = comm->split;
  weftResult_t rc = weftBootstrapSplit(s->parent->boot, s->members, s->n, s->epoch,
                                       weftDeadline(comm), &comm->boot);
  return rc == weftSuccess || weftCommAborted(comm) ? rc : weftSplitNameGone(s->parent, rc);
}

weftResult_t weftSplitBootstrap(struct weftComm *comm) {
  switch (comm->split->kind) {
    case WEFT_SPLIT_SHRINK: return shrinkBootstrap(comm);
    case WEFT_SPLIT_RECOVER: return weftRecoverBootstrap(comm);
    case WEFT_SPLIT_COLOR: return weftSplitColorBootstrap(comm);
    case WEFT_SPLIT_GROW: return weftGrowBootstrap(comm);
  }
  return weftSetError(weftInternalError, "split of unknown kind %d", (int)comm->split->kind);
}

/* "rank 2 (pid 9 on host h), rank 5 (10.0.0.3:4000)"; how many. */
static int describeGone(const struct weftComm *comm, const char *gone, char *buf, size_t len) {
  int found = 0;
  size_t o = 0;
  buf[0] = '\0';
  for (int r = 0; r < comm->nranks && o < len; r++) {
    if (!gone[r]) continue;
    char where[WEFT_SOCK_NAME_MAX + 96], name[WEFT_SOCK_NAME_MAX];
    const union weftSockAddr *addr = weftBootstrapPeerAddr(comm->boot, r);
    if (weftRankByProcess(comm, r))
      snprintf(where, sizeof where, "pid %d on host %s", comm->peers[r].pid, comm->peers[r].hostname);
    else if (addr != NULL)
      snprintf(where, sizeof where, "listener %s closed", weftSockAddrName(addr, name));
    else
      snprintf(where, sizeof where, "address unknown");
    o += (size_t)snprintf(buf + o, len - o, "%srank %d (%s)", found++ ? ", " : "", r, where);
  }
  return found;
}

weftResult_t weftSplitNameGone(struct weftComm *parent, weftResult_t rc) {
  if (rc == weftSuccess || rc == weftInvalidArgument || rc == weftInvalidUsage) return rc;
  if (parent->peers == NULL || parent->boot == NULL || weftCommAborted(parent)) return rc;
  char *gone = calloc((size_t)parent->nranks, 1);
  if (gone == NULL) return rc;
  int listeners = 0;
  for (int r = 0; r < parent->nranks; r++) listeners += r != parent->rank && !weftRankByProcess(parent, r);
  if (listeners > 0) weftBootstrapSettle(); /* a killed process's sockets close one by one */
  weftCommMarkGone(parent, gone, WEFT_GONE_PROBE_MS);
  char list[512], was[1024];
  int found = describeGone(parent, gone, list, sizeof list);
  free(gone);
  if (found == 0) return rc;
  snprintf(was, sizeof was, "%s", weftThreadLastError());
  return weftSetError(weftRemoteError, "%s; gone from the parent communicator: %s", was, list);
}
