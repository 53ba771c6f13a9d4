/* Small collectives queued together in one group run as one, as NCCL aggregates a group's
 * operations into one launch: consecutive AllReduces of one communicator with the same
 * datatype and built-in op, together at most WEFT_GROUP_FUSE_BYTES, are packed into one
 * buffer, reduced by one AllReduce and unpacked. An 8-byte AllReduce costs nearly all
 * synchronisation, so k of them fused cost about one (a framework's many small gradients, or
 * norms and flags, in one group).
 *
 * Every rank queues the same calls in the same order, so every rank fuses them the same way;
 * a rank that called something else meets a fused call's signature that is not its own, and
 * the mismatch is still weftInvalidUsage on the fused counts. Results are those of one
 * AllReduce of the packed buffer: integers exact, floats in the reduction order of the
 * algorithm the tuner picks for the packed size, the same on every rank. PreMulSum ops keep
 * their own calls (each scales its input by its own scalar), and a call that reads what an
 * earlier one of the run writes starts a new run (in call order it sees that result). */
#include "fuse.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "errors.h"
#include "param.h"
#include "reduce.h"

static int fusesWith(const struct weftTask *first, const struct weftTask *t) {
  const struct weftCollArgs *a = &first->coll, *b = &t->coll;
  return t->isColl && b->coll == weftCollAllReduce && a->coll == weftCollAllReduce &&
         b->type == a->type && b->op == a->op && (int)a->op < weftNumOps;
}

static int overlaps(const void *a, size_t aBytes, const void *b, size_t bBytes) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return x < y + bBytes && y < x + aBytes;
}

/* Whether task k reads what an earlier task of the run writes: run in order, it would read
 * that task's result; packed before any runs, its input. */
static int readsEarlierResult(const struct weftTask *tasks, int k) {
  for (int i = 0; i < k; i++)
    if (overlaps(tasks[k].coll.sendbuff, tasks[k].coll.bytes, tasks[i].coll.recvbuff,
                 tasks[i].coll.bytes))
      return 1;
  return 0;
}

/* The dependency check compares each call with every earlier one of its run, so a run is
 * capped in calls as well as bytes: 256 calls of a few bytes already cost about one. */
enum { fuseMaxCalls = 256 };

int weftFuseCount(const struct weftTask *tasks, int n) {
  size_t limit = (size_t)weftParamGroupFuseBytes(), total = 0;
  int k = 0;
  if (n > fuseMaxCalls) n = fuseMaxCalls;
  while (k < n && fusesWith(&tasks[0], &tasks[k]) && tasks[k].coll.bytes <= limit - total &&
         !readsEarlierResult(tasks, k))
    total += tasks[k++].coll.bytes;
  return k > 1 ? k : 1;
}

weftResult_t weftFuseRun(struct weftComm *comm, const struct weftTask *tasks, int k) {
  size_t total = 0, count = 0;
  for (int i = 0; i < k; i++) total += tasks[i].coll.bytes, count += tasks[i].coll.count;
  char *packed = malloc(total);
  if (packed == NULL)
    return weftReportTo(comm, weftSetError(weftSystemError, "weftGroupEnd: out of memory fusing "
                                                            "%d AllReduces of %zu bytes", k, total));
  for (size_t i = 0, off = 0; i < (size_t)k; off += tasks[i].coll.bytes, i++)
    memcpy(packed + off, tasks[i].coll.sendbuff, tasks[i].coll.bytes);
  struct weftCollArgs fused = tasks[0].coll;
  fused.sendbuff = fused.recvbuff = packed;
  fused.count = count;
  fused.bytes = total;
  weftResult_t rc = weftCollRun(comm, &fused);
  for (size_t i = 0, off = 0; rc == weftSuccess && i < (size_t)k; off += tasks[i].coll.bytes, i++)
    memcpy(tasks[i].coll.recvbuff, packed + off, tasks[i].coll.bytes);
  free(packed);
  return rc;
}
