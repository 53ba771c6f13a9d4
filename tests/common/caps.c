#include "caps.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "device.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define CAPS_X86 1
#else
#define CAPS_X86 0
#endif

static int no(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int no(char *why, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, len, fmt, ap);
  va_end(ap);
  return 0;
}

static int onPath(const char *name) {
  const char *path = getenv("PATH");
  char dir[4096];
  for (const char *p = path ? path : "/usr/bin:/bin"; *p != '\0';) {
    size_t n = strcspn(p, ":");
    snprintf(dir, sizeof dir, "%.*s/%s", (int)n, p, name);
    if (access(dir, X_OK) == 0) return 1;
    p += n + (p[n] == ':');
  }
  /* root's PATH may lack the sbin directories where ip and tc live */
  const char *sbin[] = {"/usr/sbin", "/sbin"};
  for (int i = 0; i < 2; i++) {
    snprintf(dir, sizeof dir, "%s/%s", sbin[i], name);
    if (access(dir, X_OK) == 0) return 1;
  }
  return 0;
}

/* Runs fn in a child process (so that namespaces and signals stay out of the caller). */
static int inChild(int (*fn)(void)) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return 0;
  if (pid == 0) _exit(fn() ? 0 : 1);
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static int newNetns(void) {
  if (unshare(CLONE_NEWNET | CLONE_NEWUTS) != 0) return 0;
  /* what tests/mpi/cluster.sh makes, inside this throwaway namespace */
  return system("{ PATH=$PATH:/usr/sbin:/sbin; ip link add capsbr type bridge && "
                "ip link add capsv0 type veth peer name capsv1; } >/dev/null 2>&1") == 0;
}

static int capNetns(char *why, size_t len) {
  if (geteuid() != 0) return no(why, len, "not root");
  if (!onPath("ip")) return no(why, len, "no 'ip' (iproute2)");
  if (!inChild(newNetns))
    return no(why, len, "the kernel refuses a network namespace with a bridge and a veth pair");
  return 1;
}

static int capIpv6(char *why, size_t len) {
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0) return no(why, len, "socket(AF_INET6): %s", strerror(errno));
  struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
  int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
  int err = errno;
  close(fd);
  return ok ? 1 : no(why, len, "bind([::1]:0): %s", strerror(err));
}

/* The direct algorithm reads a sibling rank's memory; Yama and seccomp may allow a parent but
 * not a sibling, so two children of this process try it. */
static volatile unsigned long cmaWord = 0x63617073;

static int capCma(char *why, size_t len) {
  int fds[2];
  if (pipe(fds) != 0) return no(why, len, "pipe: %s", strerror(errno));
  fflush(NULL);
  pid_t target = fork();
  if (target == 0) {
    close(fds[0]);
    close(fds[1]);
    for (;;) pause();
  }
  pid_t reader = fork();
  if (reader == 0) {
    unsigned long v = 0;
    struct iovec local = {&v, sizeof v}, remote = {(void *)&cmaWord, sizeof v};
    ssize_t n = process_vm_readv(target, &local, 1, &remote, 1, 0);
    int err = errno;
    char msg[128] = "";
    if (n != (ssize_t)sizeof v || v != 0x63617073)
      snprintf(msg, sizeof msg, "process_vm_readv of a sibling process: %s",
               n < 0 ? strerror(err) : "wrong bytes");
    ssize_t w = write(fds[1], msg, strlen(msg) + 1);
    (void)w;
    _exit(0);
  }
  close(fds[1]);
  char msg[128] = "";
  ssize_t n = read(fds[0], msg, sizeof msg - 1);
  close(fds[0]);
  msg[n > 0 ? n : 0] = '\0';
  kill(target, SIGKILL);
  waitpid(target, NULL, 0);
  waitpid(reader, NULL, 0);
  if (n <= 0) return no(why, len, "the probe process died");
  return msg[0] == '\0' ? 1 : no(why, len, "%s", msg);
}

static int capCpu(const char *cap, char *why, size_t len) {
#if CAPS_X86
  unsigned eax, ebx, ecx = 0, edx;
  int f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
  __builtin_cpu_init();
  if (strcmp(cap, "x86") == 0) return 1;
  if (strcmp(cap, "f16c") == 0) return f16c ? 1 : no(why, len, "this CPU has no F16C");
  if (strcmp(cap, "avx2") == 0)
    return f16c && __builtin_cpu_supports("avx2") ? 1 : no(why, len, "this CPU has no AVX2 + F16C");
  if (strcmp(cap, "avx512") == 0)
    return f16c && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl")
               ? 1
               : no(why, len, "this CPU has no AVX-512 F + BW + VL");
  return -1;
#else
  (void)cap;
  return no(why, len, "not an x86 CPU");
#endif
}

