/* The topology model from hwloc: this machine (detection), or an hwloc XML file (WEFT_TOPO_FILE,
 * tests). hwloc is read once into plain data (lib/topo.h) and closed again; the XML it exported
 * is kept for WEFT_TOPO_DUMP_FILE. What hwloc does not know (NUMA memory, PCI locality on a VM,
 * no PCI tree at all) is noted in host->missing, and the decisions fall back (rank order, any
 * NIC, no binding). */
#include <errno.h>
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "log.h"
#include "topo.h"

void weftTopoNoteMissing(struct weftTopoHost *host, const char *what) {
  size_t o = strlen(host->missing);
  if (o + 1 < sizeof host->missing)
    snprintf(host->missing + o, sizeof host->missing - o, "%s%s", o ? "; " : "", what);
}

static int logicalOf(hwloc_topology_t topo, hwloc_obj_t obj, hwloc_obj_type_t type) {
  hwloc_obj_t a = obj->type == type ? obj : hwloc_get_ancestor_obj_by_type(topo, type, obj);
  return a != NULL ? (int)a->logical_index : -1;
}

/* The NUMA node of an object whose nodeset holds exactly one node, else -1. */
static int numaOf(hwloc_topology_t topo, hwloc_obj_t obj) {
  if (obj->nodeset == NULL || hwloc_bitmap_weight(obj->nodeset) != 1) return -1;
  hwloc_obj_t n = hwloc_get_numanode_obj_by_os_index(topo, (unsigned)hwloc_bitmap_first(obj->nodeset));
  return n != NULL ? (int)n->logical_index : -1;
}

/* The last-level cache above a core that it shares with others: L3, else L2. */
static int cacheOf(hwloc_topology_t topo, hwloc_obj_t core) {
  int l3 = logicalOf(topo, core, HWLOC_OBJ_L3CACHE);
  if (l3 >= 0 || hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_L3CACHE) > 0) return l3;
  return logicalOf(topo, core, HWLOC_OBJ_L2CACHE);
}

static weftResult_t readCores(hwloc_topology_t topo, struct weftTopoHost *host) {
  host->ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  host->npus = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
  int coreType = host->ncores > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU; /* no core objects: a PU each */
  if (host->ncores <= 0) host->ncores = host->npus;
  host->puMax = 0;
  for (hwloc_obj_t pu = NULL; (pu = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PU, pu)) != NULL;)
    if ((int)pu->os_index + 1 > host->puMax) host->puMax = (int)pu->os_index + 1;
  host->cores = calloc((size_t)host->ncores, sizeof *host->cores);
  host->puCore = malloc(sizeof(int) * (size_t)host->puMax);
  if (host->cores == NULL || host->puCore == NULL) return weftSetError(weftSystemError, "out of memory");
  for (int p = 0; p < host->puMax; p++) host->puCore[p] = -1;
  for (int c = 0; c < host->ncores; c++) {
    hwloc_obj_t core = hwloc_get_obj_by_type(topo, (hwloc_obj_type_t)coreType, (unsigned)c);
    struct weftTopoCore *tc = &host->cores[c];
    tc->loc = (struct weftTopoLoc){logicalOf(topo, core, HWLOC_OBJ_PACKAGE), numaOf(topo, core),
                                   cacheOf(topo, core), c, -1, -1};
    tc->firstPu = hwloc_bitmap_first(core->cpuset);
    tc->npus = hwloc_bitmap_weight(core->cpuset);
    for (int p = hwloc_bitmap_first(core->cpuset); p >= 0; p = hwloc_bitmap_next(core->cpuset, p))
      if (p < host->puMax) host->puCore[p] = c;
  }
  return weftSuccess;
}

static weftResult_t readNuma(hwloc_topology_t topo, struct weftTopoHost *host) {
  host->npackages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  host->nnuma = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  host->ncaches = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_L3CACHE);
  if (host->ncaches == 0) host->ncaches = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_L2CACHE);
  host->numaOs = malloc(sizeof(int) * (size_t)(host->nnuma > 0 ? host->nnuma : 1));
  if (host->numaOs == NULL) return weftSetError(weftSystemError, "out of memory");
  int withMemory = 0;
  for (int i = 0; i < host->nnuma; i++) {
    hwloc_obj_t n = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, (unsigned)i);
    host->numaOs[i] = (int)n->os_index;
    withMemory += n->attr->numanode.local_memory > 0;
  }
  if (host->nnuma == 0 || withMemory == 0) weftTopoNoteMissing(host, "no NUMA information (one node assumed)");
  return weftSuccess;
}

/* Link speed of a network interface in Mb/s as this machine's kernel reports it, -1 unknown
 * (virtual interfaces report -1 or refuse the read). */
static int netSpeed(const char *ifname) {
  char path[128];
  snprintf(path, sizeof path, "/sys/class/net/%s/speed", ifname);
  FILE *f = fopen(path, "re");
  int mbps = -1;
  if (f == NULL) return -1;
  if (fscanf(f, "%d", &mbps) != 1 || mbps <= 0) mbps = -1;
  fclose(f);
  return mbps;
}

