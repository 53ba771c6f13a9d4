#include "netns.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int64_t netnsNowMs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void say(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(char *why, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, len, fmt, ap);
  va_end(ap);
}

/* ---- cluster.sh ---- */

/* WEFT_CLUSTER_SH, else tests/mpi/cluster.sh of the tree this binary was built in
 * (BUILD/tests/<dir>/<binary>), else relative to the working directory (make check runs from
 * the repository root). */
static const char *clusterScript(void) {
  static char path[PATH_MAX];
  const char *env = getenv("WEFT_CLUSTER_SH");
  if (env != NULL && *env != '\0') return env;
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = '\0';
    int up = 0;
    for (char *p = exe + n; p > exe && up < 4; p--)
      if (*p == '/') { *p = '\0'; up++; } /* binary, tests/<dir>, tests, BUILD */
    if (snprintf(path, sizeof path, "%s/tests/mpi/cluster.sh", exe) < (int)sizeof path &&
        access(path, X_OK) == 0)
      return path;
  }
  return "tests/mpi/cluster.sh";
}

/* Runs `cluster.sh ARGS` with stdout into out (may be NULL) and stderr into err; returns its
 * exit status (-1 if it could not run). */
static int runCluster(const char *args, char *out, size_t outLen, char *err, size_t errLen) {
  char errPath[] = "/tmp/weft-netns-XXXXXX";
  int errFd = mkstemp(errPath);
  if (errFd < 0) return -1;
  close(errFd);
  char cmd[PATH_MAX + 512];
  snprintf(cmd, sizeof cmd, "'%s' %s 2>'%s'", clusterScript(), args, errPath);
  fflush(NULL);
  FILE *p = popen(cmd, "r");
  size_t n = 0;
  char sink[512];
  while (p != NULL) { /* to the end, past what fits: the script must never block on the pipe */
    int keep = out != NULL && n + 1 < outLen;
    size_t got = fread(keep ? out + n : sink, 1, keep ? outLen - 1 - n : sizeof sink, p);
    if (got == 0) break;
    if (keep) n += got;
  }
  if (out) out[n] = '\0';
  int status = p != NULL ? pclose(p) : -1;
  FILE *e = fopen(errPath, "r");
  size_t m = e ? fread(err, 1, errLen - 1, e) : 0;
  err[m] = '\0';
  if (e) fclose(e);
  unlink(errPath);
  return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The last "cannot make hosts: REASON" line of cluster.sh's stderr, or all of it. */
static void skipReason(const char *err, char *why, size_t len) {
  const char *tag = "cannot make hosts: ", *last = NULL;
  for (const char *p = strstr(err, tag); p != NULL; p = strstr(p + 1, tag)) last = p + strlen(tag);
  const char *from = last ? last : err;
  size_t n = strcspn(from, "\n");
  say(why, len, "%.*s", (int)(n < 300 ? n : 300), from);
}

/* WEFT_CLUSTER_HOSTS='a b c' from cluster.sh's stdout: the addresses of the hosts. */
static int parseHosts(struct netnsCluster *c, const char *out) {
  const char *p = strstr(out, "WEFT_CLUSTER_HOSTS='");
  if (p == NULL) return -1;
  p += strlen("WEFT_CLUSTER_HOSTS='");
  int i = 0;
  while (*p != '\'' && *p != '\0' && i < c->hosts) {
    size_t n = strcspn(p, " '");
    snprintf(c->addr[i++], NETNS_NAME_MAX, "%.*s", (int)n, p);
    p += n;
    while (*p == ' ') p++;
  }
  return i == c->hosts ? 0 : -1;
}

int netnsClusterUp(struct netnsCluster *c, int hosts, char *why, size_t len) {
  memset(c, 0, sizeof *c);
  if (hosts < 1 || hosts > NETNS_MAX_HOSTS) {
    say(why, len, "netnsClusterUp: %d hosts (1..%d)", hosts, NETNS_MAX_HOSTS);
    return NETNS_ERROR;
  }
  char out[2048], err[4096], args[128];
  int rc = runCluster("clean", NULL, 0, err, sizeof err);
  if (rc == NETNS_SKIP) {
    skipReason(err, why, len);
    return NETNS_SKIP;
  }
  c->hosts = hosts;
  snprintf(c->prefix, sizeof c->prefix, "wft%d", (int)getpid());
  snprintf(args, sizeof args, "up %d --prefix %s --owner %d", hosts, c->prefix, (int)getpid());
  rc = runCluster(args, out, sizeof out, err, sizeof err);
  if (rc == NETNS_SKIP) {
    skipReason(err, why, len);
    return NETNS_SKIP;
  }
  c->up = 1; /* from here on, down removes whatever up made, even if it failed half-way */
  if (rc != 0 || parseHosts(c, out) != 0) {
    say(why, len, "cluster.sh %s: exit %d: %.300s", args, rc, err);
    return NETNS_ERROR;
  }
  char prefix[sizeof c->prefix]; /* a copy: the names are written into the same struct */
  memcpy(prefix, c->prefix, sizeof prefix);
  snprintf(c->bridge, sizeof c->bridge, "%s-br", prefix);
  for (int i = 0; i < hosts; i++) snprintf(c->ns[i], NETNS_NAME_MAX, "%s-h%d", prefix, i + 1);
  return 0;
}

/* Counts output lines of cmd whose first word (after "N: " for links) starts with "prefix-". */
static int countNamed(const char *cmd, const char *prefix, int links) {
  FILE *p = popen(cmd, "r");
  if (p == NULL) return -1;
  char line[1024];
  int n = 0;
  size_t plen = strlen(prefix);
  while (fgets(line, sizeof line, p) != NULL) {
    const char *name = line;
    if (links) {
      name = strstr(line, ": ");
      if (name == NULL) continue;
      name += 2;
    }
    n += strncmp(name, prefix, plen) == 0 && name[plen] == '-';
  }
  return pclose(p) == 0 ? n : -1;
}

int netnsLeftovers(const char *prefix) {
  int ns = countNamed("ip netns list 2>/dev/null", prefix, 0);
  int links = countNamed("ip -o link show 2>/dev/null", prefix, 1);
  return ns < 0 || links < 0 ? -1 : ns + links;
}

int netnsClusterDown(struct netnsCluster *c) {
  if (!c->up) return 0;
  char args[64], err[4096];
  snprintf(args, sizeof args, "down --prefix %s", c->prefix);
  int rc = runCluster(args, NULL, 0, err, sizeof err);
  c->up = 0;
  int left = netnsLeftovers(c->prefix);
  if (rc != 0) fprintf(stderr, "netns: cluster.sh %s: exit %d: %s", args, rc, err);
  return left;
}

/* ---- rank processes ---- */

int netnsEnter(const char *ns, char *why, size_t len) {
  char path[128];
  snprintf(path, sizeof path, "/run/netns/%s", ns);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    say(why, len, "open %s: %s", path, strerror(errno));
    return -1;
  }
  int rc = setns(fd, CLONE_NEWNET);
  int err = errno;
  close(fd);
  if (rc != 0) {
    say(why, len, "setns(%s, CLONE_NEWNET): %s", path, strerror(err));
    return -1;
  }
  /* A hostname of its own, as nsagent gives ranks launched by mpirun: weft names hosts by it. */
  if (unshare(CLONE_NEWUTS) != 0 || sethostname(ns, strlen(ns)) != 0) {
    say(why, len, "unshare(CLONE_NEWUTS) / sethostname(%s): %s", ns, strerror(errno));
    return -1;
  }
  setenv("WEFT_SOCKET_IFNAME", "=eth0", 1);
  return 0;
}

