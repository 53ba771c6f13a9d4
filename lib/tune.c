/* The tuner: for every AllReduce, the algorithm with the lowest predicted time. Each
 * algorithm's cost() is a pure function of the communicator's shape and the size, so every
 * rank makes the same choice without talking. WEFT_ALGO forces one. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "api.h"
#include "check.h"
#include "core.h"
#include "log.h"
#include "param.h"

/* "ring, direct, tree or hier": the registry's names. */
static void algoNames(char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  int n = weftAlgoCount();
  for (int a = 0; a < n && o < len; a++)
    o += (size_t)snprintf(buf + o, len - o, "%s%s", a == 0 ? "" : a == n - 1 ? " or " : ", ",
                          weftAlgos[a]->name);
}

static int algoIndex(const char *name) {
  for (int a = 0; weftAlgos[a] != NULL; a++)
    if (strcasecmp(name, weftAlgos[a]->name) == 0) return a;
  return -1;
}

int weftTuneCheckAlgo(const char *value, char *allowed, size_t len) {
  algoNames(allowed, len);
  return value == NULL || algoIndex(value) >= 0 ? 0 : -1;
}

weftResult_t weftTuneInit(struct weftComm *comm) {
  comm->forcedAlgo = -1;
  const char *forced = weftParamAlgo();
  if (*forced == '\0') return weftSuccess;
  int a = algoIndex(forced);
  if (a < 0) { /* lib/settings.c refuses this before init; kept for internal callers */
    char known[128];
    algoNames(known, sizeof known);
    return weftSetError(weftInvalidArgument, "WEFT_ALGO=\"%s\" is not an algorithm (allowed: %s)",
                        forced, known);
  }
  if (comm->algoState[a] == NULL)
    return weftSetError(weftInvalidArgument, "WEFT_ALGO=%s cannot run on this communicator: %s",
                        weftAlgos[a]->name, comm->algoWhy[a]);
  comm->forcedAlgo = a;
  INFO(WEFT_TUNE, "WEFT_ALGO forces %s", weftAlgos[a]->name);
  return weftSuccess;
}

static void explain(struct weftComm *comm, size_t bytes, int best, const double *cost) {
  char line[512];
  size_t o = 0;
  for (int a = 0; weftAlgos[a] != NULL && o < sizeof line; a++) {
    if (comm->algoState[a] == NULL)
      o += (size_t)snprintf(line + o, sizeof line - o, " %s=n/a", weftAlgos[a]->name);
    else
      o += (size_t)snprintf(line + o, sizeof line - o, " %s=%.2fus", weftAlgos[a]->name, cost[a]);
  }
  INFO(WEFT_TUNE, "AllReduce %zu bytes on %d ranks (%d per host): %s, predicted%s", bytes,
       comm->nranks, comm->nLocalRanks, weftAlgos[best]->name, line);
}

int weftTuneChoose(struct weftComm *comm, size_t count, size_t bytes) {
  if (comm->forcedAlgo >= 0) return comm->forcedAlgo;
  double cost[WEFT_MAX_ALGOS];
  int best = -1;
  for (int a = 0; weftAlgos[a] != NULL; a++) {
    if (comm->algoState[a] == NULL) continue;
    cost[a] = weftAlgos[a]->cost(comm->algoState[a], comm, count, bytes);
    if (best < 0 || cost[a] < cost[best]) best = a;
  }
  if (weftLogLevel != 0 && weftLogEnabled(WEFT_LOG_INFO, WEFT_TUNE)) explain(comm, bytes, best, cost);
  return best;
}

/* weft extension: what weftAllReduce would run, by name. The same argument checks as
 * weftAllReduce (without buffers) and the same tuner call; it runs and sends nothing. */
WEFT_PUBLIC weftResult_t weftCommGetAlgorithm(const weftComm_t comm, size_t count,
                                              weftDataType_t datatype, const char **name) {
  WEFTCHECK(weftCheckComm(comm, "weftCommGetAlgorithm"));
  if (name == NULL)
    return weftReportTo(comm, weftSetError(weftInvalidArgument, "weftCommGetAlgorithm: name is NULL"));
  if ((int)datatype < 0 || datatype >= weftNumTypes)
    return weftReportTo(comm, weftSetError(weftInvalidArgument,
                                           "weftCommGetAlgorithm: unknown datatype %d", (int)datatype));
  /* Non-NULL stand-in buffers, equal (in place): only the count and type are checked here;
   * weftSum takes every type. */
  static const char dummy;
  size_t bytes = 0;
  weftResult_t rc = weftCheckCollArgs(&dummy, &dummy, count, datatype, weftSum, &bytes);
  if (rc != weftSuccess) return weftReportTo(comm, rc);
  *name = count == 0 ? "none" : weftAlgos[weftTuneChoose(comm, count, bytes)]->name;
  return weftSuccess;
}
WEFT_PROFILING_ALIAS(weftCommGetAlgorithm);
