/* Which interface the TCP transport's connections use on a host with two NICs. Each case runs
 * in a network namespace of its own (root only; skipped with the reason otherwise) holding
 * three interfaces (veth pairs): boot0 (10.77.9.1, made first, so the bootstrap takes it), eth0
 * (10.77.0.1) and eth1 (10.77.1.1), and the topology of tests/data/topo-2s-2pu.xml injected
 * (eth0 on package 0, eth1 on package 1). Two rank processes, bound to CPUs 0 and 1 (packages 0
 * and 1), run AllReduces over tcp; then each lists its own sockets (its fds' inodes in
 * /proc/net/tcp), and a connection counts where one rank's socket dialed the other's NIC
 * address and the other's socket there is its far end. Everything on eth0 or eth1 is the transport's, the bootstrap being on boot0. And the
 * progress thread keeps the rank's binding (a binding the launcher set is never overridden). */
#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "caps.h"
#include "forked.h"
#include "harness.h"
#include "netns.h"
#include "topofix.h"

TestSuite(tcp_nic, .timeout = 120);

enum { NRANKS = 2, MAX_SOCKS = 64 };

struct sock {
  uint32_t local, remote; /* as in memory (network order) */
  int localPort, remotePort, listening;
};

struct rankSeen {
  int rc, wrong, nsocks;
  uint32_t listenAddr; /* where its transport listened, from its log; port listenPort */
  int listenPort;
  struct sock socks[MAX_SOCKS];
  char threadCpus[64], rankCpus[64]; /* Cpus_allowed_list of weft-tcp and of the rank */
};

struct shared {
  int ok;
  char why[256];
  struct rankSeen rank[NRANKS];
};

/* Inodes of this process's sockets. */
static int socketInodes(unsigned long *inodes, int max) {
  DIR *d = opendir("/proc/self/fd");
  int n = 0;
  for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL && n < max;) {
    char path[300], link[64];
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t len = readlink(path, link, sizeof link - 1);
    if (len <= 0) continue;
    link[len] = '\0';
    if (sscanf(link, "socket:[%lu]", &inodes[n]) == 1) n++;
  }
  if (d != NULL) closedir(d);
  return n;
}

/* This process's IPv4 TCP sockets, listening or established (/proc/net/tcp). */
static void listSockets(struct rankSeen *seen) {
  unsigned long inodes[256];
  int ninodes = socketInodes(inodes, 256);
  FILE *f = fopen("/proc/net/tcp", "r");
  char line[512];
  if (f == NULL || fgets(line, sizeof line, f) == NULL) goto out; /* the header */
  while (fgets(line, sizeof line, f) != NULL && seen->nsocks < MAX_SOCKS) {
    unsigned local, remote, lport, rport, state;
    unsigned long inode;
    if (sscanf(line, " %*d: %x:%x %x:%x %x %*x:%*x %*x:%*x %*x %*u %*u %lu", &local, &lport, &remote,
               &rport, &state, &inode) != 6)
      continue;
    int mine = 0;
    for (int i = 0; i < ninodes; i++) mine |= inodes[i] == inode;
    if (!mine || (state != 0x01 && state != 0x0A)) continue; /* ESTABLISHED, LISTEN */
    seen->socks[seen->nsocks++] = (struct sock){local, remote, (int)lport, (int)rport, state == 0x0A};
  }
out:
  if (f != NULL) fclose(f);
}

/* Cpus_allowed_list of a thread of this process named name (first found), or of the process. */
static void cpusOf(const char *name, char *out, size_t len) {
  DIR *d = opendir("/proc/self/task");
  snprintf(out, len, "none");
  for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
    char path[300], comm[64] = "", line[256];
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (f == NULL) continue;
    if (fgets(comm, sizeof comm, f) == NULL) comm[0] = '\0';
    fclose(f);
    comm[strcspn(comm, "\n")] = '\0';
    if (name != NULL ? strcmp(comm, name) != 0 : strcmp(e->d_name, "..") == 0 || e->d_name[0] == '.') continue;
    if (name == NULL && atoi(e->d_name) != getpid()) continue;
    snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
    f = fopen(path, "r");
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
      if (sscanf(line, "Cpus_allowed_list: %63s", out) == 1) break;
    if (f != NULL) fclose(f);
    break;
  }
  if (d != NULL) closedir(d);
}

/* The log of this process (WEFT_DEBUG_FILE with %p, runCase). */
static void logPath(char *out, size_t len, int pid) { snprintf(out, len, "/tmp/weft-tcp-nic-%d.log", pid); }