/* The PCI side of a device: its host bridge and the nearest PCI-to-PCI bridge (a switch). */
static void pciSide(hwloc_obj_t dev, struct weftTopoLoc *loc) {
  for (hwloc_obj_t p = dev->parent; p != NULL && p->type == HWLOC_OBJ_BRIDGE; p = p->parent) {
    if (p->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST) loc->hostBridge = (int)p->logical_index;
    else if (loc->pciSwitch < 0) loc->pciSwitch = (int)p->logical_index;
  }
}

static void cpuSide(hwloc_topology_t topo, hwloc_obj_t dev, struct weftTopoDev *d) {
  hwloc_obj_t a = hwloc_get_non_io_ancestor_obj(topo, dev);
  d->localityKnown = a != NULL && a->type != HWLOC_OBJ_MACHINE;
  if (!d->localityKnown) return;
  d->loc.package = logicalOf(topo, a, HWLOC_OBJ_PACKAGE);
  d->loc.numa = numaOf(topo, a);
}

/* The GPU or NIC a PCI function is, from its class and its OS devices, into d; 0 when it is
 * neither. */
static int readDev(hwloc_obj_t pci, struct weftTopoDev *d) {
  unsigned cls = pci->attr->pcidev.class_id;
  memset(d, 0, sizeof *d);
  d->kind = (cls >> 8) == 0x03 ? WEFT_TOPO_GPU : (cls >> 8) == 0x02 ? WEFT_TOPO_NIC : -1;
  for (hwloc_obj_t os = pci->io_first_child; os != NULL; os = os->next_sibling) {
    if (os->type != HWLOC_OBJ_OS_DEVICE || os->name == NULL) continue;
    hwloc_obj_osdev_type_t t = os->attr->osdev.type;
    if (t == HWLOC_OBJ_OSDEV_NETWORK && d->name[0] == '\0') {
      snprintf(d->name, sizeof d->name, "%s", os->name);
      d->kind = WEFT_TOPO_NIC;
    } else if (t == HWLOC_OBJ_OSDEV_OPENFABRICS && d->rdma[0] == '\0') {
      snprintf(d->rdma, sizeof d->rdma, "%s", os->name);
      d->kind = WEFT_TOPO_NIC;
    } else if ((t == HWLOC_OBJ_OSDEV_GPU || t == HWLOC_OBJ_OSDEV_COPROC) && d->kind == WEFT_TOPO_GPU &&
               d->name[0] == '\0') {
      snprintf(d->name, sizeof d->name, "%s", os->name);
    }
  }
  if (d->kind < 0) return 0;
  snprintf(d->busId, sizeof d->busId, "%04x:%02x:%02x.%x", pci->attr->pcidev.domain & 0xffffu,
           pci->attr->pcidev.bus, pci->attr->pcidev.dev, pci->attr->pcidev.func);
  if (d->name[0] == '\0') snprintf(d->name, sizeof d->name, "%s", d->rdma[0] ? d->rdma : d->busId);
  return 1;
}

static void readDevices(hwloc_topology_t topo, struct weftTopoHost *host) {
  char unplaced[160] = "";
  size_t o = 0;
  int npci = 0;
  for (hwloc_obj_t pci = NULL; (pci = hwloc_get_next_pcidev(topo, pci)) != NULL;) {
    npci++;
    struct weftTopoDev d;
    if (host->ndevs == WEFT_TOPO_MAX_DEVS || !readDev(pci, &d)) continue;
    d.loc = (struct weftTopoLoc){-1, -1, -1, -1, -1, -1};
    d.cudaDev = -1;
    d.speedMbps = !host->fromFile && d.kind == WEFT_TOPO_NIC && d.name[0] != d.busId[0] ? netSpeed(d.name) : -1;
    pciSide(pci, &d.loc);
    cpuSide(topo, pci, &d);
    if (!d.localityKnown && o < sizeof unplaced)
      o += (size_t)snprintf(unplaced + o, sizeof unplaced - o, "%s%s", o ? ", " : "", d.name);
    host->ngpus += d.kind == WEFT_TOPO_GPU;
    host->nnics += d.kind == WEFT_TOPO_NIC;
    host->devs[host->ndevs++] = d;
  }
  char what[256];
  if (npci == 0) weftTopoNoteMissing(host, "no PCI devices (no GPU or NIC locality: NICs are the sockets' own)");
  if (o > 0) {
    snprintf(what, sizeof what, "no PCI locality for %s (taken as anywhere on the machine)", unplaced);
    weftTopoNoteMissing(host, what);
  }
}

static weftResult_t exportXml(hwloc_topology_t topo, struct weftTopoHost *host) {
  char *buf = NULL;
  int len = 0;
  if (hwloc_topology_export_xmlbuffer(topo, &buf, &len, 0) != 0)
    return weftSetSysError(errno, "topology: hwloc cannot export the topology as XML");
  host->xml = strdup(buf);
  hwloc_free_xmlbuffer(topo, buf);
  if (host->xml == NULL) return weftSetError(weftSystemError, "out of memory");
  return weftSuccess;
}

