/* Many communicators: a loop of TCP communicators must not pile up sockets in TIME_WAIT (each
 * holds a local port for 60 s; ~28k ports run out after ~1,000 cycles at 28 per cycle), and
 * init must not wait for the TCP progress thread's idle poll (100 ms).
 * Each case runs in a child in a network namespace of its own (root only; skipped with the
 * reason otherwise), where /proc/net/tcp shows this test's sockets and nobody else's. The
 * measured figures are printed; docs/performance.md has the benchmark (bench/init_perf). */
#include <criterion/criterion.h>
#include <errno.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "caps.h"
#include "harness.h"
#include "netns.h"

enum { CYCLES = 10 };

struct result {
  int ok;
  char why[256];
  int timeWait;
  double initMs[CYCLES];
};

static double nowMs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static long oneAllReduce(weftComm_t comm, int rank, int nranks, void *arg) {
  (void)rank, (void)nranks, (void)arg;
  float x[1024] = {1};
  return weftAllReduce(x, x, 1024, weftFloat32, weftSum, comm, NULL) != weftSuccess;
}

/* In a new network namespace: CYCLES init / AllReduce / destroy of nranks thread ranks. */
static void cyclesInNamespace(struct result *res, int nranks) {
  if (unshare(CLONE_NEWNET) != 0) {
    snprintf(res->why, sizeof res->why, "unshare(CLONE_NEWNET): %s", strerror(errno));
    return;
  }
  if (netnsLoopbackUp(res->why, sizeof res->why) != 0) return;
  res->ok = 1;
  for (int c = 0; c < CYCLES && res->ok; c++) {
    double t0 = nowMs();
    long failures = runRanks(1, nranks, oneAllReduce, NULL, 60);
    res->initMs[c] = nowMs() - t0;
    if (failures != 0) {
      snprintf(res->why, sizeof res->why, "cycle %d: %ld failures", c, failures);
      res->ok = 0;
    }
  }
  res->timeWait = netnsCountTimeWait();
}

static struct result *runCycles(int nranks) {
  struct result *res = mmap(NULL, sizeof *res, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert(res != MAP_FAILED);
  memset(res, 0, sizeof *res);
  SKIP_UNLESS("netns"); /* a network namespace of its own */
  setenv("WEFT_TRANSPORTS", "tcp", 1);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    cyclesInNamespace(res, nranks);
    _exit(0);
  }
  int status;
  waitpid(pid, &status, 0);
  cr_assert(WIFEXITED(status), "the child died (status 0x%x)", status);
  cr_assert(res->ok, "%s", res->why);
  return res;
}

static int cmpDouble(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

Test(tcp_teardown, no_time_wait_after_init_destroy_cycles, .timeout = 120) {
  for (int nranks = 2; nranks <= 4; nranks += 2) {
    struct result *res = runCycles(nranks);
    fprintf(stderr, "tcp_teardown: %d ranks, %d cycles: %d sockets in TIME_WAIT\n", nranks, CYCLES,
            res->timeWait);
    cr_expect_eq(res->timeWait, 0, "%d ranks: %d sockets in TIME_WAIT after %d cycles", nranks,
                 res->timeWait, CYCLES);
  }
}

/* A bound a hang or the 100 ms idle poll trips, ten times what init takes here (~5 ms). */
Test(tcp_teardown, init_does_not_wait_for_the_idle_poll, .timeout = 120) {
  struct result *res = runCycles(2);
  double sorted[CYCLES];
  memcpy(sorted, res->initMs, sizeof sorted);
  qsort(sorted, CYCLES, sizeof sorted[0], cmpDouble);
  double median = sorted[CYCLES / 2];
  fprintf(stderr, "tcp_teardown: 2 ranks over tcp: init + AllReduce + destroy median %.1f ms\n",
          median);
  cr_expect_lt(median, 50.0, "median cycle %.1f ms", median);
}
