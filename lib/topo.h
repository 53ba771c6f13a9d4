/* The topology model: one plain description of a host (packages, NUMA nodes, caches, cores,
 * GPUs and NICs with their place in the PCI tree), built once from hwloc (lib/topo_detect.c) or
 * from an hwloc XML file (WEFT_TOPO_FILE), and each rank's placement on it, which every rank of
 * a communicator receives through the bootstrap (in struct weftPeerInfo). Every decision that
 * depends on where things are (ring order, NIC per rank, NUMA node of a FIFO, progress thread
 * binding) is a function of this model only, so ranks that hold the same model decide alike.
 * Nothing here keeps an hwloc handle: the model is plain data, and tests build it from XML. */
#ifndef WEFT_TOPO_H_
#define WEFT_TOPO_H_

#include <stddef.h>
#include <stdint.h>
#include "weft.h"

#define WEFT_TOPO_NAME_BYTES 32
#define WEFT_TOPO_MAX_DEVS 64
#define WEFT_TOPO_CPUSET_BYTES 128 /* PUs 0..1023: enough for a rank's binding */
#define WEFT_TOPO_MISSING_BYTES 768
#define WEFT_TOPO_BUSID_BYTES 24 /* "00000000:17:00.0" as NVML spells it */

/* How close two things are: the most specific level they share, closest first. Two cores
 * compare by their CPU levels; two PCI devices first by their PCI tree, then by the CPU side
 * they hang from; a core and a device by the CPU side only. */
enum weftTopoDist {
  WEFT_TOPO_SAME_CORE,
  WEFT_TOPO_SAME_CACHE,       /* the last-level cache (L3, else L2) */
  WEFT_TOPO_SAME_PCI_SWITCH,  /* the same PCI-to-PCI bridge above both */
  WEFT_TOPO_SAME_HOST_BRIDGE,
  WEFT_TOPO_SAME_NUMA,
  WEFT_TOPO_SAME_PACKAGE,
  WEFT_TOPO_SAME_MACHINE,
  WEFT_TOPO_NUM_DISTS
};
const char *weftTopoDistName(enum weftTopoDist d);

/* Where one thing is: logical indexes of what holds it, -1 where none or unknown. A core has
 * no PCI side; a device has no core or cache. */
struct weftTopoLoc {
  int package, numa, cache, core;
  int hostBridge, pciSwitch;
};
enum weftTopoDist weftTopoDistance(const struct weftTopoLoc *a, const struct weftTopoLoc *b);

enum weftTopoDevKind { WEFT_TOPO_GPU, WEFT_TOPO_NIC };
struct weftTopoDev {
  int kind;
  char name[WEFT_TOPO_NAME_BYTES]; /* network interface (eth0), else RDMA device, else GPU's */
  char rdma[WEFT_TOPO_NAME_BYTES]; /* the RDMA device of the same PCI function, "" none */
  char busId[WEFT_TOPO_BUSID_BYTES]; /* PCI bus id, "0000:17:00.0" */
  int cudaDev;                     /* a GPU's CUDA device ordinal (bus id matched), -1 none/unknown */
  int speedMbps;                   /* link speed the OS reports, -1 unknown */
  int localityKnown;               /* 0: hwloc hangs it off the machine (a VM's PCI tree) */
  struct weftTopoLoc loc;
};

struct weftTopoCore {
  struct weftTopoLoc loc; /* loc.core is its own index */
  int firstPu, npus;      /* OS index of its first PU; PUs it has */
};

struct weftTopoHost {
  int npackages, nnuma, ncaches, ncores, npus;
  struct weftTopoCore *cores; /* ncores */
  int *puCore;                /* PU OS index -> core index, -1: none; puMax entries */
  int puMax;
  int *numaOs;                /* logical NUMA index -> OS index; nnuma entries */
  int ndevs, ngpus, nnics;
  struct weftTopoDev devs[WEFT_TOPO_MAX_DEVS];
  int fromFile;                        /* loaded from WEFT_TOPO_FILE: not this machine */
  char source[256];                    /* "hwloc" or the file's path */
  char missing[WEFT_TOPO_MISSING_BYTES]; /* what fell back, "" nothing; warned once */
  char *xml;                           /* the hwloc XML it was built from (for the dump) */
  int refs;
};