static int readFull(int fd, void *buf, size_t len) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = read(fd, (char *)buf + done, len - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    done += (size_t)n;
  }
  return 0;
}

/* Pipe ends of every rank: the parent's id writer and ack reader. */
struct rankPipes {
  int idW[NETNS_MAX_RANKS], ackR[NETNS_MAX_RANKS];
};

static void closePipes(struct rankPipes *p, int n) {
  for (int r = 0; r < n; r++) {
    if (p->idW[r] >= 0) close(p->idW[r]);
    if (p->ackR[r] >= 0) close(p->ackR[r]);
    p->idW[r] = p->ackR[r] = -1;
  }
}

/* The child: joins its host, acks (a NUL byte, or the reason it could not), waits for the id. */
static void rankChild(struct rankPipes *parentEnds, int forked, int idR, int ackW, const char *ns,
                      int rank, int nranks, netnsRankFn fn, void *arg, pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(125); /* the parent died before the line above */
  closePipes(parentEnds, forked);      /* the other ranks' pipes */
  char why[256] = "";
  if (netnsEnter(ns, why, sizeof why) != 0) {
    ssize_t w = write(ackW, why, strlen(why) + 1);
    (void)w;
    _exit(124);
  }
  if (write(ackW, "", 1) != 1) _exit(123);
  close(ackW);
  weftUniqueId id;
  if (readFull(idR, &id, sizeof id) != 0) _exit(122); /* the parent gave up: no id */
  close(idR);
  _exit(fn(rank, nranks, id, arg));
}

static int forkRank(struct netnsJob *job, struct rankPipes *p, const struct netnsCluster *c,
                    int r, netnsRankFn fn, void *arg) {
  int idPipe[2], ackPipe[2];
  if (pipe2(idPipe, O_CLOEXEC) != 0) return -1;
  if (pipe2(ackPipe, O_CLOEXEC) != 0) {
    close(idPipe[0]);
    close(idPipe[1]);
    return -1;
  }
  pid_t parent = getpid();
  job->pids[r] = fork();
  if (job->pids[r] == 0) {
    close(idPipe[1]);
    close(ackPipe[0]);
    rankChild(p, r, idPipe[0], ackPipe[1], c->ns[r / job->ranksPerHost], r, job->nranks, fn, arg,
              parent);
  }
  close(idPipe[0]);
  close(ackPipe[1]);
  p->idW[r] = idPipe[1];
  p->ackR[r] = ackPipe[0];
  return job->pids[r] < 0 ? -1 : 0;
}