static weftResult_t fromTopology(hwloc_topology_t topo, struct weftTopoHost *host) {
  WEFTCHECK(readNuma(topo, host));
  WEFTCHECK(readCores(topo, host));
  readDevices(topo, host);
  return exportXml(topo, host);
}

/* hwloc with I/O objects: PCI devices that matter (GPUs, NICs) and the bridges above them.
 * Detection that fails with them is retried without (no PCI devices then: a fallback). */
/* This machine's topology (with I/O objects or not); 0, or -1 with errno. The linux backend
 * reads the PCI tree from sysfs itself; hwloc's pci plugin (libpciaccess) finds the same
 * devices and leaks at every load (LeakSanitizer fails every test that inits), gl would open
 * the X display and opencl start the OpenCL runtimes, so those three are left out. */
static int openTopologyWith(hwloc_topology_t *topo, int io) {
  static const char *const skipped[] = {"pci", "gl", "opencl"};
  if (hwloc_topology_init(topo) != 0) return -1;
  for (size_t i = 0; io && i < sizeof skipped / sizeof skipped[0]; i++)
    (void)hwloc_topology_set_components(*topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, skipped[i]);
  if (io) hwloc_topology_set_io_types_filter(*topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  if (hwloc_topology_load(*topo) == 0 && hwloc_get_nbobjs_by_type(*topo, HWLOC_OBJ_PU) > 0) return 0;
  int err = errno;
  hwloc_topology_destroy(*topo);
  errno = err;
  return -1;
}

static weftResult_t openDetected(hwloc_topology_t *topo) {
  if (openTopologyWith(topo, 1) == 0) return weftSuccess;
  if (openTopologyWith(topo, 0) != 0) return weftSetSysError(errno, "topology: hwloc cannot detect this machine");
  WARN("topology: hwloc cannot detect this machine's PCI devices; detected without them");
  return weftSuccess;
}

/* WEFT_TOPO_FILE: refused with the reason when hwloc cannot read it, never replaced. */
static weftResult_t openFile(const char *path, hwloc_topology_t *topo) {
  if (hwloc_topology_init(topo) != 0) return weftSetSysError(errno, "topology: hwloc_topology_init failed");
  hwloc_topology_set_io_types_filter(*topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  const char *why = NULL;
  int err = 0;
  if (hwloc_topology_set_xml(*topo, path) != 0) why = "hwloc cannot open it as XML", err = errno;
  else if (hwloc_topology_load(*topo) != 0) why = "it is not a topology hwloc can read", err = errno;
  else if (hwloc_get_nbobjs_by_type(*topo, HWLOC_OBJ_PU) <= 0) why = "it describes no processing unit";
  if (why == NULL) return weftSuccess;
  hwloc_topology_destroy(*topo);
  return weftSetError(weftInvalidArgument, "WEFT_TOPO_FILE=\"%s\": %s%s%s%s; fix or unset it", path, why,
                      err ? " (" : "", err ? strerror(err) : "", err ? ")" : "");
}

static weftResult_t openTopology(const char *path, hwloc_topology_t *topo) {
  return path == NULL ? openDetected(topo) : openFile(path, topo);
}

weftResult_t weftTopoHostLoad(const char *path, struct weftTopoHost **out) {
  *out = NULL;
  hwloc_topology_t topo;
  WEFTCHECK(openTopology(path, &topo));
  struct weftTopoHost *host = calloc(1, sizeof *host);
  if (host == NULL) {
    hwloc_topology_destroy(topo);
    return weftSetError(weftSystemError, "out of memory");
  }
  host->fromFile = path != NULL;
  snprintf(host->source, sizeof host->source, "%s", path != NULL ? path : "hwloc");
  weftResult_t rc = fromTopology(topo, host);
  hwloc_topology_destroy(topo);
  if (rc == weftSuccess && !host->fromFile) weftTopoHostMatchCuda(host, weftTopoCudaBusIds);
  if (rc != weftSuccess) {
    weftTopoHostFree(host);
    return rc;
  }
  *out = host;
  return weftSuccess;
}

void weftTopoHostFree(struct weftTopoHost *host) {
  if (host == NULL) return;
  free(host->cores);
  free(host->puCore);
  free(host->numaOs);
  free(host->xml);
  free(host);
}

weftResult_t weftTopoHostDump(const struct weftTopoHost *host, const char *path) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
  FILE *f = fopen(tmp, "we");
  if (f == NULL) return weftSetSysError(errno, "WEFT_TOPO_DUMP_FILE=\"%s\": cannot create %s", path, tmp);
  size_t len = strlen(host->xml);
  int ok = fwrite(host->xml, 1, len, f) == len;
  ok = (fclose(f) == 0) && ok;
  /* written whole, then renamed: ranks of one host dumping at once leave one complete file */
  if (!ok || rename(tmp, path) != 0) {
    int err = errno;
    remove(tmp);
    return weftSetSysError(err, "WEFT_TOPO_DUMP_FILE=\"%s\": cannot write it", path);
  }
  return weftSuccess;
}
