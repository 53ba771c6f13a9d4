/* nccl-tests' flags (see perf_opts.h and docs/benchmark.md). */
#include "perf_opts.h"

#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf_data.h"
#include "perf_team.h"

static void perfUsage(const char *tool) {
  printf("USAGE: %s\n"
         "\t[-t,--nthreads <ranks as threads per process>]\n"
         "\t[-g,--ngpus <must be 1: one GPU per rank, shared when there are fewer GPUs than ranks>]\n"
         "\t[-B,--buffers <auto/device/host> auto: device buffers where a GPU is usable, host "
         "buffers otherwise; device: no GPU is an error (mpi_*_perf: host buffers only, device "
         "refused)]\n"
         "\t[-b,--minbytes <min size in bytes, K/M/G suffixes>]\n"
         "\t[-e,--maxbytes <max size in bytes, K/M/G suffixes>]\n"
         "\t[-i,--stepbytes <increment size>]\n"
         "\t[-f,--stepfactor <increment factor>]\n"
         "\t[-n,--iters <iteration count>]\n"
         "\t[-m,--agg_iters <collectives per iteration>]\n"
         "\t[-w,--warmup_iters <warmup iteration count>]\n"
         "\t[-N,--run_cycles <cycle count> run & print each cycle (default: 1; 0=infinite)]\n"
         "\t[-p,--parallel_init <0/1> (ranks always initialize concurrently)]\n"
         "\t[-c,--check <check iteration count> (0: no check)]\n"
         "\t[-o,--op <sum/prod/min/max/avg/all> (collectives that take an op)]\n"
         "\t[-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/all>]\n"
         "\t[-r,--root <root rank, or all (-1): each rank in turn> (rooted collectives; default 0)]\n"
         "\t[-z,--blocking <0/1/2/3> 1=barrier after each collective, 2=no barrier (calls always "
         "wait), 3=barrier after each iteration (-n), not timed]\n"
         "\t[-y,--stream_null <0/1> (no streams on host buffers: noted, ignored)]\n"
         "\t[-T,--timeout <seconds> end the run (exit 4) when a collective takes longer; "
         "fractions allowed]\n"
         "\t[-G,--cudagraph <num graph launches> (no CUDA graphs on host buffers: noted, ignored)]\n"
         "\t[-C,--report_cputime <0/1> time columns report the rank thread's CPU time]\n"
         "\t[-S,--report_timestamps <0/1> report timestamps (default 0)]\n"
         "\t[-J,--output_file <file> write output to filepath, if accessible; .json only]\n"
         "\t[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>]\n"
         "\t[-R,--local_register <0/1/2> (no buffer registration on host memory: noted, ignored)]\n"
         "\t[-x,--cta_policy <0/1/2> (no CTAs on host buffers: noted, ignored)]\n"
         "\t[-D,--device_implementation <n> (no device implementation: noted, ignored)]\n"
         "\t[-V,--device_cta_count <n> (no device implementation: noted, ignored)]\n"
         "\t[-M,--memory <0/1> enable memory usage report (default: 0)]\n"
         "\t[-u,--unalign <index of first element> misalign source and destination buffers]\n"
         "\t[-I,--per_iter_timing <0/1> per-iteration timing: i_min i_max i_p99 i_cv%% columns]\n"
         "\t[-K,--per_iter_skip <count> exclude leading samples from -I summary stats]\n"
         "\t[-A,--algo <0/1> add an algo column: the algorithm run at each size (weft's tuner)]\n"
         "\t[-h,--help]\n",
         tool);
}

/* "64", "1.5K", "256M", "2G" (binary units, as nccl-tests). Returns -1 when malformed. */
static int perfParseSize(const char *s, size_t *out) {
  char *end;
  double v = strtod(s, &end);
  double unit = 1;
  switch (*end) {
  case 'k': case 'K': unit = 1024.0; end++; break;
  case 'm': case 'M': unit = 1024.0 * 1024; end++; break;
  case 'g': case 'G': unit = 1024.0 * 1024 * 1024; end++; break;
  default: break;
  }
  if (end == s || *end != '\0' || !(v >= 0) || v * unit > 1e18) return -1;
  *out = (size_t)(v * unit);
  return 0;
}

static int perfParseInt(const char *s, long lo, long hi, int *out) {
  char *end;
  long v = strtol(s, &end, 0);
  if (end == s || *end != '\0' || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

/* Seconds, 0 or more, at most a year (so that deadlines stay exact doubles). */
static int perfParseSeconds(const char *s, double *out) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end != '\0' || !(v >= 0) || v > 366.0 * 86400) return -1;
  *out = v;
  return 0;
}

/* Index of a -d / -o name, PERF_ALL for "all", -2 when unknown. */
static int perfTypeByName(const char *s) {
  if (strcmp(s, "all") == 0) return PERF_ALL;
  for (int i = 0; i < PERF_NTYPES; i++) {
    if (strcmp(s, perfTypes[i].name) == 0) return i;
  }
  return -2;
}

