#include "version.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core.h"
#include "device.h"
#include "reduce.h"

/* The Makefile passes `git describe` for this one file, so a new commit rebuilds nothing else. */
#ifndef WEFT_GIT_REV
#define WEFT_GIT_REV "unknown"
#endif

const char *weftVersionGitRev(void) { return WEFT_GIT_REV; }

static char banner[512];
static pthread_once_t bannerOnce = PTHREAD_ONCE_INIT;

#ifdef WEFT_HAVE_VERBS
#define VERBS_FEATURE "verbs built"
#else
#define VERBS_FEATURE "verbs not built"
#endif
#ifdef WEFT_HAVE_UCX
#define UCX_FEATURE "UCX built"
#else
#define UCX_FEATURE "UCX not built"
#endif

/* "CUDA runtime 13.0 built, 2 GPUs", "CUDA built, no GPU: <why>" or "CUDA not built": the
 * runtime in use (a test's replacement says its own name). */
static size_t deviceFeature(char *out, size_t len) {
  const struct weftDeviceOps *ops = weftDeviceRuntime();
  if (ops == NULL) return (size_t)snprintf(out, len, "CUDA not built");
  const char *name = strcmp(ops->name, "cuda") == 0 ? "CUDA" : ops->name;
  char why[256] = "";
  int n = ops->count(why, sizeof why);
  if (n == 0) return (size_t)snprintf(out, len, "%s built, %s", name, why);
  return (size_t)snprintf(out, len, "%s runtime %d.%d built, %d GPU%s", name, ops->version / 1000,
                          ops->version % 1000 / 10, n, n == 1 ? "" : "s");
}

/* Features as they are added to the build: each one says whether this build has it. */
static void bannerMake(void) {
  size_t o = (size_t)snprintf(banner, sizeof banner, "weft %s (git %s); transports",
                              WEFT_VERSION_TEXT, WEFT_GIT_REV);
  for (int t = 0; weftTransports[t] != NULL && o < sizeof banner; t++)
    o += (size_t)snprintf(banner + o, sizeof banner - o, " %s", weftTransports[t]->name);
  if (o < sizeof banner) o += (size_t)snprintf(banner + o, sizeof banner - o, "; algorithms");
  for (int a = 0; weftAlgos[a] != NULL && o < sizeof banner; a++)
    o += (size_t)snprintf(banner + o, sizeof banner - o, " %s", weftAlgos[a]->name);
  if (o < sizeof banner)
    o += (size_t)snprintf(banner + o, sizeof banner - o, "; reduction kernels %s; ", weftReduceKernelName());
  if (o < sizeof banner) o += deviceFeature(banner + o, sizeof banner - o);
  if (o < sizeof banner) snprintf(banner + o, sizeof banner - o, "; " VERBS_FEATURE "; " UCX_FEATURE);
}

const char *weftVersionBanner(void) {
  pthread_once(&bannerOnce, bannerMake);
  return banner;
}