/* The model of this host: from WEFT_TOPO_FILE when set, else detected; cached while the
 * variable keeps its value. A file hwloc cannot read, or one with no PU, is weftInvalidArgument
 * with the reason; it is never replaced by detection. Release with weftTopoHostPut. */
weftResult_t weftTopoHostGet(const struct weftTopoHost **host);
void weftTopoHostPut(const struct weftTopoHost *host);
/* Builds a model from an XML file or buffer (path NULL: detect), uncached: tests and weft-topo. */
weftResult_t weftTopoHostLoad(const char *path, struct weftTopoHost **host);
void weftTopoHostFree(struct weftTopoHost *host);
/* WEFT_TOPO_DUMP_FILE: writes the XML the model came from; an error names the file. */
weftResult_t weftTopoHostDump(const struct weftTopoHost *host, const char *path);

/* The n-th device of a kind (GPU or NIC), or NULL. */
const struct weftTopoDev *weftTopoDevOf(const struct weftTopoHost *host, int kind, int n);

/* One rank's placement, as it travels in struct weftPeerInfo (fixed size, plain ints). */
struct weftTopoPlace {
  int32_t core;    /* first core of its binding, -1 unknown */
  int32_t ncores;  /* cores its binding covers */
  int32_t numa;    /* NUMA node of its binding when it covers one only, else -1 */
  int32_t package; /* likewise its package */
  int32_t bound;   /* 1: bound to fewer PUs than the host has (the user's or launcher's choice) */
  int32_t gpu;     /* index among the host's GPUs, -1 none */
  int32_t npackages, nnuma, hostCores, ngpus, nnics; /* the host's model, for other hosts' ranks */
  int32_t packageMBps; /* the link between two of its packages, each way (WEFT_TOPO_PACKAGE_BW_GBPS) */
  int32_t numaMBps;    /* between two NUMA nodes of one package, each way (WEFT_TOPO_NUMA_BW_GBPS) */
  uint8_t cpuset[WEFT_TOPO_CPUSET_BYTES]; /* PU OS indexes of its binding, bit per PU */
};
/* This process's placement on host (its affinity mask read now). */
void weftTopoPlaceSelf(const struct weftTopoHost *host, struct weftTopoPlace *place);
/* The placement of PUs given as a mask (bit per PU OS index): tests, weft-topo. */
void weftTopoPlaceOfCpus(const struct weftTopoHost *host, const uint8_t *cpus, size_t bytes,
                         struct weftTopoPlace *place);
/* Clamps a placement received from a peer to values every user can index with. */
void weftTopoPlaceSanitize(struct weftTopoPlace *place);
/* The location a placement stands for (its first core's, else its NUMA node's). */
void weftTopoPlaceLoc(const struct weftTopoHost *host, const struct weftTopoPlace *place,
                      struct weftTopoLoc *loc);

/* Ring order: the ranks of one host (members, in rank order) sorted by package, then NUMA
 * node, then core, then rank, so a ring through them crosses between packages the fewest
 * times (once per package boundary). Ranks without a known place keep their rank order after
 * the placed ones. Pure: the same input gives the same order on every rank. */
void weftTopoOrderHost(const struct weftTopoPlace *places, int *members, int n);
/* Times a ring over order[0..n) (cyclic) passes between packages, counting only
 * consecutive ranks of one host (same hostOf). */
int weftTopoPackageCrossings(const struct weftTopoPlace *places, const int *hostOf,
                             const int *order, int n);

