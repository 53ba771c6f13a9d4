/* weftCommSplit, NCCL's ncclCommSplit: the ranks of a communicator that pass the same color
 * form a new communicator each, ordered by key then by their old rank, without a new unique id.
 *
 * How it works:
 *   1. Agreement: every rank of the parent, NOCOLOR ones included, contributes (color, key) to
 *      an all-gather on a ring of its own formed through the parent's bootstrap listeners
 *      (weftBootstrapAgree), so it works however the parent's own ring is (closed after a
 *      failure, carrying signature notes). A rank that is dead or dies here makes every rank's
 *      split fail: its neighbours see it, the others see their neighbours leave, and each
 *      names the gone ranks it finds (weftSplitNameGone).
 *   2. A NOCOLOR rank is done. The ranks of one color sort themselves by (key, old rank) and
 *      form the child's bootstrap as a shrink does (weftBootstrapSplit over that member list,
 *      through the same listeners): every color at once, as their member lists, and so their
 *      secrets, differ. A rank dying now fails the ranks of its color only; the other colors'
 *      communicators do not include it.
 *   3. The rest is the init of any communicator (lib/comm.c).
 * Non-blocking: a colored rank's steps run in its child's init thread (poll the child); a
 * NOCOLOR rank's agreement runs in the parent's operation thread, as a non-blocking collective
 * does (poll the parent, whose error it becomes if it fails). */
#include <stdio.h>
#include <stdlib.h>

#include "devcoll.h"
#include "api.h"
#include "bootstrap.h"
#include "bytes.h"
#include "check.h"
#include "deadline.h"
#include "errors.h"
#include "log.h"
#include "split.h"

#define ENTRY_BYTES 8 /* color, key: big-endian int32 each */

static int entryColor(const uint8_t *table, int r) {
  return (int)(int32_t)weftGetBe32(table + (size_t)r * ENTRY_BYTES);
}
static int entryKey(const uint8_t *table, int r) {
  return (int)(int32_t)weftGetBe32(table + (size_t)r * ENTRY_BYTES + 4);
}

/* The message of a failed split: which rank and color, what failed, who is gone. */
static weftResult_t splitFailed(const struct weftSplit *s, weftResult_t rc) {
  rc = weftSplitNameGone(s->parent, rc);
  char was[1024];
  snprintf(was, sizeof was, "%s", weftThreadLastError());
  return weftSetError(rc, "weftCommSplit: rank %d (color %d, key %d): %s", s->parent->rank,
                      s->color, s->key, was);
}

/* Step 1: every rank's (color, key), in *tableOut (parent->nranks entries) on success. */
static weftResult_t agreeColors(const struct weftSplit *s, int64_t deadlineMs, uint8_t **tableOut) {
  const struct weftComm *parent = s->parent;
  uint8_t *table = calloc((size_t)parent->nranks, ENTRY_BYTES);
  if (table == NULL) return weftSetError(weftSystemError, "out of memory");
  uint8_t *mine = table + (size_t)parent->rank * ENTRY_BYTES;
  weftPutBe32(mine, (uint32_t)s->color);
  weftPutBe32(mine + 4, (uint32_t)s->key);
  weftResult_t rc =
      weftBootstrapAgree(parent->boot, s->epoch, WEFT_AGREE_SPLIT, table, ENTRY_BYTES, deadlineMs);
  for (int r = 0; rc == weftSuccess && r < parent->nranks; r++)
    if (entryColor(table, r) < WEFT_SPLIT_NOCOLOR) /* each rank refused its own already */
      rc = weftSetError(weftInternalError, "rank %d agreed on color %d", r, entryColor(table, r));
  if (rc != weftSuccess) {
    free(table);
    return rc;
  }
  *tableOut = table;
  return weftSuccess;
}

struct member {
  int key, rank;
};

