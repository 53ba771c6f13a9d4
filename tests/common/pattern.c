/* The data every collective test reduces, and the expected results, computed here in plain C
 * (fp16/bf16 through tests/common/refconv.c, never through the library's converters). */
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "reduce.h"
#include "refconv.h"

static uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

static uint64_t rawValue(size_t i, int rank) { return mix(((uint64_t)i << 8) ^ (uint64_t)rank ^ 0x9e37); }

/* Float inputs are exact in every float type and so are all their partial results, in any
 * order: integers in [-16, 15] (sums of up to 16 ranks stay within +-256, which bf16's 8-bit
 * significand holds), and for prod +-1/2, +-1, +-2 (products of up to 14 ranks stay within
 * fp16's range). So sum, prod, max and min have one right answer, which a reduction that lost
 * or doubled a contribution cannot give. */
static double floatValue(size_t i, int rank, weftRedOp_t op) {
  uint64_t r = rawValue(i, rank);
  if (op == weftProd) {
    static const double p[] = {0.5, 1.0, 2.0, 1.0};
    return (r & 4 ? -1.0 : 1.0) * p[r & 3];
  }
  return (double)((int)(r % 32) - 16);
}

static void storeFloat(void *buf, size_t i, weftDataType_t type, double v) {
  switch (type) {
    case weftFloat16: ((uint16_t *)buf)[i] = refFloatToHalf((float)v); break;
    case weftBfloat16: ((uint16_t *)buf)[i] = refFloatToBf16((float)v); break;
    case weftFloat32: ((float *)buf)[i] = (float)v; break;
    default: ((double *)buf)[i] = v; break;
  }
}

static double loadFloat(const void *buf, size_t i, weftDataType_t type) {
  switch (type) {
    case weftFloat16: return refHalfToFloat(((const uint16_t *)buf)[i]);
    case weftBfloat16: return refBf16ToFloat(((const uint16_t *)buf)[i]);
    case weftFloat32: return ((const float *)buf)[i];
    default: return ((const double *)buf)[i];
  }
}

static void storeInt(void *buf, size_t i, weftDataType_t type, uint64_t v) {
  switch (weftTypeSize(type)) {
    case 1: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case 4: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    default: ((uint64_t *)buf)[i] = v; break;
  }
}

static uint64_t loadInt(const void *buf, size_t i, weftDataType_t type) {
  switch (weftTypeSize(type)) {
    case 1: return ((const uint8_t *)buf)[i];
    case 4: return ((const uint32_t *)buf)[i];
    default: return ((const uint64_t *)buf)[i];
  }
}

void fillInput(void *buf, size_t count, weftDataType_t type, weftRedOp_t op, int rank) {
  for (size_t i = 0; i < count; i++) {
    if (weftTypeIsFloat(type)) storeFloat(buf, i, type, floatValue(i, rank, op));
    else storeInt(buf, i, type, rawValue(i, rank));
  }
}

static int isSigned(weftDataType_t t) { return t == weftInt8 || t == weftInt32 || t == weftInt64; }

/* Sign-extends (or zero-extends) a value of the type's width for ordering. */
static int64_t asSigned(uint64_t v, weftDataType_t t) {
  switch (weftTypeSize(t)) {
    case 1: return (int8_t)v;
    case 4: return (int32_t)v;
    default: return (int64_t)v;
  }
}

static uint64_t widthMask(weftDataType_t t) {
  size_t s = weftTypeSize(t);
  return s == 8 ? ~0ULL : (1ULL << (8 * s)) - 1;
}

static uint64_t intExpected(size_t i, weftDataType_t t, weftRedOp_t op, int nranks) {
  uint64_t acc = rawValue(i, 0) & widthMask(t);
  for (int r = 1; r < nranks; r++) {
    uint64_t v = rawValue(i, r) & widthMask(t);
    switch (op) {
      case weftProd: acc *= v; break;
      case weftMax:
        if (isSigned(t) ? asSigned(v, t) > asSigned(acc, t) : v > acc) acc = v;
        break;
      case weftMin:
        if (isSigned(t) ? asSigned(v, t) < asSigned(acc, t) : v < acc) acc = v;
        break;
      default: acc += v; break;
    }
    acc &= widthMask(t);
  }
  return acc;
}

/* The one rounding of an average: the exact sum divided by nranks in the type's compute type
 * (fp32 for fp16 and bf16, lib/reduce.h), then rounded to the type. */
