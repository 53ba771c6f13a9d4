/* The data every collective test reduces, and the expected results, computed here in plain C
 * (fp16/bf16/fp8 through tests/common/refconv.c, never through the library's converters). */
#include "harness.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "reduce.h"
#include "refconv.h"

uint64_t testMix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

static uint64_t rawValue(size_t i, int rank) { return testMix(((uint64_t)i << 8) ^ (uint64_t)rank ^ 0x9e37); }

static int isFp8(weftDataType_t t) { return t == weftFloat8e4m3 || t == weftFloat8e5m2; }
static const struct refFp8Format *fp8Format(weftDataType_t t) {
  return t == weftFloat8e4m3 ? &refE4m3 : &refE5m2;
}

/* Float inputs are exact in every float type and so are all their partial results, in any
 * order: integers in [-16, 15] (sums of up to 16 ranks stay within +-256, which bf16's 8-bit
 * significand holds), and for prod +-1/2, +-1, +-2 (products of up to 14 ranks stay within
 * fp16's range). fp8 (3 or 4 significant bits, e4m3 at most 448) needs sparser data: element
 * i of a rank is a value only where (i + rank) % 4 == 0, else 0 (prod: +-1), so up to 16
 * ranks add at most 4 values: integers in [-2, 2] (sums within +-8, which e5m2 holds), and
 * for prod +-1/2, +-1, +-2 (within 2^+-4). So sum, prod, max and min have one right answer,
 * which a reduction that lost or doubled a contribution cannot give. */
static double floatValue(size_t i, int rank, weftRedOp_t op, weftDataType_t t) {
  uint64_t r = rawValue(i, rank);
  int sparse = isFp8(t) && (i + (size_t)rank) % 4 != 0;
  if (op == weftProd) {
    static const double p[] = {0.5, 1.0, 2.0, 1.0};
    return (r & 4 ? -1.0 : 1.0) * (sparse ? 1.0 : p[r & 3]);
  }
  if (isFp8(t)) return sparse ? 0.0 : (double)((int)(r % 5) - 2);
  return (double)((int)(r % 32) - 16);
}

static void storeFloat(void *buf, size_t i, weftDataType_t type, double v) {
  switch (type) {
    case weftFloat16: ((uint16_t *)buf)[i] = refFloatToHalf((float)v); break;
    case weftBfloat16: ((uint16_t *)buf)[i] = refFloatToBf16((float)v); break;
    case weftFloat8e4m3:
    case weftFloat8e5m2: ((uint8_t *)buf)[i] = refFloatToFp8(fp8Format(type), (float)v); break;
    case weftFloat32: ((float *)buf)[i] = (float)v; break;
    default: ((double *)buf)[i] = v; break;
  }
}

