/* Group calls (lib/group.c): what a call becomes when queued, and how a communicator runs a
 * list of them (inside a group, or alone). */
#ifndef WEFT_GROUP_H_
#define WEFT_GROUP_H_

#include "core.h"
#include "p2p.h"

/* One queued call: a collective, or a Send/Recv. */
struct weftTask {
  struct weftComm *comm;
  int isColl;
  struct weftCollArgs coll;
  struct weftP2pOp p2p;
  /* Device buffers (lib/devcoll.c): the call runs in the communicator's device worker,
   * ordered on stream (the caller's cudaStream_t). */
  int onDevice;
  void *stream;
};

/* Whether this thread is between weftGroupStart and the matching weftGroupEnd. */
int weftGroupActive(void);
/* A call refused by its checks: inside a group, weftGroupEnd returns the first such error
 * and runs nothing. Returns rc. */
weftResult_t weftGroupRefused(weftResult_t rc);
/* Queues a validated call in this thread's group; an error (out of memory) is remembered for
 * weftGroupEnd too. */
weftResult_t weftGroupEnqueue(const struct weftTask *task);
/* Runs tasks (all of comm) now in this thread: its collectives in order, then its Send/Recv
 * together. A failure becomes the communicator's sticky error (weftCommFail). */
weftResult_t weftRunTasks(struct weftComm *comm, const struct weftTask *tasks, int n);
/* Runs tasks on comm: at once when blocking, else in its operation thread (weftInProgress). */
weftResult_t weftStartTasks(struct weftComm *comm, const struct weftTask *tasks, int n,
                            const char *api);
/* Runs one validated collective (lib/coll.c). It sets args->seq, and a PreMulSum's scaled input
 * replaces args->sendbuff: callers pass a copy of their own. */
weftResult_t weftCollRun(struct weftComm *comm, struct weftCollArgs *args);
/* The part of weftCollRun that runs the collective, without the straggler report's
 * bookkeeping around it: what the report's own exchange calls (lib/straggler.c). */
weftResult_t weftCollRunAlgo(struct weftComm *comm, struct weftCollArgs *args);
/* Why comm cannot take a call now (init in progress, failed, a non-blocking call in flight,
 * aborted), named after api; weftSuccess when it can (lib/coll.c). */
weftResult_t weftCheckUsable(struct weftComm *comm, const char *api);

#endif