static int perfOpByName(const char *s) {
  if (strcmp(s, "all") == 0) return PERF_ALL;
  for (int i = 0; i < PERF_NOPS; i++) {
    if (strcmp(s, perfOpNames[i]) == 0) return i;
  }
  return -2;
}

/* -r: a rank, or every rank in turn ("all", or -1 as in nccl-tests). */
static int perfParseRoot(const char *s, int *out) {
  if (strcmp(s, "all") == 0) {
    *out = PERF_ALL;
    return 0;
  }
  return perfParseInt(s, -1, INT_MAX, out);
}

/* -B auto / device / host. */
static int perfParseBuffers(const char *s, int *out) {
  static const char *const names[] = {"auto", "device", "host"};
  for (int i = 0; i < 3; i++) {
    if (strcmp(s, names[i]) == 0) {
      *out = i; /* PERF_BUF_AUTO, PERF_BUF_DEVICE, PERF_BUF_HOST */
      return 0;
    }
  }
  return -1;
}

static void perfDefaults(perfOpts *o) {
  memset(o, 0, sizeof(*o));
  o->minBytes = o->maxBytes = 32u << 20; /* nccl-tests' defaults */
  o->stepBytes = 1u << 20;
  o->stepFactor = 1;
  o->iters = 20;
  o->warmup = 5;
  o->aggIters = 1;
  o->check = 1;
  o->nThreads = o->nGpus = 1;
  o->average = 1;
  o->type = PERF_FLOAT32;
  o->op = PERF_SUM;
  o->cycles = 1;
  o->ctaPolicy = -1; /* nccl-tests: not set */
  o->deviceCtas = 16;
}

/* One flag; returns its error message, NULL when fine. */
static const char *perfParseFlag(int c, const char *arg, perfOpts *o) {
  int ok = 0;
  switch (c) {
  case 'b': ok = perfParseSize(arg, &o->minBytes) == 0; break;
  case 'e': ok = perfParseSize(arg, &o->maxBytes) == 0; break;
  case 'i': ok = perfParseSize(arg, &o->stepBytes) == 0; break;
  case 'f': ok = perfParseSize(arg, &o->stepFactor) == 0; break;
  case 'n': ok = perfParseInt(arg, 1, INT_MAX, &o->iters) == 0; break;
  case 'w': ok = perfParseInt(arg, 0, INT_MAX, &o->warmup) == 0; break;
  case 'm': ok = perfParseInt(arg, 1, INT_MAX, &o->aggIters) == 0; break;
  case 'N': ok = perfParseInt(arg, 0, INT_MAX, &o->cycles) == 0; break;
  case 'c': ok = perfParseInt(arg, 0, INT_MAX, &o->check) == 0; break;
  case 't': ok = perfParseInt(arg, 1, 4096, &o->nThreads) == 0; break;
  case 'g': ok = perfParseInt(arg, 0, INT_MAX, &o->nGpus) == 0; break;
  case 'B': ok = perfParseBuffers(arg, &o->buffers) == 0; break;
  case 'a': ok = perfParseInt(arg, 0, 3, &o->average) == 0; break;
  case 'z': ok = perfParseInt(arg, 0, 3, &o->blocking) == 0; break;
  case 'p': ok = perfParseInt(arg, 0, 1, &o->parallelInit) == 0; break;
  case 'A': ok = perfParseInt(arg, 0, 1, &o->showAlgo) == 0; break;
  case 'r':
    o->rootGiven = arg;
    ok = perfParseRoot(arg, &o->root) == 0;
    break;
  case 'T': ok = perfParseSeconds(arg, &o->timeout) == 0; break;
  case 'C': ok = perfParseInt(arg, 0, 1, &o->cputime) == 0; break;
  case 'S': ok = perfParseInt(arg, 0, 1, &o->timestamps) == 0; break;
  case 'J': o->json = arg; ok = arg[0] != '\0'; break;
  case 'u': ok = perfParseInt(arg, 0, 1 << 20, &o->unalign) == 0; break;
  case 'M': ok = perfParseInt(arg, 0, 1, &o->memReport) == 0; break;
  case 'I': ok = perfParseInt(arg, 0, 1, &o->perIter) == 0; break;
  case 'K': ok = perfParseInt(arg, 0, INT_MAX, &o->perIterSkip) == 0; break;
  case 'G': ok = perfParseInt(arg, 0, INT_MAX, &o->graphs) == 0; break;
  case 'R': ok = perfParseInt(arg, 0, 2, &o->localRegister) == 0; break;
  case 'y': ok = perfParseInt(arg, 0, 1, &o->streamNull) == 0; break;
  case 'x': ok = perfParseInt(arg, 0, 2, &o->ctaPolicy) == 0; break;
  case 'D': ok = perfParseInt(arg, 0, INT_MAX, &o->deviceImpl) == 0; break;
  case 'V': ok = perfParseInt(arg, 1, 128, &o->deviceCtas) == 0; break;
  case 'd':
    o->type = perfTypeByName(arg);
    ok = o->type != -2;
    break;
  case 'o':
    o->opGiven = arg;
    o->op = perfOpByName(arg);
    ok = o->op != -2;
    break;
  default: return "unknown option";
  }
  return ok ? NULL : "invalid value";
}

