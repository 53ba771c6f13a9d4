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
#include <unistd.h>

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
  size_t recWords;    /* one rank's record: WEFT_STRAGGLER_REC_WORDS(every, nranks) */
  uint32_t *mine;     /* this rank's record (straggler.h): waits per collective, then per peer */
  uint32_t *all;      /* nranks records, after the exchange */
  struct weftLinkMeter *meters; /* per peer, from the transports (comm->linkMeters) */
  int64_t *peerNs;    /* this window's waits per peer, ns (comm->waitNsByPeer during a call) */
  weftStraggler_t *named; /* the last window's verdict */
  int nnamed;
};

/* The first rule of "consistently last": last in at least 1/WEFT_STRAGGLER_LAST_SHARE of the
 * window. The second: more than FAIR_NUM/FAIR_DEN of a fair share (1 / nranks) of the late
 * collectives, so that lateness spread evenly by a busy host names nobody. */
#define FAIR_NUM 3
#define FAIR_DEN 2
/* A collective is late only when its last rank's lateness is also at least 1/LATE_REL_DEN of
 * what the others waited (their median): where every collective waits milliseconds on a slow
 * link, 100 us of noise between the fast ranks is not one of them being late. */
#define LATE_REL_DEN 4

weftResult_t weftStragglerInit(struct weftComm *comm) {
  int64_t every = weftParamStragglerReport();
  if (every == 0) return weftSuccess;
  struct weftStragglers *s = calloc(1, sizeof *s);
  if (s == NULL) return weftSetError(weftSystemError, "straggler report: out of memory");
  comm->stragglers = s;
  comm->runqueueFd = -1;
  size_t n = (size_t)comm->nranks;
  s->every = (int)every;
  s->minUs = weftParamStragglerMinUs();
  s->recWords = WEFT_STRAGGLER_REC_WORDS(every, n);
  s->mine = calloc(s->recWords, sizeof *s->mine);
  s->all = calloc(s->recWords * n, sizeof *s->all);
  s->peerNs = calloc(n, sizeof *s->peerNs);
  s->named = calloc(n, sizeof *s->named);
  s->meters = calloc(n, sizeof *s->meters);
  if (s->mine == NULL || s->all == NULL || s->peerNs == NULL || s->named == NULL ||
      s->meters == NULL)
    return weftSetError(weftSystemError, "straggler report: out of memory for %d ranks and a "
                        "window of %d", comm->nranks, s->every);
  atomic_store_explicit(&comm->linkMeters, s->meters, memory_order_release);
  return weftSuccess;
}

void weftStragglerFree(struct weftComm *comm) {
  struct weftStragglers *s = comm->stragglers;
  if (s == NULL) return;
  if (comm->runqueueFd >= 0) close(comm->runqueueFd);
  comm->runqueueFd = -1;
  free(s->mine);
  free(s->all);
  free(s->peerNs);
  free(s->named);
  atomic_store(&comm->linkMeters, NULL); /* after the transports: nothing meters any more */
  free(s->meters);
  free(s);
  comm->stragglers = NULL;
}

void weftStragglerOpBegin(struct weftComm *comm) {
  comm->opWaitNs = 0;
  comm->waitNsByPeer = comm->stragglers->peerNs;
}

static uint32_t clampU32(int64_t v) {
  return v > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)(v < 0 ? 0 : v);
}

static uint32_t toUs(int64_t ns) { return clampU32(ns / 1000); }

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
                  double *lateUs, double *othersUs) {
  size_t stride = WEFT_STRAGGLER_REC_WORDS(ops, nranks);
  int last = 0;
  for (int r = 1; r < nranks; r++)
    if (rec[r * stride + (size_t)k] < rec[last * stride + (size_t)k]) last = r;
  int m = 0;
  for (int r = 0; r < nranks; r++)
    if (r != last) scratch[m++] = rec[r * stride + (size_t)k];
  *othersUs = m > 0 ? medianOf(scratch, m) : 0;
  *lateUs = m > 0 ? *othersUs - rec[last * stride + (size_t)k] : 0;
  return last;
}

/* Named on slow links first (the most first), then the most often last. */
static int cmpNamed(const void *a, const void *b) {
  const weftStraggler_t *x = a, *y = b;
  if (x->slowLinks != y->slowLinks) return y->slowLinks - x->slowLinks;
  if (x->lastOps != y->lastOps) return y->lastOps - x->lastOps;
  return x->rank - y->rank;
}

/* What the others' waits attributed to r in the window, us. */
static double waitedOn(const uint32_t *rec, int nranks, int ops, int r) {
  size_t stride = WEFT_STRAGGLER_REC_WORDS(ops, nranks);
  double sum = 0;
  for (int q = 0; q < nranks; q++)
    if (q != r) sum += rec[q * stride + WEFT_STRAGGLER_WAIT_AT(ops, nranks) + (size_t)r];
  return sum;
}

/* The ranks consistently last into out; lastAt/lateAt/lastOps/scratch are the caller's. */
static int lastVerdict(const uint32_t *rec, int nranks, int ops, int64_t minUs, int *lastAt,
                       uint32_t *lateAt, int *lastOps, uint32_t *scratch, weftStraggler_t *out) {
  int lateOps = 0, named = 0;
  for (int k = 0; k < ops; k++) {
    double late, others;
    int last = lastOf(rec, nranks, ops, k, scratch, &late, &others);
    lastAt[k] = late >= (double)minUs && LATE_REL_DEN * late >= others ? last : -1;
    lateAt[k] = (uint32_t)(late > 0 ? late : 0);
    if (lastAt[k] >= 0) lateOps++, lastOps[last]++;
  }
  for (int r = 0; r < nranks; r++) {
    int c = lastOps[r];
    if (c == 0 || c * WEFT_STRAGGLER_LAST_SHARE < ops || FAIR_DEN * nranks * c <= FAIR_NUM * lateOps)
      continue;
    int m = 0;
    for (int k = 0; k < ops; k++)
      if (lastAt[k] == r) scratch[m++] = lateAt[k];
    out[named++] = (weftStraggler_t){r, c, ops, medianOf(scratch, m), waitedOn(rec, nranks, ops, r),
                                     0, 0};
  }
  return named;
}

