/* Datatypes and verifiable data (see perf_data.h). */
#include "perf_data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "perf_team.h"

const perfTypeInfo perfTypes[PERF_NTYPES] = {
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
const char *const perfOpNames[PERF_NOPS] = {"sum", "prod", "max", "min", "avg"};

/* ---------------------------------------------------------------------------------------------
 * fp16 / bf16, round to nearest even. Written here rather than taken from the library so that
 * the expected values do not share code with what they check. */

static uint16_t perfFloatToHalf(float f) {
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

static float perfHalfToFloat(uint16_t h) {
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

static uint16_t perfFloatToBf16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
  x += 0x7fffu + ((x >> 16) & 1);
  return (uint16_t)(x >> 16);
}

static float perfBf16ToFloat(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  float f;
  memcpy(&f, &x, 4);
  return f;
}

/* Integers as two's-complement bits (sums and products wrap as the fixed-width type does once
 * truncated), floating point as a double (exact: small integers). */
typedef union {
  uint64_t u;
  double f;
} perfVal;

static uint32_t perfHash(uint32_t a, uint32_t b, uint32_t c) {
  uint64_t x = ((uint64_t)a << 40) ^ ((uint64_t)b << 12) ^ c;
  x ^= x >> 33; /* murmur3 finalizer */
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return (uint32_t)x;
}

/* Half-width of the value range: small enough that nRanks * 3k stays exact for the type. */
static int perfRange(int type, int nRanks) {
  double k = floor(perfTypes[type].exactLimit / (3.0 * nRanks));
  return k > 4 ? 4 : k < 1 ? 1 : (int)k;
}

/* avg: every element sums to exactly nRanks * base (ranks r and nRanks-1-r add +d and -d), so
 * the average is exact whatever the type, and no partial sum wraps. */
static int64_t perfAvgInput(int kind, int k, int n, int r, uint32_t j, uint32_t salt) {
  uint32_t hb = perfHash(0xffffu, j, salt);
  int64_t base = kind == PERF_UINT ? k + (int64_t)(hb % (uint32_t)(k + 1))
                                   : (int64_t)(hb % (uint32_t)(2 * k + 1)) - k;
  int partner = n - 1 - r, lo = r < partner ? r : partner;
  if (partner == r) return base;
  int64_t d = (int64_t)(perfHash((uint32_t)lo, j, salt ^ 0x5a5a5a5au) % (uint32_t)(k + 1));
  return r == lo ? base + d : base - d;
}

static int64_t perfInput(int type, int op, int n, int r, uint32_t j) {
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

static perfVal perfToVal(int kind, int64_t v) {
  perfVal x;
  if (kind == PERF_FLOAT) x.f = (double)v;
  else x.u = (uint64_t)v;
  return x;
}

static perfVal perfCombine(int kind, int op, perfVal a, perfVal b) {
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

static perfVal perfExpected(int type, int op, int n, uint32_t j) {
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

static void perfStore(int type, void *dst, perfVal v) {
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

static double perfLoadFloat(int type, const void *src) {
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

static void perfInputTable(char *table, int type, int op, int rank, int nRanks) {
  int kind = perfTypes[type].kind;
  size_t esize = perfTypes[type].size;
  for (uint32_t j = 0; j < PERF_PERIOD; j++)
    perfStore(type, table + j * esize, perfToVal(kind, perfInput(type, op, nRanks, rank, j)));
}

void perfDataInit(perfData *d, int type, int op, int rank, int nRanks, int reduction) {
  d->type = type;
  d->op = op;
  d->rank = rank;
  d->nRanks = nRanks;
  d->esize = perfTypes[type].size;
  d->otherRank = -1;
  d->input = malloc(PERF_PERIOD * d->esize);
  d->other = malloc(PERF_PERIOD * d->esize);
  d->expect = reduction ? malloc(PERF_PERIOD * d->esize) : NULL;
  if (!d->input || !d->other || (reduction && !d->expect)) perfFatal("out of memory");
  perfInputTable(d->input, type, op, rank, nRanks);
  for (uint32_t j = 0; reduction && j < PERF_PERIOD; j++)
    perfStore(type, d->expect + j * d->esize, perfExpected(type, op, nRanks, j));
}

void perfDataFree(perfData *d) {
  free(d->input);
  free(d->other);
  free(d->expect);
}

const char *perfDataInputOf(perfData *d, int rank) {
  if (rank == d->rank) return d->input;
  if (rank != d->otherRank) {
    perfInputTable(d->other, d->type, d->op, rank, d->nRanks);
    d->otherRank = rank;
  }
  return d->other;
}

/* buf follows the table in runs: the first from index first % PERIOD to the period's end,
 * then whole periods. The length of the run from index at when left elements remain: */
static size_t perfRun(size_t at, size_t left) {
  return left < PERF_PERIOD - at ? left : PERF_PERIOD - at;
}

void perfFill(char *buf, const char *table, size_t first, size_t count, size_t esize) {
  for (size_t done = 0, at = first % PERF_PERIOD, n; done < count; done += n, at = 0) {
    n = perfRun(at, count - done);
    memcpy(buf + done * esize, table + at * esize, n * esize);
  }
}

static int perfEltWrong(const perfData *d, const char *got, const char *want, int exact) {
  if (exact || perfTypes[d->type].kind != PERF_FLOAT) return memcmp(got, want, d->esize) != 0;
  double g = perfLoadFloat(d->type, got), w = perfLoadFloat(d->type, want);
  double tol = d->op == PERF_AVG ? perfTypes[d->type].avgTolerance * fmax(1.0, fabs(w)) : 0.0;
  return !(fabs(g - w) <= tol); /* NaN counts as wrong */
}

long long perfCountWrong(const perfData *d, const char *buf, const char *table, size_t first,
                         size_t count, int exact) {
  size_t es = d->esize;
  long long wrong = 0;
  for (size_t done = 0, at = first % PERF_PERIOD, n; done < count; done += n, at = 0) {
    n = perfRun(at, count - done);
    const char *got = buf + done * es, *want = table + at * es;
    if (memcmp(got, want, n * es) == 0) continue; /* the common case: one memcmp a period */
    for (size_t e = 0; e < n * es; e += es) wrong += perfEltWrong(d, got + e, want + e, exact);
  }
  return wrong;
}

long long perfCountNotSentinel(const char *buf, size_t count, size_t esize) {
  long long wrong = 0;
  for (size_t e = 0; e < count * esize; e += esize) {
    for (size_t b = 0; b < esize; b++) {
      if ((unsigned char)buf[e + b] != PERF_SENTINEL) {
        wrong++;
        break;
      }
    }
  }
  return wrong;
}
