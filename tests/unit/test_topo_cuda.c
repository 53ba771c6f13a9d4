/* GPUs of the model matched to CUDA devices by PCI bus id (lib/topo_cuda.c), against the
 * 8-GPU fixture with lists of bus ids standing for what the driver reports: every GPU, in
 * another order and spelling, as CUDA_VISIBLE_DEVICES would leave them, one the model lacks,
 * and a driver that cannot be loaded (one note). And the driver's own list on this machine. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "topofix.h"

TestSuite(topo_cuda, .timeout = 30);

typedef char busIdList[WEFT_TOPO_MAX_DEVS][WEFT_TOPO_BUSID_BYTES];

static int gpuDev(const struct weftTopoHost *h, int gpu) { return weftTopoDevOf(h, WEFT_TOPO_GPU, gpu)->cudaDev; }

Test(topo_cuda, every_gpu_by_bus_id_in_any_order) {
  struct weftTopoHost *h = topoFixtureLoad("topo-2s4n-8gpu-4nic.xml");
  cr_assert_eq(h->ngpus, 8);
  for (int g = 0; g < 8; g++) cr_expect_eq(gpuDev(h, g), -1, "a file's GPUs are matched to nothing here");
  busIdList ids;
  /* the driver's order reversed, its spelling NVML-like: 8-digit domain, upper case */
  for (int i = 0; i < 8; i++) {
    unsigned v[4];
    cr_assert_eq(sscanf(weftTopoDevOf(h, WEFT_TOPO_GPU, 7 - i)->busId, "%x:%x:%x.%x", &v[0], &v[1], &v[2], &v[3]), 4);
    snprintf(ids[i], sizeof ids[i], "%08X:%02X:%02X.%X", v[0] & 0xffff, v[1] & 0xff, v[2] & 0x1f, v[3] & 7);
  }
  cr_expect_eq(weftTopoMatchGpus(h, (const char (*)[WEFT_TOPO_BUSID_BYTES])ids, 8), 8);
  for (int g = 0; g < 8; g++)
    cr_expect_eq(gpuDev(h, g), 7 - g, "GPU %d (%s) is CUDA device %d", g, weftTopoDevOf(h, WEFT_TOPO_GPU, g)->busId,
                 gpuDev(h, g));
  for (int d = 0; d < h->ndevs; d++)
    if (h->devs[d].kind == WEFT_TOPO_NIC) cr_expect_eq(h->devs[d].cudaDev, -1, "a NIC is no CUDA device");
  cr_expect_str_empty(h->missing, "%s", h->missing);
  weftTopoHostFree(h);
}

Test(topo_cuda, visible_devices_subset_and_a_stranger) {
  struct weftTopoHost *h = topoFixtureLoad("topo-2s4n-8gpu-4nic.xml");
  busIdList ids;
  /* CUDA_VISIBLE_DEVICES=5,2 and a device hwloc did not see */
  snprintf(ids[0], sizeof ids[0], "%s", weftTopoDevOf(h, WEFT_TOPO_GPU, 5)->busId);
  snprintf(ids[1], sizeof ids[1], "%s", weftTopoDevOf(h, WEFT_TOPO_GPU, 2)->busId);
  snprintf(ids[2], sizeof ids[2], "0000:e3:00.0");
  cr_expect_eq(weftTopoMatchGpus(h, (const char (*)[WEFT_TOPO_BUSID_BYTES])ids, 3), 2);
  for (int g = 0; g < 8; g++) cr_expect_eq(gpuDev(h, g), g == 5 ? 0 : g == 2 ? 1 : -1, "GPU %d: %d", g, gpuDev(h, g));
  cr_expect(strstr(h->missing, "CUDA devices not among the model's GPUs: 2 (0000:e3:00.0)") != NULL, "%s", h->missing);
  /* a bus id that is not one matches nothing, and is named */
  snprintf(ids[0], sizeof ids[0], "garbage");
  h->missing[0] = '\0';
  cr_expect_eq(weftTopoMatchGpus(h, (const char (*)[WEFT_TOPO_BUSID_BYTES])ids, 1), 0);
  cr_expect(strstr(h->missing, "0 (garbage)") != NULL, "%s", h->missing);
  weftTopoHostFree(h);
}

static int lists;
static int noDriver(char (*ids)[WEFT_TOPO_BUSID_BYTES], int max, char *why, size_t len) {
  (void)ids, (void)max;
  lists++;
  snprintf(why, len, "no CUDA driver (libcuda.so.1: cannot open shared object file)");
  return -1;
}
static int twoDevices(char (*ids)[WEFT_TOPO_BUSID_BYTES], int max, char *why, size_t len) {
  (void)why, (void)len;
  lists++;
  cr_assert_geq(max, 2);
  snprintf(ids[0], WEFT_TOPO_BUSID_BYTES, "0000:11:02.0"); /* the fixture's GPUs 1 and 0 */
  snprintf(ids[1], WEFT_TOPO_BUSID_BYTES, "0000:11:01.0");
  return 2;
}

Test(topo_cuda, host_match_through_a_lister) {
  struct weftTopoHost *h = topoFixtureLoad("topo-2s4n-8gpu-4nic.xml");
  cr_assert_str_eq(weftTopoDevOf(h, WEFT_TOPO_GPU, 0)->busId, "0000:11:01.0", "the fixture's first GPU");
  weftTopoHostMatchCuda(h, twoDevices);
  cr_expect(gpuDev(h, 0) == 1 && gpuDev(h, 1) == 0 && gpuDev(h, 2) == -1);
  cr_expect_str_empty(h->missing, "%s", h->missing);
  weftTopoHostMatchCuda(h, noDriver);
  cr_expect_str_eq(h->missing, "GPUs not matched to CUDA devices: no CUDA driver (libcuda.so.1: cannot open "
                   "shared object file)", "one note, naming why");
  for (int g = 0; g < 8; g++) cr_expect_eq(gpuDev(h, g), g == 0 ? 1 : g == 1 ? 0 : -1, "a failed list changes no match");
  weftTopoHostFree(h);
  /* no GPU: the driver is not even asked */
  h = topoFixtureLoad("topo-2s4n-cpu.xml");
  lists = 0;
  char before[WEFT_TOPO_MISSING_BYTES];
  snprintf(before, sizeof before, "%s", h->missing);
  weftTopoHostMatchCuda(h, noDriver);
  cr_expect_eq(lists, 0);
  cr_expect_str_eq(h->missing, before, "no note about CUDA");
  weftTopoHostFree(h);
}

/* The driver's list here: a count, or -1 saying why (this machine may have no driver, or a
 * driver and no GPU); never a crash. */
Test(topo_cuda, driver_list_here_answers) {
  busIdList ids;
  char why[256] = "";
  int n = weftTopoCudaBusIds(ids, WEFT_TOPO_MAX_DEVS, why, sizeof why);
  if (n < 0) {
    cr_expect_neq(why[0], '\0', "a failure says why");
    cr_log_info("CUDA driver here: %s", why);
  } else {
    for (int i = 0; i < n; i++) {
      unsigned v[4];
      cr_expect_eq(sscanf(ids[i], "%x:%x:%x.%x", &v[0], &v[1], &v[2], &v[3]), 4, "device %d: %s", i, ids[i]);
    }
  }
}
