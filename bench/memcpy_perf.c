/* memcpy_perf: the memory limit the collectives' busbw is held against. One core copies
 * `size` bytes from one buffer to another, again and again; the median time of a copy gives
 * GB/s (1e9 bytes). busbw counts the bytes each rank must move (nccl-tests' factors), so a
 * collective at the memcpy rate moves its bytes as fast as one core can copy them.
 * With -p N, N processes (as many as the collective's ranks) each copy `size` bytes of their
 * own at once, every copy started together: the time is the batch's, from the start to the
 * last process's end, so the rate is what each of N ranks sharing this host's cores and
 * memory can move at best (with more ranks than cores, less than one core's alone).
 *
 *   memcpy_perf [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-p PROCS]   (sizes as *_perf: 8, 64K, 1M)
 *
 * Prints "#  size  time (us)  GB/s" rows, the sizes of the collectives' tables
 * (bench/compare.sh runs it beside them). Buffers are allocated once at the largest size and
 * touched first, so no page fault is timed; small sizes run from the cache, as a collective's
 * small pieces do. */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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

/* What the -p processes share: a barrier (arrivals, and the round it releases) and, per
 * timed copy, the batch's start and the latest end, in ns. */
struct batch {
  _Atomic long arrived, round;
  _Atomic long long startNs, endNs;
};

static long long nowNs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* A process that waits this long at a barrier gives up: another one died or was stopped. */
#define BARRIER_LIMIT_NS (60LL * 1000000000LL)

/* Every one of procs processes waits here until all are; yields while it waits (with more
 * processes than cores the one it waits for needs the core). */
static void barrier(struct batch *b, int procs) {
  long round = atomic_load(&b->round);
  if (atomic_fetch_add(&b->arrived, 1) == procs - 1) {
    atomic_store(&b->arrived, 0);
    atomic_fetch_add(&b->round, 1);
    return;
  }
  long long start = nowNs();
  for (unsigned i = 1; atomic_load(&b->round) == round; i++) {
    sched_yield();
    if ((i & 1023) == 0 && nowNs() - start > BARRIER_LIMIT_NS) {
      fprintf(stderr, "memcpy_perf: a process did not reach the barrier in 60 s; giving up\n");
      _exit(1);
    }
  }
}

static void raiseTo(_Atomic long long *v, long long x) {
  long long seen = atomic_load(v);
  while (x > seen && !atomic_compare_exchange_weak(v, &seen, x)) {
  }
}

/* One copy of bytes by each of procs processes at once (me: this one); the batch's time in
 * us, known to every process after the closing barrier. */
static double batchCopyUs(struct batch *b, int procs, char *dst, const char *src, size_t bytes) {
  barrier(b, procs);
  long long t0 = nowNs();
  long long zero = 0;
  atomic_compare_exchange_strong(&b->startNs, &zero, t0); /* the first to start */
  memcpy(dst, src, bytes);
  __asm__ __volatile__("" : : "r"(dst) : "memory"); /* the copy is not optimised away */
  raiseTo(&b->endNs, nowNs());
  barrier(b, procs);
  double us = (double)(atomic_load(&b->endNs) - atomic_load(&b->startNs)) / 1e3;
  barrier(b, procs); /* everyone read the times before the next copy resets them */
  return us;
}

/* The median of iters batches of bytes, after warmup untimed copies; process 0 resets the
 * batch's times between them. */
static double medianCopyUs(struct batch *b, int procs, int me, char *dst, const char *src,
                           size_t bytes, int iters, int warmup, double *times) {
  for (int i = 0; i < warmup; i++) memcpy(dst, src, bytes);
  for (int i = 0; i < iters; i++) {
    if (procs == 1) { /* alone: only the copy between the clock's two reads */
      double t0 = nowUs();
      memcpy(dst, src, bytes);
      times[i] = nowUs() - t0;
      __asm__ __volatile__("" : : "r"(dst) : "memory");
      continue;
    }
    if (me == 0) atomic_store(&b->startNs, 0), atomic_store(&b->endNs, 0);
    times[i] = batchCopyUs(b, procs, dst, src, bytes);
  }
  qsort(times, (size_t)iters, sizeof *times, byTime);
  return iters % 2 ? times[iters / 2] : (times[iters / 2 - 1] + times[iters / 2]) / 2;
}

