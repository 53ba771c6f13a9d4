#include "errors.h"

#include <stdio.h>

#include "api.h"
#include "core.h"
#include "log.h"

weftResult_t weftAbortedError(const struct weftComm *comm) {
  return weftSetError(weftRemoteError, "rank %d: communicator aborted (weftCommAbort)", comm->rank);
}

/* Copies this thread's last error to the communicator, where weftGetLastError(comm) finds it. */
weftResult_t weftReportTo(struct weftComm *comm, weftResult_t rc) {
  if (rc != weftSuccess && comm != NULL && weftCommIsLive(comm))
    snprintf(comm->lastError, sizeof comm->lastError, "%s", weftThreadLastError());
  return rc;
}

WEFT_PUBLIC const char *weftGetErrorString(weftResult_t result) {
  switch (result) {
    case weftSuccess: return "no error";
    case weftUnhandledCudaError: return "unhandled cuda error";
    case weftSystemError: return "unhandled system error (run with WEFT_DEBUG=INFO for details)";
    case weftInternalError: return "internal error - please report this issue to the weft developers";
    case weftInvalidArgument: return "invalid argument (run with WEFT_DEBUG=WARN for details)";
    case weftInvalidUsage: return "invalid usage (run with WEFT_DEBUG=WARN for details)";
    case weftRemoteError: return "remote process exited or there was a network error";
    case weftInProgress: return "operation in progress";
    case weftTimeout: return "operation timed out (see WEFT_TIMEOUT_MS)";
    default: return "unknown result code";
  }
}
WEFT_PROFILING_ALIAS(weftGetErrorString);

WEFT_PUBLIC const char *weftGetLastError(weftComm_t comm) {
  if (comm != NULL && weftCommIsLive(comm)) return comm->lastError;
  return weftThreadLastError();
}
WEFT_PROFILING_ALIAS(weftGetLastError);