static int byKeyThenRank(const void *a, const void *b) {
  const struct member *x = a, *y = b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Step 2: s->members = the ranks of this rank's color by (key, old rank); this rank's index. */
static weftResult_t groupOf(struct weftSplit *s, const uint8_t *table, int *me) {
  const struct weftComm *parent = s->parent;
  struct member *group = malloc(sizeof *group * (size_t)parent->nranks);
  if (group == NULL) return weftSetError(weftSystemError, "out of memory");
  s->n = 0;
  for (int r = 0; r < parent->nranks; r++)
    if (entryColor(table, r) == s->color)
      group[s->n++] = (struct member){.key = entryKey(table, r), .rank = r};
  qsort(group, (size_t)s->n, sizeof *group, byKeyThenRank);
  for (int i = 0; i < s->n; i++) {
    s->members[i] = group[i].rank;
    if (group[i].rank == parent->rank) *me = i;
  }
  free(group);
  return weftSuccess;
}

weftResult_t weftSplitColorBootstrap(struct weftComm *comm) {
  struct weftSplit *s = comm->split;
  int64_t deadlineMs = weftDeadline(comm);
  uint8_t *table = NULL;
  int me = -1;
  weftResult_t rc = agreeColors(s, deadlineMs, &table);
  if (rc == weftSuccess) rc = groupOf(s, table, &me);
  free(table);
  if (rc == weftSuccess)
    rc = weftBootstrapSplit(s->parent->boot, s->members, s->n, s->epoch, deadlineMs, &comm->boot);
  if (rc != weftSuccess) return weftCommAborted(comm) ? rc : splitFailed(s, rc);
  comm->rank = me;
  comm->nranks = s->n;
  INFO(WEFT_INIT, "weftCommSplit: rank %d (color %d, key %d) is rank %d of %d (epoch %llu)",
       s->parent->rank, s->color, s->key, me, s->n, (unsigned long long)s->epoch);
  return weftSuccess;
}

/* A NOCOLOR rank's whole part: the agreement. */
static weftResult_t noColorPart(const struct weftSplit *s) {
  uint8_t *table = NULL;
  weftResult_t rc = agreeColors(s, s->deadlineMs, &table);
  free(table);
  if (rc != weftSuccess) return splitFailed(s, rc);
  INFO(WEFT_INIT, "weftCommSplit: rank %d (NOCOLOR) took part; no new communicator (epoch %llu)",
       s->parent->rank, (unsigned long long)s->epoch);
  return weftSuccess;
}

/* Non-blocking NOCOLOR: in the parent's operation thread, which weftCommGetAsyncError(parent)
 * reports as weftInProgress and destroy and abort join (lib/coll.c's machinery). */
static void *noColorMain(void *arg) {
  struct weftSplit *s = arg;
  struct weftComm *parent = s->parent;
  weftLogSetRank(parent->rank);
  weftClearThreadError();
  weftThreadAbortFlag = &parent->abortFlag;
  weftResult_t rc = noColorPart(s);
  if (rc != weftSuccess && weftCommAborted(parent)) rc = weftAbortedError(parent);
  /* The message before the state, which pollers read first (as lib/comm.c's init thread);
   * nothing else changes the parent's state while its operation is in flight. */
  if (rc != weftSuccess && atomic_load(&parent->asyncError) == weftSuccess) {
    snprintf(parent->lastError, sizeof parent->lastError, "%s", weftThreadLastError());
    atomic_store(&parent->asyncError, (int)rc);
  }
  weftThreadAbortFlag = NULL;
  weftSplitFree(s);
  atomic_store_explicit(&parent->opInFlight, 0, memory_order_release);
  return NULL;
}

static weftResult_t startNoColor(struct weftComm *parent, struct weftSplit *s) {
  weftJoinOpThread(parent); /* the previous operation, done (the caller saw it out of flight) */
  atomic_store(&parent->opInFlight, 1);
  int err = pthread_create(&parent->opThread, NULL, noColorMain, s);
  if (err != 0) {
    atomic_store(&parent->opInFlight, 0);
    weftSplitFree(s);
    return weftReportTo(parent, weftSetSysError(err, "weftCommSplit: pthread_create"));
  }
  atomic_store(&parent->opThreadStarted, 1);
  return weftInProgress;
}

WEFT_PUBLIC weftResult_t weftCommSplit(weftComm_t comm, int color, int key, weftComm_t *newcomm,
                                       weftConfig_t *config) {
  weftLogInit();
  weftClearThreadError();
  WEFTCHECK(weftSplitCheckParent(comm, newcomm, "weftCommSplit"));
  weftDevDrain(comm); /* its calls on device buffers come first */
  if (color < 0 && color != WEFT_SPLIT_NOCOLOR)
    return weftReportTo(comm, weftSetError(weftInvalidArgument,
                                           "weftCommSplit: color %d is negative and not "
                                           "WEFT_SPLIT_NOCOLOR (%d)", color, WEFT_SPLIT_NOCOLOR));
  /* Every refusal comes before the epoch is taken, so that a refused rank stays in step. */
  int blocking;
  int64_t timeoutMs;
  WEFTCHECK(weftReportTo(comm, weftSplitConfig(comm, config, &blocking, &timeoutMs)));
  if (color == WEFT_SPLIT_NOCOLOR && !blocking && atomic_load(&comm->opInFlight))
    return weftReportTo(comm, weftSetError(weftInvalidUsage,
                                           "weftCommSplit: rank %d: a non-blocking operation of "
                                           "comm is still in progress", comm->rank));
  struct weftSplit *s = weftSplitNew(comm, WEFT_SPLIT_COLOR);
  if (s == NULL) return weftReportTo(comm, weftSetError(weftSystemError, "out of memory"));
  s->color = color;
  s->key = key;
  if (color != WEFT_SPLIT_NOCOLOR) {
    /* The rank and size are known once the colors are agreed (weftSplitColorBootstrap). */
    weftResult_t rc = weftSplitStartChild(s, comm->rank, comm->nranks, blocking, timeoutMs, newcomm);
    return rc == weftInProgress ? rc : weftReportTo(comm, rc);
  }
  s->deadlineMs = weftNowMs() + timeoutMs;
  if (!blocking) return startNoColor(comm, s);
  weftResult_t rc = noColorPart(s);
  weftSplitFree(s);
  return weftReportTo(comm, rc);
}
WEFT_PROFILING_ALIAS(weftCommSplit);
