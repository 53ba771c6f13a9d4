/* Ranks as threads of this process: weftCommAbort from another thread unblocks a collective;
 * non-blocking init and collectives, and their abort; configs; 1,000 init/destroy and
 * init/abort cycles leak no descriptor, thread, segment, mapping or heap memory. Time bounds
 * catch a hang or a missed wake-up (10x what is expected on a loaded machine); the measured
 * times are in docs/performance.md (WEFT_TEST_VERBOSE=1 prints them). */
#include <criterion/criterion.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forked.h"
#include "harness.h"

#define nowMs forkedNowMs

/* An abort is seen within a poll slice (50 ms) plus teardown; 10x a loaded machine's worst
 * (docs/performance.md) still tells a wake-up from the 300 s default timeout. */
#define ABORT_BOUND_MS 5000
#define GONE_BOUND_MS 10000

static void verbose(const char *what, long long ms) {
  if (getenv("WEFT_TEST_VERBOSE")) fprintf(stderr, "abort: %s: %lld ms\n", what, ms);
}

/* A hang fails the test (tests/run-all.sh requires a timeout on every test). */
TestSuite(config, .timeout = 30);

/* ---- ranks as threads of this process ---- */

struct threadRank {
  pthread_t tid;
  weftUniqueId id;
  int rank, nranks;
  weftConfig_t config;
  weftComm_t comm;
  weftResult_t rc;
  char msg[256];
};

static void *initThread(void *p) {
  struct threadRank *t = p;
  t->rc = weftCommInitRankConfig(&t->comm, t->nranks, t->id, t->rank, &t->config);
  snprintf(t->msg, sizeof t->msg, "%s", weftGetLastError(NULL));
  return NULL;
}


/* nranks communicators of one id, initialized by as many threads (blocking or not). */
static void initThreads(struct threadRank *t, int nranks, int blocking) {
  weftUniqueId id;
  cr_assert_eq(weftGetUniqueId(&id), weftSuccess);
  for (int r = 0; r < nranks; r++) {
    weftConfig_t config = WEFT_CONFIG_INITIALIZER;
    config.blocking = blocking;
    t[r] = (struct threadRank){.id = id, .rank = r, .nranks = nranks, .config = config};
    pthread_create(&t[r].tid, NULL, initThread, &t[r]);
  }
  for (int r = 0; r < nranks; r++) pthread_join(t[r].tid, NULL);
}

struct blocked {
  weftComm_t comm;
  weftResult_t rc;
  int64_t returnedAt;
  char msg[1024];
};

static void *blockedAllReduce(void *p) {
  struct blocked *b = p;
  float x = 1, y;
  b->rc = weftAllReduce(&x, &y, 1, weftFloat32, weftSum, b->comm, NULL);
  b->returnedAt = nowMs();
  snprintf(b->msg, sizeof b->msg, "%s", weftGetLastError(NULL));
  return NULL;
}

static void abortUnblocks(const char *algo) {
  setenv("WEFT_ALGO", algo, 1);
  struct threadRank t[2];
  initThreads(t, 2, 1);
  unsetenv("WEFT_ALGO");
  cr_assert(t[0].rc == weftSuccess && t[1].rc == weftSuccess);
  /* rank 0 waits for rank 1, which does not come; abort it from here. */
  struct blocked b = {.comm = t[0].comm};
  pthread_t tid;
  pthread_create(&tid, NULL, blockedAllReduce, &b);
  usleep(200000);
  int64_t abortAt = nowMs();
  cr_assert_eq(weftCommAbort(t[0].comm), weftSuccess);
  pthread_join(tid, NULL);
  cr_expect_eq(b.rc, weftRemoteError, "%s: %d %s", algo, b.rc, b.msg);
  cr_expect(strstr(b.msg, "aborted") != NULL, "%s: %s", algo, b.msg);
  verbose(strcmp(algo, "direct") == 0 ? "blocked direct call returned" : "blocked ring call returned",
          (long long)(b.returnedAt - abortAt));
  cr_expect_lt(b.returnedAt - abortAt, ABORT_BOUND_MS, "%s: returned %lld ms after the abort", algo,
               (long long)(b.returnedAt - abortAt));
  /* rank 1 now finds its peer gone instead of waiting for the timeout (its first call may
   * still complete: rank 0 had posted its input before the abort) */
  struct blocked b1 = {.comm = t[1].comm};
  int64_t start = nowMs();
  for (int i = 0; i < 2 && b1.rc == weftSuccess; i++) blockedAllReduce(&b1);
  verbose("its peer saw it gone", (long long)(nowMs() - start));
  cr_expect(b1.rc == weftRemoteError && nowMs() - start < GONE_BOUND_MS, "%s: rank 1 got %d after %lld ms: %s",
            algo, b1.rc, (long long)(nowMs() - start), b1.msg);
  cr_expect_eq(weftCommDestroy(t[1].comm), weftSuccess);
}

