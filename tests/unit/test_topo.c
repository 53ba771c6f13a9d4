/* The topology model from the hwloc XML fixtures of tests/data (made by
 * tests/data/make-topo-fixtures.py, which says what each holds): counts, distances, places,
 * the ring order inside a host, the NIC of each rank with WEFT_NET_DEVICES, the NUMA node of
 * a FIFO, the fallbacks and their one warning, a bad file refused, the dump read back, and a
 * job whose ranks are bound to the two packages of an injected topology. Each Criterion test
 * runs in a process of its own, so its environment and the model cache start fresh. */
#include <criterion/criterion.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "caps.h"
#include "core.h"
#include "forked.h"
#include "shmseg.h"
#include "harness.h"
#include "topo.h"
#include "topofix.h"

TestSuite(topo_model, .timeout = 30);
TestSuite(topo_decide, .timeout = 30);
TestSuite(topo_files, .timeout = 30);
TestSuite(topo_job, .timeout = 60);
TestSuite(topo_tool, .timeout = 30);

static int nicIndex(const struct weftTopoHost *h, const char *name) {
  for (int i = 0; i < h->ndevs; i++)
    if (h->devs[i].kind == WEFT_TOPO_NIC && strcmp(h->devs[i].name, name) == 0) return i;
  cr_assert_fail("no NIC %s", name);
  return -1;
}

static void placeUnbound(const struct weftTopoHost *h, struct weftTopoPlace *p) {
  uint8_t cpus[WEFT_TOPO_CPUSET_BYTES];
  memset(cpus, 0xff, sizeof cpus);
  weftTopoPlaceOfCpus(h, cpus, sizeof cpus, p);
}

Test(topo_model, counts_of_the_8_gpu_server) {
  struct weftTopoHost *h = topoFixtureLoad("topo-2s4n-8gpu-4nic.xml");
  cr_expect_eq(h->npackages, 2);
  cr_expect_eq(h->nnuma, 4);
  cr_expect_eq(h->ncaches, 4);
  cr_expect_eq(h->ncores, 16);
  cr_expect_eq(h->npus, 32);
  cr_expect_eq(h->ngpus, 8);
  cr_expect_eq(h->nnics, 4);
  cr_expect_str_empty(h->missing, "nothing is missing, got \"%s\"", h->missing);
  for (int i = 0; i < 4; i++) {
    char eth[24], mlx[24];
    snprintf(eth, sizeof eth, "eth%d", i);
    snprintf(mlx, sizeof mlx, "mlx5_%d", i);
    const struct weftTopoDev *d = &h->devs[nicIndex(h, eth)];
    cr_expect_str_eq(d->rdma, mlx);
    cr_expect_eq(d->loc.numa, i, "%s on NUMA node %d", eth, d->loc.numa);
    cr_expect_eq(d->loc.package, i / 2);
    cr_expect_eq(d->speedMbps, -1, "a file's NIC has no speed of this machine's");
  }
  cr_expect_str_eq(weftTopoDevOf(h, WEFT_TOPO_GPU, 5)->name, "cuda5");
  /* core c has PUs c and c + 16 (Linux's numbering of hyperthreads) */
  cr_expect_eq(h->puCore[3], 3);
  cr_expect_eq(h->puCore[19], 3);
  cr_expect_eq(h->cores[9].loc.numa, 2);
  weftTopoHostFree(h);
}

Test(topo_model, counts_of_the_others) {
  static const struct {
    const char *file;
    int packages, numa, cores, pus, gpus, nics;
  } want[] = {
      {"topo-2s4n-cpu.xml", 2, 4, 16, 32, 0, 0},
      {"topo-2s2n-2nic-gpu.xml", 2, 2, 8, 8, 1, 2},
      {"topo-laptop.xml", 1, 1, 4, 8, 1, 1},
      {"topo-vm.xml", 1, 1, 2, 2, 0, 1},
      {"topo-2s-2pu.xml", 2, 2, 2, 2, 0, 2},
  };
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    struct weftTopoHost *h = topoFixtureLoad(want[i].file);
    cr_expect(h->npackages == want[i].packages && h->nnuma == want[i].numa && h->ncores == want[i].cores &&
                  h->npus == want[i].pus && h->ngpus == want[i].gpus && h->nnics == want[i].nics,
              "%s: %d packages %d NUMA %d cores %d PUs %d GPUs %d NICs", want[i].file, h->npackages,
              h->nnuma, h->ncores, h->npus, h->ngpus, h->nnics);
    weftTopoHostFree(h);
  }
}

