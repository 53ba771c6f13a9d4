/* What the weft benchmarks share (see perf_weft.h). */
#include "perf_weft.h"

#include <stdio.h>
#include <string.h>

const weftDataType_t perfWeftTypes[PERF_NTYPES] = {
  weftInt8, weftUint8, weftInt32, weftUint32, weftInt64, weftUint64,
  weftFloat16, weftFloat32, weftFloat64, weftBfloat16,
};
const weftRedOp_t perfWeftOps[PERF_NOPS] = {weftSum, weftProd, weftMax, weftMin, weftAvg};

const char *perfWeftLibrary(void) {
  static char line[64];
  int v = 0;
  weftResult_t res = weftGetVersion(&v);
  if (res != weftSuccess) perfFatal("weftGetVersion: %s", weftGetErrorString(res));
  snprintf(line, sizeof(line), "weft version %d.%d.%d", v / 10000, v / 100 % 100, v % 100);
  return line;
}

/* World rank 0 creates the id (and with it the bootstrap root); MPI hands it to the others. */
static weftUniqueId uniqueId;

void *perfWeftSetup(const perfWorld *w) {
  memset(&uniqueId, 0, sizeof(uniqueId));
  if (w->rank == 0) {
    weftResult_t res = weftGetUniqueId(&uniqueId);
    if (res != weftSuccess) perfFatal("weftGetUniqueId: %s: %s", weftGetErrorString(res), weftGetLastError(NULL));
  }
  if (perfUseMpi) MPI_Bcast(&uniqueId, (int)sizeof(uniqueId), MPI_BYTE, 0, MPI_COMM_WORLD);
  return &uniqueId;
}

/* Each rank owns its buffers and communicator, as a process-per-rank application would. */
void *perfWeftRankInit(void *shared, int rank, int nRanks) {
  weftComm_t comm;
  weftResult_t res = weftCommInitRank(&comm, nRanks, *(const weftUniqueId *)shared, rank);
  if (res != weftSuccess) {
    perfFatal("rank %d: weftCommInitRank: %s: %s", rank, weftGetErrorString(res), weftGetLastError(NULL));
  }
  return comm;
}

void perfWeftRankFini(void *ctx) {
  weftResult_t res = weftCommDestroy(ctx);
  if (res != weftSuccess) perfFatal("weftCommDestroy: %s", weftGetErrorString(res));
}

void perfWeftGroupStart(void *ctx) {
  perfWeftCheck(weftGroupStart(), ctx, "weftGroupStart", 0, 0, -1, -1);
}

void perfWeftGroupEnd(void *ctx) {
  perfWeftCheck(weftGroupEnd(), ctx, "weftGroupEnd", 0, 0, -1, -1);
}

int perfWeftSupportedReduce(int type, int op) {
  return op != PERF_AVG || perfTypes[type].kind == PERF_FLOAT;
}

void perfWeftCheck(weftResult_t res, weftComm_t comm, const char *call, size_t count, int type, int op,
                   int root) {
  if (res == weftSuccess) return;
  char opPart[16] = "", rootPart[24] = "";
  if (op >= 0) snprintf(opPart, sizeof(opPart), ", %s", perfOpNames[op]);
  if (root >= 0) snprintf(rootPart, sizeof(rootPart), ", root %d", root);
  perfFatal("%s(count %zu, %s%s%s): %s: %s", call, count, perfTypes[type].name, opPart, rootPart,
            weftGetErrorString(res), weftGetLastError(comm));
}

const char *perfWeftAlgo(weftComm_t comm, weftColl_t coll, size_t count, int type) {
  const char *name = "?";
  weftResult_t res = weftCommGetCollAlgorithm(comm, coll, count, perfWeftTypes[type], &name);
  if (res != weftSuccess) perfFatal("weftCommGetCollAlgorithm: %s: %s", weftGetErrorString(res), weftGetLastError(comm));
  return name;
}

/* The transports this rank's peers are reached over, each with its peer count and what this
 * rank uses for it (weftCommGetPeerTransport), in the order first met: "shm to 3; tcp to 4
 * (eth0 10.0.0.1)". */
#define PERF_LINK_KINDS 8
void perfWeftLinks(void *ctx, char *line, size_t len) {
  weftComm_t comm = ctx;
  int n = 0, me = 0, kinds = 0;
  const char *names[PERF_LINK_KINDS];
  char devs[PERF_LINK_KINDS][256];
  int peers[PERF_LINK_KINDS];
  if (weftCommCount(comm, &n) != weftSuccess || weftCommUserRank(comm, &me) != weftSuccess)
    perfFatal("weftCommCount: %s", weftGetLastError(comm));
  for (int p = 0; p < n; p++) {
    const char *t;
    char dev[256];
    if (p == me) continue;
    weftResult_t res = weftCommGetPeerTransport(comm, p, &t, dev, sizeof(dev));
    if (res != weftSuccess) perfFatal("weftCommGetPeerTransport: %s", weftGetLastError(comm));
    int k = 0;
    while (k < kinds && (strcmp(names[k], t) != 0 || strcmp(devs[k], dev) != 0)) k++;
    if (k == kinds && kinds == PERF_LINK_KINDS) continue;
    if (k == kinds) names[kinds] = t, snprintf(devs[kinds], sizeof(devs[0]), "%s", dev), peers[kinds++] = 0;
    peers[k]++;
  }
  size_t at = 0;
  line[0] = '\0';
  if (kinds == 0) snprintf(line, len, "(no other rank)");
  for (int k = 0; k < kinds && at < len; k++)
    at += (size_t)snprintf(line + at, len - at, "%s%s to %d%s%s%s", k ? "; " : "", names[k], peers[k],
                           devs[k][0] ? " (" : "", devs[k], devs[k][0] ? ")" : "");
}