Test(abort, unblocks_direct, .timeout = 30) { abortUnblocks("direct"); }
Test(abort, unblocks_ring, .timeout = 30) { abortUnblocks("ring"); }

/* Polls a non-blocking communicator until its init or collective is no longer in progress. */
static weftResult_t pollState(weftComm_t comm) {
  weftResult_t state = weftInProgress;
  for (int64_t end = nowMs() + 20000; state == weftInProgress && nowMs() < end;) {
    cr_assert_eq(weftCommGetAsyncError(comm, &state), weftSuccess);
    if (state == weftInProgress) usleep(1000);
  }
  return state;
}

/* Non-blocking init, then non-blocking collectives: each returns weftInProgress at once (rank
 * 0's cannot complete before the others call theirs), one at a time, and the result is in
 * recvbuff once weftCommGetAsyncError reports weftSuccess. */
Test(nonblocking, init_then_allreduce, .timeout = 30) {
  struct threadRank t[3];
  initThreads(t, 3, 0);
  for (int r = 0; r < 3; r++) {
    cr_assert_eq(t[r].rc, weftInProgress, "rank %d: %d", r, t[r].rc);
    cr_assert_eq(pollState(t[r].comm), weftSuccess, "rank %d: %s", r, weftGetLastError(t[r].comm));
  }
  for (int round = 0; round < 3; round++) {
    float in[3][1000], out[3][1000];
    for (int r = 0; r < 3; r++) {
      for (int i = 0; i < 1000; i++) in[r][i] = (float)(r + round * i);
      cr_assert_eq(weftAllReduce(in[r], out[r], 1000, weftFloat32, weftSum, t[r].comm, NULL),
                   weftInProgress, "round %d rank %d", round, r);
      if (r > 0) continue;
      float x = 1, y;
      cr_expect_eq(weftAllReduce(&x, &y, 1, weftFloat32, weftSum, t[0].comm, NULL), weftInvalidUsage,
                   "a second collective while one is in progress");
      cr_expect_eq(weftCommFinalize(t[0].comm), weftInProgress);
    }
    for (int r = 0; r < 3; r++) {
      cr_assert_eq(pollState(t[r].comm), weftSuccess, "rank %d: %s", r, weftGetLastError(t[r].comm));
      for (int i = 0; i < 1000; i++)
        cr_assert_eq(out[r][i], (float)(3 + 3 * round * i), "round %d rank %d [%d]", round, r, i);
    }
  }
  for (int r = 0; r < 3; r++) {
    cr_expect_eq(weftCommFinalize(t[r].comm), weftSuccess);
    float x = 1, y;
    cr_expect_eq(weftAllReduce(&x, &y, 1, weftFloat32, weftSum, t[r].comm, NULL), weftInvalidUsage);
    cr_expect_eq(weftCommDestroy(t[r].comm), weftSuccess);
  }
}

/* A non-blocking collective that cannot complete (rank 1 never calls): abort returns
 * promptly, and so does the operation's thread. */
Test(nonblocking, abort_pending_collective, .timeout = 30) {
  struct threadRank t[2];
  initThreads(t, 2, 0);
  for (int r = 0; r < 2; r++) cr_assert_eq(pollState(t[r].comm), weftSuccess);
  float x = 1, y;
  cr_assert_eq(weftAllReduce(&x, &y, 1, weftFloat32, weftSum, t[0].comm, NULL), weftInProgress);
  usleep(100000);
  weftResult_t state;
  cr_assert_eq(weftCommGetAsyncError(t[0].comm, &state), weftSuccess);
  cr_expect_eq(state, weftInProgress);
  int64_t start = nowMs();
  cr_assert_eq(weftCommAbort(t[0].comm), weftSuccess);
  verbose("pending collective", (long long)(nowMs() - start));
  cr_expect_lt(nowMs() - start, ABORT_BOUND_MS, "abort took %lld ms", (long long)(nowMs() - start));
  cr_assert_eq(weftCommAbort(t[1].comm), weftSuccess);
}

