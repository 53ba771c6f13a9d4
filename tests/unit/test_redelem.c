/* Unit tests of lib/redelem.h, the element functions the CUDA kernels run
 * (devices/cuda/cuda_reduce.cu): called from C one element at a time, as a kernel thread calls
 * them (weftElemOp, then tag_apply), they give the bits of the host's weftReduceApply /
 * weftReduceFinal / weftReduceScale, for every type and op, over inputs made of the corner
 * cases of each type (NaNs with payloads, +-0, infinities, denormals, the largest and smallest
 * values, wrap-around) paired with each other, and random values.
 *
 * The host reductions run whole vectors through their own SIMD code (lib/reduce.c) and only
 * the tails through these functions, so each kernel set is an oracle for them that shares no
 * code with them; the sets this CPU lacks are skipped. Where every set uses the element
 * function itself (integer Avg) and for the conversions of the portable set, references
 * written here and in tests/common/refconv.c, independent of lib/, take that role. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caps.h"
#include "redelem.h"
#include "reduce.h"
#include "refconv.h"

TestSuite(redelem, .timeout = 120);

/* ---- Inputs ------------------------------------------------------------------------------ */

/* Corner cases per type, as raw little-endian bits. */
static const uint64_t intCorners[] = {0, 1, 2, 3, 7, 0x7f, 0x80, 0xff, 0x7fff, 0x8000, 0xffff,
                                      0x7fffffff, 0x80000000, 0xfffffffe, 0xffffffff,
                                      0x7fffffffffffffff, 0x8000000000000000,
                                      0xfffffffffffffffe, 0xffffffffffffffff, 0x123456789abcdef0};
static const uint64_t f16Corners[] = {0x7e00, 0xfe00, 0x7d55, 0x7e01, 0x7c00, 0xfc00, 0x0000,
                                      0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0xfbff,
                                      0x3c00, 0xbc00, 0x3c01, 0x4200, 0x7800};
static const uint64_t bf16Corners[] = {0x7fc0, 0xffc0, 0x7f81, 0x7fc1, 0x7f80, 0xff80, 0x0000,
                                       0x8000, 0x0001, 0x807f, 0x0080, 0x7f7f, 0xff7f, 0x3f80,
                                       0xbf80, 0x3f81, 0x4040, 0x7f00};
static const uint64_t f32Corners[] = {0x7fc00000, 0xffc00000, 0x7f800001, 0x7fc12345, 0x7f800000,
                                      0xff800000, 0, 0x80000000, 1, 0x807fffff, 0x00800000,
                                      0x7f7fffff, 0xff7fffff, 0x3f800000, 0xbf800000,
                                      0x3f800001, 0x40400000, 0x7f000000, 0x00000003};
static const uint64_t f64Corners[] = {
    0x7ff8000000000000, 0xfff8000000000000, 0x7ff0000000000001, 0x7ff8000000012345,
    0x7ff0000000000000, 0xfff0000000000000, 0, 0x8000000000000000, 1, 0x800fffffffffffff,
    0x0010000000000000, 0x7fefffffffffffff, 0xffefffffffffffff, 0x3ff0000000000000,
    0xbff0000000000000, 0x3ff0000000000001, 0x4008000000000000, 0x7fe0000000000000};

struct corners {
  const uint64_t *v;
  size_t n;
};
#define CORNERS(a) ((struct corners){a, sizeof a / sizeof a[0]})

static struct corners cornersOf(weftDataType_t t) {
  switch (t) {
    case weftFloat16: return CORNERS(f16Corners);
    case weftBfloat16: return CORNERS(bf16Corners);
    case weftFloat32: return CORNERS(f32Corners);
    case weftFloat64: return CORNERS(f64Corners);
    default: return CORNERS(intCorners); /* truncated to the type: its extremes, -1, -2 ... */
  }
}