/* Adds the ranks the slow links name, and drops a rank named as last that is on a slow link
 * without being named by them: a slow link fed it late, and its own rank is the one named. */
static int addSlowLinks(const uint32_t *rec, int nranks, int ops, const int *slowLinks,
                        const double *mbps, const int *lastOps, weftStraggler_t *out, int named) {
  int kept = 0;
  for (int i = 0; i < named; i++) {
    int r = out[i].rank;
    if (slowLinks[r] < 0) continue;
    out[kept] = out[i];
    out[kept].slowLinks = slowLinks[r];
    out[kept++].slowestLinkMBps = mbps[r];
  }
  for (int r = 0; r < nranks; r++) {
    int have = 0;
    for (int i = 0; i < kept && !have; i++) have = out[i].rank == r;
    if (slowLinks[r] > 0 && !have)
      out[kept++] = (weftStraggler_t){r, lastOps[r], ops, 0, waitedOn(rec, nranks, ops, r),
                                      slowLinks[r], mbps[r]};
  }
  return kept;
}

int weftStragglerAnalyze(const uint32_t *rec, int nranks, int ops, int64_t minUs,
                         weftStraggler_t *out) {
  uint32_t *scratch = malloc(sizeof *scratch * (size_t)(nranks > ops ? nranks : ops));
  int *lastAt = malloc(sizeof *lastAt * (size_t)ops);
  uint32_t *lateAt = malloc(sizeof *lateAt * (size_t)ops);
  int *lastOps = calloc((size_t)nranks, sizeof *lastOps);
  int *slowLinks = malloc(sizeof *slowLinks * (size_t)nranks);
  double *mbps = malloc(sizeof *mbps * (size_t)nranks);
  int named = -1;
  if (scratch == NULL || lastAt == NULL || lateAt == NULL || lastOps == NULL ||
      slowLinks == NULL || mbps == NULL)
    goto done;
  named = lastVerdict(rec, nranks, ops, minUs, lastAt, lateAt, lastOps, scratch, out);
  if (weftStragglerSlowLinks(rec, nranks, ops, minUs, slowLinks, mbps) < 0) {
    named = -1;
    goto done;
  }
  named = addSlowLinks(rec, nranks, ops, slowLinks, mbps, lastOps, out, named);
  qsort(out, (size_t)named, sizeof *out, cmpNamed);
done:
  free(scratch);
  free(lastAt);
  free(lateAt);
  free(lastOps);
  free(slowLinks);
  free(mbps);
  return named;
}

static void printVerdict(const struct weftComm *comm, const struct weftStragglers *s) {
  char line[1024];
  size_t o = 0;
  for (int i = 0; i < s->nnamed && o < sizeof line; i++) {
    const weftStraggler_t *t = &s->named[i];
    if (t->slowLinks > 0)
      o += (size_t)snprintf(line + o, sizeof line - o,
                            "%srank %d on %d slow link%s (the slowest %.1f MB/s; the others "
                            "waited %.0f us on it)", i ? ", " : "", t->rank, t->slowLinks,
                            t->slowLinks > 1 ? "s" : "", t->slowestLinkMBps, t->waitedOnUs);
    else
      o += (size_t)snprintf(line + o, sizeof line - o,
                            "%srank %d last in %d (median %.0f us late; the others waited %.0f "
                            "us on it)", i ? ", " : "", t->rank, t->lastOps, t->medianLateUs,
                            t->waitedOnUs);
  }
  fprintf(stderr, "[%d] WEFT stragglers in the %d collectives up to operation %llu: %s\n",
          comm->rank, s->every, (unsigned long long)comm->opSeq, s->nnamed ? line : "none");
  fflush(stderr);
}

/* The window is full: every rank's records to every rank (an AllGather of what it waited),
 * then the verdict. */
/* This rank's per-peer part of the record: waits, and what the link meters saw (cleared). */
static void recordPeers(struct weftComm *comm, struct weftStragglers *s) {
  size_t n = (size_t)comm->nranks;
  for (size_t p = 0; p < n; p++) {
    s->mine[WEFT_STRAGGLER_WAIT_AT(s->every, n) + p] = toUs(s->peerNs[p]);
    int64_t ns = atomic_exchange_explicit(&s->meters[p].trickleNs, 0, memory_order_relaxed);
    int64_t bytes = atomic_exchange_explicit(&s->meters[p].bytes, 0, memory_order_relaxed);
    s->mine[WEFT_STRAGGLER_TRICKLE_AT(s->every, n) + p] = toUs(ns);
    s->mine[WEFT_STRAGGLER_KIB_AT(s->every, n) + p] = clampU32(bytes / 1024);
  }
  memset(s->peerNs, 0, sizeof *s->peerNs * n);
}

static weftResult_t closeWindow(struct weftComm *comm, struct weftStragglers *s) {
  recordPeers(comm, s);
  s->filled = 0;
  struct weftCollArgs args = {weftCollAllGather, s->mine, s->all, s->recWords, 0, weftUint32,
                              weftSum, -1, 0, {0}};
  WEFTCHECK(weftCheckCall(comm, &args));
  WEFTCHECK(weftCollRunAlgo(comm, &args));
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
