/* weft-topo: the topology weft sees, and what it would decide from it.
 *   weft-topo                      this host, detected by hwloc (or WEFT_TOPO_FILE's)
 *   weft-topo -i FILE.xml          the host an hwloc XML file describes
 *   weft-topo --hosts H --ranks-per-host M [--map package|core] [--json]
 *                                  a job of H such hosts, M ranks on each, each rank bound to
 *                                  one core (--map package: local rank i on package i mod P,
 *                                  as mpirun --map-by socket; core: i-th core block by block):
 *                                  the ring (package-aware, and the rank-order one for
 *                                  comparison), the tree algorithm's two trees, each rank's NIC
 *                                  (WEFT_NET_DEVICES applies), and the tuner's predicted
 *                                  AllReduce time per algorithm at a few sizes, from each
 *                                  algorithm's own cost() with the links' default figures
 *                                  (shm inside a host, WEFT_TCP_LAT_US / WEFT_TCP_BW_GBPS
 *                                  between hosts). --json prints WEFT_GRAPH_DUMP_FILE's JSON.
 * Exits 1 on a bad argument or a file hwloc cannot read (the message says why). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../algorithms/direct.h"
#include "../algorithms/hier.h"
#include "../algorithms/hier_numa.h"
#include "../algorithms/ring.h"
#include "../algorithms/tree.h"
#include "core.h"
#include "param.h"
#include "settings.h"
#include "topo.h"

struct job {
  const struct weftTopoHost *host;
  int hosts, perHost, n, byCore;
  int *hostOf, *ring, *naive;
  struct weftTopoPlace *places;
  struct weftTopoNicInfo *nics;
};

/* Local rank i's core: round robin over packages (byCore 0), or blocks of cores in order. */
static int coreFor(const struct weftTopoHost *h, int i, int m, int byCore) {
  if (byCore || h->npackages < 2) return (int)((long)i * h->ncores / (m > h->ncores ? m : h->ncores)) % h->ncores;
  int pkg = i % h->npackages, k = i / h->npackages, seen = 0;
  for (int c = 0; c < h->ncores; c++)
    if (h->cores[c].loc.package == pkg && seen++ == k % (h->ncores / h->npackages)) return c;
  return i % h->ncores;
}

static void placeRanks(struct job *j) {
  const struct weftTopoHost *h = j->host;
  for (int r = 0; r < j->n; r++) {
    uint8_t cpus[WEFT_TOPO_CPUSET_BYTES] = {0};
    const struct weftTopoCore *c = &h->cores[coreFor(h, r % j->perHost, j->perHost, j->byCore)];
    for (int p = 0; p < h->puMax && p / 8 < WEFT_TOPO_CPUSET_BYTES; p++)
      if (h->puCore[p] == c->loc.core) cpus[p / 8] |= (uint8_t)(1u << (p % 8));
    weftTopoPlaceOfCpus(h, cpus, sizeof cpus, &j->places[r]);
    j->hostOf[r] = r / j->perHost;
    j->ring[r] = j->naive[r] = r;
  }
  int *nic = malloc(sizeof(int) * (size_t)j->perHost);
  for (int k = 0; k < j->hosts; k++) {
    weftTopoOrderHost(j->places, j->ring + k * j->perHost, j->perHost);
    weftTopoChooseNics(h, j->places + k * j->perHost, j->perHost, weftParamNetDevices(), nic);
    for (int i = 0; i < j->perHost; i++) {
      struct weftTopoNicInfo *ni = &j->nics[k * j->perHost + i];
      memset(ni, 0, sizeof *ni);
      ni->dev = nic[i];
      ni->speedMbps = nic[i] >= 0 ? h->devs[nic[i]].speedMbps : -1;
      ni->dist = WEFT_TOPO_SAME_MACHINE;
      if (nic[i] < 0) continue;
      snprintf(ni->name, sizeof ni->name, "%s", h->devs[nic[i]].name);
      struct weftTopoLoc at;
      weftTopoPlaceLoc(h, &j->places[k * j->perHost + i], &at);
      ni->dist = (int32_t)weftTopoDistance(&at, &h->devs[nic[i]].loc);
    }
  }
  free(nic);
}

