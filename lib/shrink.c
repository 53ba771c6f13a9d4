/* weftCommShrink and weftCommRecover: a new communicator of some of the ranks of an existing
 * one, without a new unique id. Its bootstrap is a ring formed through the parent's bootstrap
 * listeners, which stay open for the communicator's life (lib/bootstrap.c); everything after
 * the bootstrap is the init of any communicator (lib/comm.c).
 *
 * Recovery agrees on who is gone without a coordinator: each survivor tests every other rank
 * (its process on this host, its listener on another), and the ring of a split only forms
 * when every member proposes the same member list, because the split's secret is bound to
 * the list. A survivor whose view differed fails its attempt and tests again; deaths are
 * permanent, so the views converge once the failures stop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"
#include "bootstrap.h"
#include "check.h"
#include "core.h"
#include "log.h"
#include "settings.h"

/* One attempt of a recovery: long enough for a ring to form on a loaded host, short enough
 * that survivors whose views differed meet again soon. */
#define RECOVER_ATTEMPT_MS 1000
/* How long a rank on another host may take to answer a connection before it counts as gone. */
#define RECOVER_PROBE_MS 500
#define RECOVER_RETRY_MS 20

struct weftSplit {
  struct weftComm *parent;
  int recover;
  uint64_t epoch;
  int *members; /* parent ranks, ascending: fixed for a shrink, the last view for a recovery */
  int n;
  int *excludedOut, *excludedCountOut; /* the caller's, for weftCommRecover */
};

void weftSplitFree(struct weftSplit *split) {
  if (split == NULL) return;
  free(split->members);
  free(split);
}


static void listMembers(struct weftSplit *s, const char *gone) {
  s->n = 0;
  for (int r = 0; r < s->parent->nranks; r++)
    if (!gone[r]) s->members[s->n++] = r;
}

static void describeMembers(const struct weftSplit *s, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (int i = 0; i < s->n && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, "%s%d", i ? "," : "", s->members[i]);
}

static weftResult_t recoverFailed(struct weftComm *comm, struct weftSplit *s, weftResult_t rc) {
  if (weftCommAborted(comm)) return weftAbortedError(comm);
  char why[512], members[256];
  snprintf(why, sizeof why, "%s", weftThreadLastError());
  describeMembers(s, members, sizeof members);
  return weftSetError(rc,
                      "weftCommRecover: rank %d: the survivors it sees (ranks %s) did not form a "
                      "communicator within %lld ms; last attempt: %s",
                      s->parent->rank, members, (long long)comm->timeoutMs, why);
}

static void reportExcluded(const struct weftSplit *s) {
  int k = 0;
  for (int r = 0, i = 0; r < s->parent->nranks; r++) {
    if (i < s->n && s->members[i] == r) {
      i++;
      continue;
    }
    if (s->excludedOut != NULL) s->excludedOut[k] = r;
    k++;
  }
  if (s->excludedCountOut != NULL) *s->excludedCountOut = k;
}

static weftResult_t recoverBootstrap(struct weftComm *comm, struct weftSplit *s) {
  char *gone = calloc((size_t)s->parent->nranks, 1);
  if (gone == NULL) return weftSetError(weftSystemError, "out of memory");
  int64_t deadline = weftDeadline(comm);
  weftResult_t rc;
  for (int attempt = 1;; attempt++) {
    weftCommMarkGone(s->parent, gone, RECOVER_PROBE_MS);
    listMembers(s, gone);
    int64_t until = weftNowMs() + RECOVER_ATTEMPT_MS;
    rc = weftBootstrapSplit(s->parent->boot, s->members, s->n, s->epoch,
                            until < deadline ? until : deadline, &comm->boot);
    if (rc == weftSuccess || weftCommAborted(comm) || weftNowMs() >= deadline) break;
    INFO(WEFT_INIT, "weftCommRecover: rank %d, attempt %d with %d survivors failed (%s); again",
         s->parent->rank, attempt, s->n, weftThreadLastError());
    struct timespec pause = {0, RECOVER_RETRY_MS * 1000000L};
    nanosleep(&pause, NULL);
  }
  free(gone);
  return rc == weftSuccess ? weftSuccess : recoverFailed(comm, s, rc);
}

weftResult_t weftSplitBootstrap(struct weftComm *comm) {
  struct weftSplit *s = comm->split;
  if (!s->recover)
    return weftBootstrapSplit(s->parent->boot, s->members, s->n, s->epoch, weftDeadline(comm),
                              &comm->boot);
  WEFTCHECK(recoverBootstrap(comm, s));
  for (int i = 0; i < s->n; i++)
    if (s->members[i] == s->parent->rank) comm->rank = i;
  comm->nranks = s->n;
  reportExcluded(s);
  char members[256];
  describeMembers(s, members, sizeof members);
  INFO(WEFT_INIT, "weftCommRecover: rank %d is rank %d of %d survivors (old ranks %s)",
       s->parent->rank, comm->rank, comm->nranks, members);
  return weftSuccess;
}

/* Closes comm's links so that collectives blocked on them, here or on peers, end (also after
 * a timeout, which leaves them open). The first error and its message stay. */
static void giveUpParent(struct weftComm *comm, const char *api) {
  int healthy = weftSuccess;
  if (atomic_compare_exchange_strong(&comm->asyncError, &healthy, weftRemoteError)) {
    weftSetError(weftRemoteError, "rank %d: communicator given up by %s", comm->rank, api);
    weftReportTo(comm, weftRemoteError);
    weftClearThreadError();
  }
  weftCommCloseLinks(comm, weftRemoteError);
}