Test(topo_model, distances) {
  struct weftTopoHost *h = topoFixtureLoad("topo-2s4n-8gpu-4nic.xml");
  const struct weftTopoLoc *c0 = &h->cores[0].loc;
  cr_expect_eq(weftTopoDistance(c0, c0), WEFT_TOPO_SAME_CORE);
  cr_expect_eq(weftTopoDistance(c0, &h->cores[3].loc), WEFT_TOPO_SAME_CACHE);
  cr_expect_eq(weftTopoDistance(c0, &h->cores[4].loc), WEFT_TOPO_SAME_PACKAGE);
  cr_expect_eq(weftTopoDistance(c0, &h->cores[8].loc), WEFT_TOPO_SAME_MACHINE);
  const struct weftTopoDev *g0 = weftTopoDevOf(h, WEFT_TOPO_GPU, 0), *g1 = weftTopoDevOf(h, WEFT_TOPO_GPU, 1);
  const struct weftTopoDev *g2 = weftTopoDevOf(h, WEFT_TOPO_GPU, 2);
  cr_expect_eq(weftTopoDistance(&g0->loc, &g1->loc), WEFT_TOPO_SAME_PCI_SWITCH);
  cr_expect_eq(weftTopoDistance(&g0->loc, &h->devs[nicIndex(h, "eth0")].loc), WEFT_TOPO_SAME_PCI_SWITCH);
  cr_expect_eq(weftTopoDistance(&g0->loc, &g2->loc), WEFT_TOPO_SAME_PACKAGE);
  cr_expect_eq(weftTopoDistance(&g0->loc, &h->devs[nicIndex(h, "eth3")].loc), WEFT_TOPO_SAME_MACHINE);
  cr_expect_eq(weftTopoDistance(c0, &h->devs[nicIndex(h, "eth0")].loc), WEFT_TOPO_SAME_NUMA);
  weftTopoHostFree(h);
  h = topoFixtureLoad("topo-laptop.xml");
  cr_expect_eq(weftTopoDistance(&h->devs[0].loc, &h->devs[1].loc), WEFT_TOPO_SAME_HOST_BRIDGE,
               "wlan0 and the GPU hang off one host bridge, no switch");
  weftTopoHostFree(h);
}

Test(topo_model, places) {
  struct weftTopoHost *h = topoFixtureLoad("topo-2s4n-8gpu-4nic.xml");
  struct weftTopoPlace p;
  uint8_t cpus[WEFT_TOPO_CPUSET_BYTES] = {0};
  cpus[2] = 1 << 3; /* PU 19: core 3's second hyperthread */
  weftTopoPlaceOfCpus(h, cpus, sizeof cpus, &p);
  cr_expect(p.core == 3 && p.ncores == 1 && p.numa == 0 && p.package == 0 && p.bound,
            "PU 19: core %d (%d), NUMA %d, package %d, bound %d", p.core, p.ncores, p.numa, p.package, p.bound);
  memset(cpus, 0, sizeof cpus);
  cpus[0] = 0xf0; /* PUs 4-7: cores 4-7, NUMA node 1 */
  weftTopoPlaceOfCpus(h, cpus, sizeof cpus, &p);
  cr_expect(p.core == 4 && p.ncores == 4 && p.numa == 1 && p.package == 0, "PUs 4-7: core %d (%d) NUMA %d",
            p.core, p.ncores, p.numa);
  placeUnbound(h, &p);
  cr_expect(!p.bound && p.ncores == 16 && p.numa == -1 && p.package == -1,
            "unbound: %d cores, NUMA %d, package %d, bound %d", p.ncores, p.numa, p.package, p.bound);
  struct weftTopoPlace bad = p;
  bad.core = -7;
  bad.numa = 1 << 30;
  bad.ncores = -3;
  weftTopoPlaceSanitize(&bad);
  cr_expect(bad.core == -1 && bad.numa == -1 && bad.ncores == 0, "a peer's nonsense is clamped");
  weftTopoHostFree(h);
}