/* Every rank is in its namespace: 0, or -1 with the first one's reason. */
static int awaitAcks(struct rankPipes *p, int n, char *why, size_t len) {
  for (int r = 0; r < n; r++) {
    char msg[256];
    size_t got = 0;
    ssize_t k;
    while (got < sizeof msg && (k = read(p->ackR[r], msg + got, 1)) == 1 && msg[got] != '\0') got++;
    if (got == 0 && k == 1) continue; /* a bare NUL: entered */
    say(why, len, "rank %d could not enter its host: %.*s", r, (int)got,
        got ? msg : "(it exited)");
    return -1;
  }
  return 0;
}

/* The bootstrap root runs in a process of its own, in this namespace, on the bridge (the one
 * address every host reaches): the caller stays free of weft's threads, so its later forks
 * never copy a lock another thread held. The process idles once the id is out (the root thread
 * serves the ranks) until netnsReapRanks kills it. */
static int startRoot(struct netnsJob *job, struct rankPipes *p, const struct netnsCluster *c,
                     weftUniqueId *id, char *why, size_t len) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  pid_t parent = getpid();
  job->rootPid = fork();
  if (job->rootPid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(125);
    closePipes(p, job->nranks); /* else ranks would never see the parent close them */
    close(fds[0]);
    char ifname[NETNS_NAME_MAX + 1];
    snprintf(ifname, sizeof ifname, "=%s", c->bridge);
    setenv("WEFT_SOCKET_IFNAME", ifname, 1);
    weftUniqueId mine;
    if (weftGetUniqueId(&mine) != weftSuccess) {
      fprintf(stderr, "netns: weftGetUniqueId on %s: %s\n", c->bridge, weftGetLastError(NULL));
      _exit(1);
    }
    if (write(fds[1], &mine, sizeof mine) != (ssize_t)sizeof mine) _exit(1);
    close(fds[1]);
    for (;;) pause();
  }
  close(fds[1]);
  int ok = job->rootPid > 0 && readFull(fds[0], id, sizeof *id) == 0;
  close(fds[0]);
  if (!ok) say(why, len, "the bootstrap root process (on %s) made no unique id", c->bridge);
  return ok ? 0 : -1;
}

int netnsStartRanks(struct netnsJob *job, const struct netnsCluster *c, int ranksPerHost,
                    netnsRankFn fn, void *arg, char *why, size_t len) {
  memset(job, 0, sizeof *job);
  job->ranksPerHost = ranksPerHost;
  job->nranks = c->hosts * ranksPerHost;
  if (!c->up || ranksPerHost < 1 || job->nranks > NETNS_MAX_RANKS) {
    say(why, len, "netnsStartRanks: %d hosts x %d ranks (cluster %s)", c->hosts, ranksPerHost,
        c->up ? "up" : "down");
    return -1;
  }
  struct rankPipes p;
  for (int r = 0; r < NETNS_MAX_RANKS; r++) p.idW[r] = p.ackR[r] = -1;
  fflush(NULL);
  int forked = 0, ok = 1;
  for (; forked < job->nranks && ok; forked++) ok = forkRank(job, &p, c, forked, fn, arg) == 0;
  if (!ok) say(why, len, "fork/pipe for rank %d: %s", forked - 1, strerror(errno));
  ok = ok && awaitAcks(&p, job->nranks, why, len) == 0;
  weftUniqueId id;
  ok = ok && startRoot(job, &p, c, &id, why, len) == 0;
  for (int r = 0; ok && r < job->nranks; r++) /* 128 bytes: one atomic pipe write */
    ok = write(p.idW[r], &id, sizeof id) == (ssize_t)sizeof id;
  job->idSentMs = netnsNowMs();
  closePipes(&p, forked); /* ranks still waiting for an id see EOF and exit */
  if (!ok) netnsReapRanks(job);
  return ok ? 0 : -1;
}

static void killAndReap(pid_t *pid) {
  if (*pid <= 0) return;
  kill(*pid, SIGKILL);
  while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR) {
  }
  *pid = 0;
}

void netnsReapRanks(struct netnsJob *job) {
  for (int r = 0; r < job->nranks; r++) killAndReap(&job->pids[r]);
  killAndReap(&job->rootPid);
}

/* Sockets in TIME_WAIT (state 06) in this network namespace. */
int netnsCountTimeWait(void) {
  static const char *const files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
  int n = 0;
  for (int i = 0; i < 2; i++) {
    FILE *f = fopen(files[i], "r");
    if (f == NULL) continue;
    char line[512], state[8];
    while (fgets(line, sizeof line, f) != NULL)
      n += sscanf(line, "%*s %*s %*s %7s", state) == 1 && strcmp(state, "06") == 0;
    fclose(f);
  }
  return n;
}

int netnsLoopbackUp(char *why, size_t len) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  struct ifreq ifr = {0};
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
  int rc = fd >= 0 && ioctl(fd, SIOCGIFFLAGS, &ifr) == 0 ? 0 : -1;
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (rc == 0) rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
  if (rc != 0) snprintf(why, len, "lo up: %s", strerror(errno));
  if (fd >= 0) close(fd);
  return rc;
}