Test(nonblocking, abort_during_init, .timeout = 30) {
  int fds = countOpenFds(), threads = countThreads();
  weftUniqueId id;
  cr_assert_eq(weftGetUniqueId(&id), weftSuccess);
  weftConfig_t config = WEFT_CONFIG_INITIALIZER;
  config.blocking = 0;
  weftComm_t comm;
  cr_assert_eq(weftCommInitRankConfig(&comm, 2, id, 0, &config), weftInProgress);
  usleep(100000);
  weftResult_t state;
  cr_assert_eq(weftCommGetAsyncError(comm, &state), weftSuccess);
  cr_expect_eq(state, weftInProgress, "rank 1 never came, yet init says %d", state);
  float x = 1, y;
  cr_expect_eq(weftAllReduce(&x, &y, 1, weftFloat32, weftSum, comm, NULL), weftInvalidUsage);
  int64_t start = nowMs();
  cr_assert_eq(weftCommAbort(comm), weftSuccess);
  verbose("pending init", (long long)(nowMs() - start));
  cr_expect_lt(nowMs() - start, ABORT_BOUND_MS, "abort of a pending init took %lld ms",
               (long long)(nowMs() - start));
  /* the root listener of weftGetUniqueId gives up on its own; wait for it */
  for (int i = 0; i < 20 && (countOpenFds() != fds || countThreads() != threads); i++) usleep(10000);
  if (getenv("WEFT_TEST_VERBOSE"))
    fprintf(stderr, "fds %d -> %d, threads %d -> %d\n", fds, countOpenFds(), threads, countThreads());
  /* + 1: the root listener of weftGetUniqueId waits for rank 1 until its own deadline */
  cr_expect_leq(countOpenFds(), fds + 1, "fds: %d before, %d after", fds, countOpenFds());
  cr_expect_leq(countThreads(), threads + 1, "threads: %d before, %d after", threads, countThreads());
}

Test(config, bad_config) {
  weftUniqueId id;
  cr_assert_eq(weftGetUniqueId(&id), weftSuccess);
  weftConfig_t config = WEFT_CONFIG_INITIALIZER;
  config.magic = 0;
  weftComm_t comm;
  cr_expect_eq(weftCommInitRankConfig(&comm, 1, id, 0, &config), weftInvalidArgument);
  config = (weftConfig_t)WEFT_CONFIG_INITIALIZER;
  config.blocking = 7;
  cr_expect_eq(weftCommInitRankConfig(&comm, 1, id, 0, &config), weftInvalidArgument);
  config = (weftConfig_t)WEFT_CONFIG_INITIALIZER;
  config.timeoutMs = 1000;
  cr_assert_eq(weftCommInitRankConfig(&comm, 1, id, 0, &config), weftSuccess);
  weftResult_t state;
  cr_expect_eq(weftCommGetAsyncError(comm, &state), weftSuccess);
  cr_expect_eq(state, weftSuccess);
  cr_expect_eq(weftCommAbort(NULL), weftSuccess);
  cr_expect_eq(weftCommDestroy(comm), weftSuccess);
}

/* ---- no growth over many cycles ---- */

static void *allReduceThread(void *p) {
  struct threadRank *t = p;
  float x = (float)t->rank, y = 0;
  t->rc = weftAllReduce(&x, &y, 1, weftFloat32, weftSum, t->comm, NULL);
  if (t->rc == weftSuccess && y != 1.0f) t->rc = weftInternalError;
  return NULL;
}

/* What a cycle must not grow. heapBytes counts allocated bytes in every malloc arena, so a
 * leak of a few bytes per cycle shows after 1,000 cycles where the resident set (pages, reused
 * by later allocations, and touched by the allocator's caches) would hide it. */
struct footprint {
  int fds, threads, mappings;
  long rssKb;
  size_t heapBytes;
};

static struct footprint footprintNow(void) {
  struct mallinfo2 mi = mallinfo2();
  return (struct footprint){countOpenFds(), countThreads(), countMappings(), residentKb(), mi.uordblks};
}

/* 1,000 cycles: ~8 ms each for init/AllReduce/destroy and ~13 ms for init/abort on a 2-CPU
 * VM (measured with WEFT_TEST_VERBOSE=1, which prints the numbers). Most of a cycle is the
 * kernel: posix_fallocate of ~10 MiB of shared memory (FIFOs, direct segment) and bind() of
 * the listeners; abort adds its 1 ms grace per communicator. */
#define CYCLES 1000
#define WARMUP_CYCLES 10
/* Allowed growth from the end of warm-up to the last cycle (measured: none at all): 16 KiB of
 * heap is 16 bytes a cycle; mappings and RSS get slack for page-granular trimming. */
