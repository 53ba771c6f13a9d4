/* Text and JSON output (see perf_report.h). */
#include "perf_report.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "perf_json.h"

extern char **environ;

/* The JSON file and the text table, under one lock: perfReportAbort may run in another thread
 * than the printer. */
static perfJson js;
static struct {
  pthread_mutex_t lock;
  int rowOpen; /* stdout: a table row has been started and not ended */
} rep = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void formatNow(char *buf, size_t len) {
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm);
}

/* Ends the document: top-level end_time, every level closed, the file closed. */
static void jsonFinish(const char *error) {
  while (js.depth > 1) perfJsonClose(&js);
  if (js.depth == 1) {
    char now[64];
    formatNow(now, sizeof(now));
    perfJsonKey(&js, "errors");
    perfJsonOpen(&js, '[');
    if (error) perfJsonStr(&js, error);
    perfJsonClose(&js);
    perfJsonKeyStr(&js, "end_time", now);
    perfJsonClose(&js);
  }
  fputc('\n', js.f);
  fclose(js.f);
  js.f = NULL;
}

#define JSON_BEGIN() pthread_mutex_lock(&rep.lock)
#define JSON_END() pthread_mutex_unlock(&rep.lock)

/* ---------------------------------------------------------------------------------------------
 * Header. */

/* nccl-tests writes the whole environment into the file; a results file passed around should
 * not carry credentials, so only the settings of the libraries involved go in. */
static int perfEnvWorthKeeping(const char *e) {
  static const char *const prefixes[] = {"WEFT_", "NCCL_", "OMPI_", "PMIX_", "UCX_", "OMP_"};
  for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
    if (strncmp(e, prefixes[i], strlen(prefixes[i])) == 0) return 1;
  }
  return 0;
}

void perfReportOpen(const perfOpts *o, int argc, char **argv, const char *library) {
  if (!o->json) return;
  const char *dot = strrchr(o->json, '.');
  if (!dot || strcasecmp(dot, ".json") != 0) {
    printf("# -J %s: only .json output files are written (by suffix): no output file\n", o->json);
    return;
  }
  size_t len = strlen(o->json) + 16;
  char *path = malloc(len);
  if (!path) perfFatal("out of memory");
  snprintf(path, len, "%s", o->json);
  FILE *f = fopen(path, "wx");
  for (int i = 0; !f && errno == EEXIST && i < 1000; i++) {
    snprintf(path, len, "%s.%d", o->json, i);
    f = fopen(path, "wx");
  }
  if (!f) {
    printf("# skipping json output; %s not accessible: %s\n", path, strerror(errno));
    free(path);
    return;
  }
  printf("# Writing JSON output to %s\n", path);
  free(path);
  char now[64];
  formatNow(now, sizeof(now));
  JSON_BEGIN();
  js.f = f;
  perfJsonOpen(&js, '{');
  perfJsonKeyInt(&js, "version", 3); /* nccl-tests' JSON_FILE_VERSION whose layout this follows */
  perfJsonKeyStr(&js, "start_time", now);
  perfJsonKey(&js, "args");
  perfJsonOpen(&js, '[');
  for (int i = 0; i < argc; i++) perfJsonStr(&js, argv[i]);
  perfJsonClose(&js);
  perfJsonKey(&js, "env");
  perfJsonOpen(&js, '[');
  for (char **e = environ; e && *e; e++) {
    if (perfEnvWorthKeeping(*e)) perfJsonStr(&js, *e);
  }
  perfJsonClose(&js);
  perfJsonKeyStr(&js, "library", library);
  JSON_END();
}