static double loadFloat(const void *buf, size_t i, weftDataType_t type) {
  switch (type) {
    case weftFloat16: return refHalfToFloat(((const uint16_t *)buf)[i]);
    case weftBfloat16: return refBf16ToFloat(((const uint16_t *)buf)[i]);
    case weftFloat8e4m3:
    case weftFloat8e5m2: return refFp8ToFloat(fp8Format(type), ((const uint8_t *)buf)[i]);
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

static void computeInput(void *buf, size_t count, weftDataType_t type, weftRedOp_t op, int rank) {
  for (size_t i = 0; i < count; i++) {
    if (weftTypeIsFloat(type)) storeFloat(buf, i, type, floatValue(i, rank, op, type));
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
 * (fp32 for fp16, bf16 and fp8, lib/reduce.h), then rounded to the type. */
static double avgExpected(double sum, int nranks, weftDataType_t t) {
  if (t == weftFloat64) return sum / nranks;
  float q = (float)sum / (float)nranks; /* sum and nranks are exact in float */
  if (t == weftFloat16) return refHalfToFloat(refFloatToHalf(q));
  if (t == weftBfloat16) return refBf16ToFloat(refFloatToBf16(q));
  if (isFp8(t)) return refFp8ToFloat(fp8Format(t), refFloatToFp8(fp8Format(t), q));
  return q;
}

/* Every float result is exact (see floatValue): compared with ==, no tolerance. */
static double floatExpected(size_t i, weftDataType_t t, weftRedOp_t op, int nranks) {
  double ref = floatValue(i, 0, op, t);
  for (int r = 1; r < nranks; r++) {
    double v = floatValue(i, r, op, t);
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

/* Inputs and expected AllReduce results, computed once per case and shared by every algorithm
 * and rank of a process, and by the processes forked after collMatrixPrepare: the reference
 * costs a hash and a conversion per element (nranks of them for a result) on every rank and
 * every run, which made making and checking data, not the collective, most of the matrix's
 * time. Only the all-equal answer is taken from a cached result; any difference is counted and
 * described element by element, as before. */
struct cachedData {
  size_t count;
  weftDataType_t type;
  weftRedOp_t op;
  int rank;   /* whose input; -1: the result */
  int nranks; /* the result's rank count; 0 for an input */
  struct cachedData *next;
  unsigned char bits[];
};
static struct cachedData *cachedDataList;
static pthread_mutex_t cachedDataLock = PTHREAD_MUTEX_INITIALIZER;

static void computeData(struct cachedData *d) {
  if (d->rank >= 0) {
    computeInput(d->bits, d->count, d->type, d->op, d->rank);
    return;
  }
  for (size_t i = 0; i < d->count; i++) {
    if (weftTypeIsFloat(d->type)) storeFloat(d->bits, i, d->type, floatExpected(i, d->type, d->op, d->nranks));
    else storeInt(d->bits, i, d->type, intExpected(i, d->type, d->op, d->nranks));
  }
}

/* The case's bytes (NULL when out of memory: the caller computes them itself). */
static const void *cachedBits(size_t count, weftDataType_t type, weftRedOp_t op, int rank,
                              int nranks) {
  pthread_mutex_lock(&cachedDataLock);
  struct cachedData *d = cachedDataList;
  while (d && (d->count != count || d->type != type || d->op != op || d->rank != rank ||
               d->nranks != nranks))
    d = d->next;
  if (d == NULL && (d = malloc(sizeof *d + count * weftTypeSize(type))) != NULL) {
    *d = (struct cachedData){count, type, op, rank, nranks, cachedDataList};
    computeData(d);
    cachedDataList = d;
  }
  pthread_mutex_unlock(&cachedDataLock);
  return d ? d->bits : NULL;
}

void fillInput(void *buf, size_t count, weftDataType_t type, weftRedOp_t op, int rank) {
  const void *input = count ? cachedBits(count, type, op, rank, 0) : NULL;
  if (input) memcpy(buf, input, count * weftTypeSize(type));
  else computeInput(buf, count, type, op, rank);
}

void patternPrepare(size_t count, weftDataType_t type, weftRedOp_t op, int nranks) {
  if (count == 0) return;
  cachedBits(count, type, op, -1, nranks);
  for (int r = 0; r < nranks; r++) cachedBits(count, type, op, r, 0);
}

const void *expectedResult(size_t count, weftDataType_t type, weftRedOp_t op, int nranks) {
  return count ? cachedBits(count, type, op, -1, nranks) : NULL;
}

void collMatrixPrepare(const struct collMatrix *m, int nranks) {
  for (int c = 0; c < m->nCounts; c++)
    for (int t = 0; t < m->nTypes; t++)
      for (int o = 0; o < m->nOps; o++) patternPrepare(m->counts[c], m->types[t], m->ops[o], nranks);
}

size_t countWrong(const void *buf, size_t count, weftDataType_t type, weftRedOp_t op, int nranks) {
  const void *want = expectedResult(count, type, op, nranks);
  if (want && memcmp(buf, want, count * weftTypeSize(type)) == 0) return 0;
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

double roundingInput(size_t i, int rank, weftRedOp_t op) {
  uint64_t r = rawValue(i, rank + 1000);
  double frac = (double)(r >> 11) * 0x1p-53; /* [0, 1), 53 random bits */
  if (op == weftProd) return 0.75 + frac / 2;
  return (r & 1 ? -1 : 1) * (1 + frac) * ldexp(1.0, (int)((r >> 1) & 15) - 8);
}

void fillRoundingFrom(void *buf, size_t first, size_t count, weftDataType_t type, weftRedOp_t op,
                      int rank) {
  for (size_t i = 0; i < count; i++) storeFloat(buf, i, type, roundingInput(first + i, rank, op));
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
        fillRoundingFrom(send, 0, m->counts[c], m->types[t], m->ops[o], rank);
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

/* ---- PreMulSum: sum over ranks of round(scalar * input) ----
 *
 * Float cases have one right answer, as above: every sum of rounded products they make is
 * exact in the type, so the order of the sum cannot matter (up to 16 ranks):
 *  - PREMUL_DYADIC, scalar -1.5: even elements: a value in {-1, 0, 1} on ranks where
 *    (i / 2 + rank) % 4 == 0, else 0 (products +-1.5, at most 4 of them: exact even in e5m2);
 *    odd elements: one rank, (i / 2) % nranks, holds an arbitrary finite value of the type
 *    (any exponent, any mantissa), whose product with -1.5 rounds (or overflows: Inf, or for
 *    fp8 the largest finite), the others 0.
 *  - PREMUL_WITNESS, scalar 1 + u (u the type's epsilon, 2^(1 - significand bits)): even
 *    elements as the odd ones above; odd elements: rank 0 holds 1 + u and rank 1 holds -1, the
 *    others 0, so the result is round(1 + 2u + u^2) - (1 + u) = u when each product is rounded
 *    to the type before the sum (as NCCL does), but u + u^2 (exact in the type) when the
 *    products were kept wider: the case tells the two apart.
 * Integers: every rank a random value, the scalar random (DYADIC) or all ones (WITNESS: -1, or
 * the largest unsigned), products and sums modulo 2^bits (two's complement for signed). */

static int significandBits(weftDataType_t t) {
  switch (t) {
    case weftFloat16: return 11;
    case weftBfloat16: return 8;
    case weftFloat32: return 24;
    case weftFloat8e4m3: return 4;
    case weftFloat8e5m2: return 3;
    default: return 53;
  }
}

/* Raw bits of an arbitrary finite value of a float type (subnormals included). */
static void storeAnyFinite(void *buf, size_t i, weftDataType_t t, uint64_t r) {
  uint64_t s = r >> 63;
  switch (t) {
    case weftFloat16: ((uint16_t *)buf)[i] = (uint16_t)(s << 15 | (r % 31) << 10 | ((r >> 8) & 0x3ff)); break;
    case weftBfloat16: ((uint16_t *)buf)[i] = (uint16_t)(s << 15 | (r % 255) << 7 | ((r >> 8) & 0x7f)); break;
    case weftFloat32: ((uint32_t *)buf)[i] = (uint32_t)(s << 31 | (r % 255) << 23 | ((r >> 8) & 0x7fffff)); break;
    case weftFloat8e4m3: { /* exponent 15 is finite too, but for 0x7f */
      uint8_t c = (uint8_t)(s << 7 | (r % 16) << 3 | ((r >> 8) & 7));
      ((uint8_t *)buf)[i] = (c & 0x7f) == 0x7f ? c - 1 : c;
      break;
    }
    case weftFloat8e5m2: ((uint8_t *)buf)[i] = (uint8_t)(s << 7 | (r % 31) << 2 | ((r >> 8) & 3)); break;
    default: ((uint64_t *)buf)[i] = s << 63 | (r % 2047) << 52 | (testMix(r) & 0xfffffffffffffull); break;
  }
}

void premulScalar(weftDataType_t t, enum premulKind kind, void *scalar) {
  if (!weftTypeIsFloat(t)) {
    storeInt(scalar, 0, t, kind == PREMUL_DYADIC ? testMix(0x5ca1ab1e) : ~0ULL);
    return;
  }
  storeFloat(scalar, 0, t, kind == PREMUL_DYADIC ? -1.5 : 1.0 + ldexp(1.0, 1 - significandBits(t)));
}

/* Rank's element i of the input, stored at buf[at]. */
static void premulInput(void *buf, size_t at, size_t i, weftDataType_t t, enum premulKind kind,
                        int rank, int nranks) {
  uint64_t r = rawValue(i, rank + 7000);
  if (!weftTypeIsFloat(t)) {
    storeInt(buf, at, t, r);
    return;
  }
  size_t k = i / 2;
  int arbitrary = kind == PREMUL_DYADIC ? (int)(i & 1) : !(i & 1);
  if (arbitrary) {
    if (rank == (int)(k % (size_t)nranks)) storeAnyFinite(buf, at, t, rawValue(k, 7777));
    else storeFloat(buf, at, t, 0.0);
  } else if (kind == PREMUL_DYADIC) {
    storeFloat(buf, at, t, (k + (size_t)rank) % 4 == 0 ? (double)((int)(r % 3) - 1) : 0.0);
  } else {
    double onePlusU = 1.0 + ldexp(1.0, 1 - significandBits(t));
    storeFloat(buf, at, t, rank == 0 ? onePlusU : rank == 1 ? -1.0 : 0.0);
  }
}

void fillPreMulInput(void *buf, size_t count, weftDataType_t t, enum premulKind kind, int rank,
                     int nranks) {
  for (size_t i = 0; i < count; i++) premulInput(buf, i, i, t, kind, rank, nranks);
}

/* round(s * x) in type t: the product of two values of t is exact in double (at most 2 x 24
 * significant bits) except for fp64, where it is the IEEE product itself; storing it rounds
 * once (fp16, bf16, fp8 through a float, which holds the product exactly too). */
static double roundedProduct(double s, double x, weftDataType_t t) {
  unsigned char one[8];
  storeFloat(one, 0, t, s * x);
  return loadFloat(one, 0, t);
}

/* Whether buf[at] differs from element i of the result. */
static int premulWrongAt(const void *buf, size_t at, size_t i, weftDataType_t t,
                         enum premulKind kind, int nranks, const void *scalar) {
  unsigned char x[8];
  if (!weftTypeIsFloat(t)) {
    uint64_t s = loadInt(scalar, 0, t), acc = 0;
    for (int r = 0; r < nranks; r++) {
      premulInput(x, 0, i, t, kind, r, nranks);
      acc += s * loadInt(x, 0, t); /* modulo 2^64, then the type's width */
    }
    return loadInt(buf, at, t) != (acc & widthMask(t));
  }
  double s = loadFloat(scalar, 0, t), want = 0;
  for (int r = 0; r < nranks; r++) {
    premulInput(x, 0, i, t, kind, r, nranks);
    want += roundedProduct(s, loadFloat(x, 0, t), t); /* exact: see above */
  }
  return loadFloat(buf, at, t) != want;
}

size_t countWrongPreMul(const void *buf, size_t first, size_t count, weftDataType_t t,
                        enum premulKind kind, int nranks, const void *scalar, char *what,
                        size_t len) {
  size_t wrong = 0;
  for (size_t i = 0; i < count; i++) {
    if (!premulWrongAt(buf, i, first + i, t, kind, nranks, scalar)) continue;
    if (wrong++ == 0 && what != NULL) {
      unsigned char got[8] = {0};
      memcpy(got, (const char *)buf + i * weftTypeSize(t), weftTypeSize(t));
      uint64_t bits;
      memcpy(&bits, got, 8);
      snprintf(what, len, "first at [%zu]: bits 0x%llx (%.17g)", first + i,
               (unsigned long long)bits, weftTypeIsFloat(t) ? loadFloat(got, 0, t) : 0.0);
    }
  }
  return wrong;
}
