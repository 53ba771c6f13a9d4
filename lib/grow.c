/* weftCommGetUniqueId and weftCommGrow, NCCL 2.29's ncclCommGetUniqueId and ncclCommGrow: new
 * ranks join a running communicator, as a new communicator in which the ranks of the old one
 * keep their ranks.
 *
 * How it works:
 *   1. One rank of comm (the root) makes an id with weftCommGetUniqueId: a fresh bootstrap
 *      root in its process, whatever WEFT_COMM_ID says. The program hands it to the new ranks
 *      (a file, a store, its launcher) as it would any unique id.
 *   2. Every rank of comm calls weftCommGrow, the root with the id, the others with NULL; they
 *      agree over comm's bootstrap listeners (weftBootstrapAgree: every rank's size and the
 *      root's id), so the id reaches them authenticated by comm's secret, and exactly one root
 *      and one size are checked on every rank. A rank of comm that is gone fails the agreement
 *      on every rank of comm, named (weftSplitNameGone).
 *   3. Every rank, old (its rank) and new (the rank it was given), then inits through the id's
 *      root as with weftCommInitRank: the new communicator has a secret, bootstrap and
 *      listeners of its own, so it can be shrunk, split or grown in turn. A rank that dies
 *      here fails the others as in any init. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "bootstrap.h"
#include "bytes.h"
#include "check.h"
#include "deadline.h"
#include "errors.h"
#include "log.h"
#include "param.h"
#include "settings.h"
#include "split.h"

/* Each rank's part of the agreement: passed the id (u32), its nRanks (u32), the id. */
#define ENTRY_BYTES (8 + WEFT_UNIQUE_ID_BYTES)

WEFT_PUBLIC weftResult_t weftCommGetUniqueId(weftComm_t comm, weftUniqueId *uniqueId) {
  weftLogInit();
  weftClearThreadError();
  WEFTCHECK(weftCheckComm(comm, "weftCommGetUniqueId"));
  if (uniqueId == NULL)
    return weftReportTo(comm, weftSetError(weftInvalidArgument, "weftCommGetUniqueId: uniqueId is NULL"));
  if (atomic_load(&comm->asyncError) == weftInProgress || !comm->initDone)
    return weftReportTo(comm, weftSetError(weftInvalidUsage,
                                           "weftCommGetUniqueId: comm's init is in progress or failed"));
  WEFTCHECK(weftReportTo(comm, weftSettingsCheck("weftCommGetUniqueId")));
  return weftReportTo(comm, weftBootstrapGetFreshId(uniqueId));
}
WEFT_PROFILING_ALIAS(weftCommGetUniqueId);

/* The agreed table: one size for everyone, exactly one root; its id into s->growId. */
static weftResult_t readAgreement(struct weftSplit *s, const uint8_t *table) {
  const struct weftComm *parent = s->parent;
  int roots = 0, root = -1;
  for (int r = 0; r < parent->nranks; r++) {
    const uint8_t *e = table + (size_t)r * ENTRY_BYTES;
    int size = (int)weftGetBe32(e + 4);
    if (size != s->growRanks)
      return weftSetError(weftInvalidUsage, "weftCommGrow: rank %d grows to %d ranks, rank %d to %d",
                          parent->rank, s->growRanks, r, size);
    if (weftGetBe32(e) != 0 && roots++ == 0) root = r;
  }
  if (roots != 1)
    return weftSetError(weftInvalidUsage,
                        "weftCommGrow: %d ranks of comm passed the id; exactly one must (the one "
                        "that made it with weftCommGetUniqueId), the others NULL", roots);
  memcpy(&s->growId, table + (size_t)root * ENTRY_BYTES + 8, sizeof s->growId);
  return weftSuccess;
}

/* Step 2, on the ranks of comm. */
static weftResult_t agreeId(struct weftSplit *s, int64_t deadlineMs) {
  const struct weftComm *parent = s->parent;
  uint8_t *table = calloc((size_t)parent->nranks, ENTRY_BYTES);
  if (table == NULL) return weftSetError(weftSystemError, "out of memory");
  uint8_t *mine = table + (size_t)parent->rank * ENTRY_BYTES;
  weftPutBe32(mine, (uint32_t)s->growRoot);
  weftPutBe32(mine + 4, (uint32_t)s->growRanks);
  if (s->growRoot) memcpy(mine + 8, &s->growId, sizeof s->growId);
  weftResult_t rc =
      weftBootstrapAgree(parent->boot, s->epoch, WEFT_AGREE_GROW, table, ENTRY_BYTES, deadlineMs);
  if (rc == weftSuccess) rc = readAgreement(s, table);
  explicit_bzero(table, (size_t)parent->nranks * ENTRY_BYTES); /* the id's secret */
  free(table);
  return rc;
}