void perfPrintHeader(const perfOpts *o, const char *library, const char *const *notes, const perfMemory *mem) {
  int factor = o->stepFactor > 1;
  printf("# %s\n", library);
  for (; notes && *notes; notes++) printf("# %s\n", *notes);
  printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
         "iters: %d agg iters: %d validation: %d graph: 0 unalign: %d\n",
         o->nThreads, o->nGpus, o->minBytes, o->maxBytes, factor ? o->stepFactor : o->stepBytes,
         factor ? "factor" : "bytes", o->warmup, o->iters, o->aggIters, o->check, o->unalign);
  if (o->blocking == 1) printf("# Blocking Enabled: wait and barrier after each inner iteration (-m) \n");
  if (o->blocking == 2) printf("# Blocking Enabled: wait after each inner iteration (-m), no barrier \n");
  if (o->blocking == 3)
    printf("# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier \n");
  if (o->perIter) {
    printf("# Per-Iteration Report: host clock timing; i_* uses max over ranks");
    if (o->perIterSkip) printf("; summary skips first %d iterations", o->perIterSkip);
    printf(" \n");
  }
  if (o->parallelInit) printf("# Parallel Init Enabled: ranks initialize concurrently (they always do) \n");
  if (o->cputime) printf("# Time columns: CPU time of each rank's thread (-C 1); bandwidths from wall time\n");
  /* nccl-tests' flags that have nothing to act on with host buffers: one line each. */
  if (o->graphs) printf("# -G %d: no CUDA graphs with host buffers: collectives are called directly (graph: 0)\n", o->graphs);
  if (o->localRegister) printf("# -R %d: no buffer registration for host memory: buffers are used as allocated\n", o->localRegister);
  if (o->streamNull) printf("# -y %d: no streams with host buffers: every call completes before it returns\n", o->streamNull);
  if (o->ctaPolicy >= 0) printf("# -x %d: no CTAs with host buffers: no CTA policy to set\n", o->ctaPolicy);
  if (o->deviceImpl) printf("# -D %d: no device implementation with host buffers\n", o->deviceImpl);
  if (o->deviceCtas != 16) printf("# -V %d: no device implementation with host buffers\n", o->deviceCtas);
  perfMemoryHeader(mem);
  printf("#\n");
  if (!js.f) return;
  JSON_BEGIN();
  perfJsonKey(&js, "config");
  perfJsonOpen(&js, '{');
  perfJsonKeyInt(&js, "nthreads", o->nThreads);
  perfJsonKeyInt(&js, "ngpus", o->nGpus);
  perfJsonKeyInt(&js, "minimum_bytes", (long long)o->minBytes);
  perfJsonKeyInt(&js, "maximum_bytes", (long long)o->maxBytes);
  if (factor) perfJsonKeyInt(&js, "step_factor", (long long)o->stepFactor);
  else perfJsonKeyInt(&js, "step_bytes", (long long)o->stepBytes);
  perfJsonKeyInt(&js, "warmup_iters", o->warmup);
  perfJsonKeyInt(&js, "iterations", o->iters);
  perfJsonKeyInt(&js, "aggregated_iterations", o->aggIters);
  perfJsonKeyInt(&js, "validation", o->check);
  perfJsonKeyInt(&js, "graph", 0);
  perfJsonKey(&js, "blocking_collectives");
  perfJsonBool(&js, o->blocking);
  perfJsonKey(&js, "per_iter_timing");
  perfJsonBool(&js, o->perIter);
  perfJsonKeyInt(&js, "per_iter_skip", o->perIterSkip);
  perfJsonKey(&js, "parallel_init");
  perfJsonBool(&js, o->parallelInit);
  perfJsonKeyInt(&js, "unalign", o->unalign);
  perfJsonKeyInt(&js, "run_cycles", o->cycles);
  JSON_END(); /* the object stays open for perfPrintDevices */
}

typedef struct {
  int rank, pid, device;
  char host[64];
} perfDevice;