/* 8 ranks of one host bound round robin over the packages (mpirun --map-by socket): rank r on
 * package r % 2. The ring visits package 0's ranks, then package 1's: 2 crossings, the least a
 * ring through both packages can make; rank order makes 8. */
Test(topo_decide, ring_crosses_packages_least) {
  struct weftTopoHost *h = topoFixtureLoad("topo-2s4n-8gpu-4nic.xml");
  struct weftTopoPlace places[8];
  int order[8], naive[8], hostOf[8] = {0};
  for (int r = 0; r < 8; r++) {
    topoPlaceOnCore(h, (r % 2) * 8 + r / 2, &places[r]);
    order[r] = naive[r] = r;
  }
  weftTopoOrderHost(places, order, 8);
  static const int want[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  for (int i = 0; i < 8; i++) cr_expect_eq(order[i], want[i], "position %d: rank %d", i, order[i]);
  cr_expect_eq(weftTopoPackageCrossings(places, hostOf, order, 8), 2);
  cr_expect_eq(weftTopoPackageCrossings(places, hostOf, naive, 8), 8);
  /* two hosts of 4: crossings only count inside a host */
  int two[8] = {0, 0, 0, 0, 1, 1, 1, 1}, order2[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  weftTopoOrderHost(places, order2, 4);
  weftTopoOrderHost(places, order2 + 4, 4);
  cr_expect_eq(weftTopoPackageCrossings(places, two, order2, 8), 2, "one per host");
  weftTopoHostFree(h);
}

Test(topo_decide, unplaced_ranks_keep_rank_order) {
  struct weftTopoHost *h = topoFixtureLoad("topo-vm.xml");
  struct weftTopoPlace places[3];
  int order[3] = {0, 1, 2};
  for (int r = 0; r < 3; r++) placeUnbound(h, &places[r]);
  places[1].package = places[1].numa = places[1].core = -1; /* a peer that knows nothing */
  weftTopoOrderHost(places, order, 3);
  cr_expect(order[0] == 0 && order[1] == 2 && order[2] == 1, "order %d %d %d", order[0], order[1], order[2]);
  weftTopoHostFree(h);
}

/* One rank per NUMA node gets the NIC of its node; 8 ranks on NUMA node 0 all take eth0 (the
 * closest); unbound ranks spread over the 4 NICs; a rank with a GPU takes the GPU's NIC. */
Test(topo_decide, nic_closest_and_spread) {
  struct weftTopoHost *h = topoFixtureLoad("topo-2s4n-8gpu-4nic.xml");
  struct weftTopoPlace places[8];
  int nic[8];
  for (int i = 0; i < 4; i++) topoPlaceOnCore(h, 4 * i + 1, &places[i]);
  weftTopoChooseNics(h, places, 4, "", nic);
  for (int i = 0; i < 4; i++) {
    char eth[24];
    snprintf(eth, sizeof eth, "eth%d", i);
    cr_expect_eq(nic[i], nicIndex(h, eth), "rank on NUMA node %d: %s", i, nic[i] >= 0 ? h->devs[nic[i]].name : "none");
  }
  for (int i = 0; i < 4; i++) topoPlaceOnCore(h, i, &places[i]);
  weftTopoChooseNics(h, places, 4, "", nic);
  for (int i = 0; i < 4; i++) cr_expect_eq(nic[i], nicIndex(h, "eth0"));
  for (int i = 0; i < 8; i++) placeUnbound(h, &places[i]);
  weftTopoChooseNics(h, places, 8, "", nic);
  int uses[WEFT_TOPO_MAX_DEVS] = {0};
  for (int i = 0; i < 8; i++) uses[nic[i]]++;
  for (int i = 0; i < 4; i++) {
    char eth[24];
    snprintf(eth, sizeof eth, "eth%d", i);
    cr_expect_eq(uses[nicIndex(h, eth)], 2, "8 unbound ranks: 2 on %s", eth);
  }
  topoPlaceOnCore(h, 0, &places[0]);
  places[0].gpu = 5; /* cuda5: NUMA node 2's switch */
  weftTopoChooseNics(h, places, 1, "", nic);
  cr_expect_eq(nic[0], nicIndex(h, "eth2"), "the GPU's NIC, not the cores'");
  weftTopoHostFree(h);
}

Test(topo_decide, net_devices_override) {
  struct weftTopoHost *h = topoFixtureLoad("topo-2s4n-8gpu-4nic.xml");
  struct weftTopoPlace places[4];
  int nic[4];
  for (int i = 0; i < 4; i++) topoPlaceOnCore(h, i, &places[i]); /* all on NUMA node 0 */
  weftTopoChooseNics(h, places, 4, "eth2", nic);
  for (int i = 0; i < 4; i++) cr_expect_eq(nic[i], nicIndex(h, "eth2"), "eth2 only");
  weftTopoChooseNics(h, places, 4, "^eth0", nic);
  for (int i = 0; i < 4; i++) cr_expect_eq(nic[i], nicIndex(h, "eth1"), "^eth0: the next closest, same package");
  weftTopoChooseNics(h, places, 4, "mlx5_3,mlx5_2", nic);
  cr_expect(nic[0] == nicIndex(h, "eth2") && nic[1] == nicIndex(h, "eth3") && nic[2] == nicIndex(h, "eth2"),
            "RDMA names; equally far: spread");
  weftTopoChooseNics(h, places, 4, "=eth", nic);
  for (int i = 0; i < 4; i++) cr_expect_eq(nic[i], -1, "=eth names no NIC exactly");
  weftTopoChooseNics(h, places, 4, "eth", nic);
  for (int i = 0; i < 4; i++) cr_expect_eq(nic[i], nicIndex(h, "eth0"), "a prefix of all: the closest");
  char allowed[256];
  cr_expect_eq(weftTopoCheckNetDevices("=eth0,ib", allowed, sizeof allowed), 0);
  cr_expect_eq(weftTopoCheckNetDevices("^lo", allowed, sizeof allowed), 0);
  static const char *const bad[] = {"", "^", "=", "eth0,,ib", "eth0,", "eth 0", "eth0;ib"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    cr_expect_neq(weftTopoCheckNetDevices(bad[i], allowed, sizeof allowed), 0, "\"%s\" refused", bad[i]);
  weftTopoHostFree(h);
}

Test(topo_decide, fifo_numa_node_is_the_readers) {
  struct weftTopoHost *h = topoFixtureLoad("topo-2s4n-8gpu-4nic.xml");
  struct weftTopoPlace p;
  topoPlaceOnCore(h, 13, &p);
  cr_expect_eq(weftTopoMemNode(h, &p), -1, "a file's model is not this machine: no binding");
  h->fromFile = 0; /* as if detected here */
  cr_expect_eq(weftTopoMemNode(h, &p), 3, "core 13's FIFOs on NUMA node 3");
  placeUnbound(h, &p);
  cr_expect_eq(weftTopoMemNode(h, &p), -1, "an unbound reader: first touch decides");
  weftTopoHostFree(h);
  h = topoFixtureLoad("topo-laptop.xml");
  h->fromFile = 0;
  topoPlaceOnCore(h, 1, &p);
  cr_expect_eq(weftTopoMemNode(h, &p), -1, "one NUMA node: nothing to bind");
  weftTopoHostFree(h);
  cr_expect_eq(weftTopoBindMemory(NULL, 0, -1), 0, "node -1 binds nothing");
}

/* The binding itself, on a shared segment as the shm transport makes them: node 0 (which every
 * machine has) becomes the segment's preferred node; a node that does not exist is an error
 * the caller logs, the memory staying usable. */
Test(topo_decide, fifo_binding_takes) {
  char name[WEFT_SHM_NAME_BYTES];
  void *p = NULL;
  size_t bytes = 1 << 16;
  cr_assert_eq(weftShmCreate(bytes, name, &p), weftSuccess, "%s", weftGetLastError(NULL));
  weftShmUnlink(name);
  cr_assert_eq(weftTopoBindMemory(p, bytes, 0), 0, "mbind to node 0");
  int mode = -1;
  unsigned long mask[16] = {0};
  long rc = syscall(SYS_get_mempolicy, &mode, mask, sizeof mask * 8, p, 2UL /* MPOL_F_ADDR */);
  cr_expect_eq(rc, 0, "get_mempolicy");
  cr_expect_eq(mode, 1 /* MPOL_PREFERRED */, "policy %d", mode);
  cr_expect_eq(mask[0] & 1, 1UL, "node 0 preferred");
  cr_expect_neq(weftTopoBindMemory(p, bytes, 1000), 0, "node 1000 does not exist");
  memset(p, 7, bytes);
  cr_expect_eq(((unsigned char *)p)[bytes - 1], 7, "still usable");
  weftShmUnmap(p, bytes);
}

Test(topo_decide, progress_thread_cpus) {
  struct weftTopoHost *h = topoFixtureLoad("topo-2s4n-8gpu-4nic.xml");
  struct weftTopoPlace p;
  uint8_t cpus[WEFT_TOPO_CPUSET_BYTES];
  placeUnbound(h, &p);
  const struct weftTopoDev *eth3 = &h->devs[nicIndex(h, "eth3")];
  cr_expect_eq(weftTopoDevCpus(h, &p, eth3, cpus, sizeof cpus), 8, "NUMA node 3: 4 cores x 2 PUs");
  cr_expect((cpus[1] & 0xf0) == 0xf0 && (cpus[3] & 0xf0) == 0xf0, "PUs 12-15 and 28-31");
  topoPlaceOnCore(h, 0, &p);
  cr_expect_eq(weftTopoDevCpus(h, &p, eth3, cpus, sizeof cpus), 0, "a bound process keeps its binding");
  weftTopoHostFree(h);
}

/* ---- Files: fallbacks, refusal, dump ---- */

static char *readAll(const char *path) {
  FILE *f = fopen(path, "re");
  if (f == NULL) return NULL;
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

static int countOf(const char *text, const char *what) {
  int n = 0;
  for (const char *p = text; (p = strstr(p, what)) != NULL; p++) n++;
  return n;
}

Test(topo_files, vm_falls_back_with_one_warning) {
  char log[] = "/tmp/weft-topo-log-XXXXXX";
  int fd = mkstemp(log);
  cr_assert_geq(fd, 0);
  close(fd);
  setenv("WEFT_TOPO_FILE", topoFixturePath("topo-vm.xml"), 1);
  setenv("WEFT_DEBUG", "WARN", 1);
  setenv("WEFT_DEBUG_FILE", log, 1);
  const struct weftTopoHost *h = NULL, *again = NULL;
  cr_assert_eq(weftTopoHostGet(&h), weftSuccess, "%s", weftGetLastError(NULL));
  cr_assert_eq(weftTopoHostGet(&again), weftSuccess);
  cr_expect_eq(h, again, "one model per value of WEFT_TOPO_FILE");
  cr_expect(strstr(h->missing, "no NUMA information") != NULL, "missing: %s", h->missing);
  cr_expect(strstr(h->missing, "no PCI locality for eth0") != NULL, "missing: %s", h->missing);
  weftTopoHostPut(again);
  weftTopoHostPut(h);
  const char *text = readAll(log);
  cr_assert_not_null(text);
  cr_expect_eq(countOf(text, "topology ("), 1, "one warning, got:\n%s", text);
  cr_expect(strstr(text, "no NUMA information") && strstr(text, "no PCI locality for eth0"),
            "the warning names what is missing:\n%s", text);
  unlink(log);
}

static void expectRefused(const char *file, const char *why) {
  setenv("WEFT_TOPO_FILE", file, 1);
  const struct weftTopoHost *h = NULL;
  weftResult_t rc = weftTopoHostGet(&h);
  const char *msg = weftGetLastError(NULL);
  cr_expect_eq(rc, weftInvalidArgument, "%s: rc %d", file, rc);
  cr_expect(strstr(msg, "WEFT_TOPO_FILE") != NULL && strstr(msg, file) != NULL, "%s: message \"%s\"", why, msg);
  cr_expect_null(h, "no model replaces a bad file");
}

Test(topo_files, bad_file_refused) {
  expectRefused("/nonexistent/topo.xml", "missing file");
  char bad[] = "/tmp/weft-topo-bad-XXXXXX";
  int fd = mkstemp(bad);
  cr_assert_geq(fd, 0);
  const char junk[] = "<?xml version=\"1.0\"?>\n<topology version=\"2.0\"><object type=\"Bogus\"";
  cr_assert_eq(write(fd, junk, sizeof junk - 1), (ssize_t)(sizeof junk - 1));
  close(fd);
  expectRefused(bad, "truncated XML");
  unlink(bad);
}

/* A communicator refuses to start on a bad WEFT_TOPO_FILE, saying so. */
static long neverRuns(weftComm_t comm, int rank, int nranks, void *arg) {
  (void)comm, (void)rank, (void)nranks, (void)arg;
  return 1;
}

Test(topo_files, init_refuses_bad_file) {
  setenv("WEFT_TOPO_FILE", "/nonexistent/topo.xml", 1);
  weftUniqueId id;
  cr_assert_eq(weftGetUniqueId(&id), weftSuccess);
  weftComm_t comm = NULL;
  weftResult_t rc = weftCommInitRank(&comm, 1, id, 0);
  cr_expect_eq(rc, weftInvalidArgument, "rc %d", rc);
  cr_expect(strstr(weftGetLastError(NULL), "WEFT_TOPO_FILE=\"/nonexistent/topo.xml\"") != NULL, "%s",
            weftGetLastError(NULL));
  (void)neverRuns;
}

Test(topo_files, dump_reads_back) {
  char dump[] = "/tmp/weft-topo-dump-XXXXXX";
  int fd = mkstemp(dump);
  cr_assert_geq(fd, 0);
  close(fd);
  setenv("WEFT_TOPO_FILE", topoFixturePath("topo-2s4n-8gpu-4nic.xml"), 1);
  setenv("WEFT_TOPO_DUMP_FILE", dump, 1);
  const struct weftTopoHost *h = NULL;
  cr_assert_eq(weftTopoHostGet(&h), weftSuccess, "%s", weftGetLastError(NULL));
  struct weftTopoHost *back = NULL;
  cr_assert_eq(weftTopoHostLoad(dump, &back), weftSuccess, "%s", weftGetLastError(NULL));
  cr_expect(back->npackages == h->npackages && back->nnuma == h->nnuma && back->ncores == h->ncores &&
                back->npus == h->npus && back->ndevs == h->ndevs, "the dump holds the same host");
  for (int i = 0; i < h->ndevs && i < back->ndevs; i++) {
    cr_expect_str_eq(back->devs[i].name, h->devs[i].name);
    for (int j = 0; j < h->ndevs && j < back->ndevs; j++)
      cr_expect_eq(weftTopoDistance(&back->devs[i].loc, &back->devs[j].loc),
                   weftTopoDistance(&h->devs[i].loc, &h->devs[j].loc), "distance %d-%d", i, j);
  }
  weftTopoHostFree(back);
  weftTopoHostPut(h);
  unlink(dump);
}

Test(topo_files, detection_here_never_fails) {
  struct weftTopoHost *h = NULL;
  cr_assert_eq(weftTopoHostLoad(NULL, &h), weftSuccess, "%s", weftGetLastError(NULL));
  cr_expect_geq(h->npus, 1);
  cr_expect_geq(h->ncores, 1);
  cr_expect_eq(h->fromFile, 0);
  struct weftTopoPlace p;
  weftTopoPlaceSelf(h, &p);
  cr_expect(p.core >= 0 && p.ncores >= 1, "this process runs somewhere: core %d", p.core);
  weftTopoHostFree(h);
}

/* ---- A job on an injected topology ---- */

struct jobShared {
  long wrong[4];
  int rc[4];
};

/* Rank r binds itself to CPU r % 2 (package r % 2 of topo-2s-2pu.xml), then runs AllReduces
 * checked exactly. */
static void jobMain(void *shared, weftUniqueId id, int rank, int nranks) {
  struct jobShared *s = shared;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(rank % 2, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) _exit(3);
  weftComm_t comm;
  s->rc[rank] = weftCommInitRank(&comm, nranks, id, rank);
  if (s->rc[rank] != weftSuccess) _exit(1);
  static const size_t counts[] = {0, 1, 7, 1031, 65537};
  for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
    size_t n = counts[i];
    int32_t *buf = malloc(sizeof(int32_t) * (n + 1));
    fillInput(buf, n, weftInt32, weftSum, rank);
    if (weftAllReduce(buf, buf, n, weftInt32, weftSum, comm, NULL) != weftSuccess) s->wrong[rank]++;
    s->wrong[rank] += (long)countWrong(buf, n, weftInt32, weftSum, nranks);
    free(buf);
  }
  weftCommDestroy(comm);
  _exit(0);
}

Test(topo_job, ring_follows_injected_packages) {
  SKIP_UNLESS("cpu01"); /* ranks bind to CPUs 0 and 1 */
  char graph[] = "/tmp/weft-topo-graph-XXXXXX";
  int fd = mkstemp(graph);
  cr_assert_geq(fd, 0);
  close(fd);
  setenv("WEFT_TOPO_FILE", topoFixturePath("topo-2s-2pu.xml"), 1);
  setenv("WEFT_GRAPH_DUMP_FILE", graph, 1);
  struct jobShared *s = forkedShared(sizeof *s);
  pid_t pids[4];
  forkedLaunch(4, jobMain, s, pids);
  forkedReap(pids, 4, 50000);
  for (int r = 0; r < 4; r++)
    cr_expect(s->rc[r] == weftSuccess && s->wrong[r] == 0, "rank %d: init %d, %ld wrong", r, s->rc[r], s->wrong[r]);
  const char *json = readAll(graph);
  cr_assert_not_null(json);
  cr_expect(strstr(json, "\"order\": [0, 2, 1, 3], \"packageCrossings\": 2") != NULL,
            "ranks 0 and 2 on package 0, 1 and 3 on package 1:\n%s", json);
  cr_expect(strstr(json, "{\"rank\": 1, \"host\": 0, \"core\": 1, \"cores\": 1, \"numa\": 1, \"package\": 1, "
                         "\"bound\": true, \"nic\": \"eth1\", \"nicDistance\": \"NUMA node\"") != NULL,
            "rank 1 on package 1 uses eth1:\n%s", json);
  cr_expect(strstr(json, "\"nranks\": 4") && strstr(json, "\"trees\": [{\"root\": "), "%s", json);
  unlink(graph);
}

/* ---- weft-topo ---- */

/* build/tools/weft-topo beside this binary (build/tests/unit/test_topo), run with args; its
 * output (stdout and stderr) in a static buffer, its exit status in *status. */
static const char *runTool(const char *args, int *status) {
  char exe[512], cmd[2048];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  cr_assert_gt(n, 0);
  exe[n] = '\0';
  for (int up = 0; up < 3; up++) *strrchr(exe, '/') = '\0'; /* test_topo, unit, tests */
  snprintf(cmd, sizeof cmd, "%s/tools/weft-topo", exe);
  cr_assert_eq(access(cmd, X_OK), 0, "%s is not built (make tools; make check builds it)", cmd);
  snprintf(cmd, sizeof cmd, "%s/tools/weft-topo %s 2>&1", exe, args);
  FILE *p = popen(cmd, "r");
  cr_assert_not_null(p);
  static char out[1 << 16];
  size_t len = fread(out, 1, sizeof out - 1, p);
  out[len] = '\0';
  *status = pclose(p);
  return out;
}

static void expectHas(const char *out, const char *what) {
  cr_expect(strstr(out, what) != NULL, "weft-topo output lacks \"%s\":\n%s", what, out);
}

Test(topo_tool, host_and_job) {
  char args[1024];
  int st;
  snprintf(args, sizeof args, "-i %s --hosts 1 --ranks-per-host 8", topoFixturePath("topo-2s4n-8gpu-4nic.xml"));
  const char *out = runTool(args, &st);
  cr_expect_eq(st, 0, "exit status %d", st);
  expectHas(out, "2 packages, 4 NUMA nodes, 4 last-level caches, 16 cores, 32 PUs, 8 GPUs, 4 NICs");
  expectHas(out, "NIC eth1       0000:21:03.0  package 0, NUMA node 1, host bridge 2, PCI switch 3, RDMA mlx5_1");
  expectHas(out, "rank   1: host 0, core 8, NUMA node 2, package 1, NIC eth2 (NUMA node)");
  expectHas(out, "Ring (2 package crossings): 0 2 4 6 1 3 5 7\n");
  expectHas(out, "Ring in rank order (without topology) (8 package crossings): 0 1 2 3 4 5 6 7\n");
  expectHas(out, "Tree 0 (root 7), parent of each rank: 1 3 1 7 5 3 5 -1\n");
  expectHas(out, "Inter-package traffic of one AllReduce of B bytes, all hosts: 3.50 B (rank order: 14.00 B)\n");
  /* the ring's cost() prices the crossings: rank order's 4 links each way share the socket */
  expectHas(out, "Ring links between packages get 16.00 GB/s (rank order: 4.00; 0: none cross), links 6.00 GB/s:\n");
  double aware = 0, naive = 0;
  const char *gain = strstr(out, "  package-aware ring ");
  cr_assert(gain != NULL && sscanf(gain, "  package-aware ring %lf us, rank order %lf us", &aware, &naive) == 2, "%s", out);
  cr_expect(naive > 1.45 * aware && naive < 1.5 * aware, "the predicted gain: %.1f against %.1f us", naive, aware);
  const char *table = strstr(out, "Predicted AllReduce time");
  cr_assert_not_null(table, "%s", out);
  cr_expect(strstr(table, "ring") && strstr(table, "direct") && strstr(table, "tree"), "%s", table);
  cr_expect(strstr(table, "\n  268435456 ") != NULL, "a line for 256 MiB:\n%s", table);
  cr_expect(strstr(table, "n/a") != NULL, "hier cannot run on one host:\n%s", table);
}

Test(topo_tool, one_package_predicts_no_gain) {
  char args[1024];
  int st;
  snprintf(args, sizeof args, "-i %s --hosts 1 --ranks-per-host 4", topoFixturePath("topo-laptop.xml"));
  const char *out = runTool(args, &st);
  cr_expect_eq(st, 0, "exit status %d", st);
  expectHas(out, "Ring links between packages get 0.00 GB/s (rank order: 0.00; 0: none cross)");
  expectHas(out, " at 256 MiB (1.00x)\n");
}

Test(topo_tool, json_and_fallback_and_refusal) {
  char args[1024];
  int st;
  snprintf(args, sizeof args, "-i %s --hosts 2 --ranks-per-host 4 --json", topoFixturePath("topo-2s2n-2nic-gpu.xml"));
  const char *out = runTool(args, &st);
  cr_expect_eq(st, 0);
  expectHas(out, "\"nranks\": 8,\n  \"nhosts\": 2,");
  expectHas(out, "\"order\": [0, 2, 1, 3, 4, 6, 5, 7], \"packageCrossings\": 2");
  expectHas(out, "{\"rank\": 1, \"host\": 0, \"core\": 4, \"cores\": 1, \"numa\": 1, \"package\": 1, "
                 "\"bound\": true, \"nic\": \"eth1\"");
  snprintf(args, sizeof args, "-i %s", topoFixturePath("topo-vm.xml"));
  out = runTool(args, &st);
  cr_expect_eq(st, 0);
  expectHas(out, "NIC eth0       0000:00:01.0  locality unknown");
  expectHas(out, "Missing (fallbacks): no NUMA information (one node assumed); no PCI locality for eth0");
  out = runTool("-i /nonexistent.xml", &st);
  cr_expect_neq(st, 0, "a file hwloc cannot read fails");
  expectHas(out, "\"/nonexistent.xml\": hwloc cannot");
  out = runTool("--hosts 0 --ranks-per-host 2", &st);
  cr_expect_neq(st, 0);
  expectHas(out, "usage: weft-topo");
}
