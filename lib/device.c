/* The accelerator runtime of this build (lib/device.h): CUDA's where the build has it
 * (devices/cuda/), none otherwise; tests may put an emulated one in its place. */
#include "device.h"

#include <stdio.h>

#ifdef WEFT_HAVE_CUDA
extern const struct weftDeviceOps weftCudaDevice;
static const struct weftDeviceOps *const builtIn = &weftCudaDevice;
#else
static const struct weftDeviceOps *const builtIn = NULL;
#endif

static const struct weftDeviceOps *replaced;

const struct weftDeviceOps *weftDeviceRuntime(void) {
  return replaced != NULL ? replaced : builtIn;
}

int weftDeviceCount(char *why, size_t len) {
  const struct weftDeviceOps *ops = weftDeviceRuntime();
  if (ops == NULL) {
    snprintf(why, len, "this build of weft has no accelerator runtime (CUDA was not found when it was built)");
    return 0;
  }
  return ops->count(why, len);
}

void weftDeviceSetRuntime(const struct weftDeviceOps *ops) { replaced = ops; }
