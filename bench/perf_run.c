/* The benchmark driver (see perf_run.h): ranks, the timing loop, -T's watchdog, -M's report. */
#include "perf_run.h"

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "perf_check.h"
#include "perf_device.h"
#include "perf_report.h"

typedef struct {
  const perfOpts *opts;
  const perfBench *bench;
  perfTeam *team;
  void *shared, *ctx;
  int tid, rank, nRanks;
  int printer;                /* world rank 0, thread 0: prints the table */
  const perfMemory *mem;      /* host or device buffers (perf_device.h) */
  perfDevRank dev;            /* device buffers: the buffers the calls get, and their stream */
  char *sendBase, *recvBase;  /* cap + PERF_GUARD + room for -u, each (device: the mirrors) */
  size_t cap;                 /* the most bytes a call sends or receives */
  char *send, *recv;          /* past -u's elements of the current type (host memory) */
  char *callSend, *callRecv;  /* what the calls get: send / recv, or the device buffers' same */
  double *iterSec;            /* -I: each iteration's seconds */
  _Atomic double busySince;   /* -T: when the wait in progress started; 0: none */
  _Atomic size_t busyCount;   /* the collective's count, or PERF_IN_BARRIER */
  double bwSum;
  int bwCount, errors; /* errors: measurements with wrong elements on any rank */
  pthread_t thread;
} perfRank;

/* ---------------------------------------------------------------------------------------------
 * -T: a collective that takes longer than the timeout ends the run, as nccl-tests' timeout does
 * (it aborts its communicators and exits with testTimeout, 4). A call is checked when it
 * returns, and a watchdog thread catches one that does not return at all. The watchdog also
 * watches the benchmark's own barriers and reductions between the calls: a rank that stops
 * (or dies) leaves its peers waiting there as often as in a collective. */

#define PERF_IN_BARRIER ((size_t)-1)

static struct {
  perfRank *ranks;
  int n;
  double timeout;
  const char *coll;
  atomic_int stop;
  pthread_t thread;
} dog;

static void perfTimedOut(const perfRank *r, size_t count, double elapsed, int returned) {
  static atomic_flag ending = ATOMIC_FLAG_INIT;
  if (atomic_flag_test_and_set(&ending)) {
    for (;;) pause(); /* another thread is ending the process */
  }
  char host[256] = "?", msg[512];
  gethostname(host, sizeof(host) - 1);
  if (count == PERF_IN_BARRIER) {
    snprintf(msg, sizeof(msg), "Test timeout (%gs): rank %d: still waiting for the other ranks in the "
             "benchmark's barrier after %.6f s", dog.timeout, r->rank, elapsed);
  } else {
    snprintf(msg, sizeof(msg), "Test timeout (%gs): rank %d: %s of %zu elements %s %.6f s", dog.timeout,
             r->rank, dog.coll, count, returned ? "took" : "still running after", elapsed);
  }
  perfReportAbort(msg);
  fflush(stdout);
  fprintf(stderr, "%s:%d: error: %s\n", host, (int)getpid(), msg);
  fflush(NULL);
  _exit(4); /* under mpirun, a process gone without MPI_Finalize ends the job */
}

static void *perfWatchdog(void *arg) {
  (void)arg;
  double step = fmin(fmax(dog.timeout / 10, 0.001), 0.1);
  struct timespec ts = {0, (long)(step * 1e9)};
  while (!atomic_load(&dog.stop)) {
    double now = perfNow();
    for (int i = 0; i < dog.n; i++) {
      double since = atomic_load(&dog.ranks[i].busySince);
      if (since > 0 && now - since > dog.timeout)
        perfTimedOut(&dog.ranks[i], atomic_load(&dog.ranks[i].busyCount), now - since, 0);
    }
    nanosleep(&ts, NULL);
  }
  return NULL;
}

