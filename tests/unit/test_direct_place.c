/* The direct algorithm's segment on the NUMA nodes of its writers (algorithms/direct_place.c):
 * each rank's staging and its share of the result bound to its node, from the places of an
 * injected topology (as the shm FIFOs' placement is tested in test_topo.c), and the binding
 * taking on a real segment before its pages are allocated. */
#include <criterion/criterion.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../algorithms/direct.h"
#include "topofix.h"

TestSuite(direct_place, .timeout = 30);

enum { N = 4 };
static const size_t chunk = 64 << 10;

/* N ranks bound to the first core of NUMA nodes numa[0..N) of h. */
static void placeOnNodes(const struct weftTopoHost *h, const int *numa, struct weftTopoPlace *places) {
  for (int r = 0; r < N; r++) {
    int core = -1;
    for (int c = 0; c < h->ncores && core < 0; c++)
      if (h->cores[c].loc.numa == numa[r]) core = c;
    cr_assert_geq(core, 0, "a core on NUMA node %d", numa[r]);
    topoPlaceOnCore(h, core, &places[r]);
  }
}

Test(direct_place, each_rank_writes_whole_pages_of_its_own) {
  size_t header = weftDirectHeaderBytes(N), result = header + N * 2 * chunk;
  cr_expect_eq(header % DIRECT_PAGE_BYTES, 0);
  cr_expect_geq(header, sizeof(struct directFailLine) + N * sizeof(struct directCtrl));
  struct directSpan all[N * DIRECT_SPANS_PER_RANK];
  int k = 0;
  for (int r = 0; r < N; r++) {
    struct directSpan *sp = &all[k];
    int got = weftDirectSpansOf(N, chunk, DIRECT_PAGE_BYTES, r, sp);
    cr_assert_eq(got, 3, "rank %d: staging and a share of each result half", r);
    cr_expect(sp[0].off == header + r * 2 * chunk && sp[0].len == 2 * chunk, "rank %d's staging", r);
    for (int h = 1; h < 3; h++) {
      size_t half = result + (h - 1) * chunk;
      /* 64 KiB over 4 ranks: 16 KiB each, 4 pages, starting at the rank's slice */
      cr_expect(sp[h].off == half + r * (chunk / N) && sp[h].len == chunk / N, "rank %d half %d: %zu+%zu",
                r, h - 1, sp[h].off, sp[h].len);
    }
    k += got;
  }
  for (int i = 0; i < k; i++) {
    cr_expect(all[i].off % DIRECT_PAGE_BYTES == 0 && all[i].len % DIRECT_PAGE_BYTES == 0);
    for (int j = 0; j < i; j++)
      cr_expect(all[i].off + all[i].len <= all[j].off || all[j].off + all[j].len <= all[i].off,
                "parts %d and %d overlap", i, j);
  }
  /* slices under a page leave the result on first touch, the staging still bound */
  struct directSpan sp[DIRECT_SPANS_PER_RANK];
  cr_expect_eq(weftDirectSpansOf(8, 16 << 10, DIRECT_PAGE_BYTES, 3, sp), 1, "2 KiB slices: staging only");
  cr_expect_eq(weftDirectSpansOf(8, 16 << 10, 64 << 10, 3, sp), 0, "64 KiB pages: 32 KiB holds none");
}