static double avgExpected(double sum, int nranks, weftDataType_t t) {
  if (t == weftFloat64) return sum / nranks;
  float q = (float)sum / (float)nranks; /* sum and nranks are exact in float */
  if (t == weftFloat16) return refHalfToFloat(refFloatToHalf(q));
  if (t == weftBfloat16) return refBf16ToFloat(refFloatToBf16(q));
  return q;
}

/* Every float result is exact (see floatValue): compared with ==, no tolerance. */
static double floatExpected(size_t i, weftDataType_t t, weftRedOp_t op, int nranks) {
  double ref = floatValue(i, 0, op);
  for (int r = 1; r < nranks; r++) {
    double v = floatValue(i, r, op);
    if (op == weftProd) ref *= v;
    else if (op == weftMax) ref = v > ref ? v : ref;
    else if (op == weftMin) ref = v < ref ? v : ref;
    else ref += v;
  }
  return op == weftAvg ? avgExpected(ref, nranks, t) : ref;
}

size_t countWrongFrom(const void *buf, size_t first, size_t count, weftDataType_t type,
                      weftRedOp_t op, int nranks) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++) {
    if (weftTypeIsFloat(type))
      wrong += loadFloat(buf, i, type) != floatExpected(first + i, type, op, nranks);
    else
      wrong += loadInt(buf, i, type) != intExpected(first + i, type, op, nranks);
  }
  return wrong;
}

size_t countWrong(const void *buf, size_t count, weftDataType_t type, weftRedOp_t op, int nranks) {
  return countWrongFrom(buf, 0, count, type, op, nranks);
}

/* First wrong element for the message: index, value, expected. */
static void describeWrong(const void *buf, size_t count, weftDataType_t type, weftRedOp_t op,
                          int nranks, char *out, size_t len) {
  for (size_t i = 0; i < count; i++) {
    if (weftTypeIsFloat(type)) {
      double got = loadFloat(buf, i, type), want = floatExpected(i, type, op, nranks);
      if (got != want) {
        snprintf(out, len, "first at [%zu]: %.17g, expected %.17g", i, got, want);
        return;
      }
    } else if (loadInt(buf, i, type) != intExpected(i, type, op, nranks)) {
      snprintf(out, len, "first at [%zu]: 0x%llx, expected 0x%llx", i,
               (unsigned long long)loadInt(buf, i, type),
               (unsigned long long)intExpected(i, type, op, nranks));
      return;
    }
  }
  snprintf(out, len, "none");
}

long checkAllReduce(weftComm_t comm, int rank, int nranks, size_t count, weftDataType_t type,
                    weftRedOp_t op, int inPlace, void *send, void *recv) {
  fillInput(send, count, type, op, rank);
  if (!inPlace) memset(recv, 0xA5, count * weftTypeSize(type));
  void *out = inPlace ? send : recv;
  weftResult_t rc = weftAllReduce(send, out, count, type, op, comm, NULL);
  if (rc != weftSuccess) {
    fprintf(stderr, "rank %d: AllReduce %zu %s %s failed: %s\n", rank, count,
            weftTypeName(type), weftOpName(op), weftGetLastError(comm));
    return 1;
  }
  size_t wrong = countWrong(out, count, type, op, nranks);
  if (wrong) {
    char first[160];
    describeWrong(out, count, type, op, nranks, first, sizeof first);
    fprintf(stderr, "rank %d/%d WEFT_ALGO=%s: %zu of %zu wrong (%s): %s %s %s\n", rank, nranks,
            getenv("WEFT_ALGO"), wrong, count, first, weftTypeName(type), weftOpName(op),
            inPlace ? "in-place" : "out-of-place");
  }
  return wrong != 0;
}

static size_t maxCountOf(const struct collMatrix *m) {
  size_t maxCount = 0;
  for (int c = 0; c < m->nCounts; c++) maxCount = m->counts[c] > maxCount ? m->counts[c] : maxCount;
  return maxCount;
}

long collMatrixBody(weftComm_t comm, int rank, int nranks, void *arg) {
  const struct collMatrix *m = arg;
  size_t maxCount = maxCountOf(m);
  char *send = malloc(maxCount * 8 + 64), *recv = malloc(maxCount * 8 + 64);
  long failures = 0;
  for (int c = 0; c < m->nCounts; c++)
    for (int t = 0; t < m->nTypes; t++)
      for (int o = 0; o < m->nOps; o++) {
        if (m->ops[o] == weftAvg && !weftTypeIsFloat(m->types[t])) continue;
        for (int inPlace = 0; inPlace < 2; inPlace++) /* odd cases start 8 bytes in: unaligned */
          failures += checkAllReduce(comm, rank, nranks, m->counts[c], m->types[t], m->ops[o],
                                     inPlace, send + 8 * (c & 1), recv);
      }
  free(send);
  free(recv);
  return failures;
}

