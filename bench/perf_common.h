/* Shared by bench/allreduce_perf.c (weft) and bench/mpi_allreduce_perf.c (MPI): the options and
 * output of nccl-tests' all_reduce_perf, verifiable data, the team of ranks (threads x processes)
 * and the timing loop. Only the collective call differs between the two benchmarks, so the
 * numbers they print are comparable line by line.
 * Header-only (static inline, so an unused helper draws no warning) because the Makefile builds
 * each benchmark from its one .c file. Both are compiled with mpicc, hence <mpi.h> here. */
#ifndef WEFT_BENCH_PERF_COMMON_H_
#define WEFT_BENCH_PERF_COMMON_H_

#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------------
 * Types and operations, in nccl-tests' order (which is also weftDataType_t's / weftRedOp_t's). */

enum { PERF_SINT, PERF_UINT, PERF_FLOAT };
enum {
  PERF_INT8, PERF_UINT8, PERF_INT32, PERF_UINT32, PERF_INT64, PERF_UINT64,
  PERF_HALF, PERF_FLOAT32, PERF_DOUBLE, PERF_BF16, PERF_NTYPES
};
enum { PERF_SUM, PERF_PROD, PERF_MAX, PERF_MIN, PERF_AVG, PERF_NOPS };
#define PERF_ALL (-1)

typedef struct {
  const char *name;
  size_t size;
  int kind;
  /* Partial results of the check data stay below this magnitude, so that they are exact
   * (fp mantissa) and do not wrap (8-bit integers, which matters for avg). */
  double exactLimit;
  /* Relative tolerance of avg: its final division may be a multiplication by 1/nranks, off
   * by an ulp in float / double; fp16 / bf16 results are rounded from fp32 and come out exact. */
  double avgTolerance;
} perfTypeInfo;

static const perfTypeInfo perfTypes[PERF_NTYPES] = {
  {"int8", 1, PERF_SINT, 127, 0},
  {"uint8", 1, PERF_UINT, 255, 0},
  {"int32", 4, PERF_SINT, 2147483647.0, 0},
  {"uint32", 4, PERF_UINT, 4294967295.0, 0},
  {"int64", 8, PERF_SINT, 9.0e18, 0},
  {"uint64", 8, PERF_UINT, 1.8e19, 0},
  {"half", 2, PERF_FLOAT, 2048, 0},
  {"float", 4, PERF_FLOAT, 16777216.0, 0x1p-23},
  {"double", 8, PERF_FLOAT, 9007199254740992.0, 0x1p-52},
  {"bfloat16", 2, PERF_FLOAT, 256, 0},
};
static const char *const perfOpNames[PERF_NOPS] = {"sum", "prod", "max", "min", "avg"};

/* ---------------------------------------------------------------------------------------------
 * Process-wide state and fatal errors. */

static int perfUseMpi; /* set once MPI_Init has run: errors then abort the whole job */

/* Rank from the launcher's environment, before MPI_Init: lets only one process print usage
 * errors instead of every one of them. */
static inline int perfEnvRank(void) {
  const char *names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    const char *v = getenv(names[i]);
    if (v) return atoi(v);
  }
  return 0;
}

/* True when started by mpirun/srun: only then may MPI_Init run (a singleton MPI_Init would
 * need a launcher daemon and is not wanted for plain thread runs). */
