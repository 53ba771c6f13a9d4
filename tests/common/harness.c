#include "harness.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "reduce.h"

struct rankThread {
  pthread_t tid;
  weftUniqueId id;
  int rank, nranks;
  rankBody body;
  void *arg;
  long failures;
};

static void *rankMain(void *p) {
  struct rankThread *t = p;
  weftComm_t comm = NULL;
  weftResult_t rc = weftCommInitRank(&comm, t->nranks, t->id, t->rank);
  if (rc != weftSuccess) {
    fprintf(stderr, "rank %d: init failed: %s: %s\n", t->rank, weftGetErrorString(rc),
            weftGetLastError(NULL));
    t->failures = 1;
    return NULL;
  }
  t->failures = t->body(comm, t->rank, t->nranks, t->arg);
  rc = weftCommDestroy(comm);
  if (rc != weftSuccess) t->failures++;
  return NULL;
}

/* Ranks first..first+threads-1 as threads of this process. */
static long runThreads(weftUniqueId id, int first, int threads, int nranks, rankBody body, void *arg) {
  struct rankThread *t = calloc((size_t)threads, sizeof *t);
  for (int i = 0; i < threads; i++) {
    t[i] = (struct rankThread){.id = id, .rank = first + i, .nranks = nranks, .body = body, .arg = arg};
    pthread_create(&t[i].tid, NULL, rankMain, &t[i]);
  }
  long failures = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(t[i].tid, NULL);
    failures += t[i].failures;
  }
  free(t);
  return failures;
}

static long waitChildren(pid_t *pids, int procs, int timeoutSec) {
  long failures = 0;
  time_t end = time(NULL) + timeoutSec;
  int left = procs;
  while (left > 0) {
    int status;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid == 0) {
      if (time(NULL) > end) {
        for (int i = 0; i < procs; i++) if (pids[i] > 0) kill(pids[i], SIGKILL);
        while (wait(NULL) > 0) {}
        fprintf(stderr, "runRanks: timed out after %d s\n", timeoutSec);
        return -1;
      }
      usleep(2000);
      continue;
    }
    if (pid < 0) break;
    for (int i = 0; i < procs; i++) if (pids[i] == pid) pids[i] = -1;
    left--;
    if (!WIFEXITED(status)) {
      fprintf(stderr, "runRanks: a rank process died (signal %d)\n", WTERMSIG(status));
      failures = -1;
    } else if (failures >= 0) {
      failures += WEXITSTATUS(status);
    }
  }
  return failures;
}

/* Reads the unique id the parent writes after forking (see forkRanks): 0, or -1 at EOF. */
static int readId(int fd, weftUniqueId *id) {
  size_t done = 0;
  while (done < sizeof *id) {
    ssize_t n = read(fd, (char *)id + done, sizeof *id - done);
    if (n <= 0) return -1;
    done += (size_t)n;
  }
  return 0;
}

static long forkRanks(int procs, int threads, int procsPerHost, rankBody body, void *arg,
                      int timeoutSec) {
  weftUniqueId id;
  int nranks = procs * threads;
  if (procs == 1 && procsPerHost == 0) {
    if (weftGetUniqueId(&id) != weftSuccess) return -1;
    return runThreads(id, 0, threads, nranks, body, arg);
  }
  /* Every rank process is forked before weftGetUniqueId starts the root thread, and gets the id
   * through a pipe: a child forked while that thread holds a lock (malloc's under ASan, whose
   * allocator is not fork-safe) would inherit the lock held and hang. */
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t *pids = calloc((size_t)procs, sizeof *pids);
  fflush(NULL);
  for (int p = 0; p < procs; p++) {
    pids[p] = fork();
    noteChild(pids[p]);
    if (pids[p] == 0) {
      close(fds[1]);
      if (readId(fds[0], &id) != 0) _exit(100);
      close(fds[0]);
      if (procsPerHost > 0) {
        char host[64];
        snprintf(host, sizeof host, "weft-test-host-%d", p / procsPerHost);
        setenv("WEFT_HOSTID", host, 1);
      }
      long f = runThreads(id, p * threads, threads, nranks, body, arg);
      _exit(f > 100 ? 100 : (int)f);
    }
  }
  close(fds[0]);
  int ok = weftGetUniqueId(&id) == weftSuccess;
  for (int p = 0; ok && p < procs; p++) /* 128 bytes: each write is atomic */
    ok = write(fds[1], &id, sizeof id) == (ssize_t)sizeof id;
  close(fds[1]); /* children still waiting see EOF and exit */
  long failures = waitChildren(pids, procs, timeoutSec);
  free(pids);
  return ok ? failures : -1;
}