static void printOrder(const char *what, const struct job *j, const int *order) {
  printf("%s (%d package crossings):", what, weftTopoPackageCrossings(j->places, j->hostOf, order, j->n));
  for (int i = 0; i < j->n; i++) printf(" %d", order[i]);
  printf("\n");
}

static void printJob(const struct job *j) {
  printf("\nJob: %d hosts x %d ranks, one core each (%s)\n", j->hosts, j->perHost,
         j->byCore ? "cores in order" : "round robin over packages");
  for (int r = 0; r < j->n; r++) {
    const struct weftTopoPlace *p = &j->places[r];
    const struct weftTopoNicInfo *ni = &j->nics[r];
    printf("  rank %3d: host %d, core %d, NUMA node %d, package %d, NIC %s (%s)\n", r, j->hostOf[r],
           p->core, p->numa, p->package, ni->name[0] ? ni->name : "none",
           weftTopoDistName((enum weftTopoDist)ni->dist));
  }
  printOrder("Ring", j, j->ring);
  printOrder("Ring in rank order (without topology)", j, j->naive);
  /* every ring link carries 2(n-1)/n of an AllReduce's bytes; those that cross packages put
   * it on the link between the sockets */
  double perLink = j->n > 1 ? 2.0 * (j->n - 1) / j->n : 0;
  int aware = weftTopoPackageCrossings(j->places, j->hostOf, j->ring, j->n);
  int naive = weftTopoPackageCrossings(j->places, j->hostOf, j->naive, j->n);
  printf("Inter-package traffic of one AllReduce of B bytes, all hosts: %.2f B (rank order: %.2f B)\n",
         aware * perLink, naive * perLink);
  for (int t = 0; t < 2; t++) {
    printf("Tree %d (root %d), parent of each rank:", t, weftTreeRootOf(t, j->n));
    for (int v = 0; v < j->n; v++) {
      struct weftTreeNode node;
      weftTreeNodeOf(v, t, j->n, &node);
      printf(" %d", node.parent);
    }
    printf("\n");
  }
}

/* ---- The tuner's view: a communicator of this shape, with the algorithms' states filled as
 * their init would on these links. ---- */

struct model {
  struct weftComm comm;
  struct weftRing naiveRing;
  struct treeState tree;
  struct hierState hier;
  struct directState direct;
  struct numaState numa;
  int hierOk, numaOk;
};

static double paramNumber(const char *text, double fallback) {
  double v;
  return weftParseNumber(text, &v) == 0 && v > 0 ? v : fallback;
}

static void linkFigures(const struct job *j, double *lat, double *bw) {
  double shmLat = 0.2, shmBw = 6.0; /* transports/shm: what its canConnect reports */
  *lat = j->hosts > 1 ? paramNumber(weftParamTcpLatUs(), 20) : shmLat;
  *bw = j->hosts > 1 ? paramNumber(weftParamTcpBwGbps(), 1.5) : shmBw;
}

/* hiernuma's rings, where the job's layout has its shape: inside a host shm's figures. */
static void buildNumaModel(const struct job *j, struct model *m, double lat, double bw) {
  char why[160];
  if (weftNumaLayoutInit(&m->comm, &m->numa.L, why, sizeof why) != 0) return;
  const struct numaLayout *L = &m->numa.L;
  int *order = malloc(sizeof(int) * (size_t)j->n);
  if (order == NULL) {
    weftNumaLayoutFree(&m->numa.L);
    return;
  }
  weftNumaCrossOrder(L, order);
  m->numa.numa = (struct weftRing){.n = L->m, .latencyUs = 0.2, .bandwidthGBs = 6.0};
  m->numa.cross = (struct weftRing){.n = L->g, .latencyUs = 0.2, .bandwidthGBs = 6.0,
                                    .crossGBs = weftTopoRingCrossGBs(j->places, j->hostOf, order, j->n)};
  m->numa.inter = (struct weftRing){.n = L->h, .latencyUs = lat, .bandwidthGBs = bw};
  free(order);
  m->numaOk = 1;
}

