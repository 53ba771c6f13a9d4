#include "forked.h"
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Linked into MPI programs too, so no Criterion here: a failure to set up ends the test. */
static void die(const char *what) {
  perror(what);
  exit(99);
}

int64_t forkedNowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void *forkedShared(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) die("mmap");
  memset(p, 0, bytes);
  return p;
}

void forkedLaunch(int nranks, forkedMain main, void *shared, pid_t *pids) {
  int pipes[nranks][2];
  fflush(NULL);
  for (int r = 0; r < nranks; r++) {
    if (pipe(pipes[r]) != 0) die("pipe");
    pids[r] = fork();
    if (pids[r] < 0) die("fork");
    noteChild(pids[r]);
    if (pids[r] == 0) {
      weftUniqueId id;
      close(pipes[r][1]);
      if (read(pipes[r][0], &id, sizeof id) != (ssize_t)sizeof id) _exit(3);
      close(pipes[r][0]);
      main(shared, id, r, nranks);
      _exit(4);
    }
    close(pipes[r][0]);
  }
  weftUniqueId id;
  if (weftGetUniqueId(&id) != weftSuccess) die("weftGetUniqueId");
  for (int r = 0; r < nranks; r++) {
    if (write(pipes[r][1], &id, sizeof id) != (ssize_t)sizeof id) die("write");
    close(pipes[r][1]);
  }
}

void forkedReap(pid_t *pids, int nranks, int timeoutMs) {
  int64_t end = forkedNowMs() + timeoutMs;
  for (int r = 0; r < nranks; r++) {
    pid_t got;
    while ((got = waitpid(pids[r], NULL, WNOHANG)) == 0 && forkedNowMs() < end) usleep(2000);
    if (got != 0) continue; /* reaped (or not ours): its pid may already be another process's */
    kill(pids[r], SIGKILL);
    waitpid(pids[r], NULL, 0);
  }
}