/* ---- bit-identical results on every rank ---- */

/* Inputs whose sums and products round at every step: full significands over 16 binades. */
static void fillRounding(void *buf, size_t count, weftDataType_t type, weftRedOp_t op, int rank) {
  for (size_t i = 0; i < count; i++) {
    uint64_t r = rawValue(i, rank + 1000);
    double frac = (double)(r >> 11) * 0x1p-53; /* [0, 1), 53 random bits */
    double v = op == weftProd ? 0.75 + frac / 2 : (r & 1 ? -1 : 1) * (1 + frac) * ldexp(1.0, (int)((r >> 1) & 15) - 8);
    storeFloat(buf, i, type, v);
  }
}

struct bitsBoard {
  int nranks, ncases;
  uint64_t hash[]; /* [case][rank] */
};

struct bitsBoard *bitsBoardNew(int nranks, int ncases) {
  size_t bytes = sizeof(struct bitsBoard) + sizeof(uint64_t) * (size_t)nranks * (size_t)ncases;
  struct bitsBoard *b = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (b == MAP_FAILED) return NULL;
  b->nranks = nranks;
  b->ncases = ncases;
  return b;
}

void bitsBoardFree(struct bitsBoard *b) {
  munmap(b, sizeof *b + sizeof(uint64_t) * (size_t)b->nranks * (size_t)b->ncases);
}

static uint64_t fnv1a(const void *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ull;
  return h | 1; /* never 0: 0 means "not reported" */
}

int bitsBoardCheck(const struct bitsBoard *b, const struct collMatrix *m, char *msg, size_t len) {
  int bad = 0;
  size_t o = 0;
  msg[0] = '\0';
  for (int k = 0; k < b->ncases; k++) {
    const uint64_t *h = b->hash + (size_t)k * (size_t)b->nranks;
    int differ = 0;
    for (int r = 0; r < b->nranks; r++) differ |= h[r] == 0 || h[r] != h[0];
    if (!differ) continue;
    bad++;
    /* case k = ((c * nTypes) + t) * nOps + o, as identicalBitsBody numbers them */
    int op = k % m->nOps, t = k / m->nOps % m->nTypes, c = k / m->nOps / m->nTypes;
    if (o < len)
      o += (size_t)snprintf(msg + o, len - o, " [count %zu %s %s:", m->counts[c],
                            weftTypeName(m->types[t]), weftOpName(m->ops[op]));
    for (int r = 0; r < b->nranks && o < len; r++)
      o += (size_t)snprintf(msg + o, len - o, " %s", h[r] == 0 ? "none" : h[r] == h[0] ? "=" : "differs");
    if (o < len) o += (size_t)snprintf(msg + o, len - o, "]");
  }
  return bad;
}

int bitsBoardCases(const struct collMatrix *m) { return m->nCounts * m->nTypes * m->nOps; }

long identicalBitsBody(weftComm_t comm, int rank, int nranks, void *arg) {
  const struct bitsRun *run = arg;
  const struct collMatrix *m = run->matrix;
  size_t maxCount = maxCountOf(m);
  char *send = malloc(maxCount * 8), *recv = malloc(maxCount * 8);
  long failures = 0;
  (void)nranks;
  for (int c = 0, k = 0; c < m->nCounts; c++)
    for (int t = 0; t < m->nTypes; t++)
      for (int o = 0; o < m->nOps; o++, k++) {
        size_t bytes = m->counts[c] * weftTypeSize(m->types[t]);
        fillRounding(send, m->counts[c], m->types[t], m->ops[o], rank);
        weftResult_t rc = weftAllReduce(send, recv, m->counts[c], m->types[t], m->ops[o], comm, NULL);
        if (rc != weftSuccess) {
          fprintf(stderr, "rank %d: AllReduce %zu %s %s failed: %s\n", rank, m->counts[c],
                  weftTypeName(m->types[t]), weftOpName(m->ops[o]), weftGetLastError(comm));
          failures++;
          continue;
        }
        run->board->hash[(size_t)k * (size_t)run->board->nranks + (size_t)rank] = fnv1a(recv, bytes);
      }
  free(send);
  free(recv);
  return failures;
}