static weftResult_t growFailed(const struct weftComm *comm, weftResult_t rc) {
  char was[1024];
  snprintf(was, sizeof was, "%s", weftThreadLastError());
  return weftSetError(rc, "weftCommGrow: rank %d of %d: %s", comm->rank, comm->nranks, was);
}

weftResult_t weftGrowBootstrap(struct weftComm *comm) {
  struct weftSplit *s = comm->split;
  int64_t deadlineMs = weftDeadline(comm);
  weftResult_t rc = weftSuccess;
  if (s->parent != NULL) {
    rc = agreeId(s, deadlineMs);
    if (rc != weftSuccess && !weftCommAborted(comm)) rc = weftSplitNameGone(s->parent, rc);
  }
  if (rc == weftSuccess)
    rc = weftBootstrapInitFromId(&s->growId, comm->rank, comm->nranks, deadlineMs, &comm->boot);
  if (rc != weftSuccess) return weftCommAborted(comm) ? rc : growFailed(comm, rc);
  INFO(WEFT_INIT, "weftCommGrow: rank %d of %d (%s)", comm->rank, comm->nranks,
       s->parent != NULL ? "it was a rank of the communicator that grew" : "a new rank");
  return weftSuccess;
}

/* A rank that joins: no parent, the id and the rank it was given. */
static weftResult_t joinGrow(int nRanks, const weftUniqueId *uniqueId, int rank, weftComm_t *newcomm,
                             weftConfig_t *config) {
  if (newcomm == NULL) return weftSetError(weftInvalidArgument, "weftCommGrow: newcomm is NULL");
  *newcomm = NULL;
  if (uniqueId == NULL)
    return weftSetError(weftInvalidArgument,
                        "weftCommGrow: a new rank (comm NULL) needs the id of weftCommGetUniqueId");
  if (nRanks < 2 || rank < 1 || rank >= nRanks)
    return weftSetError(weftInvalidArgument,
                        "weftCommGrow: new rank %d of %d ranks: a new rank is in [1, nRanks) "
                        "(the ranks of the communicator that grows keep theirs, from 0)", rank, nRanks);
  WEFTCHECK(weftSettingsCheck("weftCommGrow"));
  int blocking = 1;
  int64_t timeoutMs = weftParamTimeoutMs();
  WEFTCHECK(weftConfigRead(config, &blocking, &timeoutMs));
  if (timeoutMs <= 0)
    return weftSetError(weftInvalidArgument, "timeoutMs=%lld must be positive", (long long)timeoutMs);
  struct weftSplit *s = calloc(1, sizeof *s);
  if (s == NULL) return weftSetError(weftSystemError, "out of memory");
  *s = (struct weftSplit){.kind = WEFT_SPLIT_GROW, .growRanks = nRanks, .growId = *uniqueId};
  weftLogSetRank(rank);
  return weftSplitStartChild(s, rank, nRanks, blocking, timeoutMs, newcomm);
}

WEFT_PUBLIC weftResult_t weftCommGrow(weftComm_t comm, int nRanks, const weftUniqueId *uniqueId,
                                      int rank, weftComm_t *newcomm, weftConfig_t *config) {
  weftLogInit();
  weftClearThreadError();
  if (comm == NULL) return joinGrow(nRanks, uniqueId, rank, newcomm, config);
  WEFTCHECK(weftSplitCheckParent(comm, newcomm, "weftCommGrow"));
  if (rank != -1)
    return weftReportTo(comm, weftSetError(weftInvalidArgument,
                                           "weftCommGrow: rank %d: a rank of comm keeps its rank "
                                           "and passes -1 (new ranks pass comm NULL)", rank));
  if (nRanks <= comm->nranks)
    return weftReportTo(comm, weftSetError(weftInvalidArgument,
                                           "weftCommGrow: nRanks %d must exceed comm's %d ranks",
                                           nRanks, comm->nranks));
  int blocking;
  int64_t timeoutMs;
  WEFTCHECK(weftReportTo(comm, weftSplitConfig(comm, config, &blocking, &timeoutMs)));
  struct weftSplit *s = weftSplitNew(comm, WEFT_SPLIT_GROW);
  if (s == NULL) return weftReportTo(comm, weftSetError(weftSystemError, "out of memory"));
  s->growRanks = nRanks;
  s->growRoot = uniqueId != NULL;
  if (uniqueId != NULL) s->growId = *uniqueId;
  weftResult_t rc = weftSplitStartChild(s, comm->rank, nRanks, blocking, timeoutMs, newcomm);
  return rc == weftInProgress ? rc : weftReportTo(comm, rc);
}
WEFT_PROFILING_ALIAS(weftCommGrow);