/* "# Using devices": one line per rank, gathered to world rank 0 in rank order. */
void perfPrintDevices(int nThreads, const perfWorld *w, const perfMemory *mem) {
  char host[64] = "?";
  gethostname(host, sizeof(host) - 1);
  perfDevice *devs = calloc((size_t)nThreads, sizeof(perfDevice) * (size_t)(w->rank == 0 ? w->size : 1));
  if (!devs) perfFatal("out of memory");
  for (int i = 0; i < nThreads; i++) {
    devs[i].rank = w->rank * nThreads + i;
    devs[i].device = mem->ops ? perfMemoryDeviceOf(mem, devs[i].rank) : 0;
    devs[i].pid = (int)getpid();
    memcpy(devs[i].host, host, sizeof(host));
  }
  if (perfUseMpi) {
    int mine = (int)(sizeof(perfDevice) * (size_t)nThreads);
    MPI_Gather(w->rank == 0 ? MPI_IN_PLACE : devs, mine, MPI_BYTE, devs, mine, MPI_BYTE, 0, MPI_COMM_WORLD);
  }
  if (w->rank == 0) {
    size_t n = (size_t)w->size * (size_t)nThreads;
    printf("# Using devices\n");
    for (size_t i = 0; i < n; i++) {
      printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%s]\n", devs[i].rank, 0, devs[i].pid,
             devs[i].host, devs[i].device, perfMemoryTag(mem));
    }
    fflush(stdout);
    JSON_BEGIN();
    if (js.f) {
      perfJsonKey(&js, "devices");
      perfJsonOpen(&js, '[');
      for (size_t i = 0; i < n; i++) {
        perfJsonOpen(&js, '{');
        perfJsonKeyInt(&js, "rank", devs[i].rank);
        perfJsonKeyInt(&js, "group", 0);
        perfJsonKeyInt(&js, "pid", devs[i].pid);
        perfJsonKeyStr(&js, "hostname", devs[i].host);
        perfJsonKeyInt(&js, "device", devs[i].device);
        perfJsonKeyStr(&js, "device_hex", perfMemoryTag(mem));
        perfJsonKeyStr(&js, "device_info", mem->ops ? "device memory" : "host memory");
        perfJsonClose(&js);
      }
      perfJsonClose(&js);
      perfJsonClose(&js); /* config */
    }
    JSON_END();
  }
  free(devs);
}

#define PERF_LINK_LINE 512

void perfPrintLinks(perfTeam *t, int tid, void (*links)(void *ctx, char *line, size_t len), void *ctx) {
  char line[PERF_LINK_LINE] = "";
  links(ctx, line, sizeof(line));
  char *all = perfTeamGatherText(t, tid, line, sizeof(line));
  if (all == NULL) return;
  printf("# Links: what each rank uses to reach the others (transport, to how many, over what)\n");
  for (int r = 0; r < t->nRanks; r++) printf("#  Rank %2d %s\n", r, all + (size_t)r * PERF_LINK_LINE);
  fflush(stdout);
  free(all);
}

/* ---------------------------------------------------------------------------------------------
 * Table. nccl-tests' columns; -I adds i_min i_max i_p99 i_cv% after each placement's #wrong,
 * -A 1 (weft only) an "algo" column after them, -S a timestamp at the end. */

static void perfTimeStr(char *buf, size_t len, double usec) {
  snprintf(buf, len, usec >= 10000.0 ? "%7.0f" : usec >= 100.0 ? "%7.1f" : "%7.2f", usec);
}