static void perfWatchdogStart(perfRank *ranks, int n, const perfOpts *o, const perfBench *b) {
  if (o->timeout <= 0) return;
  dog.ranks = ranks;
  dog.n = n;
  dog.timeout = o->timeout;
  dog.coll = b->shape->name;
  atomic_store(&dog.stop, 0);
  if (pthread_create(&dog.thread, NULL, perfWatchdog, NULL) != 0) perfFatal("cannot start the -T watchdog");
}

static void perfWatchdogStop(const perfOpts *o) {
  if (o->timeout <= 0) return;
  atomic_store(&dog.stop, 1);
  pthread_join(dog.thread, NULL);
}

static void perfBusy(perfRank *r, size_t what, double since) {
  atomic_store(&r->busyCount, what);
  atomic_store(&r->busySince, since);
}

static void perfCall(perfRank *r, const void *send, void *recv, const perfCase *k) {
  double timeout = r->opts->timeout, t0 = 0;
  if (timeout > 0) perfBusy(r, k->count, t0 = perfNow());
  r->bench->run(r->ctx, send, recv, k->count, k->type, k->op, k->root, r->dev.stream);
  if (timeout > 0) {
    perfBusy(r, 0, 0.0);
    double took = perfNow() - t0;
    if (took > timeout) perfTimedOut(r, k->count, took, 1);
  }
}

/* The team's barrier and reductions, watched by -T. */
static void perfBarrier(perfRank *r) {
  if (r->opts->timeout > 0) perfBusy(r, PERF_IN_BARRIER, perfNow());
  perfTeamBarrier(r->team, r->tid);
  if (r->opts->timeout > 0) perfBusy(r, 0, 0.0);
}

/* Device buffers: waits for the rank's stream, watched by -T as a call (a collective that
 * hangs hangs here). Nothing on host buffers, whose calls have returned with their result. */
static void perfWait(perfRank *r, const perfCase *k) {
  if (!r->dev.ops) return;
  double timeout = r->opts->timeout, t0 = 0;
  if (timeout > 0) perfBusy(r, k->count, t0 = perfNow());
  perfDevSync(&r->dev);
  if (timeout > 0) {
    perfBusy(r, 0, 0.0);
    double took = perfNow() - t0;
    if (took > timeout) perfTimedOut(r, k->count, took, 1);
  }
}

/* Device buffers: the host mirrors' first sendBytes / recvBytes to the device buffers (up) or
 * back (down), then waits for them; nothing on host buffers. */
static void perfCopyUp(perfRank *r, size_t sendBytes, size_t recvBytes) {
  perfDevCopy(&r->dev, r->callSend, r->send, sendBytes);
  perfDevCopy(&r->dev, r->callRecv, r->recv, recvBytes);
  perfDevSync(&r->dev);
}

static void perfCopyDown(perfRank *r, size_t sendBytes, size_t recvBytes) {
  perfDevCopy(&r->dev, r->send, r->callSend, sendBytes);
  perfDevCopy(&r->dev, r->recv, r->callRecv, recvBytes);
  perfDevSync(&r->dev);
}

static double perfReduce(perfRank *r, double v, int mode) {
  if (r->opts->timeout > 0) perfBusy(r, PERF_IN_BARRIER, perfNow());
  v = perfTeamReduce(r->team, r->tid, v, mode);
  if (r->opts->timeout > 0) perfBusy(r, 0, 0.0);
  return v;
}

static const double *perfMaxVec(perfRank *r, const double *v, int n, const double **rows) {
  if (r->opts->timeout > 0) perfBusy(r, PERF_IN_BARRIER, perfNow());
  const double *max = perfTeamMaxVec(r->team, r->tid, v, n, rows);
  if (r->opts->timeout > 0) perfBusy(r, 0, 0.0);
  return max;
}

/* ---------------------------------------------------------------------------------------------
 * One rank. */

/* Both buffers as large as the larger of the largest call's (as nccl-tests, whose buffers are
 * maxBytes each): in place, the receive buffer holds the send part too, and the timed
 * iterations step through both at the same offsets. */