long runRanks(int procs, int threads, rankBody body, void *arg, int timeoutSec) {
  return forkRanks(procs, threads, 0, body, arg, timeoutSec);
}

long runRanksOnHosts(int hosts, int procsPerHost, rankBody body, void *arg, int timeoutSec) {
  return forkRanks(hosts * procsPerHost, 1, procsPerHost, body, arg, timeoutSec);
}

/* ---- data pattern ---- */

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

static uint64_t rawValue(size_t i, int rank) { return mix(((uint64_t)i << 8) ^ (uint64_t)rank ^ 0x9e37); }

/* Float inputs: multiples of 1/64 in [-8, 8) (exact in every float type), near 1 for prod. */
static double floatValue(size_t i, int rank, weftRedOp_t op) {
  uint64_t r = rawValue(i, rank);
  if (op == weftProd) return 1.0 + (double)((int)(r % 33) - 16) / 64.0;
  return (double)((int)(r % 1024) - 512) / 64.0;
}

static void storeFloat(void *buf, size_t i, weftDataType_t type, double v) {
  switch (type) {
    case weftFloat16: ((uint16_t *)buf)[i] = weftFloatToHalf((float)v); break;
    case weftBfloat16: ((uint16_t *)buf)[i] = weftFloatToBf16((float)v); break;
    case weftFloat32: ((float *)buf)[i] = (float)v; break;
    default: ((double *)buf)[i] = v; break;
  }
}

static double loadFloat(const void *buf, size_t i, weftDataType_t type) {
  switch (type) {
    case weftFloat16: return weftHalfToFloat(((const uint16_t *)buf)[i]);
    case weftBfloat16: return weftBf16ToFloat(((const uint16_t *)buf)[i]);
    case weftFloat32: return ((const float *)buf)[i];
    default: return ((const double *)buf)[i];
  }
}

static void storeInt(void *buf, size_t i, weftDataType_t type, uint64_t v) {
  switch (weftTypeSize(type)) {
    case 1: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case 4: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    default: ((uint64_t *)buf)[i] = v; break;
  }
}

static uint64_t loadInt(const void *buf, size_t i, weftDataType_t type) {
  switch (weftTypeSize(type)) {
    case 1: return ((const uint8_t *)buf)[i];
    case 4: return ((const uint32_t *)buf)[i];
    default: return ((const uint64_t *)buf)[i];
  }
}

void fillInput(void *buf, size_t count, weftDataType_t type, weftRedOp_t op, int rank) {
  for (size_t i = 0; i < count; i++) {
    if (weftTypeIsFloat(type)) storeFloat(buf, i, type, floatValue(i, rank, op));
    else storeInt(buf, i, type, rawValue(i, rank));
  }
}

static int isSigned(weftDataType_t t) { return t == weftInt8 || t == weftInt32 || t == weftInt64; }

/* Sign-extends (or zero-extends) a value of the type's width for ordering. */
static int64_t asSigned(uint64_t v, weftDataType_t t) {
  switch (weftTypeSize(t)) {
    case 1: return (int8_t)v;
    case 4: return (int32_t)v;
    default: return (int64_t)v;
  }
}

