/* The model's GPUs matched to CUDA devices by PCI bus id. hwloc names a GPU by its PCI
 * function; CUDA numbers the devices it shows (CUDA_VISIBLE_DEVICES reorders and hides them),
 * and only the bus id ties the two. The driver is loaded at run time (dlopen of libcuda.so.1,
 * the driver API's four calls declared here), so the build needs no CUDA and a host without a
 * driver falls back with one note among the model's fallbacks. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "topo.h"

/* A bus id as domain, bus, device, function, whatever the width and case of its digits
 * ("0000:17:00.0" from hwloc, "00000000:17:00.0" from NVML). 0 on success. */
static int parseBusId(const char *text, unsigned v[4]) {
  char end;
  return sscanf(text, "%x:%x:%x.%x%c", &v[0], &v[1], &v[2], &v[3], &end) == 4 ? 0 : -1;
}

static int sameBusId(const char *a, const char *b) {
  unsigned x[4], y[4];
  return parseBusId(a, x) == 0 && parseBusId(b, y) == 0 && memcmp(x, y, sizeof x) == 0;
}

int weftTopoMatchGpus(struct weftTopoHost *host, const char (*busIds)[WEFT_TOPO_BUSID_BYTES], int n) {
  int matched = 0;
  char unknown[160] = "";
  size_t o = 0;
  for (int d = 0; d < host->ndevs; d++) host->devs[d].cudaDev = -1;
  for (int i = 0; i < n; i++) {
    int found = 0;
    for (int d = 0; d < host->ndevs && !found; d++) {
      struct weftTopoDev *dev = &host->devs[d];
      if (dev->kind != WEFT_TOPO_GPU || dev->cudaDev >= 0 || !sameBusId(dev->busId, busIds[i])) continue;
      dev->cudaDev = i;
      found = 1;
    }
    matched += found;
    if (!found && o < sizeof unknown)
      o += (size_t)snprintf(unknown + o, sizeof unknown - o, "%s%d (%s)", o ? ", " : "", i, busIds[i]);
  }
  if (o > 0) {
    char what[256];
    snprintf(what, sizeof what, "CUDA devices not among the model's GPUs: %s (no locality for them)", unknown);
    weftTopoNoteMissing(host, what);
  }
  return matched;
}

/* The driver API's calls (cuda.h's prototypes, CUresult and CUdevice as int). */
typedef int (*cuInitFn)(unsigned flags);
typedef int (*cuDeviceGetCountFn)(int *count);
typedef int (*cuDeviceGetFn)(int *device, int ordinal);
typedef int (*cuDeviceGetPCIBusIdFn)(char *busId, int len, int device);

/* The driver stays loaded once cuInit succeeded: unloading an initialised driver is not
 * something it supports, and the process is one that uses CUDA. */
int weftTopoCudaBusIds(char (*busIds)[WEFT_TOPO_BUSID_BYTES], int max, char *why, size_t len) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    const char *err = dlerror();
    snprintf(why, len, "no CUDA driver (%s)", err != NULL ? err : "libcuda.so.1 not found");
    return -1;
  }
  cuInitFn init = (cuInitFn)dlsym(lib, "cuInit");
  cuDeviceGetCountFn getCount = (cuDeviceGetCountFn)dlsym(lib, "cuDeviceGetCount");
  cuDeviceGetFn get = (cuDeviceGetFn)dlsym(lib, "cuDeviceGet");
  cuDeviceGetPCIBusIdFn getBusId = (cuDeviceGetPCIBusIdFn)dlsym(lib, "cuDeviceGetPCIBusId");
  int rc, count = 0;
  if (init == NULL || getCount == NULL || get == NULL || getBusId == NULL) {
    snprintf(why, len, "libcuda.so.1 lacks the driver API's cuInit, cuDeviceGetCount, cuDeviceGet or cuDeviceGetPCIBusId");
    dlclose(lib);
    return -1;
  }
  if ((rc = init(0)) != 0 || (rc = getCount(&count)) != 0) {
    snprintf(why, len, "the CUDA driver failed to start (CUresult %d)", rc);
    dlclose(lib);
    return -1;
  }
  int n = 0;
  for (int i = 0; i < count && n < max; i++) {
    int dev;
    if ((rc = get(&dev, i)) != 0 || (rc = getBusId(busIds[n], WEFT_TOPO_BUSID_BYTES, dev)) != 0) {
      snprintf(why, len, "CUDA device %d: no PCI bus id (CUresult %d)", i, rc);
      return -1;
    }
    busIds[n++][WEFT_TOPO_BUSID_BYTES - 1] = '\0';
  }
  return n;
}

void weftTopoHostMatchCuda(struct weftTopoHost *host, weftTopoCudaListFn list) {
  if (host->ngpus == 0) return; /* nothing to match: the driver is not even loaded */
  char busIds[WEFT_TOPO_MAX_DEVS][WEFT_TOPO_BUSID_BYTES];
  char why[256] = "";
  int n = list(busIds, WEFT_TOPO_MAX_DEVS, why, sizeof why);
  if (n < 0) {
    char what[320];
    snprintf(what, sizeof what, "GPUs not matched to CUDA devices: %s", why);
    weftTopoNoteMissing(host, what);
    return;
  }
  weftTopoMatchGpus(host, (const char (*)[WEFT_TOPO_BUSID_BYTES])busIds, n);
}
