/* What the topology model makes the tuner predict: the ring's cost() charges the links that
 * cross between packages (their share of the socket link), so on the 2-socket fixtures the
 * package-aware order is predicted faster than rank order, and on a 1-package host both cost
 * the same. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "../../algorithms/hier.h"
#include "../../algorithms/ring.h"
#include "core.h"
#include "topofix.h"

TestSuite(topo_cost, .timeout = 30);

/* n ranks on one host h, local rank i bound to one core, round robin over the packages (as
 * mpirun --map-by socket): places[i]; aware gets the package-aware order, naive rank order. */
static void roundRobin(const struct weftTopoHost *h, int n, struct weftTopoPlace *places,
                       int *hostOf, int *aware, int *naive) {
  int next[8] = {0};
  for (int i = 0; i < n; i++) {
    int pkg = i % h->npackages, seen = 0, core = -1;
    for (int c = 0; c < h->ncores && core < 0; c++)
      if (h->cores[c].loc.package == pkg && seen++ == next[pkg]) core = c;
    cr_assert_geq(core, 0, "package %d has a core for rank %d", pkg, i);
    next[pkg]++;
    topoPlaceOnCore(h, core, &places[i]);
    hostOf[i] = 0;
    aware[i] = naive[i] = i;
  }
  weftTopoOrderHost(places, aware, n);
}

/* The ring's AllReduce cost of bytes with the shm link figures its canConnect reports. */
static double ringCost(const int *order, const struct weftTopoPlace *places, const int *hostOf,
                       int n, size_t bytes) {
  struct weftComm comm;
  memset(&comm, 0, sizeof comm);
  comm.nranks = n;
  comm.nHosts = 1;
  comm.nLocalRanks = n;
  struct weftRing ring = {.n = n, .latencyUs = 0.2, .bandwidthGBs = 6.0,
                          .crossGBs = weftTopoRingCrossGBs(places, hostOf, order, n)};
  return weftRingCost(&comm, &ring, bytes / 4, bytes);
}

static void expectGain(const char *fixture) {
  struct weftTopoHost *h = topoFixtureLoad(fixture);
  enum { N = 16 };
  struct weftTopoPlace places[N];
  int hostOf[N], aware[N], naive[N];
  roundRobin(h, N, places, hostOf, aware, naive);
  cr_expect_eq(weftTopoPackageCrossings(places, hostOf, aware, N), 2, "%s", fixture);
  cr_expect_eq(weftTopoPackageCrossings(places, hostOf, naive, N), N, "%s", fixture);
  /* 16 GB/s of the socket link each way (the default): the aware ring's one link per
   * direction has it all, rank order's 8 links per direction 2 GB/s each */
  cr_expect_float_eq(weftTopoRingCrossGBs(places, hostOf, aware, N), 16.0, 1e-9, "%s", fixture);
  cr_expect_float_eq(weftTopoRingCrossGBs(places, hostOf, naive, N), 2.0, 1e-9, "%s", fixture);
  size_t big = (size_t)64 << 20;
  double a = ringCost(aware, places, hostOf, N, big), b = ringCost(naive, places, hostOf, N, big);
  /* the wire term goes with 1 / bandwidth: 6 GB/s links against 2 GB/s crossings */
  cr_expect(b > 2.9 * a && b < 3.0 * a, "%s: 64 MiB aware %.1f us, rank order %.1f us", fixture, a, b);
  double sa = ringCost(aware, places, hostOf, N, 8), sb = ringCost(naive, places, hostOf, N, 8);
  cr_expect(sb >= sa && sb < sa * 1.01, "%s: 8 B costs a step each, %.2f vs %.2f us", fixture, sa, sb);
  weftTopoHostFree(h);
}

Test(topo_cost, package_aware_ring_predicted_faster) {
  expectGain("topo-2s4n-cpu.xml");
  expectGain("topo-2s4n-8gpu-4nic.xml");
}