/* Sizes and steps are below 1e18 (perfParseSize): a sum cannot overflow, a product is cut
 * short past maxBytes. By factor, 0 is followed by 1. */
size_t perfNextSize(const perfOpts *o, size_t size) {
  if (o->stepFactor <= 1) return size + o->stepBytes;
  if (size > o->maxBytes / o->stepFactor) return o->maxBytes + 1;
  return size ? size * o->stepFactor : 1;
}

/* Stops at the first size that holds an element: at most one element's worth of steps. */
int perfSweepHasType(const perfOpts *o, int type) {
  for (size_t size = o->minBytes; size <= o->maxBytes; size = perfNextSize(o, size)) {
    if (size == 0 || size >= perfTypes[type].size) return 1;
  }
  return 0;
}

static const char *perfCheckOpts(const perfOpts *o) {
  if (o->minBytes > o->maxBytes) return "minbytes (-b) is larger than maxbytes (-e)";
  if (o->stepFactor <= 1 && o->stepBytes == 0) return "stepbytes (-i) must be > 0 without -f";
  if (o->nGpus != 1) return "-g must be 1: one GPU per rank (ranks share GPUs when there are fewer)";
  if ((long long)o->iters * o->aggIters > INT_MAX) return "iters (-n) x agg_iters (-m) is too large";
  return NULL;
}

/* nccl-tests' own corrections: it goes on without -K rather than refusing. */
static void perfAdjustOpts(perfOpts *o, int quiet, const char *tool) {
  if (o->perIterSkip && o->perIterSkip >= o->iters) {
    if (!quiet) fprintf(stderr, "%s: per-iteration skip (-K) must be between 0 and %d. Disabling.\n", tool, o->iters - 1);
    o->perIterSkip = 0;
  }
  if (o->perIterSkip && !o->perIter) {
    if (!quiet) fprintf(stderr, "%s: per-iteration skip (-K) requires per-iteration timing (-I 1). Disabling.\n", tool);
    o->perIterSkip = 0;
  }
}

int perfParseArgs(int argc, char **argv, perfOpts *o, const char *tool) {
  static const struct option longopts[] = {
    {"nthreads", required_argument, 0, 't'}, {"ngpus", required_argument, 0, 'g'},
    {"minbytes", required_argument, 0, 'b'}, {"maxbytes", required_argument, 0, 'e'},
    {"stepbytes", required_argument, 0, 'i'}, {"stepfactor", required_argument, 0, 'f'},
    {"iters", required_argument, 0, 'n'}, {"agg_iters", required_argument, 0, 'm'},
    {"warmup_iters", required_argument, 0, 'w'}, {"run_cycles", required_argument, 0, 'N'},
    {"parallel_init", required_argument, 0, 'p'}, {"check", required_argument, 0, 'c'},
    {"op", required_argument, 0, 'o'}, {"datatype", required_argument, 0, 'd'},
    {"root", required_argument, 0, 'r'}, {"blocking", required_argument, 0, 'z'},
    {"stream_null", required_argument, 0, 'y'}, {"timeout", required_argument, 0, 'T'},
    {"cudagraph", required_argument, 0, 'G'}, {"report_cputime", required_argument, 0, 'C'},
    {"report_timestamps", required_argument, 0, 'S'}, {"output_file", required_argument, 0, 'J'},
    {"average", required_argument, 0, 'a'}, {"local_register", required_argument, 0, 'R'},
    {"cta_policy", required_argument, 0, 'x'}, {"device_implementation", required_argument, 0, 'D'},
    {"device_cta_count", required_argument, 0, 'V'}, {"memory", required_argument, 0, 'M'},
    {"unalign", required_argument, 0, 'u'}, {"per_iter_timing", required_argument, 0, 'I'},
    {"per_iter_skip", required_argument, 0, 'K'}, {"algo", required_argument, 0, 'A'},
    {"buffers", required_argument, 0, 'B'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  int quiet = perfEnvRank() != 0, c;
  perfDefaults(o);
  opterr = 0; /* our own message, from one process */
  while ((c = getopt_long(argc, argv, "t:g:B:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:G:C:a:R:x:D:V:J:S:M:u:A:h",
                          longopts, NULL)) != -1) {
    if (c == 'h') {
      if (!quiet) perfUsage(tool);
      return 0;
    }
    const char *err = c == '?' ? "unknown option or missing value" : perfParseFlag(c, optarg, o);
    if (err) {
      if (!quiet) {
        if (c == '?') fprintf(stderr, "%s: %s: %s\n", tool, err, argv[optind - 1]);
        else fprintf(stderr, "%s: %s for -%c: '%s'\n", tool, err, c, optarg);
        fprintf(stderr, "%s -h lists the options\n", tool);
      }
      return -1;
    }
  }
  const char *err = optind < argc ? "unexpected argument" : perfCheckOpts(o);
  if (err) {
    if (!quiet) fprintf(stderr, "%s: %s%s%s\n", tool, err, optind < argc ? ": " : "",
                        optind < argc ? argv[optind] : "");
    return -1;
  }
  perfAdjustOpts(o, quiet, tool);
  return 1;
}