/* The transport's listener, as its INFO TCP line says ("tcp: rank R listening on A:P"): it is
 * closed once every link is up, so the sockets cannot show it; they show what was accepted
 * on it. */
static void readListener(struct rankSeen *seen, int rank) {
  char path[64], line[512], addr[64];
  logPath(path, sizeof path, (int)getpid());
  FILE *f = fopen(path, "r");
  char want[40];
  snprintf(want, sizeof want, "tcp: rank %d listening on ", rank);
  while (f != NULL && fgets(line, sizeof line, f) != NULL) {
    const char *at = strstr(line, want);
    int port;
    if (at != NULL && sscanf(at + strlen(want), "%63[0-9.]:%d", addr, &port) == 2)
      seen->listenAddr = inet_addr(addr), seen->listenPort = port;
  }
  if (f != NULL) fclose(f);
  unlink(path);
}

static void rankMain(void *arg, weftUniqueId id, int rank, int nranks) {
  struct rankSeen *seen = &((struct shared *)arg)->rank[rank];
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(rank % 2, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) _exit(3);
  weftComm_t comm;
  seen->rc = weftCommInitRank(&comm, nranks, id, rank);
  if (seen->rc != weftSuccess) _exit(1);
  int32_t buf[4096];
  for (int i = 0; i < 3; i++) {
    for (int k = 0; k < 4096; k++) buf[k] = rank + k;
    if (weftAllReduce(buf, buf, 4096, weftInt32, weftSum, comm, NULL) != weftSuccess) seen->wrong++;
    for (int k = 0; k < 4096; k++) seen->wrong += buf[k] != 2 * k + 1;
  }
  listSockets(seen); /* the links stay up until destroy */
  cpusOf("weft-tcp", seen->threadCpus, sizeof seen->threadCpus);
  cpusOf(NULL, seen->rankCpus, sizeof seen->rankCpus);
  weftCommDestroy(comm);
  readListener(seen, rank);
  _exit(0);
}

static int sh(struct shared *s, const char *cmd) {
  int rc = system(cmd);
  if (rc != 0) snprintf(s->why, sizeof s->why, "\"%.200s\" exited %d", cmd, rc);
  return rc;
}

/* In a new network namespace: the interfaces, then the ranks. */
static void inNamespace(struct shared *s) {
  if (unshare(CLONE_NEWNET) != 0) {
    snprintf(s->why, sizeof s->why, "unshare(CLONE_NEWNET): %s", strerror(errno));
    return;
  }
  if (netnsLoopbackUp(s->why, sizeof s->why) != 0) return;
  static const char *const ifs[][2] = {{"boot0", "10.77.9.1/24"}, {"eth0", "10.77.0.1/24"}, {"eth1", "10.77.1.1/24"}};
  for (size_t i = 0; i < 3; i++) {
    char cmd[256];
    /* a veth pair (dummy interfaces need a module kernels may lack), both ends up so it has
     * carrier; the other end has no address and no use */
    snprintf(cmd, sizeof cmd, "ip link add %s type veth peer name %s-p && ip addr add %s dev %s && "
             "ip link set %s-p up && ip link set %s up", ifs[i][0], ifs[i][0], ifs[i][1], ifs[i][0],
             ifs[i][0], ifs[i][0]);
    if (sh(s, cmd) != 0) return;
  }
  pid_t pids[NRANKS];
  forkedLaunch(NRANKS, rankMain, s, pids);
  forkedReap(pids, NRANKS, 60000);
  char path[64];
  logPath(path, sizeof path, (int)getpid()); /* this process's, of the unique id */
  unlink(path);
  s->ok = 1;
}

/* Runs a case with the environment given (NULL values unset). */
static struct shared *runCase(const char *netDevices, const char *socketIfname) {
  SKIP_UNLESS("netns");
  SKIP_UNLESS("cmd:ip");
  SKIP_UNLESS("cpu01"); /* ranks bind to CPUs 0 and 1 */
  struct shared *s = forkedShared(sizeof *s);
  setenv("WEFT_TRANSPORTS", "tcp", 1);
  setenv("WEFT_TOPO_FILE", topoFixturePath("topo-2s-2pu.xml"), 1);
  setenv("WEFT_DEBUG", "INFO", 1);
  setenv("WEFT_DEBUG_SUBSYS", "TCP", 1);
  setenv("WEFT_DEBUG_FILE", "/tmp/weft-tcp-nic-%p.log", 1);
  if (netDevices != NULL) setenv("WEFT_NET_DEVICES", netDevices, 1);
  else unsetenv("WEFT_NET_DEVICES");
  if (socketIfname != NULL) setenv("WEFT_SOCKET_IFNAME", socketIfname, 1);
  else unsetenv("WEFT_SOCKET_IFNAME");
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    inNamespace(s);
    _exit(0);
  }
  int status;
  waitpid(pid, &status, 0);
  cr_assert(WIFEXITED(status), "the namespace's process died (status 0x%x)", status);
  cr_assert(s->ok, "%s", s->why);
  for (int r = 0; r < NRANKS; r++)
    cr_assert(s->rank[r].rc == weftSuccess && s->rank[r].wrong == 0, "rank %d: init %d, %d wrong",
              r, s->rank[r].rc, s->rank[r].wrong);
  for (int r = 0; r < NRANKS; r++) cr_assert_gt(s->rank[r].nsocks, 0, "rank %d lists its sockets", r);
  return s;
}