Test(topo_cost, socket_bandwidth_setting_scales_the_charge) {
  setenv("WEFT_TOPO_PACKAGE_BW_GBPS", "4", 1);
  struct weftTopoHost *h = topoFixtureLoad("topo-2s4n-cpu.xml");
  enum { N = 8 };
  struct weftTopoPlace places[N];
  int hostOf[N], aware[N], naive[N];
  roundRobin(h, N, places, hostOf, aware, naive);
  cr_expect_float_eq(weftTopoRingCrossGBs(places, hostOf, aware, N), 4.0, 1e-9);
  cr_expect_float_eq(weftTopoRingCrossGBs(places, hostOf, naive, N), 1.0, 1e-9, "4 links each way");
  /* even the aware ring's crossing (4 GB/s) is now slower than the 6 GB/s links */
  struct weftComm comm;
  memset(&comm, 0, sizeof comm);
  struct weftRing ring = {.n = N, .bandwidthGBs = 6.0, .crossGBs = 4.0};
  cr_expect_float_eq(weftRingBandwidth(&ring), 4.0, 1e-9);
  ring.crossGBs = 0;
  cr_expect_float_eq(weftRingBandwidth(&ring), 6.0, 1e-9, "no crossing, no charge");
  weftTopoHostFree(h);
}

Test(topo_cost, one_package_costs_the_same) {
  struct weftTopoHost *h = topoFixtureLoad("topo-laptop.xml");
  enum { N = 4 };
  struct weftTopoPlace places[N];
  int hostOf[N], aware[N], naive[N];
  roundRobin(h, N, places, hostOf, aware, naive);
  int reversed[N] = {3, 1, 2, 0};
  cr_expect_float_eq(weftTopoRingCrossGBs(places, hostOf, naive, N), 0.0, 1e-12);
  cr_expect_float_eq(weftTopoRingCrossGBs(places, hostOf, reversed, N), 0.0, 1e-12);
  for (size_t bytes = 8; bytes <= ((size_t)64 << 20); bytes *= 64) {
    double a = ringCost(aware, places, hostOf, N, bytes), b = ringCost(naive, places, hostOf, N, bytes);
    double c = ringCost(reversed, places, hostOf, N, bytes);
    cr_expect(a == b && b == c, "%zu B: %.3f, %.3f, %.3f us", bytes, a, b, c);
  }
  weftTopoHostFree(h);
}

Test(topo_cost, links_between_hosts_are_not_crossings) {
  struct weftTopoHost *h = topoFixtureLoad("topo-2s-2pu.xml");
  /* two hosts of one rank each on different packages: the ring passes between hosts, not
   * between the packages of one */
  struct weftTopoPlace places[2];
  topoPlaceOnCore(h, 0, &places[0]);
  topoPlaceOnCore(h, 1, &places[1]);
  int hostOf[2] = {0, 1}, order[2] = {0, 1};
  cr_expect_float_eq(weftTopoRingCrossGBs(places, hostOf, order, 2), 0.0, 1e-12);
  hostOf[1] = 0;
  cr_expect_float_eq(weftTopoRingCrossGBs(places, hostOf, order, 2), 16.0, 1e-9,
                     "one host: a link each way, each with all of it");
  weftTopoHostFree(h);
}

/* An AllReduce of fewer elements than ranks across hosts (8 B = 2 floats on 4 hosts x 2):
 * where the machine's cores are the bottleneck (emulated hosts on one kernel), the ring is
 * charged the messages a rank handles (2 of 8 chunks carry data); with a core per rank, the
 * path of a chunk that carries data, a network hop per host crossed and a shared-memory hop
 * for the rest, each way. */
Test(topo_cost, sparse_ring_latency) {
  struct weftComm comm;
  memset(&comm, 0, sizeof comm);
  comm.nranks = 8;
  comm.nHosts = 4;
  struct weftRing ring = {.n = 8, .latencyUs = 20.0, .bandwidthGBs = 1.0};
  double step = 20.0 + 0.3, wire = 2.0 * 7 / 8 * 8 / 1e3;
  comm.cpuBound = 1;
  cr_expect_float_eq(weftRingCost(&comm, &ring, 2, 8), 2.0 * 7 * step * 2 / 8 + wire, 1e-9);
  comm.cpuBound = 0;
  cr_expect_float_eq(weftRingCost(&comm, &ring, 2, 8), 2.0 * (4 * step + 3 * 0.5) + wire, 1e-9);
  /* as many elements as ranks: every step is charged at the slowest link */
  cr_expect_float_eq(weftRingCost(&comm, &ring, 8, 32), 2.0 * 7 * step + 2.0 * 7 / 8 * 32 / 1e3, 1e-9);
}

/* 8 ranks on the first package of the 4-NUMA fixture, alternating its two NUMA nodes: in rank
 * order every link crosses between them, 4 each way sharing the 32 GB/s default; in the aware
 * order one link each way crosses and has it all. WEFT_TOPO_NUMA_BW_GBPS scales it. */
