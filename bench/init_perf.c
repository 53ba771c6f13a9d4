/* init_perf: the cost of making and destroying communicators, as a job that creates them in a
 * loop pays it: per cycle (weftGetUniqueId, weftCommInitRank on -t thread ranks, one AllReduce,
 * weftCommDestroy) the time of the slowest rank's init and destroy, and the sockets the cycle
 * leaves in TIME_WAIT with the local ports they hold (each holds one for 60 s; the local port
 * range has ~28k). Public API only, so it builds against any weft.
 *   build/bench/init_perf -t 2 -n 50                 transports as the environment says
 *   WEFT_TRANSPORTS=tcp build/bench/init_perf -t 4 -n 50 -N
 * -N runs in a network namespace of its own (root), where /proc/net/tcp holds this run's
 * sockets only; without it other programs' TIME_WAIT sockets count too. */
#include <errno.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "weft.h"

#define MAX_RANKS 64
#define MAX_CYCLES 100000

static weftUniqueId cycleId;
static int nranks = 2;
static double initMs[MAX_RANKS], destroyMs[MAX_RANKS];

static double nowMs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void die(const char *what, const char *why) {
  fprintf(stderr, "init_perf: %s: %s\n", what, why);
  exit(1);
}

static void *rankMain(void *arg) {
  int rank = (int)(intptr_t)arg;
  weftComm_t comm;
  double t0 = nowMs();
  if (weftCommInitRank(&comm, nranks, cycleId, rank) != weftSuccess)
    die("weftCommInitRank", weftGetLastError(NULL));
  initMs[rank] = nowMs() - t0;
  float x[256] = {0};
  if (weftAllReduce(x, x, 256, weftFloat32, weftSum, comm, NULL) != weftSuccess)
    die("weftAllReduce", weftGetLastError(comm));
  t0 = nowMs();
  if (weftCommDestroy(comm) != weftSuccess) die("weftCommDestroy", weftGetLastError(NULL));
  destroyMs[rank] = nowMs() - t0;
  return NULL;
}

/* TIME_WAIT sockets (state 06) in this network namespace, and the distinct local ports. */
static void timeWait(int *sockets, int *ports) {
  static const char *const files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
  static unsigned char seen[65536];
  memset(seen, 0, sizeof seen);
  *sockets = *ports = 0;
  for (int i = 0; i < 2; i++) {
    FILE *f = fopen(files[i], "r");
    if (f == NULL) continue;
    char line[512], local[80], state[8];
    while (fgets(line, sizeof line, f) != NULL) {
      if (sscanf(line, "%*s %79s %*s %7s", local, state) != 2 || strcmp(state, "06") != 0) continue;
      unsigned port = 0;
      const char *colon = strrchr(local, ':');
      if (colon == NULL || sscanf(colon + 1, "%x", &port) != 1 || port > 65535) continue;
      (*sockets)++;
      *ports += !seen[port];
      seen[port] = 1;
    }
    fclose(f);
  }
}

static void ownNetworkNamespace(void) {
  if (unshare(CLONE_NEWNET) != 0) die("unshare(CLONE_NEWNET) (-N needs root)", strerror(errno));
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  struct ifreq ifr = {0};
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
  if (fd < 0 || ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) die("lo", strerror(errno));
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) die("lo up", strerror(errno));
  close(fd);
}

static int cmpDouble(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double maxOf(const double *v, int n) {
  double m = 0;
  for (int i = 0; i < n; i++) m = v[i] > m ? v[i] : m;
  return m;
}

static void usage(void) {
  fprintf(stderr, "usage: init_perf [-t ranks (2)] [-n cycles (50)] [-N]\n");
  exit(2);
}

int main(int argc, char **argv) {
  int cycles = 50, ownNetns = 0;
  for (int opt; (opt = getopt(argc, argv, "t:n:Nh")) != -1;) {
    if (opt == 't') nranks = atoi(optarg);
    else if (opt == 'n') cycles = atoi(optarg);
    else if (opt == 'N') ownNetns = 1;
    else usage();
  }
  if (nranks < 1 || nranks > MAX_RANKS || cycles < 1 || cycles > MAX_CYCLES) usage();
  if (ownNetns) ownNetworkNamespace();
  static double init[MAX_CYCLES], destroy[MAX_CYCLES];
  int tw0, ports0, tw, ports;
  timeWait(&tw0, &ports0);
  for (int c = 0; c < cycles; c++) {
    if (weftGetUniqueId(&cycleId) != weftSuccess) die("weftGetUniqueId", weftGetLastError(NULL));
    pthread_t t[MAX_RANKS];
    for (int r = 0; r < nranks; r++) pthread_create(&t[r], NULL, rankMain, (void *)(intptr_t)r);
    for (int r = 0; r < nranks; r++) pthread_join(t[r], NULL);
    init[c] = maxOf(initMs, nranks);
    destroy[c] = maxOf(destroyMs, nranks);
  }
  timeWait(&tw, &ports);
  qsort(init, (size_t)cycles, sizeof init[0], cmpDouble);
  qsort(destroy, (size_t)cycles, sizeof destroy[0], cmpDouble);
  const char *transports = getenv("WEFT_TRANSPORTS");
  printf("# init_perf: %d ranks (threads), WEFT_TRANSPORTS=%s, %d cycles%s\n", nranks,
         transports ? transports : "(all)", cycles, ownNetns ? ", own network namespace" : "");
  printf("# %-14s %10s %10s %10s\n", "", "median", "min", "max");
  printf("  %-14s %10.2f %10.2f %10.2f\n", "init ms", init[cycles / 2], init[0], init[cycles - 1]);
  printf("  %-14s %10.2f %10.2f %10.2f\n", "destroy ms", destroy[cycles / 2], destroy[0],
         destroy[cycles - 1]);
  printf("  TIME_WAIT per cycle %.1f (%d sockets), local ports held %d\n",
         (double)(tw - tw0) / cycles, tw - tw0, ports - ports0);
  return 0;
}
