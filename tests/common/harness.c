/* Launching ranks: threads of this process, forked processes, both, and emulated hosts. */
#include "harness.h"

#include <errno.h>
#include <sched.h>
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

/* Set by expectRefusal; forked ranks inherit it. */
static int refusalExpected;

void expectRefusal(int on) { refusalExpected = on; }

/* An init that had to be refused: 0 if it was, for the reason expected; else 1. */
static long checkRefused(weftComm_t comm, weftResult_t rc, int rank) {
  if (rc == weftSuccess) {
    fprintf(stderr, "rank %d: init succeeded although WEFT_ALGO=%s cannot run here\n", rank,
            getenv("WEFT_ALGO"));
    weftCommDestroy(comm);
    return 1;
  }
  const char *msg = weftGetLastError(NULL);
  if (rc == weftInvalidArgument && strstr(msg, "cannot run on this communicator") != NULL) return 0;
  fprintf(stderr, "rank %d: init failed, but not with the refusal expected: %s: %s\n", rank,
          weftGetErrorString(rc), msg);
  return 1;
}

static void *rankMain(void *p) {
  struct rankThread *t = p;
  weftComm_t comm = NULL;
  weftResult_t rc = weftCommInitRank(&comm, t->nranks, t->id, t->rank);
  if (refusalExpected) {
    t->failures = checkRefused(comm, rc, t->rank);
    return NULL;
  }
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

/* Ranks first..first+threads-1 as threads of this process; -1 if they are not all done within
 * timeoutSec (0: no limit, in a forked rank process, which the parent times). Threads that do
 * not finish are left running, and their state allocated: the caller fails the test, whose
 * process ends them. */
static long runThreads(weftUniqueId id, int first, int threads, int nranks, rankBody body,
                       void *arg, int timeoutSec) {
  struct rankThread *t = calloc((size_t)threads, sizeof *t);
  for (int i = 0; i < threads; i++) {
    t[i] = (struct rankThread){.id = id, .rank = first + i, .nranks = nranks, .body = body, .arg = arg};
    pthread_create(&t[i].tid, NULL, rankMain, &t[i]);
  }
  struct timespec end;
  clock_gettime(CLOCK_REALTIME, &end); /* pthread_timedjoin_np's clock */
  end.tv_sec += timeoutSec;
  long failures = 0;
  for (int i = 0; i < threads; i++) {
    int rc = timeoutSec > 0 ? pthread_timedjoin_np(t[i].tid, NULL, &end) : pthread_join(t[i].tid, NULL);
    if (rc == ETIMEDOUT) {
      fprintf(stderr, "runRanks: rank %d (a thread) still running after %d s\n", first + i, timeoutSec);
      return -1;
    }
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

void bindRoundRobin(int p) {
  const char *mod = getenv("WEFT_TEST_BIND_ROUND_ROBIN");
  int n = mod != NULL ? atoi(mod) : 0;
  if (n <= 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(p % n, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) _exit(101);
}

/* Process p is on host hostOf[p] when hostOf is set, else on host p / procsPerHost when that
 * is positive, else on this machine. */
static long forkRanks(int procs, int threads, int procsPerHost, const int *hostOf, rankBody body,
                      void *arg, int timeoutSec) {
  weftUniqueId id;
  int nranks = procs * threads;
  if (procs == 1 && procsPerHost == 0 && hostOf == NULL) {
    if (weftGetUniqueId(&id) != weftSuccess) return -1;
    return runThreads(id, 0, threads, nranks, body, arg, timeoutSec);
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
      if (procsPerHost > 0 || hostOf != NULL) {
        char host[64];
        snprintf(host, sizeof host, "weft-test-host-%d", hostOf ? hostOf[p] : p / procsPerHost);
        setenv("WEFT_HOSTID", host, 1);
      }
      bindRoundRobin(p);
      long f = runThreads(id, p * threads, threads, nranks, body, arg, 0);
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
  return forkRanks(procs, threads, 0, NULL, body, arg, timeoutSec);
}

long runRanksOnHosts(int hosts, int procsPerHost, rankBody body, void *arg, int timeoutSec) {
  return forkRanks(hosts * procsPerHost, 1, procsPerHost, NULL, body, arg, timeoutSec);
}

long runRanksOnHostMap(int nranks, const int *hostOf, rankBody body, void *arg, int timeoutSec) {
  return forkRanks(nranks, 1, 0, hostOf, body, arg, timeoutSec);
}

long runThreadsOnHosts(int hosts, int threadsPerHost, rankBody body, void *arg, int timeoutSec) {
  return forkRanks(hosts, threadsPerHost, 1, NULL, body, arg, timeoutSec);
}

/* What the tests know about where each algorithm can run, written here rather than asked of
 * the library, so that an algorithm refused where it should run (or run where it cannot) is
 * a failure. A newly registered algorithm is expected to run everywhere until a line here
 * says otherwise. */
int algoRunsOn(const char *algo, int hosts, int perHost, char *why, size_t len) {
  if (strcmp(algo, "direct") == 0 && hosts > 1) {
    snprintf(why, len, "direct shares one host's memory; the ranks span %d hosts", hosts);
    return 0;
  }
  if (strcmp(algo, "hier") == 0 && hosts < 2) {
    snprintf(why, len, "hier needs 2+ hosts (%d x %d)", hosts, perHost);
    return 0;
  }
  if (strcmp(algo, "hiernuma") == 0 && getenv("WEFT_TEST_BIND_ROUND_ROBIN") == NULL) {
    snprintf(why, len, "hiernuma needs every host's ranks bound to 2+ NUMA nodes, 2+ on each");
    return 0;
  }
  why[0] = '\0';
  return 1;
}