static int usage(void) {
  fprintf(stderr, "usage: memcpy_perf [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-p PROCS]\n");
  return 2;
}

/* One process's share: its own buffers, every size in turn; process 0 prints. 0 or 1. */
static int copySizes(struct batch *b, int procs, int me, size_t minBytes, size_t maxBytes,
                     long factor, long iters, long warmup) {
  char *src = malloc(maxBytes), *dst = malloc(maxBytes);
  double *times = malloc((size_t)iters * sizeof *times);
  if (src == NULL || dst == NULL || times == NULL) {
    fprintf(stderr, "memcpy_perf: cannot allocate 2 x %zu bytes\n", maxBytes);
    return 1; /* the others then wait at the barrier until main kills them */
  }
  memset(src, 1, maxBytes);
  memset(dst, 2, maxBytes);
  for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= (size_t)factor) {
    double us = medianCopyUs(b, procs, me, dst, src, bytes, (int)iters, (int)warmup, times);
    if (me == 0) printf("   %12zu  %12.2f  %8.2f\n", bytes, us, us > 0 ? (double)bytes / us / 1e3 : 0.0);
    if (bytes > maxBytes / (size_t)factor) break;
  }
  free(src), free(dst), free(times);
  return 0;
}

int main(int argc, char **argv) {
  size_t minBytes = 8, maxBytes = 64 << 20;
  long factor = 2, iters = 20, warmup = 5, procs = 1;
  for (int i = 1; i < argc; i++) {
    if (i + 1 >= argc || argv[i][0] != '-' || argv[i][2] != '\0') return usage();
    const char *v = argv[++i];
    switch (argv[i - 1][1]) {
      case 'b': if ((minBytes = parseSize(v)) == 0) return 2; break;
      case 'e': if ((maxBytes = parseSize(v)) == 0) return 2; break;
      case 'f': factor = strtol(v, NULL, 10); break;
      case 'n': iters = strtol(v, NULL, 10); break;
      case 'w': warmup = strtol(v, NULL, 10); break;
      case 'p': procs = strtol(v, NULL, 10); break;
      default: return usage();
    }
  }
  if (factor < 2 || iters < 1 || iters > 100000 || warmup < 0 || minBytes > maxBytes ||
      procs < 1 || procs > 1024) {
    fprintf(stderr, "memcpy_perf: need -f >= 2, 1 <= -n <= 100000, -w >= 0, -b <= -e, 1 <= -p <= 1024\n");
    return 2;
  }
  struct batch *b = mmap(NULL, sizeof *b, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (b == MAP_FAILED) {
    perror("memcpy_perf: mmap");
    return 1;
  }
  if (procs == 1) printf("# memcpy_perf: one core, median of %ld copies after %ld untimed\n", iters, warmup);
  else
    printf("# memcpy_perf: %ld processes copying at once, median of %ld batches after %ld untimed "
           "copies; time from the first start to the last end\n", procs, iters, warmup);
  printf("#  %12s  %12s  %8s\n", "size", "time (us)", "GB/s");
  fflush(stdout);
  pid_t kids[1024];
  int nkids = 0, rc = 0;
  for (int me = 1; me < procs; me++) {
    pid_t pid = fork();
    if (pid == 0) _exit(copySizes(b, (int)procs, me, minBytes, maxBytes, factor, iters, warmup));
    if (pid < 0) {
      perror("memcpy_perf: fork");
      rc = 1;
      break;
    }
    kids[nkids++] = pid;
  }
  if (rc == 0) rc = copySizes(b, (int)procs, 0, minBytes, maxBytes, factor, iters, warmup);
  for (int k = 0; k < nkids; k++) {
    int status = 0;
    if (rc != 0) kill(kids[k], SIGKILL); /* stuck at a barrier without this process */
    if (waitpid(kids[k], &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  return rc;
}
