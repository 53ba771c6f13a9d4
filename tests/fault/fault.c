/* The fault-injection wrapper: see fault.h for what it does and how it is configured. */
#include "fault.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "transport.h"

/* The active spec. Written by faultInstall before it registers the interposer (a seq_cst
 * store the library's load pairs with), so a link's steps always see a complete spec; `kind`
 * is atomic because faultRemove disarms links that may be stepping in another thread. */
static struct faultSpec spec;
static _Atomic int kind;
static _Atomic uint64_t steps, applied;
static _Atomic int fired;

/* One wrapper table per real table: a copy with sendPost and recvDone replaced, and the real
 * table it came from, found again from the link's ops pointer. Never freed: links may point
 * at them until the process ends, and there are at most a handful. */
struct wrapped {
  struct weftTransportOps ops;
  const struct weftTransportOps *real;
};
#define MAX_WRAPPED 16
static struct wrapped tables[MAX_WRAPPED];
static int ntables;
static pthread_mutex_t tablesLock = PTHREAD_MUTEX_INITIALIZER;

static const struct weftTransportOps *realOps(const struct weftConn *c) {
  const struct wrapped *w = (const struct wrapped *)((const char *)c->ops - offsetof(struct wrapped, ops));
  return w->real;
}

static void fireOnce(void) {
  if (atomic_exchange(&fired, 1) == 0 && spec.onFire != NULL) spec.onFire(spec.arg);
}

static void sleepMicros(uint32_t us) {
  struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* Counts a step and applies the fault to it: returns 1 if the step must be swallowed. A kill
 * never returns; a delay sleeps here. */
static int faultStep(int isSend) {
  uint64_t n = atomic_fetch_add(&steps, 1) + 1;
  int k = atomic_load(&kind);
  if (k == FAULT_NONE || n <= spec.after) return 0;
  switch (k) {
    case FAULT_KILL:
      atomic_fetch_add(&applied, 1);
      fireOnce();
      kill(getpid(), SIGKILL);
      abort(); /* not reached: SIGKILL cannot be caught */
    case FAULT_DELAY:
      atomic_fetch_add(&applied, 1);
      fireOnce();
      sleepMicros(spec.us);
      return 0;
    case FAULT_DROP:
      if (!isSend) return 0;
      if (spec.count != 0 && atomic_fetch_add(&applied, 1) >= spec.count) {
        atomic_fetch_sub(&applied, 1); /* one ticket per lost send, even across threads */
        return 0;
      }
      if (spec.count == 0) atomic_fetch_add(&applied, 1);
      fireOnce();
      return 1;
    default:
      return 0;
  }
}

static weftResult_t faultSendPost(struct weftConn *c, size_t bytes) {
  if (faultStep(1)) return weftSuccess; /* as if sent: the slot is simply never published */
  return realOps(c)->sendPost(c, bytes);
}

static weftResult_t faultRecvDone(struct weftConn *c) {
  faultStep(0);
  return realOps(c)->recvDone(c);
}

/* The wrapper table for real, made at its first use. */
static const struct weftTransportOps *wrapperFor(const struct weftTransportOps *real) {
  pthread_mutex_lock(&tablesLock);
  struct wrapped *w = NULL;
  for (int i = 0; i < ntables && w == NULL; i++)
    if (tables[i].real == real) w = &tables[i];
  if (w == NULL && ntables < MAX_WRAPPED) {
    w = &tables[ntables++];
    w->real = real;
    w->ops = *real;
    w->ops.sendPost = faultSendPost;
    w->ops.recvDone = faultRecvDone;
  }
  pthread_mutex_unlock(&tablesLock);
  if (w == NULL) { /* a test that believes it injects faults must not run without them */
    fprintf(stderr, "fault: more than %d transport tables to wrap\n", MAX_WRAPPED);
    abort();
  }
  return &w->ops;
}

static const struct weftTransportOps *interpose(int rank, const struct weftConn *c,
                                                const struct weftTransportOps *chosen) {
  if (spec.rank >= 0 && rank != spec.rank) return chosen;
  if (spec.peer >= 0 && c->peer != spec.peer) return chosen;
  return wrapperFor(chosen);
}

void faultInstall(const struct faultSpec *s) {
  weftTransportInterpose(NULL);
  spec = *s;
  atomic_store(&steps, 0);
  atomic_store(&applied, 0);
  atomic_store(&fired, 0);
  atomic_store(&kind, (int)s->kind);
  weftTransportInterpose(interpose);
}

void faultRemove(void) {
  weftTransportInterpose(NULL);
  atomic_store(&kind, FAULT_NONE);
}

uint64_t faultSteps(void) { return atomic_load(&steps); }
uint64_t faultApplied(void) { return atomic_load(&applied); }

/* ---- WEFT_FAULT ---- */

static int parseKind(const char *word, enum faultKind *k) {
  static const char *const names[] = {"", "kill", "drop", "delay"};
  for (int i = FAULT_KILL; i <= FAULT_DELAY; i++)
    if (strcmp(word, names[i]) == 0) {
      *k = (enum faultKind)i;
      return 0;
    }
  return -1;
}

static int parseNumber(const char *text, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  if (text[0] < '0' || text[0] > '9') return -1;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0 || *end != '\0') return -1;
  *out = v;
  return 0;
}

