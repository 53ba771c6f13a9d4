/* What a call's buffers are (lib/devcoll.h): device or host memory, and how many bytes of
 * each it moves on this rank. */
#include <stdio.h>

#include "check.h"
#include "collname.h"
#include "core.h"
#include "devcoll.h"
#include "device.h"
#include "log.h"
#include "reduce.h"

void weftDevTaskBytes(const struct weftComm *comm, const struct weftTask *task, size_t *inBytes,
                      size_t *outBytes, int *readsSend, int *writesRecv) {
  if (!task->isColl) {
    size_t bytes = task->p2p.count * weftTypeSize(task->p2p.type);
    *inBytes = task->p2p.isSend ? bytes : 0;
    *outBytes = task->p2p.isSend ? 0 : bytes;
    *readsSend = task->p2p.isSend;
    *writesRecv = !task->p2p.isSend;
    return;
  }
  /* Staged whole, whether the rank uses a buffer or not (the algorithms may point at it). */
  struct weftCallBuffers c = weftCallBuffersOf(&task->coll, comm->rank, comm->nranks);
  *inBytes = c.sendBytes;
  *outBytes = c.recvBytes;
  *readsSend = c.needSend;
  *writesRecv = c.needRecv;
}

struct seen {
  int any, kind, device;
  const char *name;
  const void *ptr;
};

/* Adds one buffer to what the call has seen; refuses a second kind or a second device. */
static weftResult_t seeBuffer(const struct weftDeviceOps *ops, const char *api, struct seen *s,
                              const char *name, const void *p) {
  enum weftMemKind kind;
  int device = -1;
  if (ops->pointerKind(p, &kind, &device) != weftSuccess)
    return weftSetError(weftInvalidArgument, "%s: %s %p: the %s runtime does not know it: %s", api,
                        name, p, ops->name, weftThreadLastError());
  if (!s->any) {
    *s = (struct seen){1, (int)kind, device, name, p};
    return weftSuccess;
  }
  if ((int)kind != s->kind)
    return weftSetError(weftInvalidArgument,
                        "%s: %s %p is %s memory but %s %p is %s memory: a call's buffers must be "
                        "all device memory or all host memory", api, s->name, s->ptr,
                        s->kind == WEFT_MEM_DEVICE ? "device" : "host", name, p,
                        kind == WEFT_MEM_DEVICE ? "device" : "host");
  if (kind == WEFT_MEM_DEVICE && device != s->device)
    return weftSetError(weftInvalidArgument,
                        "%s: %s %p is on device %d but %s %p on device %d: a communicator's "
                        "buffers must be on one device", api, s->name, s->ptr, s->device, name,
                        p, device);
  return weftSuccess;
}

weftResult_t weftDevClassify(const struct weftComm *comm, const char *api,
                             const struct weftTask *task, int *onDevice) {
  const struct weftDeviceOps *ops = weftDeviceRuntime();
  *onDevice = 0;
  /* Every host call passes here: no reason is asked for (count() formats it). */
  if (ops == NULL || ops->count(NULL, 0) <= 0) return weftSuccess;
  size_t inBytes, outBytes;
  int reads, writes;
  weftDevTaskBytes(comm, task, &inBytes, &outBytes, &reads, &writes);
  const void *send = task->isColl ? task->coll.sendbuff : task->p2p.sendbuff;
  const void *recv = task->isColl ? task->coll.recvbuff : task->p2p.recvbuff;
  struct seen s = {0};
  if (reads && send != NULL) WEFTCHECK(seeBuffer(ops, api, &s, "sendbuff", send));
  if (writes && recv != NULL) WEFTCHECK(seeBuffer(ops, api, &s, "recvbuff", recv));
  *onDevice = s.any && s.kind == WEFT_MEM_DEVICE;
  return weftSuccess;
}
