/* The live straggler report (see straggler.h). The last rank to arrive at a collective is the
 * one that waited least: every other rank's data was already there when it came, while they
 * waited for it. Its lateness is what the others waited (their median) beyond its own wait.
 * Only waits that pause are timed (weftWaitAccount), so a collective whose data is there
 * reads no clock; with the report off nothing is timed at all (comm->waitNsByPeer is NULL).
 * The records travel in an ordinary AllGather every N collectives, on the data path, so a
 * dead or stopped peer fails it (or times it out) as any collective, and never hangs it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "check.h"
#include "errors.h"
#include "group.h"
#include "param.h"
#include "straggler.h"

struct weftStragglers {
  int every;          /* collectives per window (WEFT_STRAGGLER_REPORT) */
  int64_t minUs;      /* WEFT_STRAGGLER_MIN_US */
  int filled;         /* collectives recorded in this window */
  size_t recWords;    /* every + nranks: one rank's record */
  uint32_t *mine;     /* this rank's record: its wait per collective (us), then per peer */
  uint32_t *all;      /* nranks records, after the exchange */
  int64_t *peerNs;    /* this window's waits per peer, ns (comm->waitNsByPeer during a call) */
  weftStraggler_t *named; /* the last window's verdict */
  int nnamed;
};

/* The first rule of "consistently last": last in at least 1/LAST_SHARE of the window. The
 * second: more than FAIR_NUM/FAIR_DEN of a fair share (1 / nranks) of the late collectives,
 * so that lateness spread evenly by a busy host names nobody. */
#define LAST_SHARE 10
#define FAIR_NUM 3
#define FAIR_DEN 2

weftResult_t weftStragglerInit(struct weftComm *comm) {
  int64_t every = weftParamStragglerReport();
  if (every == 0) return weftSuccess;
  struct weftStragglers *s = calloc(1, sizeof *s);
  if (s == NULL) return weftSetError(weftSystemError, "straggler report: out of memory");
  comm->stragglers = s;
  size_t n = (size_t)comm->nranks;
  s->every = (int)every;
  s->minUs = weftParamStragglerMinUs();
  s->recWords = (size_t)every + n;
  s->mine = calloc(s->recWords, sizeof *s->mine);
  s->all = calloc(s->recWords * n, sizeof *s->all);
  s->peerNs = calloc(n, sizeof *s->peerNs);
  s->named = calloc(n, sizeof *s->named);
  if (s->mine == NULL || s->all == NULL || s->peerNs == NULL || s->named == NULL)
    return weftSetError(weftSystemError, "straggler report: out of memory for %d ranks and a "
                        "window of %d", comm->nranks, s->every);
  return weftSuccess;
}

void weftStragglerFree(struct weftComm *comm) {
  struct weftStragglers *s = comm->stragglers;
  if (s == NULL) return;
  free(s->mine);
  free(s->all);
  free(s->peerNs);
  free(s->named);
  free(s);
  comm->stragglers = NULL;
}

void weftStragglerOpBegin(struct weftComm *comm) {
  comm->opWaitNs = 0;
  comm->waitNsByPeer = comm->stragglers->peerNs;
}

static uint32_t toUs(int64_t ns) {
  int64_t us = ns / 1000;
  return us > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)(us < 0 ? 0 : us);
}

static int cmpU32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