static void perfRankAlloc(perfRank *r) {
  perfCase k; /* the largest call: maxBytes of 1-byte elements */
  perfCaseOf(r->bench->shape, PERF_INT8, PERF_SUM, 0, r->opts->maxBytes, r->rank, r->nRanks, &k);
  r->cap = k.rowBytes;
  size_t pad = PERF_GUARD + 8 * (size_t)r->opts->unalign; /* -u: up to 8-byte elements */
  void *s = NULL, *v = NULL;
  if (posix_memalign(&s, PERF_ALIGN, r->cap + pad) || posix_memalign(&v, PERF_ALIGN, r->cap + pad))
    perfFatal("rank %d: cannot allocate 2 x %zu bytes", r->rank, r->cap + pad);
  r->sendBase = s;
  r->recvBase = v;
  perfDevRankInit(&r->dev, r->mem, r->rank, r->cap + pad);
  if (r->opts->perIter) {
    r->iterSec = calloc((size_t)r->opts->iters, sizeof(double));
    if (!r->iterSec) perfFatal("out of memory");
  }
}

static size_t perfRankBytes(const perfRank *r) {
  return 2 * (r->cap + PERF_GUARD + 8 * (size_t)r->opts->unalign);
}

static void perfRankFree(perfRank *r) {
  perfDevRankFree(&r->dev);
  free(r->sendBase);
  free(r->recvBase);
  free(r->iterSec);
}

/* Like nccl-tests, iteration i works at offset (i mod steps) * bytes inside the buffers, so
 * successive iterations do not reuse cache-hot data (and races between calls show). */
static void perfCollAt(perfRank *r, const perfCase *k, int inPlace, int iter) {
  size_t steps = k->rowBytes ? r->cap / k->rowBytes : 1;
  size_t shift = k->rowBytes * ((size_t)iter % (steps ? steps : 1));
  char *recv = r->callRecv + shift;
  const char *send = inPlace ? recv + k->sendInplace : r->callSend + shift;
  perfCall(r, send, inPlace ? recv + k->recvInplace : recv, k);
}

/* Seconds (and CPU seconds) per collective on this rank, iterations started together after a
 * barrier; -I: each iteration's seconds in iterSec. -z 1 puts a barrier after every call, -z 3
 * after every iteration, outside the time (-z 2 is -z 0: every call waits for its result).
 * Device buffers, as nccl-tests: the calls are enqueued and the stream is waited for before
 * the clock is read (after all iterations; each one's with -I or -z 3), and before a -z 1 / 3
 * barrier; -z 2 waits after each call (each group of -m calls). */
static void perfTime(perfRank *r, const perfCase *k, int inPlace, double *sec, double *cpu) {
  const perfOpts *o = r->opts;
  int n = o->iters, agg = o->aggIters, each = o->perIter || o->blocking == 3, z3 = o->blocking == 3;
  int useCpu = o->cputime; /* the thread's CPU clock is a system call: read only for -C */
  int grouped = agg > 1 && o->blocking != 1 && r->bench->groupStart != NULL;
  perfCollAt(r, k, inPlace, 0); /* sync, as nccl-tests */
  perfWait(r, k);
  perfBarrier(r);
  double c0 = useCpu ? perfCpuNow() : 0, t0 = perfNow(), inside = 0, insideCpu = 0;
  for (int i = 0; i < n; i++) {
    double ci = useCpu && z3 ? perfCpuNow() : 0, ti = each ? perfNow() : 0;
    if (grouped) r->bench->groupStart(r->ctx);
    for (int a = 0; a < agg; a++) {
      perfCollAt(r, k, inPlace, i * agg + a);
      if (o->blocking == 2 && !grouped) perfWait(r, k);
      if (o->blocking == 1) perfWait(r, k), perfBarrier(r);
    }
    if (grouped) r->bench->groupEnd(r->ctx);
    if (grouped && o->blocking == 2) perfWait(r, k);
    if (each) {
      perfWait(r, k);
      double took = perfNow() - ti;
      if (o->perIter) r->iterSec[i] = took / agg;
      if (z3) {
        inside += took;
        if (useCpu) insideCpu += perfCpuNow() - ci;
        perfBarrier(r);
      }
    }
  }
  if (!z3) perfWait(r, k);
  double total = z3 ? inside : perfNow() - t0;
  double totalCpu = !useCpu ? 0 : z3 ? insideCpu : perfCpuNow() - c0;
  *sec = total / ((double)n * agg);
  *cpu = totalCpu / ((double)n * agg);
}