static uint64_t rngState;
static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (rngState += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t ld(const void *p, size_t i, size_t sz) {
  uint64_t v = 0;
  memcpy(&v, (const char *)p + i * sz, sz);
  return v;
}
static void st(void *p, size_t i, size_t sz, uint64_t v) { memcpy((char *)p + i * sz, &v, sz); }

/* Random finite values whose sums and products round, sometimes with a corner case. */
static uint64_t randomValue(weftDataType_t t) {
  uint64_t r = rnd(), s = r >> 63;
  struct corners c = cornersOf(t);
  if ((r & 7) == 0) return c.v[(r >> 8) % c.n];
  switch (t) {
    case weftFloat16: return s << 15 | ((8 + (r >> 10) % 14) << 10) | (r & 0x3ff);
    case weftBfloat16: return s << 15 | ((110 + (r >> 7) % 30) << 7) | (r & 0x7f);
    case weftFloat32: return s << 31 | ((110 + (r >> 23) % 30) << 23) | (r & 0x7fffff);
    case weftFloat64: return s << 63 | ((1000 + (r >> 52) % 40) << 52) | (r & 0xfffffffffffffull);
    default: return r;
  }
}

/* a and b: every pair of corner cases (every pair of codes for fp8), then random values,
 * count elements in all. */
struct inputs {
  void *a, *b;
  size_t count;
};
#define RANDOM_COUNT 4099 /* not a multiple of any vector width: the tails run too */

static struct inputs makeInputs(weftDataType_t t) {
  size_t sz = weftTypeSize(t);
  int fp8 = t == weftFloat8e4m3 || t == weftFloat8e5m2;
  struct corners c = cornersOf(t);
  size_t pairs = fp8 ? 256 * 256 : c.n * c.n;
  struct inputs in = {malloc((pairs + RANDOM_COUNT) * sz), malloc((pairs + RANDOM_COUNT) * sz),
                      pairs + RANDOM_COUNT};
  cr_assert(in.a && in.b);
  for (size_t i = 0; i < pairs; i++) {
    st(in.a, i, sz, fp8 ? i / 256 : c.v[i / c.n]);
    st(in.b, i, sz, fp8 ? i % 256 : c.v[i % c.n]);
  }
  rngState = 1000 + (uint64_t)t;
  for (size_t i = pairs; i < in.count; i++) {
    st(in.a, i, sz, fp8 ? rnd() & 0xff : randomValue(t));
    st(in.b, i, sz, fp8 ? rnd() & 0xff : randomValue(t));
  }
  return in;
}

/* ---- One element, as a kernel thread computes it ----------------------------------------- */

#define AS(T, v) ((T)(v)) /* integer bits to the type: wraps, as gcc and clang define it */
static float f32Of(uint64_t v) { float f; uint32_t u = (uint32_t)v; memcpy(&f, &u, 4); return f; }
static uint64_t f32Bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static double f64Of(uint64_t v) { double d; memcpy(&d, &v, 8); return d; }
static uint64_t f64Bits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }

/* elemOp: weftSum .. weftAvg (weftElemOp's). The result's bits, zero-extended. */
static uint64_t applyElement(weftDataType_t t, uint64_t x, uint64_t y, int elemOp, int n) {
  switch (t) {
    case weftInt8: return (uint8_t)i8_apply(AS(int8_t, x), AS(int8_t, y), elemOp, n);
    case weftUint8: return u8_apply(AS(uint8_t, x), AS(uint8_t, y), elemOp, n);
    case weftInt32: return (uint32_t)i32_apply(AS(int32_t, x), AS(int32_t, y), elemOp, n);
    case weftUint32: return u32_apply(AS(uint32_t, x), AS(uint32_t, y), elemOp, n);
    case weftInt64: return (uint64_t)i64_apply(AS(int64_t, x), AS(int64_t, y), elemOp, n);
    case weftUint64: return u64_apply(x, y, elemOp, n);
    case weftFloat16: return f16_apply(AS(uint16_t, x), AS(uint16_t, y), elemOp, n);
    case weftFloat32: return f32Bits(f32_apply(f32Of(x), f32Of(y), elemOp, n));
    case weftFloat64: return f64Bits(f64_apply(f64Of(x), f64Of(y), elemOp, n));
    case weftBfloat16: return bf16_apply(AS(uint16_t, x), AS(uint16_t, y), elemOp, n);
    case weftFloat8e4m3: return e4m3_apply(AS(uint8_t, x), AS(uint8_t, y), elemOp, n);
    case weftFloat8e5m2: return e5m2_apply(AS(uint8_t, x), AS(uint8_t, y), elemOp, n);
    default: cr_assert_fail("type %d", (int)t); return 0;
  }
}

/* A reduction step as the kernel runs it: final = -1 is a scaling by *scalar (b unused). */
static void elementwise(void *dst, const struct inputs *in, weftDataType_t t, int op, int final,
                        int nranks, const void *scalar) {
  size_t sz = weftTypeSize(t);
  int elemOp = scalar ? (int)weftProd : weftElemOp(op, final);
  int n = final == 1 && !scalar ? nranks : 1;
  uint64_t s = scalar ? ld(scalar, 0, sz) : 0;
  for (size_t i = 0; i < in->count; i++)
    st(dst, i, sz, applyElement(t, ld(in->a, i, sz), scalar ? s : ld(in->b, i, sz), elemOp, n));
}