static int buildModel(const struct job *j, struct model *m) {
  memset(m, 0, sizeof *m);
  struct weftComm *c = &m->comm;
  c->nranks = j->n;
  c->nHosts = j->hosts;
  c->nLocalRanks = j->perHost;
  c->oversubscribed = j->perHost > j->host->npus;
  c->cpuBound = c->oversubscribed;
  c->peers = calloc((size_t)j->n, sizeof *c->peers);
  if (c->peers == NULL) return -1;
  for (int r = 0; r < j->n; r++) {
    c->peers[r].hostHash = 1000 + (uint64_t)j->hostOf[r];
    c->peers[r].place = j->places[r];
  }
  double lat, bw;
  linkFigures(j, &lat, &bw);
  c->ring = (struct weftRing){.n = j->n, .latencyUs = lat, .bandwidthGBs = bw,
                              .pieceBytes = (size_t)weftParamShmSlotBytes(),
                              .crossGBs = weftTopoRingCrossGBs(j->places, j->hostOf, j->ring, j->n)};
  m->naiveRing = c->ring;
  m->naiveRing.crossGBs = weftTopoRingCrossGBs(j->places, j->hostOf, j->naive, j->n);
  m->tree.latencyUs = lat;
  m->tree.bandwidthGBs = bw;
  for (m->tree.depth = 0; (1 << m->tree.depth) <= j->n; m->tree.depth++) {}
  m->tree.perHost = j->hosts > 1 ? j->perHost : 1;
  m->direct.n = j->n;
  m->direct.chunkBytes = (size_t)weftParamDirectChunkBytes();
  m->direct.cmaMinBytes = (size_t)weftParamDirectCmaMinBytes();
  m->direct.cmaOk = weftParamDirectCma() != 0;
  if (j->hosts > 1 && weftHierLayoutInit(c, &m->hier.L) == weftSuccess) {
    m->hierOk = 1;
    m->hier.slices = m->hier.L.minSize == m->hier.L.maxSize && m->hier.L.minSize >= 2;
    m->hier.local = (struct weftRing){.n = j->perHost, .latencyUs = 0.2, .bandwidthGBs = 6.0};
    m->hier.inter = (struct weftRing){.n = j->hosts, .latencyUs = lat, .bandwidthGBs = bw};
    m->hier.netLatencyUs = lat;
    m->hier.netBandwidthGBs = bw;
    m->hier.localBandwidthGBs = 6.0;
    m->hier.pieceBytes = (size_t)weftParamShmSlotBytes();
    m->hier.slots = (size_t)weftParamRingChunkSlots();
  }
  buildNumaModel(j, m, lat, bw);
  return 0;
}

static void *stateOf(struct model *m, const char *name) {
  if (strcmp(name, "ring") == 0) return &m->comm.ring;
  if (strcmp(name, "tree") == 0) return &m->tree;
  if (strcmp(name, "hier") == 0) return m->hierOk ? &m->hier : NULL;
  if (strcmp(name, "hiernuma") == 0) return m->numaOk ? &m->numa : NULL;
  if (strcmp(name, "direct") == 0) return m->comm.nHosts == 1 ? &m->direct : NULL;
  return NULL;
}

/* What the package-aware order saves over rank order, by the ring's own cost(). */
static void printRingGain(struct model *m) {
  size_t bytes = (size_t)256 << 20;
  size_t count = bytes / 4;
  double aware = weftRingCost(&m->comm, &m->comm.ring, count, bytes);
  double naive = weftRingCost(&m->comm, &m->naiveRing, count, bytes);
  printf("Ring links between packages get %.2f GB/s (rank order: %.2f; 0: none cross), links "
         "%.2f GB/s:\n  package-aware ring %.1f us, rank order %.1f us at 256 MiB (%.2fx)\n",
         m->comm.ring.crossGBs, m->naiveRing.crossGBs, m->comm.ring.bandwidthGBs, aware, naive,
         naive / aware);
}

