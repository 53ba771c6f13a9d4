/* Validation of user input at the API boundary: every bad argument gets its own code and
 * message, never an assert. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "core.h"
#include "log.h"
#include "reduce.h"

/* Live communicators of this process, so a destroyed handle is refused instead of used. */
static pthread_mutex_t liveLock = PTHREAD_MUTEX_INITIALIZER;
static const struct weftComm **live;
static size_t nLive, capLive;
/* Every API call asks; a thread remembers the last communicator it found live and the count
 * of removals then, so a call on the same one takes no lock (two locks per 8-byte SendRecv
 * were measurable). A removal bumps the count, so a destroyed handle is looked up again. */
static _Atomic uint64_t liveRemovals;
static _Thread_local const struct weftComm *lastLive;
static _Thread_local uint64_t lastLiveRemovals;

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
  atomic_fetch_add_explicit(&liveRemovals, 1, memory_order_release);
  if (nLive == 0) {
    free(live);
    live = NULL;
    capLive = 0;
  }
  pthread_mutex_unlock(&liveLock);
}

int weftCommIsLive(const struct weftComm *comm) {
  uint64_t removals = atomic_load_explicit(&liveRemovals, memory_order_acquire);
  if (comm != NULL && comm == lastLive && removals == lastLiveRemovals) return 1;
  int found = 0;
  pthread_mutex_lock(&liveLock);
  for (size_t i = 0; i < nLive && !found; i++) found = live[i] == comm;
  pthread_mutex_unlock(&liveLock);
  if (found) lastLive = comm, lastLiveRemovals = removals;
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