/* The bandwidth (GB/s) each ring link between two packages gets, where the links of a host
 * that cross from one package to another in the same direction share that direction of the
 * socket link (packageMBps of the host's places): the least over hosts and package pairs of
 * packageMBps / links sharing it, and likewise over pairs of NUMA nodes of one package with
 * numaMBps. 0 when no link crosses (one package and NUMA node, or an order that stays in
 * each). Pure, like the order. */
double weftTopoRingCrossGBs(const struct weftTopoPlace *places, const int *hostOf,
                            const int *order, int n);

/* NIC choice for the ranks of one host: for each of n ranks (places[i]) the index in
 * host->devs of its NIC, -1 when the host has none that spec allows. A rank gets one of the
 * NICs closest to its GPU (else its cores); among those, the one fewest ranks before it took,
 * so the ranks of a host spread over NICs at equal distance. spec is WEFT_NET_DEVICES's
 * syntax (NCCL_NET's / NCCL_SOCKET_IFNAME's: "eth,ib" prefixes, "^lo" excludes, "=eth0"
 * exact), matched against the NIC's interface and RDMA names; "" allows all. */
void weftTopoChooseNics(const struct weftTopoHost *host, const struct weftTopoPlace *places, int n,
                        const char *spec, int *nic);
/* The check of WEFT_NET_DEVICES (weftParamCheckFn): a syntax check only (names may differ by
 * host). */
int weftTopoCheckNetDevices(const char *value, char *allowed, size_t len);

/* The NUMA node (OS index) that memory read by a rank placed at place belongs on, -1 when
 * binding would not help (one NUMA node, an unknown place, or a model of another machine). */
int weftTopoMemNode(const struct weftTopoHost *host, const struct weftTopoPlace *place);
/* Binds [addr, addr + bytes) to NUMA node (OS index) node; 0 on success, else errno (the
 * memory keeps the kernel's first-touch placement). node < 0: nothing to do, 0. */
int weftTopoBindMemory(void *addr, size_t bytes, int node);
/* PUs (bit per OS index, into cpus of bytes) local to device dev that this process may run
 * on; 0 when binding a thread there would override the user's binding or there are none. */
int weftTopoDevCpus(const struct weftTopoHost *host, const struct weftTopoPlace *self,
                    const struct weftTopoDev *dev, uint8_t *cpus, size_t bytes);

/* Appends what fell back to host->missing ("; " between notes), warned once per model. */
void weftTopoNoteMissing(struct weftTopoHost *host, const char *what);

/* GPUs and CUDA devices (lib/topo_cuda.c). The n bus ids are CUDA's devices in ordinal order;
 * each GPU of the model with one of them gets that ordinal as cudaDev, every other GPU -1, and
 * a device matching no GPU is noted as missing. Returns the GPUs matched. */
int weftTopoMatchGpus(struct weftTopoHost *host, const char (*busIds)[WEFT_TOPO_BUSID_BYTES], int n);
/* Lists CUDA's devices' bus ids (at most max): the count, or -1 with why. */
typedef int (*weftTopoCudaListFn)(char (*busIds)[WEFT_TOPO_BUSID_BYTES], int max, char *why, size_t len);
/* The driver's list: libcuda.so.1 loaded at run time (cuInit, cuDeviceGetCount, cuDeviceGet,
 * cuDeviceGetPCIBusId). */
int weftTopoCudaBusIds(char (*busIds)[WEFT_TOPO_BUSID_BYTES], int max, char *why, size_t len);
/* Matches host's GPUs to what list returns; where it fails, one note in host->missing. Nothing
 * (no driver loaded) for a host without GPUs. weftTopoHostLoad calls it with
 * weftTopoCudaBusIds for a detected host (a file's bus ids may be another machine's). */
void weftTopoHostMatchCuda(struct weftTopoHost *host, weftTopoCudaListFn list);

/* Readable description of the host (weft-topo). */
void weftTopoHostPrint(const struct weftTopoHost *host, void *file);

#endif