/* CPUs 0 and 1 both in this process's affinity mask (tests that bind ranks to them). */
static int capCpu01(char *why, size_t len) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return no(why, len, "sched_getaffinity failed");
  return CPU_ISSET(0, &set) && CPU_ISSET(1, &set) ? 1 : no(why, len, "CPUs 0 and 1 are not both usable here");
}

/* An RDMA device with a port in state ACTIVE, as the kernel lists them (sysfs). */
static int capRdma(char *why, size_t len) {
  FILE *p = popen("cat /sys/class/infiniband/*/ports/*/state 2>/dev/null", "r");
  if (p == NULL) return no(why, len, "popen: %s", strerror(errno));
  char line[128];
  int ports = 0, active = 0;
  while (fgets(line, sizeof line, p) != NULL) {
    ports++;
    active += strstr(line, "ACTIVE") != NULL;
  }
  pclose(p);
  if (active > 0) return 1;
  if (ports == 0) return no(why, len, "no RDMA device (/sys/class/infiniband is empty: no RDMA hardware, no rdma_rxe)");
  return no(why, len, "no RDMA port is ACTIVE (%d port(s))", ports);
}

/* What tests/rdma/rdma-vm-run needs to boot its VM. */
static int capQemu(char *why, size_t len) {
  static const char *const need[] = {"qemu-system-x86_64", "busybox", "cpio", "depmod", "modprobe", "apt-get", "dpkg-deb"};
  for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
    if (!onPath(need[i])) return no(why, len, "no '%s' on PATH (install-deps.sh installs qemu-system-x86, busybox-static, kmod, cpio)", need[i]);
  return 1;
}

/* A GPU the library's runtime can use (weftDeviceCount > 0), asked in a child process: CUDA
 * started in a process does not survive its fork, and tests fork after their skip check (IPC
 * between a parent and its child; the harness's rank processes), so the caller stays clean. */
static int capGpu(char *why, size_t len) {
  int fds[2];
  if (pipe(fds) != 0) return no(why, len, "pipe: %s", strerror(errno));
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) return no(why, len, "fork: %s", strerror(errno));
  if (pid == 0) {
    close(fds[0]);
    char msg[256] = "";
    int n = weftDeviceCount(msg, sizeof msg);
    char line[300];
    int m = snprintf(line, sizeof line, "%d %s", n, n > 0 ? "" : msg);
    ssize_t w = write(fds[1], line, (size_t)m + 1);
    _exit(w > 0 ? 0 : 1);
  }
  close(fds[1]);
  char line[300] = "";
  ssize_t n = read(fds[0], line, sizeof line - 1);
  close(fds[0]);
  line[n > 0 ? n : 0] = '\0';
  waitpid(pid, NULL, 0);
  int count = 0, used = 0;
  if (n <= 0 || sscanf(line, "%d %n", &count, &used) != 1) return no(why, len, "the probe process died");
  return count > 0 ? 1 : no(why, len, "%s", line + used);
}

int capHave(const char *cap, char *why, size_t len) {
  why[0] = '\0';
  if (strncmp(cap, "cmd:", 4) == 0)
    return onPath(cap + 4) ? 1 : no(why, len, "no '%s' on PATH", cap + 4);
  if (strcmp(cap, "root") == 0) return geteuid() == 0 ? 1 : no(why, len, "not root");
  if (strcmp(cap, "netns") == 0) return capNetns(why, len);
  if (strcmp(cap, "ipv6") == 0) return capIpv6(why, len);
  if (strcmp(cap, "cma") == 0) return capCma(why, len);
  if (strcmp(cap, "cpu01") == 0) return capCpu01(why, len);
  if (strcmp(cap, "rdma") == 0 || strcmp(cap, "verbs") == 0) return capRdma(why, len);
  if (strcmp(cap, "qemu") == 0) return capQemu(why, len);
  if (strcmp(cap, "gpu") == 0) return capGpu(why, len);
  static const char *const cpu[] = {"x86", "f16c", "avx2", "avx512"};
  for (size_t i = 0; i < sizeof cpu / sizeof cpu[0]; i++)
    if (strcmp(cap, cpu[i]) == 0) return capCpu(cap, why, len);
  no(why, len, "no probe for '%s'", cap);
  return -1;
}