static uint64_t widthMask(weftDataType_t t) {
  size_t s = weftTypeSize(t);
  return s == 8 ? ~0ULL : (1ULL << (8 * s)) - 1;
}

static uint64_t intExpected(size_t i, weftDataType_t t, weftRedOp_t op, int nranks) {
  uint64_t acc = rawValue(i, 0) & widthMask(t);
  for (int r = 1; r < nranks; r++) {
    uint64_t v = rawValue(i, r) & widthMask(t);
    switch (op) {
      case weftProd: acc *= v; break;
      case weftMax:
        if (isSigned(t) ? asSigned(v, t) > asSigned(acc, t) : v > acc) acc = v;
        break;
      case weftMin:
        if (isSigned(t) ? asSigned(v, t) < asSigned(acc, t) : v < acc) acc = v;
        break;
      default: acc += v; break;
    }
    acc &= widthMask(t);
  }
  return acc;
}

static double typeEps(weftDataType_t t) {
  switch (t) {
    case weftFloat16: return ldexp(1.0, -10);
    case weftBfloat16: return ldexp(1.0, -7);
    case weftFloat32: return ldexp(1.0, -23);
    default: return ldexp(1.0, -52);
  }
}

/* Tolerance: each of the n-1 reduction steps rounds once, so |error| <= n * eps * sum|x| for
 * sums (and the same relative to |result| for products); max and min are exact. */
static int floatOk(const void *buf, size_t i, weftDataType_t t, weftRedOp_t op, int nranks) {
  char scratch[8];
  double got = loadFloat(buf, i, t), ref = 0, mag = 0;
  for (int r = 0; r < nranks; r++) {
    storeFloat(scratch, 0, t, floatValue(i, r, op));
    double v = loadFloat(scratch, 0, t);
    if (r == 0) ref = v;
    else if (op == weftProd) ref *= v;
    else if (op == weftMax) ref = v > ref ? v : ref;
    else if (op == weftMin) ref = v < ref ? v : ref;
    else ref += v;
    mag += fabs(v);
  }
  if (op == weftMax || op == weftMin) return got == ref;
  if (op == weftAvg) { ref /= nranks; mag /= nranks; }
  if (op == weftProd) mag = fabs(ref);
  return fabs(got - ref) <= nranks * typeEps(t) * mag + 1e-300;
}

size_t countWrong(const void *buf, size_t count, weftDataType_t type, weftRedOp_t op, int nranks) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++) {
    if (weftTypeIsFloat(type)) wrong += !floatOk(buf, i, type, op, nranks);
    else wrong += loadInt(buf, i, type) != intExpected(i, type, op, nranks);
  }
  return wrong;
}

int countOpenFds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
  closedir(d);
  return n - 1; /* the directory stream itself */
}

int countThreads(void) {
  DIR *d = opendir("/proc/self/task");
  if (d == NULL) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL;) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

int countMappings(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (f == NULL) return -1;
  int n = 0;
  for (int c; (c = fgetc(f)) != EOF;) n += c == '\n';
  fclose(f);
  return n;
}

long residentKb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL) return -1;
  char line[256];
  long kb = -1;
  while (kb < 0 && fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "VmRSS: %ld kB", &kb) != 1) kb = -1;
  fclose(f);
  return kb;
}

long checkAllReduce(weftComm_t comm, int rank, int nranks, size_t count, weftDataType_t type,
                    weftRedOp_t op, int inPlace, void *send, void *recv) {
  fillInput(send, count, type, op, rank);
  if (!inPlace) memset(recv, 0xA5, count * weftTypeSize(type));
  void *out = inPlace ? send : recv;
  weftResult_t rc = weftAllReduce(send, out, count, type, op, comm, NULL);
  if (rc != weftSuccess) {
    fprintf(stderr, "rank %d: AllReduce %zu %s %s failed: %s\n", rank, count,
            weftTypeName(type), weftOpName(op), weftGetLastError(comm));
    return 1;
  }
  size_t wrong = countWrong(out, count, type, op, nranks);
  if (wrong)
    fprintf(stderr, "rank %d/%d WEFT_ALGO=%s: %zu of %zu wrong: %s %s %s\n", rank, nranks,
            getenv("WEFT_ALGO"), wrong, count, weftTypeName(type), weftOpName(op),
            inPlace ? "in-place" : "out-of-place");
  return wrong != 0;
}

