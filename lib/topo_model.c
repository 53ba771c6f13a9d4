/* The host model a process uses: built once per value of WEFT_TOPO_FILE (detection when unset)
 * and shared by the communicators of the process, which hold a reference each; distances
 * between locations; the readable description weft-topo prints. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "log.h"
#include "param.h"
#include "topo.h"

static pthread_mutex_t cacheLock = PTHREAD_MUTEX_INITIALIZER;
static struct weftTopoHost *current; /* the model of WEFT_TOPO_FILE's present value */

static const char *const distNames[WEFT_TOPO_NUM_DISTS] = {
    "core", "cache", "PCI switch", "host bridge", "NUMA node", "package", "machine"};

const char *weftTopoDistName(enum weftTopoDist d) {
  return d >= 0 && d < WEFT_TOPO_NUM_DISTS ? distNames[d] : "?";
}

static int same(int a, int b) { return a >= 0 && a == b; }

enum weftTopoDist weftTopoDistance(const struct weftTopoLoc *a, const struct weftTopoLoc *b) {
  if (same(a->core, b->core)) return WEFT_TOPO_SAME_CORE;
  if (same(a->cache, b->cache)) return WEFT_TOPO_SAME_CACHE;
  if (same(a->pciSwitch, b->pciSwitch)) return WEFT_TOPO_SAME_PCI_SWITCH;
  if (same(a->hostBridge, b->hostBridge)) return WEFT_TOPO_SAME_HOST_BRIDGE;
  if (same(a->numa, b->numa)) return WEFT_TOPO_SAME_NUMA;
  if (same(a->package, b->package)) return WEFT_TOPO_SAME_PACKAGE;
  return WEFT_TOPO_SAME_MACHINE;
}

const struct weftTopoDev *weftTopoDevOf(const struct weftTopoHost *host, int kind, int n) {
  for (int i = 0; i < host->ndevs; i++)
    if (host->devs[i].kind == kind && n-- == 0) return &host->devs[i];
  return NULL;
}

static weftResult_t buildCurrent(const char *file) {
  struct weftTopoHost *host;
  WEFTCHECK(weftTopoHostLoad(*file ? file : NULL, &host));
  /* One warning per model: the decisions that needed what is missing fall back quietly. */
  if (host->missing[0])
    WARN("topology (%s): %s; decisions that need it fall back", host->source, host->missing);
  INFO(WEFT_TOPO, "topology (%s): %d packages, %d NUMA nodes, %d cores, %d PUs, %d GPUs, %d NICs",
       host->source, host->npackages, host->nnuma, host->ncores, host->npus, host->ngpus, host->nnics);
  if (current != NULL && current->refs == 0) weftTopoHostFree(current);
  current = host;
  return weftSuccess;
}

weftResult_t weftTopoHostGet(const struct weftTopoHost **out) {
  const char *file = weftParamTopoFile();
  pthread_mutex_lock(&cacheLock);
  weftResult_t rc = weftSuccess;
  if (current == NULL || strcmp(current->fromFile ? current->source : "", file) != 0)
    rc = buildCurrent(file);
  if (rc == weftSuccess) {
    current->refs++;
    *out = current;
  }
  pthread_mutex_unlock(&cacheLock);
  if (rc != weftSuccess) return rc;
  const char *dump = weftParamTopoDumpFile();
  if (*dump && weftTopoHostDump(*out, dump) != weftSuccess) /* a diagnostic: init goes on */
    WARN("%s", weftThreadLastError());
  return weftSuccess;
}

void weftTopoHostPut(const struct weftTopoHost *host) {
  if (host == NULL) return;
  pthread_mutex_lock(&cacheLock);
  struct weftTopoHost *h = (struct weftTopoHost *)host;
  if (--h->refs == 0 && h != current) weftTopoHostFree(h);
  pthread_mutex_unlock(&cacheLock);
}

static void printLoc(FILE *f, const struct weftTopoLoc *l) {
  if (l->package < 0 && l->numa < 0) {
    fprintf(f, "locality unknown");
    return;
  }
  fprintf(f, "package %d, NUMA node %d", l->package, l->numa);
  if (l->hostBridge >= 0) fprintf(f, ", host bridge %d", l->hostBridge);
  if (l->pciSwitch >= 0) fprintf(f, ", PCI switch %d", l->pciSwitch);
}

static void printCores(const struct weftTopoHost *h, FILE *f) {
  for (int p = -1; p < h->npackages; p++)
    for (int n = -1; n < h->nnuma; n++) {
      int k = 0;
      for (int c = 0; c < h->ncores; c++) {
        const struct weftTopoCore *core = &h->cores[c];
        if (core->loc.package != p || core->loc.numa != n) continue;
        if (k++ == 0) fprintf(f, "  package %d, NUMA node %d (OS %d): cores", p, n, n >= 0 ? h->numaOs[n] : -1);
        fprintf(f, " %d", c);
      }
      if (k) fprintf(f, " (%d)\n", k);
    }
}

static void printDevs(const struct weftTopoHost *h, FILE *f) {
  for (int i = 0; i < h->ndevs; i++) {
    const struct weftTopoDev *d = &h->devs[i];
    fprintf(f, "  %-3s %-10s %s  ", d->kind == WEFT_TOPO_GPU ? "GPU" : "NIC", d->name, d->busId);
    printLoc(f, &d->loc);
    if (d->rdma[0] && strcmp(d->rdma, d->name) != 0) fprintf(f, ", RDMA %s", d->rdma);
    if (d->kind == WEFT_TOPO_GPU && d->cudaDev >= 0) fprintf(f, ", CUDA device %d", d->cudaDev);
    if (d->kind == WEFT_TOPO_NIC) {
      if (d->speedMbps > 0) fprintf(f, ", %d Mb/s", d->speedMbps);
      else fprintf(f, ", speed unknown");
    }
    fprintf(f, "\n");
  }
}

/* Distances between the NICs and GPUs, the table NCCL's users read from its topology dump. */
static void printDistances(const struct weftTopoHost *h, FILE *f) {
  if (h->ndevs < 2) return;
  fprintf(f, "Distances between devices:\n  %-10s", "");
  for (int j = 0; j < h->ndevs; j++) fprintf(f, " %-11.11s", h->devs[j].name);
  fprintf(f, "\n");
  for (int i = 0; i < h->ndevs; i++) {
    fprintf(f, "  %-10.10s", h->devs[i].name);
    for (int j = 0; j < h->ndevs; j++)
      fprintf(f, " %-11s", i == j ? "-" : weftTopoDistName(weftTopoDistance(&h->devs[i].loc, &h->devs[j].loc)));
    fprintf(f, "\n");
  }
}

void weftTopoHostPrint(const struct weftTopoHost *h, void *file) {
  FILE *f = file;
  fprintf(f, "Host (%s%s): %d packages, %d NUMA nodes, %d last-level caches, %d cores, %d PUs, "
          "%d GPUs, %d NICs\n", h->fromFile ? "file " : "detected by ", h->source, h->npackages,
          h->nnuma, h->ncaches, h->ncores, h->npus, h->ngpus, h->nnics);
  printCores(h, f);
  printDevs(h, f);
  printDistances(h, f);
  if (h->missing[0]) fprintf(f, "Missing (fallbacks): %s\n", h->missing);
}