void perfPrintTableHeader(const perfOpts *o) {
  const char *t = o->cputime ? "cputime" : "time";
  printf("#\n");
  if (o->perIter) {
    printf("# %10s  %12s  %8s  %6s  %6s           %-68s%s\n", "", "", "", "", "",
           "out-of-place (+ per-iteration)", "in-place (+ per-iteration)");
  } else {
    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n",
           "", "", "", "", "");
  }
  printf("# %10s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
  for (int p = 0; p < 2; p++) {
    printf("  %7s  %6s  %6s %6s", t, "algbw", "busbw", "#wrong");
    if (o->perIter) printf("  %7s  %7s  %7s  %7s", "i_min", "i_max", "i_p99", "i_cv%");
  }
  if (o->showAlgo) printf("  %8s", "algo");
  if (o->timestamps) printf("  %19s", "timestamp");
  printf("\n");
  printf("# %10s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
  for (int p = 0; p < 2; p++) {
    printf("  %7s  %6s  %6s  %5s", "(us)", "(GB/s)", "(GB/s)", "");
    if (o->perIter) printf("  %7s  %7s  %7s  %7s", "(us)", "(us)", "(us)", "(%)");
  }
  if (o->timestamps) printf("%s  %19s", o->showAlgo ? "          " : "", "%Y-%m-%d %H:%M:%S");
  printf("\n");
  JSON_BEGIN();
  if (js.f) {
    perfJsonKey(&js, "results");
    perfJsonOpen(&js, '[');
  }
  JSON_END();
}

void perfPrintNote(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
}

void perfRowStart(size_t bytes, size_t count, const char *type, const char *op, int root) {
  printf("%12zu  %12zu  %8s  %6s  %6i", bytes, count, type, op, root);
  JSON_BEGIN();
  rep.rowOpen = 1;
  if (js.f) {
    char r[16];
    snprintf(r, sizeof(r), "%d", root);
    perfJsonOpen(&js, '{');
    perfJsonKeyInt(&js, "size", (long long)bytes);
    perfJsonKeyInt(&js, "count", (long long)count);
    perfJsonKeyStr(&js, "type", type);
    perfJsonKeyStr(&js, "redop", op);
    perfJsonKeyStr(&js, "root", r);
  }
  JSON_END();
}

void perfRowTime(const perfOpts *o, int inPlace, double usec, double algbw, double busbw, long long wrong) {
  char t[32];
  perfTimeStr(t, sizeof(t), usec);
  if (o->check) printf("  %7s  %6.2f  %6.2f  %5lld", t, algbw, busbw, wrong);
  else printf("  %7s  %6.2f  %6.2f  %5s", t, algbw, busbw, "N/A");
  JSON_BEGIN();
  if (js.f) {
    perfJsonKey(&js, inPlace ? "in_place" : "out_of_place");
    perfJsonOpen(&js, '{');
    perfJsonKeyNum(&js, o->cputime ? "cpu_time" : "time", usec);
    perfJsonKeyNum(&js, "alg_bw", algbw);
    perfJsonKeyNum(&js, "bus_bw", busbw);
    perfJsonKey(&js, "nwrong");
    if (o->check) perfJsonNum(&js, (double)wrong);
    else perfJsonNull(&js);
    perfJsonClose(&js);
  }
  JSON_END();
}

void perfRowNone(const perfOpts *o, int inPlace) {
  printf("  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
  if (o->perIter) printf("  %7s  %7s  %7s  %7s", "N/A", "N/A", "N/A", "N/A");
  JSON_BEGIN();
  if (js.f) {
    perfJsonKey(&js, inPlace ? "in_place" : "out_of_place");
    perfJsonNull(&js);
  }
  JSON_END();
}

static int perfCmpDouble(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Nearest rank: the smallest sample with at least p% of them at or below it. */
static int perfPercentileIndex(int n, int p) {
  int i = (n * p + 99) / 100 - 1;
  return i < 0 ? 0 : i > n - 1 ? n - 1 : i;
}

void perfIterStatsOf(const double *t, int n, perfIterStats *s) {
  double *v = malloc((size_t)n * sizeof(double));
  if (!v) perfFatal("out of memory");
  memcpy(v, t, (size_t)n * sizeof(double));
  qsort(v, (size_t)n, sizeof(double), perfCmpDouble);
  double sum = 0, var = 0;
  for (int i = 0; i < n; i++) sum += v[i];
  s->avg = sum / n;
  for (int i = 0; i < n; i++) var += (v[i] - s->avg) * (v[i] - s->avg);
  s->stdev = sqrt(var / n);
  s->min = v[0];
  s->max = v[n - 1];
  s->p50 = v[n / 2];
  s->p95 = v[perfPercentileIndex(n, 95)];
  s->p99 = v[perfPercentileIndex(n, 99)];
  s->cvPct = s->avg > 0 ? 100.0 * s->stdev / s->avg : 0.0;
  free(v);
}

void perfRowIters(const perfOpts *o, int inPlace, const double *sec, int n, const double *rows, int nRows) {
  perfIterStats s;
  perfIterStatsOf(sec + o->perIterSkip, n - o->perIterSkip, &s);
  char a[32], b[32], c[32], d[32];
  perfTimeStr(a, sizeof(a), s.min * 1e6);
  perfTimeStr(b, sizeof(b), s.max * 1e6);
  perfTimeStr(c, sizeof(c), s.p99 * 1e6);
  perfTimeStr(d, sizeof(d), s.cvPct);
  printf("  %7s  %7s  %7s  %7s", a, b, c, d);
  JSON_BEGIN();
  if (js.f) {
    perfJsonKey(&js, inPlace ? "in_place_per_iter" : "out_of_place_per_iter");
    perfJsonOpen(&js, '{');
    perfJsonKeyInt(&js, "skipped_iterations", o->perIterSkip);
    perfJsonKeyNum(&js, "min_us", s.min * 1e6);
    perfJsonKeyNum(&js, "max_us", s.max * 1e6);
    perfJsonKeyNum(&js, "avg_us", s.avg * 1e6);
    perfJsonKeyNum(&js, "p50_us", s.p50 * 1e6);
    perfJsonKeyNum(&js, "p95_us", s.p95 * 1e6);
    perfJsonKeyNum(&js, "p99_us", s.p99 * 1e6);
    perfJsonKeyNum(&js, "stdev_us", s.stdev * 1e6);
    perfJsonKeyNum(&js, "cv_pct", s.cvPct);
    perfJsonKey(&js, "times_us");
    perfJsonOpen(&js, '[');
    for (int i = 0; i < n; i++) perfJsonNum(&js, sec[i] * 1e6);
    perfJsonClose(&js);
    if (rows && nRows > 1) {
      perfJsonKey(&js, "per_process_max_times_us");
      perfJsonOpen(&js, '[');
      for (int p = 0; p < nRows; p++) {
        perfJsonOpen(&js, '[');
        for (int i = 0; i < n; i++) perfJsonNum(&js, rows[(size_t)p * (size_t)n + i] * 1e6);
        perfJsonClose(&js);
      }
      perfJsonClose(&js);
    }
    perfJsonClose(&js);
  }
  JSON_END();
}

void perfRowEnd(const perfOpts *o, const char *algo) {
  if (o->showAlgo) printf("  %8s", algo);
  if (o->timestamps) {
    char now[64];
    formatNow(now, sizeof(now));
    printf("  %19s", now);
  }
  printf("\n");
  JSON_BEGIN();
  rep.rowOpen = 0;
  if (js.f) {
    if (o->showAlgo) perfJsonKeyStr(&js, "algo", algo);
    perfJsonKeyInt(&js, "actual_iterations", o->iters);
    perfJsonKeyStr(&js, "experiment_name", "");
    perfJsonClose(&js);
  }
  JSON_END();
}

/* ---------------------------------------------------------------------------------------------
 * Footer. */

void perfPrintFooter(int errors, double avgBusBw) {
  JSON_BEGIN();
  if (js.f) {
    perfJsonClose(&js); /* results */
    perfJsonKey(&js, "out_of_bounds");
    perfJsonOpen(&js, '{');
    perfJsonKeyInt(&js, "count", errors);
    perfJsonKey(&js, "okay");
    perfJsonBool(&js, errors == 0);
    perfJsonClose(&js);
    perfJsonKey(&js, "average_bus_bandwidth");
    perfJsonOpen(&js, '{');
    perfJsonKeyNum(&js, "bandwidth", avgBusBw);
    perfJsonKeyStr(&js, "okay", "unchecked");
    perfJsonClose(&js);
  }
  JSON_END();
  printf("# Out of bounds values : %d %s\n", errors, errors ? "FAILED" : "OK");
  printf("# Avg bus bandwidth    : %g \n", avgBusBw);
  printf("#\n");
  fflush(stdout);
}

/* As nccl-tests' getMemString: binary units, 3 significant digits or so. */
static void perfMemStr(char *buf, size_t len, double bytes) {
  const char *unit = "B";
  double a = fabs(bytes);
  if (a >= 1024.0 * 1024 * 1024) unit = "GB", bytes /= 1024.0 * 1024 * 1024;
  else if (a >= 1024.0 * 1024) unit = "MB", bytes /= 1024.0 * 1024;
  else if (a >= 1024.0) unit = "KB", bytes /= 1024.0;
  a = fabs(bytes);
  snprintf(buf, len, "%.*f %s", a < 10.0 ? 2 : a < 100.0 ? 1 : 0, bytes, unit);
}

void perfPrintMemory(double init, double user, double coll) {
  char a[32], b[32], c[32], t[32];
  perfMemStr(a, sizeof(a), init);
  perfMemStr(b, sizeof(b), user);
  perfMemStr(c, sizeof(c), coll);
  perfMemStr(t, sizeof(t), init + user + coll);
  printf("# %-20s : Initialization %s | User-Allocated %s | Collective %s | Total  %s\n",
         "Host memory usage", a, b, c, t);
  fflush(stdout);
}

void perfReportClose(void) {
  JSON_BEGIN();
  if (js.f) jsonFinish(NULL);
  JSON_END();
}

void perfReportAbort(const char *why) {
  JSON_BEGIN();
  if (rep.rowOpen) printf("\n");
  rep.rowOpen = 0;
  if (js.f) jsonFinish(why);
  JSON_END();
}