static uint32_t ip(const char *text) { return inet_addr(text); }

static const char *ipName(uint32_t a, char *out) {
  struct in_addr in = {a};
  return inet_ntop(AF_INET, &in, out, INET_ADDRSTRLEN);
}

/* Rank q's transport listened on its NIC's address want[q], and rank r dialed it there: r has
 * a socket to want[q] at q's listener's port, whose far end is one of q's sockets, accepted on
 * that address and port. And nothing of either rank is on an address neither the bootstrap
 * (boot) nor the transport's choice (want[]) explains. */
static void expectNics(const struct shared *s, const uint32_t *want, uint32_t boot) {
  char a[INET_ADDRSTRLEN], b[INET_ADDRSTRLEN];
  for (int r = 0; r < NRANKS; r++) {
    int q = (r + 1) % NRANKS, linked = 0;
    const struct rankSeen *dialer = &s->rank[r], *acceptor = &s->rank[q];
    cr_expect(acceptor->listenAddr == want[q], "rank %d's transport listened on %s, not %s", q,
              ipName(acceptor->listenAddr, a), ipName(want[q], b));
    for (int i = 0; i < dialer->nsocks; i++) {
      const struct sock *d = &dialer->socks[i];
      cr_expect(d->local == boot || d->local == want[0] || d->local == want[1],
                "rank %d: a socket on %s, on no interface the transport chose", r, ipName(d->local, a));
      if (d->listening || d->remote != want[q] || d->remotePort != acceptor->listenPort) continue;
      for (int j = 0; j < acceptor->nsocks; j++) {
        const struct sock *k = &acceptor->socks[j];
        linked += !k->listening && k->local == want[q] && k->localPort == acceptor->listenPort &&
                  k->remote == d->local && k->remotePort == d->localPort;
      }
    }
    cr_expect_geq(linked, 1, "rank %d dialed rank %d's %s:%d, which accepted it there (%d sockets seen)",
                  r, q, ipName(want[q], a), acceptor->listenPort, dialer->nsocks);
  }
}

Test(tcp_nic, net_devices_over_socket_ifname) {
  struct shared *s = runCase("eth1", "boot0");
  uint32_t want[NRANKS] = {ip("10.77.1.1"), ip("10.77.1.1")};
  expectNics(s, want, ip("10.77.9.1"));
}

Test(tcp_nic, net_devices_picks_the_other) {
  struct shared *s = runCase("=eth0", NULL);
  uint32_t want[NRANKS] = {ip("10.77.0.1"), ip("10.77.0.1")};
  expectNics(s, want, ip("10.77.9.1"));
}

/* No setting: a host with 2 located NICs takes each rank's closest, CPU 0's eth0, CPU 1's eth1. */
Test(tcp_nic, topology_chooses_per_rank) {
  struct shared *s = runCase(NULL, NULL);
  uint32_t want[NRANKS] = {ip("10.77.0.1"), ip("10.77.1.1")};
  expectNics(s, want, ip("10.77.9.1"));
  for (int r = 0; r < NRANKS; r++)
    cr_expect_str_eq(s->rank[r].threadCpus, s->rank[r].rankCpus,
                     "rank %d's progress thread keeps the rank's binding (%s), got %s", r,
                     s->rank[r].rankCpus, s->rank[r].threadCpus);
}

/* An interface the user named, without WEFT_NET_DEVICES, is never overridden. */
Test(tcp_nic, socket_ifname_stands) {
  struct shared *s = runCase(NULL, "boot0");
  uint32_t boot = ip("10.77.9.1"), want[NRANKS] = {boot, boot};
  expectNics(s, want, boot);
  for (int r = 0; r < NRANKS; r++)
    for (int i = 0; i < s->rank[r].nsocks; i++) cr_expect_eq(s->rank[r].socks[i].local, boot, "rank %d", r);
}
