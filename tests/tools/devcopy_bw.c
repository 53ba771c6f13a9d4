/* build/tests/tools/devcopy_bw [BYTES] [ITERS]: the device-to-device copy bandwidth of GPU 0
 * through weft's runtime (lib/device.h's copyAsync on one stream), the reference that
 * tests/gpu/check.sh sets weft's AllReduce bus bandwidth against. Prints one line:
 * "devcopy: BYTES bytes x ITERS: GB/s" (read + write counted once, as nccl-tests' and
 * CUDA's bandwidthTest count a copy). Exit 1 with the reason where no GPU is. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "device.h"

static double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv) {
  size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)1 << 30;
  int iters = argc > 2 ? atoi(argv[2]) : 20;
  char why[256];
  if (weftDeviceCount(why, sizeof why) <= 0) {
    fprintf(stderr, "devcopy: %s\n", why);
    return 1;
  }
  const struct weftDeviceOps *ops = weftDeviceRuntime();
  void *a, *b, *stream;
  if (ops->alloc(&a, bytes) != weftSuccess || ops->alloc(&b, bytes) != weftSuccess ||
      ops->streamCreate(&stream) != weftSuccess) {
    fprintf(stderr, "devcopy: %s\n", weftGetLastError(NULL));
    return 1;
  }
  ops->copyAsync(b, a, bytes, stream); /* warm-up */
  ops->streamSync(stream);
  double t0 = nowSec();
  for (int i = 0; i < iters; i++) ops->copyAsync(i % 2 ? a : b, i % 2 ? b : a, bytes, stream);
  weftResult_t rc = ops->streamSync(stream);
  double sec = (nowSec() - t0) / iters;
  if (rc != weftSuccess) {
    fprintf(stderr, "devcopy: %s\n", weftGetLastError(NULL));
    return 1;
  }
  printf("devcopy: %zu bytes x %d: %.1f GB/s\n", bytes, iters, (double)bytes / sec / 1e9);
  ops->free(a);
  ops->free(b);
  ops->streamDestroy(stream);
  return 0;
}
