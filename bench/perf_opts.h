/* The benchmarks' options: nccl-tests' flags (src/common.cu of NVIDIA/nccl-tests), with the
 * meaning each has on host buffers; docs/benchmark.md lists them. */
#ifndef WEFT_BENCH_PERF_OPTS_H_
#define WEFT_BENCH_PERF_OPTS_H_

#include <stddef.h>

/* -B: device buffers where the build's accelerator runtime has a device (auto), demanded
 * (device: none is a fatal error), or host buffers whatever there is. */
enum { PERF_BUF_AUTO, PERF_BUF_DEVICE, PERF_BUF_HOST };

typedef struct {
  size_t minBytes, maxBytes, stepBytes, stepFactor;
  int iters, warmup, aggIters;
  int check; /* -c: validation rounds after each measurement (0: none) */
  int nThreads, nGpus, average, blocking, parallelInit;
  int buffers; /* -B (not in nccl-tests): PERF_BUF_AUTO, PERF_BUF_DEVICE or PERF_BUF_HOST */
  int type, op; /* index in perfTypes / perfOpNames, or PERF_ALL */
  int root;     /* -r: the root of rooted collectives, or PERF_ALL (-r all, or nccl-tests' -1) */
  const char *rootGiven, *opGiven; /* -r's and -o's values as given (NULL: not given) */
  int showAlgo; /* -A 1 (not in nccl-tests): an "algo" column, what the library runs per size */
  int cycles;   /* -N: sweeps over the sizes per (type, op); 0 = until killed */
  double timeout;   /* -T: seconds a collective may take before the run is ended; 0 = none */
  int cputime;      /* -C: the time columns report the rank's CPU time */
  int timestamps;   /* -S: a timestamp at the end of each row */
  const char *json; /* -J: JSON output file (NULL: none) */
  int unalign;      /* -u: buffers start this many elements past their alignment */
  int memReport;    /* -M: memory report after the footer */
  int perIter, perIterSkip; /* -I: per-iteration statistics; -K: leading iterations left out */
  /* Accepted for nccl-tests scripts, nothing to do on host buffers (a note says so). */
  int graphs, localRegister, streamNull, ctaPolicy, deviceImpl, deviceCtas;
} perfOpts;

/* Returns 1 to run, 0 after -h, -1 on a usage error (printed by one process only). */
int perfParseArgs(int argc, char **argv, perfOpts *o, const char *tool);

/* The size after size in the sweep (> maxBytes at the end). */
size_t perfNextSize(const perfOpts *o, size_t size);
/* Whether the sweep has a size of at least one element of type (or 0 bytes). */
int perfSweepHasType(const perfOpts *o, int type);

#endif
