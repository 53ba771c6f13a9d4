/* WEFT_GRAPH_DUMP_FILE: what init chose from the topology, as JSON (rank 0 writes it): every
 * rank's place and NIC, the ring's order, and the double binary tree's two trees. weft-topo
 * writes the same JSON for a job it only imagines. It sits at the API: it names the tree
 * algorithm's shape. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "../algorithms/tree.h"
#include "core.h"
#include "log.h"
#include "param.h"

/* A device name as a JSON string's content: names come from hwloc or a user's XML, so anything
 * but the characters interface names use is written as '?'. */
static const char *jsonName(const char *name, char *out, size_t len) {
  size_t i = 0;
  for (; name[i] != '\0' && i + 1 < len; i++) {
    char c = name[i];
    int plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                c == '_' || c == '-' || c == '.' || c == ':';
    out[i] = plain ? c : '?';
  }
  out[i] = '\0';
  return out;
}

static void writeRanks(const struct weftTopoGraph *g, FILE *f) {
  fprintf(f, "  \"ranks\": [\n");
  for (int r = 0; r < g->n; r++) {
    const struct weftTopoPlace *p = &g->places[r];
    const struct weftTopoNicInfo *nic = &g->nics[r];
    char name[WEFT_TOPO_NAME_BYTES];
    fprintf(f, "    {\"rank\": %d, \"host\": %d, \"core\": %d, \"cores\": %d, \"numa\": %d, "
            "\"package\": %d, \"bound\": %s, \"nic\": \"%s\", \"nicDistance\": \"%s\", "
            "\"nicSpeedMbps\": %d}%s\n", r, g->hostOf[r], p->core, p->ncores, p->numa, p->package,
            p->bound ? "true" : "false", jsonName(nic->name, name, sizeof name), weftTopoDistName((enum weftTopoDist)nic->dist),
            nic->speedMbps, r + 1 < g->n ? "," : "");
  }
  fprintf(f, "  ],\n");
}

static void writeRing(const struct weftTopoGraph *g, FILE *f) {
  fprintf(f, "  \"rings\": [{\"order\": [");
  for (int i = 0; i < g->n; i++) fprintf(f, "%s%d", i ? ", " : "", g->ring[i]);
  fprintf(f, "], \"packageCrossings\": %d}],\n",
          weftTopoPackageCrossings(g->places, g->hostOf, g->ring, g->n));
}

static void writeTrees(const struct weftTopoGraph *g, FILE *f) {
  fprintf(f, "  \"trees\": [");
  for (int t = 0; t < 2; t++) {
    fprintf(f, "%s{\"root\": %d, \"parent\": [", t ? ", " : "", weftTreeRootOf(t, g->n));
    for (int v = 0; v < g->n; v++) {
      struct weftTreeNode node;
      weftTreeNodeOf(v, t, g->n, &node);
      fprintf(f, "%s%d", v ? ", " : "", node.parent);
    }
    fprintf(f, "]}");
  }
  fprintf(f, "]\n");
}

void weftTopoGraphWrite(const struct weftTopoGraph *g, void *file) {
  FILE *f = file;
  int hosts = 0;
  for (int r = 0; r < g->n; r++)
    if (g->hostOf[r] + 1 > hosts) hosts = g->hostOf[r] + 1;
  fprintf(f, "{\n  \"nranks\": %d,\n  \"nhosts\": %d,\n", g->n, hosts);
  writeRanks(g, f);
  writeRing(g, f);
  writeTrees(g, f);
  fprintf(f, "}\n");
}

static weftResult_t writeFile(const struct weftTopoGraph *g, const char *path) {
  FILE *f = fopen(path, "we");
  if (f == NULL) return weftSetSysError(errno, "WEFT_GRAPH_DUMP_FILE=\"%s\": cannot create it", path);
  weftTopoGraphWrite(g, f);
  if (fclose(f) != 0) return weftSetSysError(errno, "WEFT_GRAPH_DUMP_FILE=\"%s\": cannot write it", path);
  return weftSuccess;
}

/* A failure to write is a warning: the dump is a diagnostic, the communicator works. */
weftResult_t weftTopoGraphDump(struct weftComm *comm) {
  const char *path = weftParamGraphDumpFile();
  if (*path == '\0' || comm->rank != 0) return weftSuccess;
  int n = comm->nranks;
  int *hostOf = malloc(sizeof(int) * (size_t)n);
  struct weftTopoPlace *places = malloc(sizeof *places * (size_t)n);
  if (hostOf == NULL || places == NULL) {
    free(hostOf);
    free(places);
    return weftSetError(weftSystemError, "out of memory");
  }
  for (int r = 0, hosts = 0; r < n; r++) {
    places[r] = comm->peers[r].place;
    hostOf[r] = hosts;
    for (int q = 0; q < r; q++)
      if (comm->peers[q].hostHash == comm->peers[r].hostHash) {
        hostOf[r] = hostOf[q];
        break;
      }
    if (hostOf[r] == hosts) hosts++;
  }
  struct weftTopoGraph g = {n, hostOf, places, comm->nics, comm->ring.order};
  if (writeFile(&g, path) != weftSuccess) WARN("%s", weftThreadLastError());
  free(hostOf);
  free(places);
  return weftSuccess;
}