static double medianOf(uint32_t *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmpU32);
  return n % 2 ? v[n / 2] : ((double)v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Collective k: the rank that waited least (the lowest of equals), *lateUs its lateness. */
static int lastOf(const uint32_t *rec, int nranks, int ops, int k, uint32_t *scratch,
                  double *lateUs) {
  size_t stride = (size_t)ops + (size_t)nranks;
  int last = 0;
  for (int r = 1; r < nranks; r++)
    if (rec[r * stride + (size_t)k] < rec[last * stride + (size_t)k]) last = r;
  int m = 0;
  for (int r = 0; r < nranks; r++)
    if (r != last) scratch[m++] = rec[r * stride + (size_t)k];
  *lateUs = m > 0 ? medianOf(scratch, m) - rec[last * stride + (size_t)k] : 0;
  return last;
}

static int cmpNamed(const void *a, const void *b) {
  const weftStraggler_t *x = a, *y = b;
  if (x->lastOps != y->lastOps) return y->lastOps - x->lastOps;
  return x->rank - y->rank;
}

int weftStragglerAnalyze(const uint32_t *rec, int nranks, int ops, int64_t minUs,
                         weftStraggler_t *out) {
  uint32_t *scratch = malloc(sizeof *scratch * (size_t)(nranks > ops ? nranks : ops));
  int *lastAt = malloc(sizeof *lastAt * (size_t)ops);
  uint32_t *lateAt = malloc(sizeof *lateAt * (size_t)ops);
  int *lastOps = calloc((size_t)nranks, sizeof *lastOps);
  int named = -1, lateOps = 0;
  if (scratch == NULL || lastAt == NULL || lateAt == NULL || lastOps == NULL) goto done;
  for (int k = 0; k < ops; k++) {
    double late;
    int last = lastOf(rec, nranks, ops, k, scratch, &late);
    lastAt[k] = late >= (double)minUs ? last : -1;
    lateAt[k] = (uint32_t)(late > 0 ? late : 0);
    if (lastAt[k] >= 0) lateOps++, lastOps[last]++;
  }
  size_t stride = (size_t)ops + (size_t)nranks;
  named = 0;
  for (int r = 0; r < nranks; r++) {
    int c = lastOps[r];
    if (c == 0 || c * LAST_SHARE < ops || FAIR_DEN * nranks * c <= FAIR_NUM * lateOps) continue;
    int m = 0;
    for (int k = 0; k < ops; k++)
      if (lastAt[k] == r) scratch[m++] = lateAt[k];
    double waitedOn = 0;
    for (int q = 0; q < nranks; q++)
      if (q != r) waitedOn += rec[q * stride + (size_t)ops + (size_t)r];
    out[named++] = (weftStraggler_t){r, c, ops, medianOf(scratch, m), waitedOn};
  }
  qsort(out, (size_t)named, sizeof *out, cmpNamed);
done:
  free(scratch);
  free(lastAt);
  free(lateAt);
  free(lastOps);
  return named;
}

static void printVerdict(const struct weftComm *comm, const struct weftStragglers *s) {
  char line[1024];
  size_t o = 0;
  for (int i = 0; i < s->nnamed && o < sizeof line; i++) {
    const weftStraggler_t *t = &s->named[i];
    o += (size_t)snprintf(line + o, sizeof line - o,
                          "%srank %d last in %d (median %.0f us late; the others waited %.0f us "
                          "on it)", i ? ", " : "", t->rank, t->lastOps, t->medianLateUs,
                          t->waitedOnUs);
  }
  fprintf(stderr, "[%d] WEFT stragglers in the %d collectives up to operation %llu: %s\n",
          comm->rank, s->every, (unsigned long long)comm->opSeq, s->nnamed ? line : "none");
  fflush(stderr);
}

/* The window is full: every rank's records to every rank (an AllGather of what it waited),
 * then the verdict. */
static weftResult_t closeWindow(struct weftComm *comm, struct weftStragglers *s) {
  for (int p = 0; p < comm->nranks; p++) s->mine[s->every + p] = toUs(s->peerNs[p]);
  memset(s->peerNs, 0, sizeof *s->peerNs * (size_t)comm->nranks);
  s->filled = 0;
  struct weftCollArgs args = {weftCollAllGather, s->mine, s->all, s->recWords, 0, weftUint32,
                              weftSum, -1, 0, {0}};
  WEFTCHECK(weftCheckCall(comm, &args));
  WEFTCHECK(weftCollRunAlgo(comm, args));
  int n = weftStragglerAnalyze(s->all, comm->nranks, s->every, s->minUs, s->named);
  if (n < 0) return weftReportTo(comm, weftSetError(weftSystemError, "straggler report: out of memory"));
  s->nnamed = n;
  if (comm->rank == 0) printVerdict(comm, s);
  return weftSuccess;
}

weftResult_t weftStragglerOpEnd(struct weftComm *comm, weftResult_t rc) {
  struct weftStragglers *s = comm->stragglers;
  comm->waitNsByPeer = NULL;
  if (rc != weftSuccess) return rc;
  s->mine[s->filled++] = toUs(comm->opWaitNs);
  return s->filled == s->every ? closeWindow(comm, s) : weftSuccess;
}

WEFT_PUBLIC weftResult_t weftCommGetStragglers(const weftComm_t comm, weftStraggler_t *stragglers,
                                               int capacity, int *count) {
  static const char *api = "weftCommGetStragglers";
  WEFTCHECK(weftCheckComm(comm, api));
  if (count == NULL)
    return weftReportTo(comm, weftSetError(weftInvalidArgument, "%s: count is NULL", api));
  if (capacity < 0)
    return weftReportTo(comm, weftSetError(weftInvalidArgument, "%s: capacity %d < 0", api, capacity));
  if (stragglers == NULL && capacity > 0)
    return weftReportTo(comm, weftSetError(weftInvalidArgument, "%s: stragglers is NULL with "
                                           "capacity %d", api, capacity));
  const struct weftStragglers *s = comm->stragglers;
  if (s == NULL)
    return weftReportTo(comm, weftSetError(weftInvalidUsage, "%s: rank %d: the straggler report "
                                           "is off (set WEFT_STRAGGLER_REPORT=N before init)",
                                           api, comm->rank));
  if (atomic_load(&comm->opInFlight))
    return weftReportTo(comm, weftSetError(weftInvalidUsage, "%s: rank %d: a non-blocking "
                                           "collective is in progress", api, comm->rank));
  int n = s->nnamed < capacity ? s->nnamed : capacity;
  if (n > 0) memcpy(stragglers, s->named, sizeof *stragglers * (size_t)n);
  *count = s->nnamed;
  return weftSuccess;
}
WEFT_PROFILING_ALIAS(weftCommGetStragglers);
