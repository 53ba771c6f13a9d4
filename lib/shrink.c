/* weftCommShrink and weftCommRecover: a new communicator of some of the ranks of an existing
 * one, without a new unique id. Its bootstrap is a ring formed through the parent's bootstrap
 * listeners, which stay open for the communicator's life (lib/boot_split.c); everything after
 * the bootstrap is the init of any communicator (lib/comm.c, lib/childcomm.c).
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

#include "devcoll.h"
#include "api.h"
#include "bootstrap.h"
#include "check.h"
#include "commfail.h"
#include "core.h"
#include "deadline.h"
#include "errors.h"
#include "liveness.h"
#include "log.h"
#include "split.h"

/* One attempt of a recovery: long enough for a ring to form on a loaded host, short enough
 * that survivors whose views differed meet again soon. */
#define RECOVER_ATTEMPT_MS 1000
/* How long a rank on another host may take to answer a connection before it counts as gone. */
#define RECOVER_PROBE_MS 500
#define RECOVER_RETRY_MS 20

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

weftResult_t weftRecoverBootstrap(struct weftComm *comm) {
  struct weftSplit *s = comm->split;
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

WEFT_PUBLIC weftResult_t weftCommShrink(weftComm_t comm, int *excludeRanksList,
                                        int excludeRanksCount, weftComm_t *newcomm,
                                        weftConfig_t *config, int shrinkFlags) {
  weftLogInit();
  weftClearThreadError();
  WEFTCHECK(weftSplitCheckParent(comm, newcomm, "weftCommShrink"));
  weftDevDrain(comm); /* its calls on device buffers come first */
  if (shrinkFlags != WEFT_SHRINK_DEFAULT && shrinkFlags != WEFT_SHRINK_ABORT)
    return weftReportTo(comm, weftSetError(weftInvalidArgument, "weftCommShrink: unknown flags 0x%x",
                                           (unsigned)shrinkFlags));
  /* Every refusal comes before the epoch is taken: a rank that was refused and calls again
   * stays in step with the others. */
  int blocking;
  int64_t timeoutMs;
  WEFTCHECK(weftReportTo(comm, weftSplitConfig(comm, config, &blocking, &timeoutMs)));
  char *excluded = calloc((size_t)comm->nranks, 1);
  if (excluded == NULL) return weftReportTo(comm, weftSetError(weftSystemError, "out of memory"));
  weftResult_t rc = markExcluded(comm, excludeRanksList, excludeRanksCount, excluded);
  struct weftSplit *s = rc == weftSuccess ? weftSplitNew(comm, WEFT_SPLIT_SHRINK) : NULL;
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
  rc = weftSplitStartChild(s, me, s->n, blocking, timeoutMs, newcomm);
  return rc == weftInProgress ? rc : weftReportTo(comm, rc);
}
WEFT_PROFILING_ALIAS(weftCommShrink);

WEFT_PUBLIC weftResult_t weftCommRecover(weftComm_t comm, weftComm_t *newcomm, weftConfig_t *config,
                                         int *excludedRanks, int *excludedCount) {
  weftLogInit();
  weftClearThreadError();
  WEFTCHECK(weftSplitCheckParent(comm, newcomm, "weftCommRecover"));
  int blocking;
  int64_t timeoutMs;
  WEFTCHECK(weftReportTo(comm, weftSplitConfig(comm, config, &blocking, &timeoutMs)));
  struct weftSplit *s = weftSplitNew(comm, WEFT_SPLIT_RECOVER);
  if (s == NULL) return weftReportTo(comm, weftSetError(weftSystemError, "out of memory"));
  s->excludedOut = excludedRanks;
  s->excludedCountOut = excludedCount;
  giveUpParent(comm, "weftCommRecover");
  /* The rank and size are known once the survivors agree (weftRecoverBootstrap). */
  weftResult_t rc = weftSplitStartChild(s, comm->rank, comm->nranks, blocking, timeoutMs, newcomm);
  return rc == weftInProgress ? rc : weftReportTo(comm, rc);
}
WEFT_PROFILING_ALIAS(weftCommRecover);