static void expectSame(const void *got, const void *want, const struct inputs *in,
                       weftDataType_t t, const char *what) {
  size_t sz = weftTypeSize(t);
  if (memcmp(got, want, in->count * sz) == 0) return;
  for (size_t i = 0; i < in->count; i++)
    if (ld(got, i, sz) != ld(want, i, sz))
      cr_assert_fail("%s %s, element %zu (a 0x%llx, b 0x%llx): element functions 0x%llx, "
                     "expected 0x%llx", what, weftTypeName(t), i,
                     (unsigned long long)ld(in->a, i, sz), (unsigned long long)ld(in->b, i, sz),
                     (unsigned long long)ld(got, i, sz), (unsigned long long)ld(want, i, sz));
}

/* ---- Against the host reductions, per kernel set ----------------------------------------- */

static const int allOps[] = {weftSum, weftProd, weftMax, weftMin, weftAvg, WEFT_OP_PREMULSUM};
#define NOPS (sizeof allOps / sizeof allOps[0])
static const int finalRanks[] = {1, 3, 8};

static void checkType(weftDataType_t t, const char *set) {
  struct inputs in = makeInputs(t);
  size_t sz = weftTypeSize(t);
  unsigned char *got = malloc(in.count * sz), *want = malloc(in.count * sz);
  cr_assert(got && want);
  char what[96];
  for (size_t o = 0; o < NOPS; o++) {
    weftRedOp_t op = (weftRedOp_t)allOps[o];
    weftReduceApply(want, in.a, in.b, in.count, t, op);
    elementwise(got, &in, t, op, 0, 1, NULL);
    snprintf(what, sizeof what, "[%s] weftReduceApply %s", set, weftOpName(op));
    expectSame(got, want, &in, t, what);
    for (size_t r = 0; r < sizeof finalRanks / sizeof finalRanks[0]; r++) {
      weftReduceFinal(want, in.a, in.b, in.count, t, op, finalRanks[r]);
      elementwise(got, &in, t, op, 1, finalRanks[r], NULL);
      snprintf(what, sizeof what, "[%s] weftReduceFinal %s nranks=%d", set, weftOpName(op),
               finalRanks[r]);
      expectSame(got, want, &in, t, what);
    }
  }
  /* Scaling by each corner case (a few codes for fp8). */
  struct corners c = cornersOf(t);
  for (size_t k = 0; k < c.n; k++) {
    uint64_t scalar = t == weftFloat8e4m3 || t == weftFloat8e5m2 ? (k * 37) & 0xff : c.v[k];
    weftReduceScale(want, in.a, &scalar, in.count, t);
    elementwise(got, &in, t, weftProd, -1, 1, &scalar);
    snprintf(what, sizeof what, "[%s] weftReduceScale by 0x%llx", set, (unsigned long long)scalar);
    expectSame(got, want, &in, t, what);
  }
  free(got);
  free(want);
  free(in.a);
  free(in.b);
}

static void checkAgainstSet(const char *level, const char *name) {
  if (strcmp(name, "portable") != 0) SKIP_UNLESS(name);
  setenv("WEFT_SIMD", level, 1); /* read once per process; Criterion forks each test */
  cr_assert_str_eq(weftReduceKernelName(), name, "WEFT_SIMD=%s on a CPU that has %s", level, name);
  for (int t = 0; t < weftNumTypes; t++) checkType((weftDataType_t)t, name);
}
Test(redelem, host_reductions_portable) { checkAgainstSet("0", "portable"); }
Test(redelem, host_reductions_avx2) { checkAgainstSet("2", "avx2"); }
Test(redelem, host_reductions_avx512) { checkAgainstSet("512", "avx512"); }

/* ---- Against references of this file ----------------------------------------------------- */

static int isSignedInt(weftDataType_t t) {
  return t == weftInt8 || t == weftInt32 || t == weftInt64;
}
static int64_t signExtend(uint64_t v, size_t sz) {
  if (sz == 8) return (int64_t)v;
  uint64_t m = 1ull << (8 * sz - 1);
  v &= (m << 1) - 1;
  return (int64_t)(v ^ m) - (int64_t)m;
}

/* Integer Avg, the one op every host kernel set computes through the element function: the
 * sum wraps in the type, then divides truncating toward zero, here in 64-bit arithmetic. */
