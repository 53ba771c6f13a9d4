/* Validation of user input at the API boundary: every bad argument gets its own code and
 * message, never an assert. */
#include <stdint.h>
#include <pthread.h>
#include <stdlib.h>

#include "core.h"
#include "log.h"
#include "reduce.h"

/* Live communicators of this process, so a destroyed handle is refused instead of used. */
static pthread_mutex_t liveLock = PTHREAD_MUTEX_INITIALIZER;
static const struct weftComm **live;
static size_t nLive, capLive;

weftResult_t weftCommRegisterLive(const struct weftComm *comm) {
  pthread_mutex_lock(&liveLock);
  if (nLive == capLive) {
    size_t cap = capLive ? capLive * 2 : 16;
    const struct weftComm **grown = realloc(live, cap * sizeof *grown);
    if (grown == NULL) {
      pthread_mutex_unlock(&liveLock);
      return weftSetError(weftSystemError, "out of memory");
    }
    live = grown;
    capLive = cap;
  }
  live[nLive++] = comm;
  pthread_mutex_unlock(&liveLock);
  return weftSuccess;
}

void weftCommUnregisterLive(const struct weftComm *comm) {
  pthread_mutex_lock(&liveLock);
  for (size_t i = 0; i < nLive; i++)
    if (live[i] == comm) {
      live[i] = live[--nLive];
      break;
    }
  if (nLive == 0) {
    free(live);
    live = NULL;
    capLive = 0;
  }
  pthread_mutex_unlock(&liveLock);
}

int weftCommIsLive(const struct weftComm *comm) {
  int found = 0;
  pthread_mutex_lock(&liveLock);
  for (size_t i = 0; i < nLive && !found; i++) found = live[i] == comm;
  pthread_mutex_unlock(&liveLock);
  return found;
}

weftResult_t weftCheckComm(const struct weftComm *comm, const char *api) {
  if (comm == NULL) return weftSetError(weftInvalidArgument, "%s: comm is NULL", api);
  if (!weftCommIsLive(comm))
    return weftSetError(weftInvalidUsage,
                        "%s: comm %p is not a live communicator (already destroyed?)", api,
                        (const void *)comm);
  return weftSuccess;
}

weftResult_t weftCheckCollArgs(const void *sendbuff, const void *recvbuff, size_t count,
                               weftDataType_t type, weftRedOp_t op, size_t *bytes) {
  if ((int)type < 0 || type >= weftNumTypes)
    return weftSetError(weftInvalidArgument, "AllReduce: unknown datatype %d", (int)type);
  if ((int)op < 0 || op >= weftNumOps)
    return weftSetError(weftInvalidArgument, "AllReduce: unknown reduction op %d", (int)op);
  if (op == weftAvg && !weftTypeIsFloat(type))
    return weftSetError(weftInvalidArgument,
                        "AllReduce: weftAvg is supported for floating-point types only, not %s",
                        weftTypeName(type));
  size_t typeSize = weftTypeSize(type);
  if (count > SIZE_MAX / typeSize || count * typeSize > (size_t)PTRDIFF_MAX)
    return weftSetError(weftInvalidArgument,
                        "AllReduce: count %zu of %s overflows the byte size", count,
                        weftTypeName(type));
  if (count > 0 && sendbuff == NULL)
    return weftSetError(weftInvalidArgument, "AllReduce: sendbuff is NULL with count %zu", count);
  if (count > 0 && recvbuff == NULL)
    return weftSetError(weftInvalidArgument, "AllReduce: recvbuff is NULL with count %zu", count);
  size_t n = count * typeSize;
  const char *s = sendbuff, *r = recvbuff;
  if (n > 0 && s != r && s < r + n && r < s + n)
    return weftSetError(weftInvalidArgument,
                        "AllReduce: sendbuff and recvbuff overlap without being equal (in-place "
                        "needs sendbuff == recvbuff)");
  *bytes = n;
  return weftSuccess;
}