static inline int perfEnvUnderMpi(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

static inline void perfFatal(const char *fmt, ...) {
  char host[256] = "?";
  gethostname(host, sizeof(host) - 1);
  fprintf(stderr, "%s:%d: error: ", host, (int)getpid());
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  fflush(NULL);
  if (perfUseMpi) MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

static inline double perfNow(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---------------------------------------------------------------------------------------------
 * Options: nccl-tests' flags. */

typedef struct {
  size_t minBytes, maxBytes, stepBytes, stepFactor;
  int iters, warmup, aggIters, check;
  int nThreads, nGpus, average, blocking, parallelInit;
  int type, op; /* index in perfTypes / perfOpNames, or PERF_ALL */
  int showAlgo; /* -A 1 (not in nccl-tests): an "algo" column, what the library runs per size */
} perfOpts;

static inline void perfUsage(const char *tool) {
  printf("USAGE: %s\n"
         "\t[-t,--nthreads <ranks as threads per process>]\n"
         "\t[-g,--ngpus <must be 1: host buffers>]\n"
         "\t[-b,--minbytes <min size in bytes, K/M/G suffixes>]\n"
         "\t[-e,--maxbytes <max size in bytes, K/M/G suffixes>]\n"
         "\t[-i,--stepbytes <increment size>]\n"
         "\t[-f,--stepfactor <increment factor>]\n"
         "\t[-n,--iters <iteration count>]\n"
         "\t[-m,--agg_iters <collectives per iteration>]\n"
         "\t[-w,--warmup_iters <warmup iteration count>]\n"
         "\t[-p,--parallel_init <0/1> (ranks always initialize concurrently)]\n"
         "\t[-c,--check <0/1>]\n"
         "\t[-o,--op <sum/prod/min/max/avg/all>]\n"
         "\t[-d,--datatype <int8/uint8/int32/uint32/int64/uint64/half/float/double/bfloat16/all>]\n"
         "\t[-r,--root <root> (ignored: allreduce has none)]\n"
         "\t[-z,--blocking <0/1>]\n"
         "\t[-a,--average <0/1/2/3> report average iteration time <0=RANK0/1=AVG/2=MIN/3=MAX>]\n"
         "\t[-A,--algo <0/1> add an algo column: the algorithm run at each size (weft's tuner)]\n"
         "\t[-h,--help]\n",
         tool);
}

/* "64", "1.5K", "256M", "2G" (binary units, as nccl-tests). Returns -1 when malformed. */
static inline int perfParseSize(const char *s, size_t *out) {
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

static inline int perfParseInt(const char *s, long lo, long hi, int *out) {
  char *end;
  long v = strtol(s, &end, 0);
  if (end == s || *end != '\0' || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

/* Index of a -d / -o name, PERF_ALL for "all", -2 when unknown. */
static inline int perfTypeByName(const char *s) {
  if (strcmp(s, "all") == 0) return PERF_ALL;
  for (int i = 0; i < PERF_NTYPES; i++) {
    if (strcmp(s, perfTypes[i].name) == 0) return i;
  }
  return -2;
}

static inline int perfOpByName(const char *s) {
  if (strcmp(s, "all") == 0) return PERF_ALL;
  for (int i = 0; i < PERF_NOPS; i++) {
    if (strcmp(s, perfOpNames[i]) == 0) return i;
  }
  return -2;
}

static inline void perfDefaults(perfOpts *o) {
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
}

/* One flag; returns its error message, NULL when fine. */
static inline const char *perfParseFlag(int c, const char *arg, perfOpts *o) {
  int unused, ok = 0;
  switch (c) {
  case 'b': ok = perfParseSize(arg, &o->minBytes) == 0; break;
  case 'e': ok = perfParseSize(arg, &o->maxBytes) == 0; break;
  case 'i': ok = perfParseSize(arg, &o->stepBytes) == 0; break;
  case 'f': ok = perfParseSize(arg, &o->stepFactor) == 0; break;
  case 'n': ok = perfParseInt(arg, 1, INT_MAX, &o->iters) == 0; break;
  case 'w': ok = perfParseInt(arg, 0, INT_MAX, &o->warmup) == 0; break;
  case 'm': ok = perfParseInt(arg, 1, INT_MAX, &o->aggIters) == 0; break;
  case 'c': ok = perfParseInt(arg, 0, 1, &o->check) == 0; break;
  case 't': ok = perfParseInt(arg, 1, 4096, &o->nThreads) == 0; break;
  case 'g': ok = perfParseInt(arg, 0, INT_MAX, &o->nGpus) == 0; break;
  case 'a': ok = perfParseInt(arg, 0, 3, &o->average) == 0; break;
  case 'z': ok = perfParseInt(arg, 0, 1, &o->blocking) == 0; break;
  case 'p': ok = perfParseInt(arg, 0, 1, &o->parallelInit) == 0; break;
  case 'A': ok = perfParseInt(arg, 0, 1, &o->showAlgo) == 0; break;
  case 'r': ok = perfParseInt(arg, 0, INT_MAX, &unused) == 0; break;
  case 'd':
    o->type = perfTypeByName(arg);
    ok = o->type != -2;
    break;
  case 'o':
    o->op = perfOpByName(arg);
    ok = o->op != -2;
    break;
  default: return "unknown option";
  }
  return ok ? NULL : "invalid value";
}

static inline const char *perfCheckOpts(const perfOpts *o) {
  if (o->minBytes > o->maxBytes) return "minbytes (-b) is larger than maxbytes (-e)";
  if (o->stepFactor <= 1 && o->stepBytes == 0) return "stepbytes (-i) must be > 0 without -f";
  if (o->nGpus != 1) return "-g must be 1: weft benchmarks use host (CPU) buffers only";
  if ((long long)o->iters * o->aggIters > INT_MAX) return "iters (-n) x agg_iters (-m) is too large";
  return NULL;
}

/* Returns 1 to run, 0 after -h, -1 on a usage error (printed by one process only). */
static inline int perfParseArgs(int argc, char **argv, perfOpts *o, const char *tool) {
  static const struct option longopts[] = {
    {"nthreads", required_argument, 0, 't'}, {"ngpus", required_argument, 0, 'g'},
    {"minbytes", required_argument, 0, 'b'}, {"maxbytes", required_argument, 0, 'e'},
    {"stepbytes", required_argument, 0, 'i'}, {"stepfactor", required_argument, 0, 'f'},
    {"iters", required_argument, 0, 'n'}, {"agg_iters", required_argument, 0, 'm'},
    {"warmup_iters", required_argument, 0, 'w'}, {"parallel_init", required_argument, 0, 'p'},
    {"check", required_argument, 0, 'c'}, {"op", required_argument, 0, 'o'},
    {"datatype", required_argument, 0, 'd'}, {"root", required_argument, 0, 'r'},
    {"blocking", required_argument, 0, 'z'}, {"average", required_argument, 0, 'a'},
    {"algo", required_argument, 0, 'A'},
    {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  int quiet = perfEnvRank() != 0, c;
  perfDefaults(o);
  opterr = 0; /* our own message, from one process */
  while ((c = getopt_long(argc, argv, "t:g:b:e:i:f:n:m:w:p:c:o:d:r:z:a:A:h", longopts, NULL)) != -1) {
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
  return 1;
}

/* ---------------------------------------------------------------------------------------------
 * fp16 / bf16, round to nearest even. Written here rather than taken from the library so that
 * the expected values do not share code with what they check. */

static inline uint16_t perfFloatToHalf(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
  uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00;        /* NaN */
  if (a >= 0x477ff000u) return sign | 0x7c00;       /* rounds to +-inf */
  if (a < 0x38800000u) {                            /* half subnormal or zero */
    float af;
    memcpy(&af, &a, 4);
    return sign | (uint16_t)lrintf(af * 0x1p24f); /* units of 2^-24, exact scaling */
  }
  uint32_t h = (a - 0x38000000u) >> 13, rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
  return sign | (uint16_t)h;
}

static inline float perfHalfToFloat(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, x;
  if (e == 0) {
    float f = ldexpf((float)m, -24);
    return sign ? -f : f;
  }
  x = sign | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112) << 23) | (m << 13));
  float f;
  memcpy(&f, &x, 4);
  return f;
}

static inline uint16_t perfFloatToBf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

static inline float perfBf16ToFloat(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

/* ---------------------------------------------------------------------------------------------
 * Verifiable data. Element i of rank r's input is a small integer drawn from a hash of
 * (r, i mod PERF_PERIOD, type, op), chosen so that every partial result of any reduction order
 * is exact; the expected result is then computed here, per element, over all ranks. The data
 * repeats with a prime period, so a chunk moved by any power-of-two offset shows, and filling
 * and checking are memcpy/memcmp of one period at a time. */

#define PERF_PERIOD 4093
#define PERF_GUARD 64        /* bytes past the end of the result that must stay untouched */
#define PERF_SENTINEL 0xA5   /* byte pattern of out-of-place results before the call */
#define PERF_ALIGN 64

/* Integers as two's-complement bits (sums and products wrap as the fixed-width type does once
 * truncated), floating point as a double (exact: small integers). */
typedef union {
  uint64_t u;
  double f;
} perfVal;

typedef struct {
  int type, op, nRanks;
  size_t esize;
  char *input;  /* PERF_PERIOD elements: this rank's send data */
  char *expect; /* PERF_PERIOD elements: the reduction over all ranks */
} perfData;

static inline uint32_t perfHash(uint32_t a, uint32_t b, uint32_t c) {
  uint64_t x = ((uint64_t)a << 40) ^ ((uint64_t)b << 12) ^ c;
  x ^= x >> 33; /* murmur3 finalizer */
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return (uint32_t)x;
}

/* Half-width of the value range: small enough that nRanks * 3k stays exact for the type. */
static inline int perfRange(int type, int nRanks) {
  double k = floor(perfTypes[type].exactLimit / (3.0 * nRanks));
  return k > 4 ? 4 : k < 1 ? 1 : (int)k;
}

/* avg: every element sums to exactly nRanks * base (ranks r and nRanks-1-r add +d and -d), so
 * the average is exact whatever the type, and no partial sum wraps. */
static inline int64_t perfAvgInput(int kind, int k, int n, int r, uint32_t j, uint32_t salt) {
  uint32_t hb = perfHash(0xffffu, j, salt);
  int64_t base = kind == PERF_UINT ? k + (int64_t)(hb % (uint32_t)(k + 1))
                                   : (int64_t)(hb % (uint32_t)(2 * k + 1)) - k;
  int partner = n - 1 - r, lo = r < partner ? r : partner;
  if (partner == r) return base;
  int64_t d = (int64_t)(perfHash((uint32_t)lo, j, salt ^ 0x5a5a5a5au) % (uint32_t)(k + 1));
  return r == lo ? base + d : base - d;
}

static inline int64_t perfInput(int type, int op, int n, int r, uint32_t j) {
  int kind = perfTypes[type].kind, k = perfRange(type, n);
  uint32_t salt = (uint32_t)(op * 16 + type), h = perfHash((uint32_t)r, j, salt);
  switch (op) {
  case PERF_PROD:
    /* +-1 and, on the first 6 ranks only, 2: |product| <= 64 is exact everywhere. */
    if (r < 6 && h % 4 == 0) return 2;
    return kind == PERF_UINT || (h >> 8) % 2 ? 1 : -1;
  case PERF_AVG: return perfAvgInput(kind, k, n, r, j, salt);
  default: /* sum, min, max */
    return kind == PERF_UINT ? (int64_t)(h % (uint32_t)(2 * k + 1))
                             : (int64_t)(h % (uint32_t)(2 * k + 1)) - k;
  }
}

static inline perfVal perfToVal(int kind, int64_t v) {
  perfVal x;
  if (kind == PERF_FLOAT) x.f = (double)v;
  else x.u = (uint64_t)v;
  return x;
}

static inline perfVal perfCombine(int kind, int op, perfVal a, perfVal b) {
  if (kind == PERF_FLOAT) {
    switch (op) {
    case PERF_PROD: a.f *= b.f; break;
    case PERF_MAX: a.f = fmax(a.f, b.f); break;
    case PERF_MIN: a.f = fmin(a.f, b.f); break;
    default: a.f += b.f; break;
    }
    return a;
  }
  /* min/max only ever see inputs, which are sign-extended: compare as int64 for signed. */
  int less = kind == PERF_SINT ? (int64_t)a.u < (int64_t)b.u : a.u < b.u;
  switch (op) {
  case PERF_PROD: a.u *= b.u; break;
  case PERF_MAX: if (less) a = b; break;
  case PERF_MIN: if (!less) a = b; break;
  default: a.u += b.u; break;
  }
  return a;
}

static inline perfVal perfExpected(int type, int op, int n, uint32_t j) {
  int kind = perfTypes[type].kind;
  perfVal acc = perfToVal(kind, perfInput(type, op, n, 0, j));
  for (int r = 1; r < n; r++) acc = perfCombine(kind, op, acc, perfToVal(kind, perfInput(type, op, n, r, j)));
  if (op == PERF_AVG) {
    if (kind == PERF_FLOAT) acc.f /= n;
    else if (kind == PERF_SINT) acc.u = (uint64_t)((int64_t)acc.u / n);
    else acc.u /= (uint64_t)n;
  }
  return acc;
}

static inline void perfStore(int type, void *dst, perfVal v) {
  uint8_t u8 = (uint8_t)v.u;
  uint16_t u16;
  uint32_t u32 = (uint32_t)v.u;
  float f = (float)v.f;
  switch (type) {
  case PERF_INT8: case PERF_UINT8: memcpy(dst, &u8, 1); break;
  case PERF_INT32: case PERF_UINT32: memcpy(dst, &u32, 4); break;
  case PERF_INT64: case PERF_UINT64: memcpy(dst, &v.u, 8); break;
  case PERF_HALF: u16 = perfFloatToHalf(f); memcpy(dst, &u16, 2); break;
  case PERF_BF16: u16 = perfFloatToBf16(f); memcpy(dst, &u16, 2); break;
  case PERF_FLOAT32: memcpy(dst, &f, 4); break;
  default: memcpy(dst, &v.f, 8); break;
  }
}

static inline double perfLoadFloat(int type, const void *src) {
  uint16_t u16;
  float f;
  double d;
  switch (type) {
  case PERF_HALF: memcpy(&u16, src, 2); return perfHalfToFloat(u16);
  case PERF_BF16: memcpy(&u16, src, 2); return perfBf16ToFloat(u16);
  case PERF_FLOAT32: memcpy(&f, src, 4); return f;
  default: memcpy(&d, src, 8); return d;
  }
}

static inline void perfDataInit(perfData *d, int type, int op, int rank, int nRanks) {
  int kind = perfTypes[type].kind;
  d->type = type;
  d->op = op;
  d->nRanks = nRanks;
  d->esize = perfTypes[type].size;
  d->input = malloc(PERF_PERIOD * d->esize);
  d->expect = malloc(PERF_PERIOD * d->esize);
  if (!d->input || !d->expect) perfFatal("out of memory");
  for (uint32_t j = 0; j < PERF_PERIOD; j++) {
    perfStore(type, d->input + j * d->esize, perfToVal(kind, perfInput(type, op, nRanks, rank, j)));
    perfStore(type, d->expect + j * d->esize, perfExpected(type, op, nRanks, j));
  }
}

static inline void perfDataFree(perfData *d) {
  free(d->input);
  free(d->expect);
}

/* buf[i] = table[i % PERF_PERIOD], i < count. */
static inline void perfFill(char *buf, const char *table, size_t count, size_t esize) {
  size_t period = (size_t)PERF_PERIOD * esize, bytes = count * esize;
  for (size_t off = 0; off < bytes; off += period)
    memcpy(buf + off, table, bytes - off < period ? bytes - off : period);
}

static inline int perfEltWrong(const perfData *d, const char *got, const char *want, int exact) {
  if (exact || perfTypes[d->type].kind != PERF_FLOAT) return memcmp(got, want, d->esize) != 0;
  double g = perfLoadFloat(d->type, got), w = perfLoadFloat(d->type, want);
  double tol = d->op == PERF_AVG ? perfTypes[d->type].avgTolerance * fmax(1.0, fabs(w)) : 0.0;
  return !(fabs(g - w) <= tol); /* NaN counts as wrong */
}

/* Elements of buf that differ from the periodic table; exact = bit for bit, otherwise floats
 * compare by value (+0 == -0, avg within its tolerance). */
static inline long long perfCountWrong(const perfData *d, const char *buf, const char *table,
                                       size_t count, int exact) {
  size_t period = (size_t)PERF_PERIOD * d->esize, bytes = count * d->esize;
  long long wrong = 0;
  for (size_t off = 0; off < bytes; off += period) {
    size_t n = bytes - off < period ? bytes - off : period;
    if (memcmp(buf + off, table, n) == 0) continue; /* the common case: one memcmp a period */
    for (size_t e = 0; e < n; e += d->esize) wrong += perfEltWrong(d, buf + off + e, table + e, exact);
  }
  return wrong;
}

/* Elements of the guard zone after the result that were written to. */
static inline long long perfGuardWrong(const char *guard, size_t esize) {
  long long wrong = 0;
  for (size_t e = 0; e < PERF_GUARD; e += esize) {
    for (size_t b = 0; b < esize; b++) {
      if ((unsigned char)guard[e + b] != PERF_SENTINEL) {
        wrong++;
        break;
      }
    }
  }
  return wrong;
}

/* ---------------------------------------------------------------------------------------------
 * The team: every rank of the job, i.e. nThreads threads in each of the MPI processes (or the
 * one process). Barriers and reductions go through a pthread barrier, and MPI on thread 0
 * only, so MPI needs no more than MPI_THREAD_FUNNELED (thread 0 is the main thread). */

typedef struct {
  pthread_barrier_t bar;
  int nThreads, nRanks, useMpi;
  double *vals; /* one per thread */
  double result;
} perfTeam;

static inline void perfTeamInit(perfTeam *t, int nThreads, int nRanks, int useMpi) {
  t->nThreads = nThreads;
  t->nRanks = nRanks;
  t->useMpi = useMpi;
  t->vals = calloc((size_t)nThreads, sizeof(double));
  if (!t->vals || pthread_barrier_init(&t->bar, NULL, (unsigned)nThreads) != 0)
    perfFatal("cannot set up the thread team");
}

static inline void perfTeamFree(perfTeam *t) {
  pthread_barrier_destroy(&t->bar);
  free(t->vals);
}

static inline void perfTeamBarrier(perfTeam *t, int tid) {
  pthread_barrier_wait(&t->bar);
  if (tid == 0 && t->useMpi) MPI_Barrier(MPI_COMM_WORLD);
  pthread_barrier_wait(&t->bar);
}

enum { PERF_AGG_RANK0, PERF_AGG_AVG, PERF_AGG_MIN, PERF_AGG_MAX, PERF_AGG_SUM };

static inline double perfAggregate(int mode, double a, double b) {
  switch (mode) {
  case PERF_AGG_RANK0: return a;
  case PERF_AGG_MIN: return fmin(a, b);
  case PERF_AGG_MAX: return fmax(a, b);
  default: return a + b;
  }
}

/* Combines v over all ranks (mode: -a's 0..3, or PERF_AGG_SUM); every rank gets the result.
 * Two barriers suffice: a thread cannot write vals for the next call before all have read
 * this call's result, since thread 0 publishes it only after the next first barrier. */
static inline double perfTeamReduce(perfTeam *t, int tid, double v, int mode) {
  t->vals[tid] = v;
  pthread_barrier_wait(&t->bar);
  if (tid == 0) {
    double acc = t->vals[0];
    for (int i = 1; i < t->nThreads; i++) acc = perfAggregate(mode, acc, t->vals[i]);
    if (t->useMpi && mode == PERF_AGG_RANK0) {
      MPI_Bcast(&acc, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    } else if (t->useMpi) {
      MPI_Op op = mode == PERF_AGG_MIN ? MPI_MIN : mode == PERF_AGG_MAX ? MPI_MAX : MPI_SUM;
      MPI_Allreduce(MPI_IN_PLACE, &acc, 1, MPI_DOUBLE, op, MPI_COMM_WORLD);
    }
    t->result = mode == PERF_AGG_AVG ? acc / t->nRanks : acc;
  }
  pthread_barrier_wait(&t->bar);
  return t->result;
}

/* ---------------------------------------------------------------------------------------------
 * Output, in nccl-tests' format. */

static inline void perfPrintHeader(const perfOpts *o) {
  int factor = o->stepFactor > 1;
  printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d "
         "iters: %d agg iters: %d validation: %d graph: 0\n",
         o->nThreads, o->nGpus, o->minBytes, o->maxBytes, factor ? o->stepFactor : o->stepBytes,
         factor ? "factor" : "bytes", o->warmup, o->iters, o->aggIters, o->check);
  if (o->blocking) printf("# Blocking Enabled: wait for completion and barrier after each collective \n");
  if (o->parallelInit) printf("# Parallel Init Enabled: ranks initialize concurrently (they always do) \n");
  printf("#\n");
}

/* "# Using devices": one line per rank, gathered to world rank 0 in rank order. */
static inline void perfPrintDevices(int nThreads, int worldRank, int worldSize) {
  enum { LINE = 160 };
  char host[64] = "?";
  gethostname(host, sizeof(host) - 1);
  size_t mine = (size_t)LINE * (size_t)nThreads;
  char *lines = calloc(mine, (size_t)(worldRank == 0 ? worldSize : 1));
  if (!lines) perfFatal("out of memory");
  for (int i = 0; i < nThreads; i++) {
    snprintf(lines + (size_t)i * LINE, LINE, "#  Rank %2d Group %2d Pid %6d on %10s device %2d [cpu]\n",
             worldRank * nThreads + i, 0, (int)getpid(), host, 0);
  }
  if (perfUseMpi) {
    MPI_Gather(worldRank == 0 ? MPI_IN_PLACE : lines, (int)mine, MPI_CHAR, lines, (int)mine,
               MPI_CHAR, 0, MPI_COMM_WORLD);
  }
  if (worldRank == 0) {
    printf("# Using devices\n");
    for (size_t i = 0; i < (size_t)worldSize * (size_t)nThreads; i++) printf("%s", lines + i * LINE);
    fflush(stdout);
  }
  free(lines);
}

/* nccl-tests' header; with -A 1 one more column, "algo", after in-place's #wrong. */
static inline void perfPrintTableHeader(const perfOpts *o) {
  printf("#\n");
  printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          \n",
         "", "", "", "", "");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s%s\n", "size", "count",
         "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
         "#wrong", o->showAlgo ? "      algo" : "");
  printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)",
         "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

static inline void perfPrintResult(double usec, double algbw, double busbw, long long wrong, int check) {
  char t[32];
  snprintf(t, sizeof(t), usec >= 10000.0 ? "%7.0f" : usec >= 100.0 ? "%7.1f" : "%7.2f", usec);
  if (check) printf("  %7s  %6.2f  %6.2f  %5lld", t, algbw, busbw, wrong);
  else printf("  %7s  %6.2f  %6.2f  %5s", t, algbw, busbw, "N/A");
}

static inline void perfPrintFooter(int errors, double bwSum, int bwCount) {
  printf("# Out of bounds values : %d %s\n", errors, errors ? "FAILED" : "OK");
  printf("# Avg bus bandwidth    : %g \n", bwCount ? bwSum / bwCount : 0.0);
  printf("#\n");
  fflush(stdout);
}

/* ---------------------------------------------------------------------------------------------
 * One rank and the benchmark loop (nccl-tests' TimeTest / BenchTime). */

/* The collective under test; reports its own errors through perfFatal. */
typedef void (*perfCollFn)(void *ctx, const void *send, void *recv, size_t count, int type, int op);

typedef struct {
  const perfOpts *opts;
  perfTeam *team;
  int tid, rank, nRanks;
  int printer;        /* world rank 0, thread 0: prints the table */
  char *send, *recv;  /* opts->maxBytes + PERF_GUARD each */
  perfCollFn coll;
  void *collCtx;
  int (*supported)(int type, int op); /* what -d all / -o all iterate over (NULL: all) */
  /* -A 1: the name of the algorithm the collective runs for count elements of type (NULL: "-") */
  const char *(*algoName)(void *ctx, size_t count, int type);
  double bwSum;
  int bwCount, errors; /* errors: measurements with wrong elements on any rank */
} perfRank;

static inline void perfRankAlloc(perfRank *r) {
  size_t bytes = r->opts->maxBytes + PERF_GUARD;
  void *s = NULL, *v = NULL;
  if (posix_memalign(&s, PERF_ALIGN, bytes) || posix_memalign(&v, PERF_ALIGN, bytes))
    perfFatal("rank %d: cannot allocate 2 x %zu bytes", r->rank, bytes);
  r->send = s;
  r->recv = v;
}

static inline void perfRankFree(perfRank *r) {
  free(r->send);
  free(r->recv);
}

/* Like nccl-tests, iteration i works at offset (i mod steps) * bytes inside the buffers, so
 * successive iterations do not reuse cache-hot data (and races between calls show). */
static inline void perfCollAt(perfRank *r, size_t count, int type, int op, int inPlace, int iter) {
  size_t bytes = count * perfTypes[type].size;
  size_t steps = bytes ? r->opts->maxBytes / bytes : 1;
  size_t shift = bytes * ((size_t)iter % steps);
  char *recv = r->recv + shift;
  r->coll(r->collCtx, inPlace ? recv : r->send + shift, recv, count, type, op);
}

/* Seconds per collective on this rank, iterations started together after a barrier. */
static inline double perfTime(perfRank *r, size_t count, int type, int op, int inPlace) {
  const perfOpts *o = r->opts;
  int n = o->iters * o->aggIters;
  perfCollAt(r, count, type, op, inPlace, 0); /* sync, as nccl-tests */
  perfTeamBarrier(r->team, r->tid);
  double t0 = perfNow();
  for (int i = 0; i < n; i++) {
    perfCollAt(r, count, type, op, inPlace, i);
    if (o->blocking) perfTeamBarrier(r->team, r->tid);
  }
  return (perfNow() - t0) / n;
}

/* One untimed collective on known data; returns this rank's wrong elements. Out of place, the
 * result starts as sentinel bytes (unwritten elements show) and the send buffer must come back
 * unchanged; in both cases PERF_GUARD bytes after the result must stay untouched. */
static inline long long perfValidate(perfRank *r, const perfData *d, size_t count, int inPlace) {
  size_t bytes = count * d->esize;
  perfFill(r->send, d->input, count, d->esize);
  if (inPlace) perfFill(r->recv, d->input, count, d->esize);
  else memset(r->recv, PERF_SENTINEL, bytes);
  memset(r->recv + bytes, PERF_SENTINEL, PERF_GUARD);
  perfTeamBarrier(r->team, r->tid); /* peers may read our buffers: all filled before any call */
  perfCollAt(r, count, d->type, d->op, inPlace, 0);
  long long wrong = perfCountWrong(d, r->recv, d->expect, count, 0) + perfGuardWrong(r->recv + bytes, d->esize);
  if (!inPlace) wrong += perfCountWrong(d, r->send, d->input, count, 1);
  /* Put valid data back where the sentinel was, so later timed runs reduce ordinary numbers
   * (sentinel products would underflow to slow subnormals). */
  perfFill(r->recv, d->input, count + PERF_GUARD / d->esize, d->esize);
  return wrong;
}

static inline void perfBench(perfRank *r, const perfData *d, size_t count, int inPlace) {
  const perfOpts *o = r->opts;
  double sec = perfTime(r, count, d->type, d->op, inPlace);
  sec = perfTeamReduce(r->team, r->tid, sec, o->average);
  double algbw = (double)(count * d->esize) / 1e9 / sec;
  double busbw = algbw * 2.0 * (r->nRanks - 1) / r->nRanks;
  long long wrong = 0;
  if (o->check) {
    perfTeamBarrier(r->team, r->tid);
    wrong = (long long)perfTeamReduce(r->team, r->tid, (double)perfValidate(r, d, count, inPlace), PERF_AGG_SUM);
  }
  if (r->printer) perfPrintResult(sec * 1e6, algbw, busbw, wrong, o->check);
  r->bwSum += busbw;
  r->bwCount++;
  r->errors += wrong != 0;
}

/* Sizes and steps are below 1e18 (perfParseSize): a sum cannot overflow, a product is cut
 * short past maxBytes. By factor, 0 is followed by 1. */
static inline size_t perfNextSize(const perfOpts *o, size_t size) {
  if (o->stepFactor <= 1) return size + o->stepBytes;
  if (size > o->maxBytes / o->stepFactor) return o->maxBytes + 1;
  return size ? size * o->stepFactor : 1;
}

static inline void perfWarmup(perfRank *r, size_t bytes, int type, int op) {
  size_t count = bytes / perfTypes[type].size;
  for (int i = 0; i < r->opts->warmup; i++) perfCollAt(r, count, type, op, 0, i);
}

static inline void perfTimeTest(perfRank *r, int type, int op) {
  const perfOpts *o = r->opts;
  size_t esize = perfTypes[type].size;
  perfData d;
  perfDataInit(&d, type, op, r->rank, r->nRanks);
  /* Valid numbers in the whole buffers: the timed iterations walk all of them. */
  perfFill(r->send, d.input, (o->maxBytes + PERF_GUARD) / esize, esize);
  perfFill(r->recv, d.input, (o->maxBytes + PERF_GUARD) / esize, esize);
  perfTeamBarrier(r->team, r->tid);
  perfWarmup(r, o->maxBytes, type, op);
  perfWarmup(r, o->minBytes, type, op);
  for (size_t size = o->minBytes; size <= o->maxBytes; size = perfNextSize(o, size)) {
    size_t count = size / esize;
    if (count == 0 && size != 0) continue; /* smaller than one element */
    if (r->printer) {
      printf("%12zu  %12zu  %8s  %6s  %6i", count * esize, count, perfTypes[type].name, perfOpNames[op], -1);
    }
    perfBench(r, &d, count, 0);
    perfBench(r, &d, count, 1);
    if (r->printer && o->showAlgo) printf("  %8s", r->algoName ? r->algoName(r->collCtx, count, type) : "-");
    if (r->printer) printf("\n");
  }
  perfDataFree(&d);
}

/* Every selected (type, op) pair, in nccl-tests' order. An "all" skips the pairs the
 * collective does not support; a pair named by both -d and -o always runs, so that asking for
 * an unsupported one fails with the collective's own message. */
static inline void perfRunAll(perfRank *r) {
  const perfOpts *o = r->opts;
  int any = o->type == PERF_ALL || o->op == PERF_ALL;
  for (int type = 0; type < PERF_NTYPES; type++) {
    if (o->type != PERF_ALL && o->type != type) continue;
    for (int op = 0; op < PERF_NOPS; op++) {
      if (o->op != PERF_ALL && o->op != op) continue;
      if (any && r->supported && !r->supported(type, op)) continue;
      perfTimeTest(r, type, op);
    }
  }
}

/* ---------------------------------------------------------------------------------------------
 * The world: MPI processes (or one process without MPI). */

typedef struct {
  int rank, size;
} perfWorld;

static inline void perfWorldInit(perfWorld *w, int useMpi, int *argc, char ***argv) {
  w->rank = 0;
  w->size = 1;
  if (!useMpi) return;
  int provided;
  /* Thread 0 of each process is its main thread and the only one that calls MPI. */
  if (MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
    perfFatal("MPI_Init_thread failed");
  perfUseMpi = 1;
  if (provided < MPI_THREAD_FUNNELED) perfFatal("MPI does not provide MPI_THREAD_FUNNELED");
  MPI_Comm_rank(MPI_COMM_WORLD, &w->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w->size);
}

static inline void perfWorldFinalize(void) {
  if (perfUseMpi) MPI_Finalize();
  perfUseMpi = 0;
}

#endif