Test(redelem, integer_avg_reference) {
  static const int ranks[] = {1, 2, 3, 7, 8, 127, 128, 255, 256, 1000};
  for (int t = 0; t < weftNumTypes; t++) {
    if (weftTypeIsFloat((weftDataType_t)t)) continue;
    size_t sz = weftTypeSize((weftDataType_t)t);
    uint64_t mask = sz == 8 ? ~0ull : (1ull << (8 * sz)) - 1;
    struct inputs in = makeInputs((weftDataType_t)t);
    for (size_t r = 0; r < sizeof ranks / sizeof ranks[0]; r++) {
      for (size_t i = 0; i < in.count; i++) {
        uint64_t x = ld(in.a, i, sz), y = ld(in.b, i, sz), s = (x + y) & mask, want;
        want = isSignedInt((weftDataType_t)t) ? (uint64_t)(signExtend(s, sz) / ranks[r]) & mask
                                               : s / (uint64_t)ranks[r];
        uint64_t got = applyElement((weftDataType_t)t, x, y, weftAvg, ranks[r]);
        cr_assert_eq(got, want, "%s avg of 0x%llx and 0x%llx over %d ranks: 0x%llx, expected 0x%llx",
                     weftTypeName((weftDataType_t)t), (unsigned long long)x, (unsigned long long)y,
                     ranks[r], (unsigned long long)got, (unsigned long long)want);
      }
    }
    free(in.a);
    free(in.b);
  }
}

/* fp16, bf16 and fp8: each op computes in fp32 between conversions, here refconv.c's, which
 * share no code with lowfloat.h (the portable set runs fp16 and bf16 through the element
 * functions; an AVX set would hide nothing, but the CPU may lack it). */
static uint64_t narrowReference(weftDataType_t t, uint64_t x, uint64_t y, int elemOp, int n) {
  switch (t) {
    case weftFloat16:
      return refFloatToHalf(f32_apply(refHalfToFloat((uint16_t)x), refHalfToFloat((uint16_t)y), elemOp, n));
    case weftBfloat16:
      return refFloatToBf16(f32_apply(refBf16ToFloat((uint16_t)x), refBf16ToFloat((uint16_t)y), elemOp, n));
    default: {
      const struct refFp8Format *f = t == weftFloat8e4m3 ? &refE4m3 : &refE5m2;
      return refFloatToFp8(f, f32_apply(refFp8ToFloat(f, (uint8_t)x), refFp8ToFloat(f, (uint8_t)y), elemOp, n));
    }
  }
}

Test(redelem, narrow_types_reference) {
  static const weftDataType_t narrow[] = {weftFloat16, weftBfloat16, weftFloat8e4m3, weftFloat8e5m2};
  for (size_t k = 0; k < sizeof narrow / sizeof narrow[0]; k++) {
    weftDataType_t t = narrow[k];
    size_t sz = weftTypeSize(t);
    struct inputs in = makeInputs(t);
    /* fp8's exhaustive reference search is slow: every pair, but not every op twice. */
    for (int op = weftSum; op <= weftAvg; op++) {
      int n = op == weftAvg ? 3 : 1;
      for (size_t i = 0; i < in.count; i++) {
        uint64_t x = ld(in.a, i, sz), y = ld(in.b, i, sz);
        uint64_t got = applyElement(t, x, y, op, n), want = narrowReference(t, x, y, op, n);
        cr_assert_eq(got, want, "%s %s of 0x%llx and 0x%llx: 0x%llx, expected 0x%llx",
                     weftTypeName(t), weftOpName((weftRedOp_t)op), (unsigned long long)x,
                     (unsigned long long)y, (unsigned long long)got, (unsigned long long)want);
      }
    }
    free(in.a);
    free(in.b);
  }
}

/* The op mapping the kernels share with the host (weftElemOp). */
Test(redelem, elem_op_mapping) {
  cr_assert_eq(weftElemOp(weftSum, 0), weftSum);
  cr_assert_eq(weftElemOp(weftProd, 1), weftProd);
  cr_assert_eq(weftElemOp(weftMax, 0), weftMax);
  cr_assert_eq(weftElemOp(weftMin, 1), weftMin);
  cr_assert_eq(weftElemOp(weftAvg, 0), weftSum, "Avg sums until the final step");
  cr_assert_eq(weftElemOp(weftAvg, 1), weftAvg);
  cr_assert_eq(weftElemOp(WEFT_OP_PREMULSUM, 0), weftSum);
  cr_assert_eq(weftElemOp(WEFT_OP_PREMULSUM, 1), weftSum);
}