/* One untimed collective on known data (perf_check.h); returns this rank's wrong elements.
 * Device buffers: the data is made and checked in the host mirrors, copied to the device
 * before the call and back after it (the send buffer too, out of place: it must not change). */
static long long perfValidate(perfRank *r, perfData *d, const perfCase *k, int inPlace) {
  size_t recvBytes = perfCheckRecvBytes(k, inPlace), sendBytes = inPlace ? 0 : k->sendBytes;
  perfCheckPrepare(d, k, r->send, r->recv, inPlace);
  perfCopyUp(r, sendBytes, recvBytes);
  perfBarrier(r); /* peers may read our buffers: all filled before any call */
  perfCollAt(r, k, inPlace, 0);
  perfWait(r, k);
  perfCopyDown(r, sendBytes, recvBytes);
  long long wrong = perfCheckResult(d, r->bench->shape, k, r->send, r->recv, inPlace, r->rank, r->nRanks);
  perfCheckRestore(d, k, r->recv, inPlace);
  perfCopyUp(r, 0, recvBytes);
  return wrong;
}

static void perfMeasure(perfRank *r, perfData *d, const perfCase *k, int inPlace) {
  const perfOpts *o = r->opts;
  if (inPlace && !r->bench->shape->inPlace) { /* no such form: nothing to time */
    if (r->printer) perfRowNone(o, inPlace);
    return;
  }
  double sec, cpu;
  perfTime(r, k, inPlace, &sec, &cpu);
  sec = perfReduce(r, sec, o->average);
  if (o->cputime) cpu = perfReduce(r, cpu, o->average);
  double algbw = (double)k->rowBytes / 1e9 / sec;
  double busbw = algbw * r->bench->shape->busFactor(r->nRanks);
  const double *iters = NULL, *rows = NULL;
  if (o->perIter) iters = perfMaxVec(r, r->iterSec, o->iters, &rows);
  long long wrong = 0;
  for (int c = 0; c < o->check && !wrong; c++) { /* -c N: N checks, up to the first wrong one */
    perfBarrier(r);
    wrong = (long long)perfReduce(r, (double)perfValidate(r, d, k, inPlace), PERF_AGG_SUM);
  }
  if (r->printer) {
    perfRowTime(o, inPlace, (o->cputime ? cpu : sec) * 1e6, algbw, busbw, wrong);
    if (o->perIter) perfRowIters(o, inPlace, iters, o->iters, rows, r->team->worldSize);
  }
  r->bwSum += busbw;
  r->bwCount++;
  r->errors += wrong != 0;
}

static void perfWarmup(perfRank *r, size_t bytes, int type, int op, int root) {
  perfCase k;
  perfCaseOf(r->bench->shape, type, op, root, bytes / perfTypes[type].size, r->rank, r->nRanks, &k);
  for (int i = 0; i < r->opts->warmup; i++) perfCollAt(r, &k, 0, i);
}

/* The redop column: the op, or "none" for a collective without one (nccl-tests' name). */
static const char *perfOpColumn(const perfShape *s, int op) {
  return s->opLoop ? perfOpNames[op] : "none";
}

