/* weftMemAlloc and weftMemFree (include/weft.h; NCCL's ncclMemAlloc and ncclMemFree) over the
 * build's accelerator runtime (lib/device.h). */
#include <stdio.h>

#include "api.h"
#include "device.h"
#include "log.h"

/* The runtime, when a device can be used; else the error that says why. */
static weftResult_t usableRuntime(const char *api, const struct weftDeviceOps **ops) {
  char why[256] = "";
  if (weftDeviceCount(why, sizeof why) == 0)
    return weftSetError(weftUnhandledCudaError, "%s: %s", api, why);
  *ops = weftDeviceRuntime();
  return weftSuccess;
}

WEFT_PUBLIC weftResult_t weftMemAlloc(void **ptr, size_t size) {
  if (ptr == NULL) return weftSetError(weftInvalidArgument, "weftMemAlloc: ptr is NULL");
  const struct weftDeviceOps *ops;
  weftResult_t rc = usableRuntime("weftMemAlloc", &ops);
  if (rc != weftSuccess) return rc;
  if (size == 0) { /* what cudaMalloc, and so ncclMemAlloc, answers */
    *ptr = NULL;
    return weftSuccess;
  }
  void *p;
  if ((rc = ops->alloc(&p, size)) != weftSuccess) return rc;
  *ptr = p;
  return weftSuccess;
}
WEFT_PROFILING_ALIAS(weftMemAlloc);

WEFT_PUBLIC weftResult_t weftMemFree(void *ptr) {
  const struct weftDeviceOps *ops;
  weftResult_t rc = usableRuntime("weftMemFree", &ops);
  if (rc != weftSuccess || ptr == NULL) return rc;
  return ops->free(ptr);
}
WEFT_PROFILING_ALIAS(weftMemFree);
