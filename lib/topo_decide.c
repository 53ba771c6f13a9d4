/* Decisions from the model that are not orders: each rank's NIC (WEFT_NET_DEVICES), the NUMA
 * node a reader's memory belongs on, the PUs a device's thread may be bound to. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "bootstrap.h" /* weftIfnameMatches (lib/socket.c) */
#include "topo.h"

static int nicAllowed(const struct weftTopoDev *d, const char *spec) {
  if (d->kind != WEFT_TOPO_NIC) return 0;
  if (*spec == '\0') return 1;
  int byName = weftIfnameMatches(spec, d->name);
  int byRdma = d->rdma[0] != '\0' && weftIfnameMatches(spec, d->rdma);
  /* an exclusion must exclude both names; an inclusion may name either */
  return spec[0] == '^' ? byName && (d->rdma[0] == '\0' || byRdma) : byName || byRdma;
}

void weftTopoChooseNics(const struct weftTopoHost *host, const struct weftTopoPlace *places, int n,
                        const char *spec, int *nic) {
  int load[WEFT_TOPO_MAX_DEVS] = {0};
  for (int i = 0; i < n; i++) {
    struct weftTopoLoc from;
    const struct weftTopoDev *gpu = places[i].gpu >= 0 ? weftTopoDevOf(host, WEFT_TOPO_GPU, places[i].gpu) : NULL;
    if (gpu != NULL) from = gpu->loc;
    else weftTopoPlaceLoc(host, &places[i], &from);
    int best = -1;
    enum weftTopoDist bestDist = WEFT_TOPO_NUM_DISTS;
    for (int d = 0; d < host->ndevs; d++) {
      if (!nicAllowed(&host->devs[d], spec)) continue;
      enum weftTopoDist dist = weftTopoDistance(&from, &host->devs[d].loc);
      if (best < 0 || dist < bestDist || (dist == bestDist && load[d] < load[best])) {
        best = d;
        bestDist = dist;
      }
    }
    nic[i] = best;
    if (best >= 0) load[best]++;
  }
}

int weftTopoCheckNetDevices(const char *value, char *allowed, size_t len) {
  snprintf(allowed, len, "a comma list of interface or RDMA device names (prefixes; \"^\" first "
           "excludes them, \"=\" first matches exact names), e.g. \"eth0,mlx5_1\", \"^lo\", \"=ib0\"");
  if (value == NULL) return 0;
  const char *s = value + (value[0] == '^');
  s += s[0] == '=';
  if (*s == '\0') return -1;
  size_t item = 0;
  for (; *s; s++) {
    if (*s == ',') {
      if (item == 0) return -1; /* an empty name */
      item = 0;
      continue;
    }
    if (!(*s == '_' || *s == '-' || *s == '.' || *s == ':' || (*s >= '0' && *s <= '9') ||
          (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z')))
      return -1;
    item++;
  }
  return item == 0 ? -1 : 0;
}

int weftTopoMemNode(const struct weftTopoHost *host, const struct weftTopoPlace *place) {
  if (host->fromFile || host->nnuma < 2 || place->numa < 0 || place->numa >= host->nnuma) return -1;
  return host->numaOs[place->numa];
}

/* mbind(2) with MPOL_PREFERRED: the pages go to node while it has memory, elsewhere rather
 * than fail; MPOL_MF_MOVE moves those already touched. */
#define WEFT_MPOL_PREFERRED 1
#define WEFT_MPOL_MF_MOVE (1 << 1)
int weftTopoBindMemory(void *addr, size_t bytes, int node) {
  if (node < 0) return 0;
  unsigned long mask[16] = {0};
  if ((size_t)node >= sizeof mask * 8) return EINVAL;
  mask[node / (8 * sizeof mask[0])] |= 1UL << (node % (8 * sizeof mask[0]));
  long rc = syscall(SYS_mbind, addr, bytes, WEFT_MPOL_PREFERRED, mask, sizeof mask * 8,
                    WEFT_MPOL_MF_MOVE);
  return rc == 0 ? 0 : errno;
}

int weftTopoDevCpus(const struct weftTopoHost *host, const struct weftTopoPlace *self,
                    const struct weftTopoDev *dev, uint8_t *cpus, size_t bytes) {
  memset(cpus, 0, bytes);
  if (self->bound || !dev->localityKnown) return 0; /* the user's binding stands */
  int n = 0;
  for (int p = 0; p < host->puMax && (size_t)p / 8 < bytes && p / 8 < WEFT_TOPO_CPUSET_BYTES; p++) {
    if (host->puCore[p] < 0 || !((self->cpuset[p / 8] >> (p % 8)) & 1)) continue;
    const struct weftTopoLoc *l = &host->cores[host->puCore[p]].loc;
    if (dev->loc.numa >= 0 ? l->numa != dev->loc.numa : l->package != dev->loc.package) continue;
    cpus[p / 8] |= (uint8_t)(1u << (p % 8));
    n++;
  }
  return n;
}
