/* Calls on device buffers (issue 12): what they are (lib/devbuf.c) and how they run
 * (lib/devcoll.c).
 *
 * A call whose buffers are device memory is checked at once, then enqueued on the caller's
 * stream, and returns (NCCL's semantics: its result is ready when the stream is; the caller's
 * stream is never synchronised). On the stream: the input is copied into pinned host staging,
 * an event marks it there, the stream waits for a flag word, the output is copied back. The
 * communicator's device worker (one thread per communicator, started by its first device
 * call) waits for the event, runs the call on the staging with the host algorithms, and
 * raises the flag. Everything the stream waits on is stream-ordered (a copy, an event, a
 * stream memory wait on host memory): no kernel spins on another process's kernel, so ranks
 * that share a GPU progress whatever the GPU's time-slicing. A call that fails still raises
 * the flag (the stream goes on, the output is not written) and becomes the communicator's
 * sticky error, which the next call and weftCommGetAsyncError report. */
#ifndef WEFT_DEVCOLL_H_
#define WEFT_DEVCOLL_H_

#include "group.h"

struct weftDevQueue;

/* Whether the task's buffers are device memory: *onDevice 1 when every buffer the call uses
 * on this rank is, 0 when every one is host memory (or no runtime or GPU is present: then
 * nothing is asked of a runtime). A mix, buffers on two devices, or a pointer the runtime
 * refuses is weftInvalidArgument, named after api. */
weftResult_t weftDevClassify(const struct weftComm *comm, const char *api,
                             const struct weftTask *task, int *onDevice);

/* The bytes of input and output the task's call moves on this rank, and whether it reads
 * its sendbuff and writes its recvbuff here (a Broadcast's sendbuff off the root is not read,
 * a Reduce's recvbuff there is not written, ...). */
void weftDevTaskBytes(const struct weftComm *comm, const struct weftTask *task, size_t *inBytes,
                      size_t *outBytes, int *readsSend, int *writesRecv);

/* Enqueues tasks (all of comm, all on device buffers, count > 0) on their streams and hands
 * them to comm's device worker, as one unit (a group's share runs as weftRunTasks runs it). */
weftResult_t weftDevSubmit(struct weftComm *comm, const struct weftTask *tasks, int n,
                           const char *api);
/* weftDevSubmit in its two halves, for a group that drives several communicators: every
 * communicator's inputs are enqueued (Prepare) before any stream waits for a result (Launch),
 * since their streams may be one stream. A failed Prepare leaves *job NULL. */
struct weftDevJob;
weftResult_t weftDevPrepare(struct weftComm *comm, const struct weftTask *tasks, int n,
                            const char *api, struct weftDevJob **job);
weftResult_t weftDevLaunch(struct weftComm *comm, struct weftDevJob *job);

/* Waits until comm's device worker has run every call handed to it (nothing when none
 * was): a call on host buffers, and the communicator's own operations (finalize, split),
 * come after them in order. */
void weftDevDrain(struct weftComm *comm);

/* Ends comm's device worker and frees its staging, once every stream copy that reads or
 * writes it is done. After weftCommAbort set the abort flag, calls not yet run are skipped
 * (their flags raised, their output not written). */
void weftDevClose(struct weftComm *comm);

#endif