static void printCosts(const struct job *j) {
  struct model m;
  if (buildModel(j, &m) != 0) return;
  static const size_t sizes[] = {8, 4096, 65536, 1 << 20, 16 << 20, 256 << 20};
  printf("\nPredicted AllReduce time (us), float sum, by each algorithm's cost():\n  %-10s", "bytes");
  for (int a = 0; weftAlgos[a] != NULL; a++)
    if (weftAlgos[a]->colls & WEFT_COLL_BIT(weftCollAllReduce)) printf(" %12s", weftAlgos[a]->name);
  printf("   choice   ring in rank order\n");
  for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
    struct weftCollArgs args = {.coll = weftCollAllReduce, .count = sizes[s] / 4, .bytes = sizes[s],
                                .type = weftFloat32, .op = weftSum, .root = -1};
    printf("  %-10zu", sizes[s]);
    const char *best = "-";
    double bestUs = 0;
    for (int a = 0; weftAlgos[a] != NULL; a++) {
      if (!(weftAlgos[a]->colls & WEFT_COLL_BIT(weftCollAllReduce))) continue;
      void *st = stateOf(&m, weftAlgos[a]->name);
      if (st == NULL) {
        printf(" %12s", "n/a");
        continue;
      }
      double us = weftAlgos[a]->cost(st, &m.comm, &args);
      printf(" %12.1f", us);
      if (best[0] == '-' || us < bestUs) best = weftAlgos[a]->name, bestUs = us;
    }
    printf("   %-8s %12.1f\n", best, weftRingCost(&m.comm, &m.naiveRing, args.count, args.bytes));
  }
  printRingGain(&m);
  if (m.hierOk) weftHierLayoutFree(&m.hier.L);
  if (m.numaOk) weftNumaLayoutFree(&m.numa.L);
  free(m.comm.peers);
}

static int usage(const char *why) {
  fprintf(stderr, "weft-topo: %s\nusage: weft-topo [-i FILE.xml] [--hosts H --ranks-per-host M "
          "[--map package|core] [--json]]\n", why);
  return 1;
}

static int runJob(const struct weftTopoHost *host, int hosts, int perHost, int byCore, int json) {
  struct job j = {host, hosts, perHost, hosts * perHost, byCore, NULL, NULL, NULL, NULL, NULL};
  j.hostOf = malloc(sizeof(int) * (size_t)j.n);
  j.ring = malloc(sizeof(int) * (size_t)j.n);
  j.naive = malloc(sizeof(int) * (size_t)j.n);
  j.places = malloc(sizeof *j.places * (size_t)j.n);
  j.nics = malloc(sizeof *j.nics * (size_t)j.n);
  int ok = j.hostOf && j.ring && j.naive && j.places && j.nics;
  if (ok) {
    placeRanks(&j);
    struct weftTopoGraph g = {j.n, j.hostOf, j.places, j.nics, j.ring};
    if (json) weftTopoGraphWrite(&g, stdout);
    else printJob(&j), printCosts(&j);
  }
  free(j.hostOf);
  free(j.ring);
  free(j.naive);
  free(j.places);
  free(j.nics);
  return ok ? 0 : usage("out of memory");
}

int main(int argc, char **argv) {
  const char *file = NULL;
  int hosts = 0, perHost = 0, byCore = 0, json = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "-i") == 0 && v) file = v, i++;
    else if (strcmp(a, "--hosts") == 0 && v) hosts = atoi(v), i++;
    else if (strcmp(a, "--ranks-per-host") == 0 && v) perHost = atoi(v), i++;
    else if (strcmp(a, "--map") == 0 && v && (strcmp(v, "core") == 0 || strcmp(v, "package") == 0))
      byCore = strcmp(v, "core") == 0, i++;
    else if (strcmp(a, "--json") == 0) json = 1;
    else return usage("unknown or incomplete argument");
  }
  if ((hosts != 0 || perHost != 0) && (hosts < 1 || perHost < 1 || hosts > 4096 || perHost > 4096))
    return usage("--hosts and --ranks-per-host need 1..4096 each, together");
  if (weftSettingsCheck("weft-topo") != weftSuccess) return usage(weftGetLastError(NULL));
  if (file == NULL && *weftParamTopoFile()) file = weftParamTopoFile();
  struct weftTopoHost *host;
  if (weftTopoHostLoad(file, &host) != weftSuccess) {
    fprintf(stderr, "weft-topo: %s\n", weftGetLastError(NULL));
    return 1;
  }
  if (!json) weftTopoHostPrint(host, stdout);
  int rc = hosts > 0 ? runJob(host, hosts, perHost, byCore, json) : 0;
  weftTopoHostFree(host);
  return rc;
}