/* nccl-tests' TimeTest: warmup, then -N sweeps over the sizes, for one (type, op, root). */
static void perfTimeTest(perfRank *r, int type, int op, int root) {
  const perfOpts *o = r->opts;
  const perfShape *shape = r->bench->shape;
  size_t esize = perfTypes[type].size;
  size_t skip = (size_t)o->unalign * esize; /* -u: nccl-tests' misalignment */
  r->send = r->sendBase + skip;
  r->recv = r->recvBase + skip;
  r->callSend = (r->dev.ops ? r->dev.send : r->sendBase) + skip;
  r->callRecv = (r->dev.ops ? r->dev.recv : r->recvBase) + skip;
  perfData d;
  perfDataInit(&d, type, op, r->rank, r->nRanks, shape->reduces);
  /* Valid numbers in the whole buffers: the timed iterations walk all of them. */
  size_t filled = (r->cap + PERF_GUARD) / esize;
  perfFill(r->send, d.input, 0, filled, esize);
  perfFill(r->recv, d.input, 0, filled, esize);
  perfCopyUp(r, filled * esize, filled * esize);
  perfBarrier(r);
  perfWarmup(r, o->maxBytes, type, op, root);
  perfWarmup(r, o->minBytes, type, op, root);
  for (long cycle = 0; o->cycles == 0 || cycle < o->cycles; cycle++) { /* -N, 0: forever */
    for (size_t size = o->minBytes; size <= o->maxBytes; size = perfNextSize(o, size)) {
      size_t count = size / esize;
      if (count == 0 && size != 0) continue; /* smaller than one element */
      perfCase k;
      perfCaseOf(shape, type, op, root, count, r->rank, r->nRanks, &k);
      if (r->printer) perfRowStart(k.rowBytes, k.count, perfTypes[type].name, perfOpColumn(shape, op), root);
      perfMeasure(r, &d, &k, 0);
      perfMeasure(r, &d, &k, 1);
      if (r->printer) {
        const char *algo = "-";
        if (o->showAlgo && r->bench->algoName) algo = r->bench->algoName(r->ctx, k.count, type);
        perfRowEnd(o, algo);
      }
    }
  }
  perfDataFree(&d);
}

/* Whether (type, op) is one the options select (perfBench.supported says how "all" filters).
 * A collective without an op runs once per type, as op 0 (sum: its data's value range). */
static int perfPairSelected(const perfOpts *o, const perfBench *b, int type, int op) {
  int opLoop = b->shape->opLoop;
  if (o->type != PERF_ALL && o->type != type) return 0;
  if (!opLoop ? op != PERF_SUM : o->op != PERF_ALL && o->op != op) return 0;
  int any = o->type == PERF_ALL || (opLoop && o->op == PERF_ALL);
  return !(any && b->supported && !b->supported(type, op));
}

/* Every selected (type, op) pair and root, in nccl-tests' order (roots innermost: -r all is
 * every rank in turn); a type with no size in the range (-d all from 1 to 3 bytes has no
 * float) is skipped with a note. */
static void perfRunAll(perfRank *r) {
  const perfOpts *o = r->opts;
  int rooted = r->bench->shape->rooted;
  int firstRoot = !rooted ? -1 : o->root == PERF_ALL ? 0 : o->root;
  int lastRoot = !rooted ? -1 : o->root == PERF_ALL ? r->nRanks - 1 : o->root;
  for (int type = 0; type < PERF_NTYPES; type++) {
    int noted = 0;
    for (int op = 0; op < PERF_NOPS; op++) {
      if (!perfPairSelected(o, r->bench, type, op)) continue;
      if (!perfSweepHasType(o, type)) {
        if (r->printer && !noted)
          perfPrintNote("# no size from %zu to %zu bytes holds one %s (%zu bytes): skipped", o->minBytes,
                        o->maxBytes, perfTypes[type].name, perfTypes[type].size);
        noted = 1;
        continue;
      }
      for (int root = firstRoot; root <= lastRoot; root++) perfTimeTest(r, type, op, root);
    }
  }
}