Test(direct_place, parts_on_their_writers_nodes) {
  struct weftTopoHost *h = topoFixtureLoad("topo-2s4n-8gpu-4nic.xml");
  struct weftTopoPlace places[N];
  int numa[N] = {2, 0, 3, 1};
  placeOnNodes(h, numa, places);
  struct directPlaceArgs args = {h, places, N, chunk};
  struct directSpan sp[N * DIRECT_SPANS_PER_RANK];
  cr_expect_eq(weftDirectPlacement(&args, DIRECT_PAGE_BYTES, sp), 0, "a file's model is not this machine");
  h->fromFile = 0; /* as if detected here */
  int k = weftDirectPlacement(&args, DIRECT_PAGE_BYTES, sp);
  cr_assert_eq(k, N * 3);
  for (int i = 0; i < k; i++) {
    struct directSpan mine[DIRECT_SPANS_PER_RANK];
    weftDirectSpansOf(N, chunk, DIRECT_PAGE_BYTES, sp[i].rank, mine);
    cr_expect_eq(sp[i].node, h->numaOs[numa[sp[i].rank]], "part %d of rank %d on node %d", i, sp[i].rank, sp[i].node);
    cr_expect_eq(sp[i].off, mine[i % 3].off);
  }
  /* an unbound rank's parts are left to first touch; the others keep theirs */
  uint8_t every[WEFT_TOPO_CPUSET_BYTES];
  memset(every, 0xff, sizeof every);
  weftTopoPlaceOfCpus(h, every, sizeof every, &places[1]);
  k = weftDirectPlacement(&args, DIRECT_PAGE_BYTES, sp);
  cr_expect_eq(k, (N - 1) * 3);
  for (int i = 0; i < k; i++) cr_expect_neq(sp[i].rank, 1);
  weftTopoHostFree(h);
  h = topoFixtureLoad("topo-laptop.xml");
  h->fromFile = 0;
  for (int r = 0; r < N; r++) topoPlaceOnCore(h, r, &places[r]);
  args.host = h;
  cr_expect_eq(weftDirectPlacement(&args, DIRECT_PAGE_BYTES, sp), 0, "one NUMA node: nothing to bind");
  weftTopoHostFree(h);
}

/* The policy of the page at addr (get_mempolicy MPOL_F_ADDR) and the node it is on
 * (MPOL_F_NODE | MPOL_F_ADDR). */
static void pageOf(void *addr, int *mode, unsigned long *mask, int *node) {
  unsigned long m[16] = {0};
  cr_assert_eq(syscall(SYS_get_mempolicy, mode, m, sizeof m * 8, addr, 2UL), 0, "get_mempolicy");
  *mask = m[0];
  cr_assert_eq(syscall(SYS_get_mempolicy, node, NULL, 0, addr, 3UL), 0, "get_mempolicy (node)");
}

/* On a real segment: every rank placed on NUMA node 0 of the fixture (node 0 exists on every
 * machine), so the creator's binding must take on each part and leave the header alone. */
Test(direct_place, binding_takes_before_allocation) {
  struct weftTopoHost *h = topoFixtureLoad("topo-2s4n-8gpu-4nic.xml");
  h->fromFile = 0;
  h->numaOs[0] = 0;
  struct weftTopoPlace places[N];
  int numa[N] = {0, 0, 0, 0};
  placeOnNodes(h, numa, places);
  struct directPlaceArgs args = {h, places, N, chunk};
  size_t bytes = weftDirectHeaderBytes(N) + (N + 1) * 2 * chunk;
  char name[WEFT_SHM_NAME_BYTES];
  char *seg = NULL;
  cr_assert_eq(weftShmCreatePlaced(bytes, name, (void **)&seg, weftDirectPlaceSegment, &args), weftSuccess,
               "%s", weftGetLastError(NULL));
  weftShmUnlink(name);
  struct directSpan sp[N * DIRECT_SPANS_PER_RANK];
  int k = weftDirectPlacement(&args, DIRECT_PAGE_BYTES, sp);
  cr_assert_eq(k, N * 3);
  for (int i = 0; i < k; i++) {
    int mode = -1, node = -1;
    unsigned long mask = 0;
    char *last = seg + sp[i].off + sp[i].len - 1;
    *last = 1; /* the page is there already (fallocate); touching it moves nothing */
    pageOf(last, &mode, &mask, &node);
    cr_expect(mode == 1 /* MPOL_PREFERRED */ && (mask & 1), "part %d: policy %d mask %lx", i, mode, mask);
    cr_expect_eq(node, 0, "part %d's page on node %d", i, node);
  }
  int mode = -1, node = -1;
  unsigned long mask = 0;
  seg[0] = 1;
  pageOf(seg, &mode, &mask, &node);
  cr_expect_eq(mode, 0 /* MPOL_DEFAULT */, "the header stays on first touch: policy %d", mode);
  weftShmUnmap(seg, bytes);
  weftTopoHostFree(h);
}
