/* The tuner: for every collective call, the algorithm with the lowest predicted time among
 * those that run the collective, can run on this communicator and WEFT_ALGO allows. Each
 * algorithm's cost() is a pure function of the communicator's shape and the call, so every
 * rank makes the same choice without talking. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "algospec.h"
#include "check.h"
#include "collname.h"
#include "core.h"
#include "log.h"
#include "param.h"

/* Why none of the algorithms in mask can run coll here: "hier: it needs 2 or more hosts ...". */
static void describeUnrunnable(const struct weftComm *comm, unsigned mask, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (int a = 0; weftAlgos[a] != NULL && o < len; a++)
    if (mask & (1u << a))
      o += (size_t)snprintf(buf + o, len - o, "%s%s: %s", o ? "; " : "", weftAlgos[a]->name,
                            comm->algoWhy[a]);
}

static unsigned runnable(const struct weftComm *comm) {
  unsigned m = 0;
  for (int a = 0; weftAlgos[a] != NULL; a++)
    if (comm->algoState[a] != NULL) m |= 1u << a;
  return m;
}

/* WEFT_ALGO, checked by lib/settings.c before init: what it allows must be able to run on
 * this communicator for every collective it narrows, else init fails saying why. */
weftResult_t weftTuneInit(struct weftComm *comm) {
  const char *text = weftParamAlgo();
  struct weftAlgoSpec spec;
  char err[160];
  if (weftAlgoSpecParse(text, &spec, err, sizeof err) != 0) /* refused by settings already */
    return weftSetError(weftInvalidArgument, "WEFT_ALGO=\"%s\" is not allowed: %s", text, err);
  unsigned can = runnable(comm);
  for (int c = 0; c < weftNumColls; c++) {
    comm->algoAllowed[c] = spec.allowed[c];
    comm->tuneMemo[c].algo = -1;
    if (!(spec.restricted & WEFT_COLL_BIT(c)) || (spec.allowed[c] & can) != 0) continue;
    char why[768];
    describeUnrunnable(comm, spec.allowed[c], why, sizeof why);
    if (__builtin_popcount(spec.allowed[c]) == 1)
      return weftSetError(weftInvalidArgument, "WEFT_ALGO=%s cannot run on this communicator: %s",
                          text, comm->algoWhy[__builtin_ctz(spec.allowed[c])]);
    return weftSetError(weftInvalidArgument, "WEFT_ALGO=%s leaves %s no algorithm that can run on "
                        "this communicator: %s", text, weftCollName((weftColl_t)c), why);
  }
  if (*text) INFO(WEFT_TUNE, "WEFT_ALGO=%s", text);
  return weftSuccess;
}

static void explain(struct weftComm *comm, const struct weftCollArgs *args, int best,
                    const double *cost) {
  char line[512];
  size_t o = 0;
  unsigned bit = WEFT_COLL_BIT(args->coll);
  for (int a = 0; weftAlgos[a] != NULL && o < sizeof line; a++) {
    const char *name = weftAlgos[a]->name;
    if (!(weftAlgos[a]->colls & bit)) continue;
    if (comm->algoState[a] == NULL)
      o += (size_t)snprintf(line + o, sizeof line - o, " %s=n/a", name);
    else if (!(comm->algoAllowed[args->coll] & (1u << a)))
      o += (size_t)snprintf(line + o, sizeof line - o, " %s=excluded(WEFT_ALGO)", name);
    else
      o += (size_t)snprintf(line + o, sizeof line - o, " %s=%.2fus", name, cost[a]);
  }
  INFO(WEFT_TUNE, "%s %zu bytes on %d ranks (%d per host): %s, predicted%s",
       weftCollName(args->coll), args->bytes, comm->nranks, comm->nLocalRanks,
       weftAlgos[best]->name, line);
}

/* Whether the memo holds the choice for a call like args (and the same algorithms running). */
static int memoFits(const struct weftTuneMemo *m, const struct weftCollArgs *args, unsigned run) {
  return m->algo >= 0 && m->bytes == args->bytes && m->type == (int)args->type &&
         m->op == (int)args->op && m->root == args->root && m->runnable == run;
}

int weftTuneChoose(struct weftComm *comm, const struct weftCollArgs *args) {
  double cost[WEFT_MAX_ALGOS];
  int best = -1, explaining = weftLogLevel != 0 && weftLogEnabled(WEFT_LOG_INFO, WEFT_TUNE);
  struct weftTuneMemo *memo = &comm->tuneMemo[args->coll];
  unsigned run = runnable(comm);
  if (!explaining && memoFits(memo, args, run)) return memo->algo;
  unsigned allowed = comm->algoAllowed[args->coll], bit = WEFT_COLL_BIT(args->coll);
  for (int a = 0; weftAlgos[a] != NULL; a++) {
    if (comm->algoState[a] == NULL || !(weftAlgos[a]->colls & bit) || !(allowed & (1u << a)))
      continue;
    cost[a] = weftAlgos[a]->cost(comm->algoState[a], comm, args);
    if (best < 0 || cost[a] < cost[best]) best = a;
  }
  if (best >= 0 && explaining) explain(comm, args, best, cost);
  *memo = (struct weftTuneMemo){args->bytes, (int)args->type, (int)args->op, args->root, best, run};
  return best;
}

weftResult_t weftTuneNoAlgorithm(const struct weftComm *comm, weftColl_t coll) {
  unsigned run = 0, bit = WEFT_COLL_BIT(coll);
  for (int a = 0; weftAlgos[a] != NULL; a++)
    if (weftAlgos[a]->colls & bit) run |= 1u << a;
  if (run == 0)
    return weftSetError(weftInvalidUsage, "%s: no algorithm of this build runs it yet",
                        weftCollName(coll));
  char why[768];
  describeUnrunnable(comm, run & comm->algoAllowed[coll], why, sizeof why);
  return weftSetError(weftInvalidUsage, "%s: no algorithm can run it on this communicator: %s",
                      weftCollName(coll), why);
}
