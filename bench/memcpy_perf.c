/* memcpy_perf: the memory limit the collectives' busbw is held against. One core copies
 * `size` bytes from one buffer to another, again and again; the median time of a copy gives
 * GB/s (1e9 bytes). busbw counts the bytes each rank must move (nccl-tests' factors), so a
 * collective at the memcpy rate moves its bytes as fast as one core can copy them.
 *
 *   memcpy_perf [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]   (sizes as *_perf: 8, 64K, 1M)
 *
 * Prints "#  size  time (us)  GB/s" rows, the sizes of the collectives' tables
 * (bench/compare.sh runs it beside them). Buffers are allocated once at the largest size and
 * touched first, so no page fault is timed; small sizes run from the cache, as a collective's
 * small pieces do. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double nowUs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

/* "64K", "1M", "2G", "100": bytes, or 0 (and a message) when it is not one. */
static size_t parseSize(const char *text) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(text, &end, 10);
  size_t unit = 1;
  if (*end == 'K' || *end == 'k') unit = 1 << 10, end++;
  else if (*end == 'M' || *end == 'm') unit = 1 << 20, end++;
  else if (*end == 'G' || *end == 'g') unit = 1 << 30, end++;
  if (errno != 0 || end == text || *end != '\0' || v == 0 || v > SIZE_MAX / unit) {
    fprintf(stderr, "memcpy_perf: '%s' is not a size (N, NK, NM or NG, N > 0)\n", text);
    return 0;
  }
  return (size_t)v * unit;
}

static int byTime(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of iters copies of bytes, after warmup untimed ones. */
static double medianCopyUs(char *dst, const char *src, size_t bytes, int iters, int warmup,
                           double *times) {
  for (int i = 0; i < warmup; i++) memcpy(dst, src, bytes);
  for (int i = 0; i < iters; i++) {
    double t0 = nowUs();
    memcpy(dst, src, bytes);
    times[i] = nowUs() - t0;
    __asm__ __volatile__("" : : "r"(dst) : "memory"); /* the copy is not optimised away */
  }
  qsort(times, (size_t)iters, sizeof *times, byTime);
  return iters % 2 ? times[iters / 2] : (times[iters / 2 - 1] + times[iters / 2]) / 2;
}

static int usage(void) {
  fprintf(stderr, "usage: memcpy_perf [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]\n");
  return 2;
}

int main(int argc, char **argv) {
  size_t minBytes = 8, maxBytes = 64 << 20;
  long factor = 2, iters = 20, warmup = 5;
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc || argv[i][0] != '-' || argv[i][2] != '\0') return usage();
    const char *v = argv[++i];
    switch (argv[i - 1][1]) {
      case 'b': if ((minBytes = parseSize(v)) == 0) return 2; break;
      case 'e': if ((maxBytes = parseSize(v)) == 0) return 2; break;
      case 'f': factor = strtol(v, NULL, 10); break;
      case 'n': iters = strtol(v, NULL, 10); break;
      case 'w': warmup = strtol(v, NULL, 10); break;
      default: return usage();
    }
  }
  if (factor < 2 || iters < 1 || iters > 100000 || warmup < 0 || minBytes > maxBytes) {
    fprintf(stderr, "memcpy_perf: need -f >= 2, 1 <= -n <= 100000, -w >= 0, -b <= -e\n");
    return 2;
  }
  char *src = malloc(maxBytes), *dst = malloc(maxBytes);
  double *times = malloc((size_t)iters * sizeof *times);
  if (src == NULL || dst == NULL || times == NULL) {
    fprintf(stderr, "memcpy_perf: cannot allocate 2 x %zu bytes\n", maxBytes);
    return 1;
  }
  memset(src, 1, maxBytes);
  memset(dst, 2, maxBytes);
  printf("# memcpy_perf: one core, median of %ld copies after %ld untimed\n", iters, warmup);
  printf("#  %12s  %12s  %8s\n", "size", "time (us)", "GB/s");
  for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= (size_t)factor) {
    double us = medianCopyUs(dst, src, bytes, (int)iters, (int)warmup, times);
    printf("   %12zu  %12.2f  %8.2f\n", bytes, us, us > 0 ? (double)bytes / us / 1e3 : 0.0);
    if (bytes > maxBytes / (size_t)factor) break;
  }
  free(src), free(dst), free(times);
  return 0;
}