/* An empty table would pass: refuse options under which not one row can run. */
static const char *perfCheckSweep(const perfOpts *o, const perfBench *b) {
  static char msg[256];
  for (int type = 0; type < PERF_NTYPES; type++) {
    for (int op = 0; op < PERF_NOPS; op++) {
      if (perfPairSelected(o, b, type, op) && perfSweepHasType(o, type)) return NULL;
    }
  }
  if (o->type == PERF_ALL) return "no selected datatype and op has a size in the range of -b and -e";
  snprintf(msg, sizeof(msg),
           "no size from minbytes (-b) %zu to maxbytes (-e) %zu holds one %s element (%zu bytes): "
           "nothing to measure",
           o->minBytes, o->maxBytes, perfTypes[o->type].name, perfTypes[o->type].size);
  return msg;
}

/* -r names a rank of this job (known only once MPI has started). */
static const char *perfCheckRoot(const perfOpts *o, const perfBench *b, int nRanks) {
  static char msg[128];
  if (!b->shape->rooted || o->root == PERF_ALL || o->root < nRanks) return NULL;
  snprintf(msg, sizeof(msg), "root (-r) %d is not a rank: %d ranks (0 to %d)", o->root, nRanks, nRanks - 1);
  return msg;
}

/* The header's notes: the benchmark's own, and -r / -o given to a collective without a root /
 * an op (nccl-tests ignores them silently; here the header says so). NULL-terminated. */
static void perfNotes(const perfOpts *o, const perfBench *b, char ignored[2][128], const char *notes[4]) {
  int n = 0;
  const char *name = b->shape->name;
  if (b->note) notes[n++] = b->note;
  if (o->rootGiven && !b->shape->rooted) {
    snprintf(ignored[0], 128, "-r %s: %s has no root: ignored", o->rootGiven, name);
    notes[n++] = ignored[0];
  }
  if (o->opGiven && !b->shape->opLoop) {
    snprintf(ignored[1], 128, "-o %s: %s has no reduction: ignored", o->opGiven, name);
    notes[n++] = ignored[1];
  }
  notes[n] = NULL;
}

/* ---------------------------------------------------------------------------------------------
 * -M: host memory of each process (its resident set), as nccl-tests reports GPU memory:
 * what initialization took, what the benchmark allocated, what the collectives added. */

static struct {
  double before, init, end;
} mem;

static double perfResident(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long long size = 0, resident = 0;
  if (!f) return 0;
  if (fscanf(f, "%llu %llu", &size, &resident) != 2) resident = 0;
  fclose(f);
  return (double)resident * (double)sysconf(_SC_PAGESIZE);
}

/* Not watched by -T: these barriers wait for every rank's init too. */
static void perfMemSample(perfRank *r, double *out) {
  perfTeamBarrier(r->team, r->tid);
  if (r->tid == 0) *out = perfResident();
  perfTeamBarrier(r->team, r->tid);
}

static void *perfRankMain(void *arg) {
  perfRank *r = arg;
  const perfBench *b = r->bench;
  int report = r->opts->memReport;
  perfRankAlloc(r);
  if (report) perfMemSample(r, &mem.before);
  r->ctx = b->rankInit ? b->rankInit(r->shared, r->rank, r->nRanks) : r->shared;
  if (report) perfMemSample(r, &mem.init);
  if (b->links) perfPrintLinks(r->team, r->tid, b->links, r->ctx);
  if (r->printer) perfPrintTableHeader(r->opts);
  perfRunAll(r);
  if (report) perfMemSample(r, &mem.end);
  if (b->rankFini) b->rankFini(r->ctx);
  perfRankFree(r);
  return NULL;
}