long collMatrixBody(weftComm_t comm, int rank, int nranks, void *arg) {
  const struct collMatrix *m = arg;
  size_t maxCount = 0;
  for (int c = 0; c < m->nCounts; c++) maxCount = m->counts[c] > maxCount ? m->counts[c] : maxCount;
  char *send = malloc(maxCount * 8 + 64), *recv = malloc(maxCount * 8 + 64);
  long failures = 0;
  for (int c = 0; c < m->nCounts; c++)
    for (int t = 0; t < m->nTypes; t++)
      for (int o = 0; o < m->nOps; o++) {
        if (m->ops[o] == weftAvg && !weftTypeIsFloat(m->types[t])) continue;
        for (int inPlace = 0; inPlace < 2; inPlace++) /* odd cases start 8 bytes in: unaligned */
          failures += checkAllReduce(comm, rank, nranks, m->counts[c], m->types[t], m->ops[o],
                                     inPlace, send + 8 * (c & 1), recv);
      }
  free(send);
  free(recv);
  return failures;
}

int countWeftMappings(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (f == NULL) return -1;
  char line[512];
  int n = 0;
  while (fgets(line, sizeof line, f)) n += strstr(line, "/dev/shm/weft") != NULL;
  fclose(f);
  return n;
}

/* Whether a /dev/shm name is a weft segment of pid: "weft-" then dash-separated fields, one of
 * them (the last is random) the creator's pid (lib/shmseg.c: weft-<pid namespace>-<pid>-...). */
static int segmentOf(const char *name, pid_t pid) {
  char want[24];
  snprintf(want, sizeof want, "%d", (int)pid);
  if (strncmp(name, "weft-", 5) != 0) return 0;
  for (const char *f = name + 5, *dash; (dash = strchr(f, '-')) != NULL; f = dash + 1)
    if ((size_t)(dash - f) == strlen(want) && strncmp(f, want, strlen(want)) == 0) return 1;
  return 0;
}

/* Removes the /dev/shm entries named after these processes, listing them in names (a failed
 * check must not leave them to the rest of the suite); returns how many there were. */
int takeSegmentsOf(const pid_t *pids, int n, char *names, size_t len) {
  DIR *d = opendir("/dev/shm");
  if (d == NULL) return 0;
  int found = 0;
  size_t o = 0;
  names[0] = '\0';
  for (struct dirent *e; (e = readdir(d)) != NULL;)
    for (int i = 0; i < n; i++) {
      if (pids[i] <= 0 || !segmentOf(e->d_name, pids[i])) continue;
      found++;
      if (o < len) o += (size_t)snprintf(names + o, len - o, " %s (rank %d)", e->d_name, i);
      char path[300];
      snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
      unlink(path);
    }
  closedir(d);
  return found;
}

/* Every rank process the tests forked since the last segmentsLeft, so that a check of
 * /dev/shm looks at this test's segments only, not those of other weft jobs of the machine. */
#define MAX_NOTED_CHILDREN 4096
static pid_t notedChildren[MAX_NOTED_CHILDREN];
static int notedCount;

void noteChild(pid_t pid) {
  if (pid > 0 && notedCount < MAX_NOTED_CHILDREN) notedChildren[notedCount++] = pid;
}

int segmentsLeft(char *names, size_t len) {
  noteChild(getpid());
  int left = takeSegmentsOf(notedChildren, notedCount, names, len);
  notedCount = 0;
  return left;
}
