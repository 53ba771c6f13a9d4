/* A rank killed (SIGKILL) at a random moment of weftCommInitRank: every survivor returns an
 * error (never success with a dead member, never a hang): weftRemoteError once the victim had
 * registered with the bootstrap root (within ms: docs/performance.md; the bound, 10 s, only
 * tells a detection from a hang), or weftTimeout naming the rank
 * that never registered (before its registration a dead rank cannot be told from a slow one).
 * A victim that finished init first is caught by the next collective. On one host (shared
 * memory) and on emulated hosts (TCP). Nothing stays in /dev/shm or the descriptor table. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "forked.h"
#include "harness.h"

#define NRANKS 4
#define TIMEOUT_MS 3000

#define nowMs forkedNowMs
#define DETECT_BOUND_MS 10000

struct report {
  volatile int entered, done, rc, initRc, fdsBefore, fdsAfter;
  volatile int64_t atMs;
  char msg[512];
};
struct shared {
  struct report r[NRANKS];
  int hosts;
};

static void rankMain(struct shared *sh, weftUniqueId id, int rank) {
  struct report *me = &sh->r[rank];
  if (sh->hosts > 0) {
    char host[32];
    snprintf(host, sizeof host, "deathhost%d", rank % sh->hosts);
    setenv("WEFT_HOSTID", host, 1);
  }
  me->fdsBefore = countOpenFds();
  weftComm_t comm = NULL;
  me->entered = 1;
  weftResult_t rc = weftCommInitRank(&comm, NRANKS, id, rank);
  me->initRc = rc;
  float buf[64] = {0};
  for (int64_t end = nowMs() + 10000; rc == weftSuccess && nowMs() < end;)
    rc = weftAllReduce(buf, buf, 64, weftFloat32, weftSum, comm, NULL);
  me->atMs = nowMs();
  snprintf(me->msg, sizeof me->msg, "%s", weftGetLastError(comm));
  if (comm != NULL) weftCommDestroy(comm);
  me->fdsAfter = countOpenFds();
  me->rc = rc;
  me->done = 1;
  _exit(0);
}

static void rankEntry(void *shared, weftUniqueId id, int rank, int nranks) {
  (void)nranks;
  rankMain(shared, id, rank);
}

static struct shared *launch(int hosts, pid_t *pids) {
  struct shared *sh = forkedShared(sizeof *sh);
  sh->hosts = hosts;
  forkedLaunch(NRANKS, rankEntry, sh, pids);
  return sh;
}

static void checkSurvivor(const struct report *rep, int r, int victim, int64_t killedAt,
                          const char *what) {
  long long after = (long long)(rep->atMs - killedAt);
  if (getenv("WEFT_TEST_VERBOSE"))
    fprintf(stderr, "%s: rank %d: init %d, rc %d after %lld ms: %s\n", what, r, rep->initRc,
            rep->rc, after, rep->msg);
  cr_expect(rep->done, "%s: rank %d never returned", what, r);
  cr_expect_neq(rep->rc, weftSuccess, "%s: rank %d saw no error", what, r);
  if (rep->rc == weftTimeout) {
    cr_expect(rep->initRc == weftTimeout && strstr(rep->msg, "had not registered") != NULL,
              "%s: rank %d timed out, not for an unregistered rank: %s", what, r, rep->msg);
  } else {
    cr_expect_eq(rep->rc, weftRemoteError, "%s: rank %d got %d: %s", what, r, rep->rc, rep->msg);
    cr_expect_lt(after, DETECT_BOUND_MS, "%s: rank %d took %lld ms: %s", what, r, after, rep->msg);
    char needle[16];
    snprintf(needle, sizeof needle, "rank %d", victim);
    cr_expect(strstr(rep->msg, needle) != NULL, "%s: rank %d's message does not name rank %d: %s",
              what, r, victim, rep->msg);
  }
  cr_expect_eq(rep->fdsAfter, rep->fdsBefore, "%s: rank %d has %d descriptors, had %d", what, r,
               rep->fdsAfter, rep->fdsBefore);
}

static void killDuringInit(int hosts, int reps) {
  char timeout[16];
  snprintf(timeout, sizeof timeout, "%d", TIMEOUT_MS);
  setenv("WEFT_TIMEOUT_MS", timeout, 1);
  unsigned seed = (unsigned)getpid() ^ (unsigned)nowMs();
  srand(seed);
  for (int rep = 0; rep < reps; rep++) {
    pid_t pids[NRANKS];
    int victim = rand() % NRANKS, delayMs = rand() % 60;
    struct shared *sh = launch(hosts, pids);
    while (!sh->r[victim].entered) usleep(200);
    usleep((useconds_t)delayMs * 1000);
    int64_t killedAt = nowMs();
    kill(pids[victim], SIGKILL); /* reaped last: survivors see a zombie, as with a real parent */
    for (int64_t end = nowMs() + DETECT_BOUND_MS + 3 * TIMEOUT_MS; nowMs() < end;) {
      int left = 0;
      for (int r = 0; r < NRANKS; r++) left += r != victim && !sh->r[r].done;
      if (left == 0) break;
      usleep(2000);
    }
    char what[96];
    snprintf(what, sizeof what, "%d hosts, seed %u, rep %d, rank %d killed %d ms into init",
             hosts, seed, rep, victim, delayMs);
    for (int r = 0; r < NRANKS; r++)
      if (r != victim) checkSurvivor(&sh->r[r], r, victim, killedAt, what);
    for (int r = 0; r < NRANKS; r++) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], NULL, 0);
    }
    char names[512];
    int left = takeSegmentsOf(pids, NRANKS, names, sizeof names);
    cr_expect_eq(left, 0, "%s: %d segments left in /dev/shm:%s", what, left, names);
    munmap(sh, sizeof *sh);
  }
  unsetenv("WEFT_TIMEOUT_MS");
}

Test(init_death, one_host, .timeout = 120) { killDuringInit(0, 6); }
Test(init_death, two_hosts_tcp, .timeout = 120) { killDuringInit(2, 6); }