static void perfPrintMemoryReport(const perfRank *r, int nThreads) {
  double v[3];
  v[0] = fmax(0.0, mem.init - mem.before);
  v[1] = (double)perfRankBytes(r) * nThreads;
  v[2] = fmax(0.0, mem.end - mem.init - v[1]);
  if (perfUseMpi) MPI_Allreduce(MPI_IN_PLACE, v, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  if (r->printer) perfPrintMemory(v[0], v[1], v[2]);
}

/* Thread 0 runs on the main thread: it is the one that calls MPI (MPI_THREAD_FUNNELED). */
static int perfRunRanks(const perfOpts *o, const perfBench *b, const perfWorld *w, perfTeam *team, void *shared,
                        const perfMemory *mem) {
  perfRank *rs = calloc((size_t)o->nThreads, sizeof(*rs));
  if (!rs) perfFatal("out of memory");
  for (int i = 0; i < o->nThreads; i++) {
    perfRank *r = &rs[i];
    r->opts = o;
    r->bench = b;
    r->team = team;
    r->mem = mem;
    r->shared = shared;
    r->tid = i;
    r->rank = w->rank * o->nThreads + i;
    r->nRanks = w->size * o->nThreads;
    r->printer = w->rank == 0 && i == 0;
    atomic_init(&r->busySince, 0.0);
    atomic_init(&r->busyCount, 0);
  }
  perfWatchdogStart(rs, o->nThreads, o, b);
  for (int i = 1; i < o->nThreads; i++) {
    if (pthread_create(&rs[i].thread, NULL, perfRankMain, &rs[i]) != 0) perfFatal("cannot start thread %d", i);
  }
  perfRankMain(&rs[0]);
  for (int i = 1; i < o->nThreads; i++) pthread_join(rs[i].thread, NULL);
  perfWatchdogStop(o);
  /* Every rank holds the same global counts: rank 0's are the job's. */
  if (rs[0].printer) perfPrintFooter(rs[0].errors, rs[0].bwCount ? rs[0].bwSum / rs[0].bwCount : 0.0);
  if (o->memReport) perfPrintMemoryReport(&rs[0], o->nThreads);
  int errors = rs[0].errors;
  free(rs);
  return errors;
}

int perfMain(int argc, char **argv, const perfBench *b) {
  perfOpts o;
  perfWorld w;
  perfTeam team;
  int nArgs = argc;
  char **args = argv; /* as given, for the JSON file: MPI_Init may take its own out */
  setvbuf(stdout, NULL, _IOLBF, 0);
  int rc = perfParseArgs(argc, argv, &o, b->tool);
  if (rc <= 0) return rc < 0;
  const char *err = b->checkOpts ? b->checkOpts(&o) : NULL;
  if (!err) err = perfCheckSweep(&o, b);
  if (err) {
    if (perfEnvRank() == 0) fprintf(stderr, "%s: %s\n", b->tool, err);
    return 1;
  }
  perfWorldInit(&w, b->alwaysMpi || perfEnvUnderMpi(), &argc, &argv);
  perfMemory mem;
  err = perfCheckRoot(&o, b, w.size * o.nThreads);
  if (!err) err = perfMemoryChoose(&mem, &o, b->hostOnly);
  if (err) {
    if (w.rank == 0) fprintf(stderr, "%s: %s\n", b->tool, err);
    perfWorldFinalize();
    return 1;
  }
  const char *library = b->library ? b->library() : b->tool;
  if (w.rank == 0) {
    char ignored[2][128];
    const char *notes[4];
    perfNotes(&o, b, ignored, notes);
    perfReportOpen(&o, nArgs, args, library);
    perfPrintHeader(&o, library, notes, &mem);
  }
  perfPrintDevices(o.nThreads, &w, &mem);
  void *shared = b->setup ? b->setup(&w) : NULL;
  perfTeamInit(&team, o.nThreads, &w, perfUseMpi, o.perIter ? o.iters : 0);
  int errors = perfRunRanks(&o, b, &w, &team, shared, &mem);
  if (w.rank == 0) perfReportClose();
  perfTeamFree(&team);
  perfWorldFinalize();
  return errors ? 1 : 0;
}