static double numaCrossGBs(int aware) {
  struct weftTopoHost *h = topoFixtureLoad("topo-2s4n-cpu.xml");
  enum { N = 8 };
  struct weftTopoPlace places[N];
  int hostOf[N], order[N], used[2] = {0, 0}, numas[2] = {-1, -1};
  for (int c = 0; c < h->ncores; c++) { /* the package's two NUMA nodes */
    int nd = h->cores[c].loc.numa;
    if (h->cores[c].loc.package != 0) continue;
    if (numas[0] < 0) numas[0] = nd;
    else if (numas[1] < 0 && nd != numas[0]) numas[1] = nd;
  }
  cr_assert(numas[0] >= 0 && numas[1] >= 0, "package 0 has two NUMA nodes");
  for (int i = 0; i < N; i++) {
    int want = numas[i % 2], core = -1, seen = 0;
    for (int c = 0; c < h->ncores && core < 0; c++)
      if (h->cores[c].loc.package == 0 && h->cores[c].loc.numa == want && seen++ == used[i % 2]) core = c;
    cr_assert_geq(core, 0, "NUMA node %d has a core for rank %d", want, i);
    used[i % 2]++;
    topoPlaceOnCore(h, core, &places[i]);
    hostOf[i] = 0;
    order[i] = i;
  }
  if (aware) weftTopoOrderHost(places, order, N);
  double gbs = weftTopoRingCrossGBs(places, hostOf, order, N);
  weftTopoHostFree(h);
  return gbs;
}

Test(topo_cost, numa_crossings_share_the_package) {
  cr_expect_float_eq(numaCrossGBs(0), 8.0, 1e-9, "rank order: 4 links each way between the nodes");
  cr_expect_float_eq(numaCrossGBs(1), 32.0, 1e-9, "aware order: one link each way");
  setenv("WEFT_TOPO_NUMA_BW_GBPS", "4", 1);
  cr_expect_float_eq(numaCrossGBs(1), 4.0, 1e-9);
  unsetenv("WEFT_TOPO_NUMA_BW_GBPS");
}

/* The hierarchical algorithms' layout orders each host's ranks as the ring does (package, NUMA
 * node, core): two hosts of three ranks whose packages alternate (rank r on package r % 2 of
 * the 2-socket fixture) chain 0 2 1 and 4 3 5, with 0 and 4 leading; runs stay in rank order. */
Test(topo_cost, hier_layout_follows_packages) {
  struct weftTopoHost *h = topoFixtureLoad("topo-2s4n-cpu.xml");
  enum { N = 6 };
  struct weftPeerInfo peers[N];
  memset(peers, 0, sizeof peers);
  int firstCore[2] = {-1, -1};
  for (int c = 0; c < h->ncores; c++) {
    int pkg = h->cores[c].loc.package;
    if (pkg >= 0 && pkg < 2 && firstCore[pkg] < 0) firstCore[pkg] = c;
  }
  cr_assert(firstCore[0] >= 0 && firstCore[1] >= 0);
  for (int r = 0; r < N; r++) {
    peers[r].rank = r;
    peers[r].hostHash = r < 3 ? 11 : 22;
    topoPlaceOnCore(h, firstCore[r % 2], &peers[r].place);
  }
  struct weftComm comm;
  memset(&comm, 0, sizeof comm);
  comm.nranks = N;
  comm.peers = peers;
  struct hierLayout L;
  cr_assert_eq(weftHierLayoutInit(&comm, &L), weftSuccess);
  const int byHost[N] = {0, 2, 1, 4, 3, 5}, localIndex[N] = {0, 2, 1, 1, 0, 2};
  for (int i = 0; i < N; i++) {
    cr_expect_eq(L.byHost[i], byHost[i], "byHost[%d]", i);
    cr_expect_eq(L.localIndex[i], localIndex[i], "localIndex of rank %d", i);
  }
  cr_expect(L.h == 2 && L.leader[0] == 0 && L.leader[1] == 4, "leaders %d %d", L.leader[0], L.leader[1]);
  cr_expect(L.runs[0].first == 0 && L.runs[0].nparts == 3 && L.runs[1].first == 3, "runs in rank order");
  weftHierLayoutFree(&L);
  weftTopoHostFree(h);
}