/* One key=value item into spec. */
static int parseItem(char *item, struct faultSpec *s) {
  char *eq = strchr(item, '=');
  if (eq == NULL) return -1;
  *eq = '\0';
  uint64_t v;
  if (parseNumber(eq + 1, &v) != 0) return -1;
  if (strcmp(item, "after") == 0) s->after = v;
  else if (strcmp(item, "count") == 0 && s->kind == FAULT_DROP) s->count = v;
  else if (strcmp(item, "us") == 0 && s->kind == FAULT_DELAY && v <= UINT32_MAX) s->us = (uint32_t)v;
  else if (strcmp(item, "rank") == 0 && v <= INT32_MAX) s->rank = (int)v;
  else if (strcmp(item, "peer") == 0 && v <= INT32_MAX) s->peer = (int)v;
  else return -1;
  return 0;
}

int faultParse(const char *text, struct faultSpec *out, char *why, size_t whyLen) {
  struct faultSpec s = {.kind = FAULT_NONE, .rank = -1, .peer = -1};
  char buf[256];
  if (strlen(text) >= sizeof buf) {
    snprintf(why, whyLen, "WEFT_FAULT is longer than %zu characters", sizeof buf - 1);
    return -1;
  }
  snprintf(buf, sizeof buf, "%s", text);
  char *save = NULL, *item = strtok_r(buf, ":", &save);
  if (item == NULL || parseKind(item, &s.kind) != 0) {
    snprintf(why, whyLen, "WEFT_FAULT=\"%s\": starts with kill, drop or delay", text);
    return -1;
  }
  while ((item = strtok_r(NULL, ":", &save)) != NULL) {
    char copy[256];
    snprintf(copy, sizeof copy, "%s", item);
    if (parseItem(item, &s) != 0) {
      snprintf(why, whyLen, "WEFT_FAULT=\"%s\": bad item \"%s\" (keys: rank, peer, after, "
               "count for drop, us for delay; values are decimal)", text, copy);
      return -1;
    }
  }
  if (s.kind == FAULT_DELAY && s.us == 0) {
    snprintf(why, whyLen, "WEFT_FAULT=\"%s\": delay needs us=<microseconds>", text);
    return -1;
  }
  *out = s;
  return 0;
}

int faultInstallFromEnv(void (*onFire)(void *arg), void *arg, char *why, size_t whyLen) {
  const char *text = getenv("WEFT_FAULT");
  if (text == NULL || *text == '\0') return 1;
  struct faultSpec s;
  if (faultParse(text, &s, why, whyLen) != 0) return -1;
  s.onFire = onFire;
  s.arg = arg;
  faultInstall(&s);
  return 0;
}
