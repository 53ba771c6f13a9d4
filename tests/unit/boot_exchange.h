/* Helpers of the weftBootstrapExchange tests (test_boot_exchange*.c): ranks as threads (a team
 * of bootstraps), the data every message carries and its check, shuffled orders, the
 * all-to-all round both files run. Static inline, so each test file uses what it needs. */
#ifndef WEFT_TEST_BOOT_EXCHANGE_H_
#define WEFT_TEST_BOOT_EXCHANGE_H_

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "boot_internal.h"
#include "harness.h"
#include "log.h"

#define MAX_TEAM 8
#define LONG_MS 20000

/* ---- Helpers ---- */

static inline void sleepMs(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* The descriptor count once it is back to `expected` (the root thread closes its sockets
 * just after the ranks return), or what it is after waitMs. */
static inline int fdsSettled(int expected, int waitMs) {
  int n = countOpenFds();
  for (int waited = 0; n != expected && waited < waitMs; waited += 10) {
    sleepMs(10);
    n = countOpenFds();
  }
  return n;
}

/* The data of message number seq from rank `from` to rank `to` with tag. */
static inline uint8_t patternByte(int from, int to, uint32_t tag, int seq, size_t i) {
  return (uint8_t)(from * 37 + to * 101 + (int)tag * 13 + seq * 7 + (int)(i % 251) * 3 + 1);
}

static inline void fillMsg(struct weftBootMsg *m, int peer, uint32_t tag, int from, int to, int seq) {
  m->peer = peer;
  m->tag = tag;
  for (size_t i = 0; i < WEFT_BOOT_MSG_BYTES; i++) m->data[i] = patternByte(from, to, tag, seq, i);
}

/* Bytes of m that differ from message seq of in.peer to rank `to`. */
static inline int wrongBytes(const struct weftBootMsg *m, int to, int seq) {
  int wrong = 0;
  for (size_t i = 0; i < WEFT_BOOT_MSG_BYTES; i++)
    wrong += m->data[i] != patternByte(m->peer, to, m->tag, seq, i);
  return wrong;
}

static inline void shuffle(struct weftBootMsg *m, int n, unsigned *seed) {
  for (int i = n - 1; i > 0; i--) {
    int j = (int)((unsigned)rand_r(seed) % (unsigned)(i + 1));
    struct weftBootMsg t = m[i];
    m[i] = m[j];
    m[j] = t;
  }
}

/* ---- Ranks as threads: a team of bootstraps ---- */

struct team {
  weftUniqueId id;
  int n;
  struct weftBootstrap *b[MAX_TEAM];
};

struct member {
  struct team *team;
  int rank;
  void *arg;
  long (*body)(struct team *t, int rank, void *arg, char *error);
  weftResult_t initRes;
  long failures;
  char error[1024];
};

static inline void *initMain(void *arg) {
  struct member *m = arg;
  m->initRes = weftBootstrapInit(&m->team->id, m->rank, m->team->n, weftNowMs() + LONG_MS,
                                 &m->team->b[m->rank]);
  if (m->initRes != weftSuccess) snprintf(m->error, sizeof m->error, "%s", weftThreadLastError());
  return NULL;
}

static inline void *bodyMain(void *arg) {
  struct member *m = arg;
  m->error[0] = '\0';
  m->failures = m->body(m->team, m->rank, m->arg, m->error);
  return NULL;
}

static inline int runMembers(struct member *m, int n, void *(*fn)(void *)) {
  pthread_t threads[MAX_TEAM];
  int started = 0;
  while (started < n && pthread_create(&threads[started], NULL, fn, &m[started]) == 0) started++;
  for (int r = 0; r < started; r++) pthread_join(threads[r], NULL);
  return started == n ? 0 : -1;
}

/* Without Criterion (a forked child uses them too): 0, or -1 with why in error. */
static inline int teamStart(struct team *t, int n, char *error) {
  memset(t, 0, sizeof *t);
  t->n = n;
  if (weftBootstrapGetUniqueId(&t->id) != weftSuccess)
    return snprintf(error, 1024, "unique id: %s", weftThreadLastError()), -1;
  struct member m[MAX_TEAM];
  for (int r = 0; r < n; r++) m[r] = (struct member){.team = t, .rank = r};
  if (runMembers(m, n, initMain) != 0) return snprintf(error, 1024, "pthread_create"), -1;
  for (int r = 0; r < n; r++)
    if (m[r].initRes != weftSuccess) return snprintf(error, 1024, "rank %d: %s", r, m[r].error), -1;
  return 0;
}

/* Runs body on every rank at once: the total of their failures, the first one's why in error. */
static inline long teamRunQuiet(struct team *t, long (*body)(struct team *, int, void *, char *),
                         void *arg, char *error) {
  struct member m[MAX_TEAM];
  for (int r = 0; r < t->n; r++) m[r] = (struct member){.team = t, .rank = r, .body = body, .arg = arg};
  if (runMembers(m, t->n, bodyMain) != 0) return snprintf(error, 1024, "pthread_create"), 1;
  long failures = 0;
  for (int r = 0; r < t->n; r++) {
    if (m[r].failures != 0 && failures == 0) snprintf(error, 1024, "rank %d: %s", r, m[r].error);
    failures += m[r].failures;
  }
  return failures;
}

static inline void teamInit(struct team *t, int n) {
  char error[1024];
  cr_assert_eq(teamStart(t, n, error), 0, "%s", error);
}

static inline void teamRun(struct team *t, long (*body)(struct team *, int, void *, char *), void *arg) {
  char error[1024] = "";
  long failures = teamRunQuiet(t, body, arg, error);
  cr_expect_eq(failures, 0, "%ld failures; %s", failures, error);
}

/* As a communicator that worked to the end closes it (the ring without TIME_WAIT). */
static inline void closeOne(struct weftBootstrap **b) {
  if (*b == NULL) return;
  weftBootstrapCloseRingQuietly(*b);
  weftBootstrapClose(*b);
  *b = NULL;
}

static inline void teamClose(struct team *t) {
  for (int r = 0; r < t->n; r++) closeOne(&t->b[r]);
}

static inline long fail(char *error, const char *what, weftResult_t res) {
  snprintf(error, 1024, "%s: result %d: %s", what, (int)res, weftThreadLastError());
  return 1;
}

struct procReport {
  weftResult_t res;
  long failures;
  int64_t ms;
  char error[1024];
};

enum { TAGS_PER_PAIR = 2 };

/* Every rank sends TAGS_PER_PAIR messages to every rank (itself included), listing what it
 * sends and what it expects in orders of its own; rounds use different tags. */
static inline long allToAllRound(struct weftBootstrap *b, int rank, int n, int round, char *error) {
  int count = n * TAGS_PER_PAIR;
  struct weftBootMsg *out = calloc((size_t)count, sizeof *out);
  struct weftBootMsg *in = calloc((size_t)count, sizeof *in);
  for (int p = 0, k = 0; p < n; p++)
    for (int tg = 0; tg < TAGS_PER_PAIR; tg++, k++) {
      uint32_t tag = (uint32_t)(round * 16 + tg);
      fillMsg(&out[k], p, tag, rank, p, 0);
      in[k] = (struct weftBootMsg){.peer = p, .tag = tag};
    }
  unsigned seed = (unsigned)(1000 * round + 17 * rank + 5);
  shuffle(out, count, &seed);
  shuffle(in, count, &seed);
  weftResult_t res = weftBootstrapExchange(b, out, count, in, count, weftNowMs() + LONG_MS);
  long failures = 0;
  if (res != weftSuccess)
    failures = fail(error, "exchange", res);
  else
    for (int k = 0; k < count; k++) failures += wrongBytes(&in[k], rank, 0) != 0;
  if (failures > 0 && res == weftSuccess)
    snprintf(error, 1024, "round %d: %ld messages with wrong data", round, failures);
  free(out);
  free(in);
  return failures;
}

static inline long allToAllBody(struct team *t, int rank, void *arg, char *error) {
  int rounds = *(const int *)arg;
  long failures = 0;
  for (int round = 0; round < rounds && failures == 0; round++) {
    if (rank == round % t->n) sleepMs(300); /* late: the others probe it and stash its messages */
    failures += allToAllRound(t->b[rank], rank, t->n, round, error);
  }
  return failures;
}

#endif
