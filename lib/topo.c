/* Host identity and machine shape.
 * Two ranks share memory only if their host ids are equal. The id is WEFT_HOSTID when set,
 * otherwise hostname + boot id + network namespace: containers and network namespaces on one
 * kernel share /dev/shm and the boot id, but not (usually) the UTS name, and never the
 * network namespace, so ranks that a launcher placed on different "hosts" are told apart. */
#include <hwloc.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core.h"
#include "log.h"
#include "param.h"

static uint64_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ULL;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ULL;
  return h;
}

void weftTopoParseBootId(const char *text, size_t textLen, char *out, size_t len) {
  if (len == 0) return;
  size_t n = 0;
  while (n < textLen && n + 1 < len && text[n] != '\n' && text[n] != '\0') {
    out[n] = text[n];
    n++;
  }
  out[n] = '\0';
}

static void readBootId(char *out, size_t len) {
  char text[64];
  size_t n = 0;
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");
  if (f != NULL) {
    n = fread(text, 1, sizeof text, f);
    fclose(f);
  }
  weftTopoParseBootId(text, n, out, len);
}

void weftTopoParsePeerInfo(struct weftPeerInfo *peer) {
  peer->hostId[sizeof peer->hostId - 1] = '\0';
  peer->hostname[sizeof peer->hostname - 1] = '\0';
  if (peer->cpus < 1) peer->cpus = 1;
  weftTopoPlaceSanitize(&peer->place);
}

static unsigned long long netnsInode(void) {
  struct stat st;
  return stat("/proc/self/ns/net", &st) == 0 ? (unsigned long long)st.st_ino : 0ULL;
}

weftResult_t weftTopoFillPeerInfo(struct weftPeerInfo *me, int rank, const struct weftTopoHost *host) {
  memset(me, 0, sizeof *me);
  weftTopoPlaceSelf(host, &me->place);
  me->rank = rank;
  me->pid = (int)getpid();
  me->cpus = weftTopoCpuCount();
  gethostname(me->hostname, sizeof me->hostname - 1);
  const char *forced = weftParamHostId();
  char boot[40];
  readBootId(boot, sizeof boot);
  if (*forced)
    snprintf(me->hostId, sizeof me->hostId, "%s", forced);
  else
    snprintf(me->hostId, sizeof me->hostId, "%.20s/%.36s/%llx", me->hostname, boot, netnsInode());
  me->hostHash = fnv1a(me->hostId);
  me->kernelHash = boot[0] != '\0' ? fnv1a(boot) : 0;
  return weftSuccess;
}

static int cpuCount = 0;
static pthread_once_t cpuOnce = PTHREAD_ONCE_INIT;

/* The processing units this process may run on, as hwloc sees them. */
static void detectCpus(void) {
  hwloc_topology_t topo;
  int pus = 0, cores = 0, numa = 0;
  if (hwloc_topology_init(&topo) == 0) {
    if (hwloc_topology_load(topo) == 0) {
      pus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
      cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
      numa = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    }
    hwloc_topology_destroy(topo);
  }
  if (pus <= 0) pus = (int)sysconf(_SC_NPROCESSORS_ONLN);
  if (pus <= 0) pus = 1;
  INFO(WEFT_TOPO, "hwloc: %d PUs, %d cores, %d NUMA nodes", pus, cores, numa);
  cpuCount = pus;
}

int weftTopoCpuCount(void) {
  pthread_once(&cpuOnce, detectCpus);
  return cpuCount;
}