static weftResult_t checkParent(struct weftComm *comm, weftComm_t *newcomm, const char *api) {
  WEFTCHECK(weftCheckComm(comm, api));
  if (newcomm == NULL)
    return weftReportTo(comm, weftSetError(weftInvalidArgument, "%s: newcomm is NULL", api));
  *newcomm = NULL;
  if (atomic_load(&comm->asyncError) == weftInProgress)
    return weftReportTo(comm, weftSetError(weftInvalidUsage, "%s: comm's init is in progress", api));
  return weftReportTo(comm, weftSettingsCheck(api));
}

/* excluded[r] = 1 for each listed rank; checks range, repeats and this rank's absence. */
static weftResult_t markExcluded(struct weftComm *comm, const int *list, int count, char *excluded) {
  if (count < 0 || (count > 0 && list == NULL))
    return weftSetError(weftInvalidArgument, "weftCommShrink: %d excluded ranks at %p", count,
                        (const void *)list);
  for (int i = 0; i < count; i++) {
    int r = list[i];
    if (r < 0 || r >= comm->nranks)
      return weftSetError(weftInvalidArgument, "weftCommShrink: excluded rank %d outside [0, %d)",
                          r, comm->nranks);
    if (excluded[r])
      return weftSetError(weftInvalidArgument, "weftCommShrink: rank %d excluded twice", r);
    if (r == comm->rank)
      return weftSetError(weftInvalidArgument,
                          "weftCommShrink: rank %d excludes itself (excluded ranks do not call it)", r);
    excluded[r] = 1;
  }
  return weftSuccess;
}

static struct weftSplit *splitNew(struct weftComm *parent, int recover) {
  struct weftSplit *s = calloc(1, sizeof *s);
  if (s == NULL) return NULL;
  s->members = malloc(sizeof(int) * (size_t)parent->nranks);
  if (s->members == NULL) {
    free(s);
    return NULL;
  }
  s->parent = parent;
  s->recover = recover;
  s->epoch = parent->splitsBegun++;
  return s;
}

/* Starts the child's init (which frees it, split included, on failure). */
static weftResult_t startChild(struct weftComm *parent, struct weftSplit *s, int rank, int nranks,
                               weftConfig_t *config, weftComm_t *newcomm) {
  int blocking = 1;
  int64_t timeoutMs = parent->timeoutMs;
  weftResult_t rc = weftConfigRead(config, &blocking, &timeoutMs);
  if (rc == weftSuccess && timeoutMs <= 0)
    rc = weftSetError(weftInvalidArgument, "timeoutMs=%lld must be positive", (long long)timeoutMs);
  struct weftComm *child = rc == weftSuccess ? weftCommAlloc(rank, nranks, timeoutMs) : NULL;
  if (rc == weftSuccess && child == NULL) rc = weftSetError(weftSystemError, "out of memory");
  if (rc != weftSuccess) {
    weftSplitFree(s);
    return rc;
  }
  child->split = s;
  child->nonblocking = !blocking;
  return weftCommStartInit(child, blocking, newcomm);
}

WEFT_PUBLIC weftResult_t weftCommShrink(weftComm_t comm, int *excludeRanksList,
                                        int excludeRanksCount, weftComm_t *newcomm,
                                        weftConfig_t *config, int shrinkFlags) {
  weftLogInit();
  weftClearThreadError();
  WEFTCHECK(checkParent(comm, newcomm, "weftCommShrink"));
  if (shrinkFlags != WEFT_SHRINK_DEFAULT && shrinkFlags != WEFT_SHRINK_ABORT)
    return weftReportTo(comm, weftSetError(weftInvalidArgument, "weftCommShrink: unknown flags 0x%x",
                                           (unsigned)shrinkFlags));
  char *excluded = calloc((size_t)comm->nranks, 1);
  if (excluded == NULL) return weftSetError(weftSystemError, "out of memory");
  weftResult_t rc = markExcluded(comm, excludeRanksList, excludeRanksCount, excluded);
  struct weftSplit *s = rc == weftSuccess ? splitNew(comm, 0) : NULL;
  if (rc == weftSuccess && s == NULL) rc = weftSetError(weftSystemError, "out of memory");
  int me = 0;
  for (int r = 0; s != NULL && r < comm->nranks; r++) {
    if (r == comm->rank) me = s->n;
    if (!excluded[r]) s->members[s->n++] = r;
  }
  free(excluded);
  if (rc != weftSuccess) return weftReportTo(comm, rc);
  if (shrinkFlags & WEFT_SHRINK_ABORT) giveUpParent(comm, "weftCommShrink(WEFT_SHRINK_ABORT)");
  INFO(WEFT_INIT, "weftCommShrink: rank %d becomes rank %d of %d (epoch %llu)", comm->rank, me,
       s->n, (unsigned long long)s->epoch);
  return startChild(comm, s, me, s->n, config, newcomm);
}
WEFT_PROFILING_ALIAS(weftCommShrink);

WEFT_PUBLIC weftResult_t weftCommRecover(weftComm_t comm, weftComm_t *newcomm, weftConfig_t *config,
                                         int *excludedRanks, int *excludedCount) {
  weftLogInit();
  weftClearThreadError();
  WEFTCHECK(checkParent(comm, newcomm, "weftCommRecover"));
  struct weftSplit *s = splitNew(comm, 1);
  if (s == NULL) return weftSetError(weftSystemError, "out of memory");
  s->excludedOut = excludedRanks;
  s->excludedCountOut = excludedCount;
  giveUpParent(comm, "weftCommRecover");
  /* The rank and size are known once the survivors agree (weftSplitBootstrap). */
  return startChild(comm, s, comm->rank, comm->nranks, config, newcomm);
}
WEFT_PROFILING_ALIAS(weftCommRecover);