#define HEAP_SLACK (16 * 1024)
#define MAPPING_SLACK 8
#define RSS_SLACK_KB (8 * 1024)
/* Under AddressSanitizer, LeakSanitizer checks the heap exactly, while its quarantine and
 * shadow memory grow RSS and mappings by design: only descriptors, threads and segments are
 * checked there. */
#if defined(__SANITIZE_ADDRESS__)
#define MEMORY_CHECKS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MEMORY_CHECKS 0
#endif
#endif
#ifndef MEMORY_CHECKS
#define MEMORY_CHECKS 1
#endif

static void oneCycle(int c, int doAbort) {
  struct threadRank t[2];
  initThreads(t, 2, 1);
  cr_assert(t[0].rc == weftSuccess && t[1].rc == weftSuccess, "cycle %d: init: %d %s / %d %s", c,
            t[0].rc, t[0].msg, t[1].rc, t[1].msg);
  if (!doAbort) {
    for (int r = 0; r < 2; r++) pthread_create(&t[r].tid, NULL, allReduceThread, &t[r]);
    for (int r = 0; r < 2; r++) pthread_join(t[r].tid, NULL);
    cr_assert(t[0].rc == weftSuccess && t[1].rc == weftSuccess, "cycle %d: allreduce", c);
  }
  for (int r = 0; r < 2; r++)
    cr_assert_eq(doAbort ? weftCommAbort(t[r].comm) : weftCommDestroy(t[r].comm), weftSuccess);
}

/* Descriptors and threads of the bootstrap root (weftGetUniqueId) end a moment after the
 * last rank registered: wait (up to 3 s) until nothing exceeds the baseline. */
static void settle(const struct footprint *base) {
  for (int i = 0; i < 300; i++) {
    struct footprint f = footprintNow();
    if (f.fds <= base->fds && f.threads <= base->threads) return;
    usleep(10000);
  }
}

static void cycles(int doAbort) {
  struct footprint base = {0};
  int64_t start = nowMs(), warm = 0;
  for (int c = 0; c < CYCLES; c++) {
    oneCycle(c, doAbort);
    if (c == WARMUP_CYCLES - 1) { /* after warm-up (log, hwloc, malloc arenas, ...) */
      usleep(50000);
      base = footprintNow();
      warm = nowMs();
    }
  }
  int64_t end = nowMs();
  settle(&base);
  struct footprint f = footprintNow();
  if (getenv("WEFT_TEST_VERBOSE"))
    fprintf(stderr, "%s: %d cycles in %lld ms (%.2f ms each after warm-up); fds %d -> %d, threads "
            "%d -> %d, mappings %d -> %d, rss %ld -> %ld KiB, heap %zu -> %zu bytes\n",
            doAbort ? "init/abort" : "init/allreduce/destroy", CYCLES, (long long)(end - start),
            (double)(end - warm) / (CYCLES - WARMUP_CYCLES), base.fds, f.fds, base.threads,
            f.threads, base.mappings, f.mappings, base.rssKb, f.rssKb, base.heapBytes, f.heapBytes);
  cr_expect_eq(countWeftMappings(), 0, "weft segments still mapped");
  cr_expect_leq(f.fds, base.fds, "descriptors: %d after %d cycles, %d after %d", base.fds,
                WARMUP_CYCLES, f.fds, CYCLES);
  cr_expect_leq(f.threads, base.threads, "threads: %d after %d cycles, %d after %d", base.threads,
                WARMUP_CYCLES, f.threads, CYCLES);
  if (MEMORY_CHECKS) {
    cr_expect_leq(f.mappings, base.mappings + MAPPING_SLACK, "mappings: %d after %d cycles, %d after %d",
                  base.mappings, WARMUP_CYCLES, f.mappings, CYCLES);
    cr_expect_leq(f.heapBytes, base.heapBytes + HEAP_SLACK, "heap: %zu bytes after %d cycles, %zu after %d",
                  base.heapBytes, WARMUP_CYCLES, f.heapBytes, CYCLES);
    cr_expect_leq(f.rssKb, base.rssKb + RSS_SLACK_KB, "resident: %ld KiB after %d cycles, %ld after %d",
                  base.rssKb, WARMUP_CYCLES, f.rssKb, CYCLES);
  }
  char names[512];
  int left = segmentsLeft(names, sizeof names);
  cr_expect_eq(left, 0, "%d weft segments left in /dev/shm:%s", left, names);
}

Test(cycles, init_allreduce_destroy, .timeout = 240) { cycles(0); }
Test(cycles, init_abort, .timeout = 240) { cycles(1); }
