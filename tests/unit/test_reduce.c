/* Unit tests of lib/reduce.c: every type x op against a reference written here (independently
 * of the library's kernels), wrap-around and rounding corner cases, aliasing, and bit-identical
 * results from every kernel set. WEFT_SIMD is read once per process; Criterion runs each test in
 * its own process, so a test may set it before its first reduction. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "caps.h"
#include "reduce.h"
#include "refconv.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define TEST_X86 1
#else
#define TEST_X86 0
#endif

/* A hang fails the test (tests/run-all.sh requires a timeout on every test). */
TestSuite(reduce, .timeout = 120);

static const size_t lengths[] = {0, 1, 7, 31, 33, 1000003};
#define NLENGTHS (sizeof lengths / sizeof lengths[0])

/* ---- Helpers ---------------------------------------------------------------------------- */

static uint64_t rngState;
static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (rngState += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static int isSigned(weftDataType_t t) { return t == weftInt8 || t == weftInt32 || t == weftInt64; }

/* Raw element bits (little-endian hosts, as the library's users). */
static uint64_t ld(const void *p, size_t i, size_t sz) {
  uint64_t v = 0;
  memcpy(&v, (const char *)p + i * sz, sz);
  return v;
}
static void st(void *p, size_t i, size_t sz, uint64_t v) { memcpy((char *)p + i * sz, &v, sz); }
static int64_t sext(uint64_t v, size_t sz) {
  if (sz == 8) return (int64_t)v;
  uint64_t m = 1ull << (8 * sz - 1);
  v &= (m << 1) - 1;
  return (int64_t)(v ^ m) - (int64_t)m;
}

/* Special values: NaNs (quiet, signalling, both signs, payloads), infinities, zeros,
 * subnormals, the largest finite values; for integers the extremes. */
static const uint64_t specials[][13] = {
    [weftFloat16] = {0x7e00, 0xfe00, 0x7d55, 0x7e01, 0x7c00, 0xfc00, 0x0000, 0x8000, 0x0001,
                     0x8001, 0x03ff, 0x7bff, 0xfbff},
    [weftBfloat16] = {0x7fc0, 0xffc0, 0x7f81, 0x7fc1, 0x7f80, 0xff80, 0x0000, 0x8000, 0x0001,
                      0x807f, 0x0080, 0x7f7f, 0xff7f},
    [weftFloat32] = {0x7fc00000, 0xffc00000, 0x7f800001, 0x7fc12345, 0x7f800000, 0xff800000, 0,
                     0x80000000, 1, 0x807fffff, 0x00800000, 0x7f7fffff, 0xff7fffff},
    [weftFloat64] = {0x7ff8000000000000, 0xfff8000000000000, 0x7ff0000000000001,
                     0x7ff8000000012345, 0x7ff0000000000000, 0xfff0000000000000, 0,
                     0x8000000000000000, 1, 0x800fffffffffffff, 0x0010000000000000,
                     0x7fefffffffffffff, 0xffefffffffffffff},
    /* e4m3: NaN (twice, so two NaN operands are common), +-largest, +-0, subnormals, the
     * smallest normal, 1, 240 */
    [weftFloat8e4m3] = {0x7f, 0xff, 0x7f, 0xff, 0x7e, 0xfe, 0x00, 0x80, 0x01, 0x81, 0x07, 0x08,
                        0x77},
    /* e5m2: NaNs (quiet, signalling), +-Inf, +-0, subnormals, +-largest, 1 */
    [weftFloat8e5m2] = {0x7e, 0xfe, 0x7d, 0x7f, 0x7c, 0xfc, 0x00, 0x80, 0x01, 0x81, 0x03, 0x7b,
                        0x3c},
};

/* Random contents: 1 in 8 elements a special value (so that, e.g., both operands are NaN
 * often), 1 in 16 random bits, the rest ordinary values whose sums and products round. */
static void fillRandom(void *buf, size_t n, weftDataType_t t) {
  size_t sz = weftTypeSize(t);
  uint64_t top = 1ull << (8 * sz - 1);
  uint64_t intSpecials[] = {0, 1, top - 1, top, top | (top - 1)}; /* 0, 1, MAX, MIN, -1 */
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rnd(), v = r, s = (r >> 59) & 1, kind = r >> 60;
    if (kind < 2) {
      v = weftTypeIsFloat(t) ? specials[t][(r >> 32) % 13] : intSpecials[(r >> 32) % 5];
    } else if (kind > 2) {
      switch (t) {
        case weftFloat16: v = s << 15 | ((8 + (r >> 10) % 14) << 10) | (r & 0x3ff); break;
        case weftBfloat16: v = s << 15 | ((110 + (r >> 7) % 30) << 7) | (r & 0x7f); break;
        case weftFloat32: v = s << 31 | ((110 + (r >> 23) % 30) << 23) | (r & 0x7fffff); break;
        case weftFloat64: v = s << 63 | ((1000 + (r >> 52) % 40) << 52) | (r & 0xfffffffffffffull); break;
        case weftFloat8e4m3: v = s << 7 | (1 + (r >> 8) % 14) << 3 | (r & 7); break;
        case weftFloat8e5m2: v = s << 7 | (1 + (r >> 8) % 29) << 2 | (r & 3); break;
        default: break;
      }
    }
    st(buf, i, sz, v);
  }
}

enum mode { REDUCE, FINAL, COPY };
static const char *modeName[] = {"weftReduce", "weftReduceFinal", "weftReduceFinalCopy"};

static void runLib(enum mode m, void *dst, const void *a, const void *b, size_t n,
                   weftDataType_t t, weftRedOp_t op, int nranks) {
  if (m == REDUCE) weftReduceApply(dst, a, b, n, t, op);
  else if (m == FINAL) weftReduceFinal(dst, a, b, n, t, op, nranks);
  else weftReduceFinalCopy(dst, a, n, t, op, nranks);
}

/* ---- Reference, element by element ------------------------------------------------------ */

/* NaN-propagating max/min (the library's documented choice), written another way. */
static float refMaxF(float a, float b) { return isnan(a) ? a : isnan(b) ? b : (a > b ? a : b); }
static float refMinF(float a, float b) { return isnan(a) ? a : isnan(b) ? b : (a < b ? a : b); }
static double refMaxD(double a, double b) { return isnan(a) ? a : isnan(b) ? b : (a > b ? a : b); }
static double refMinD(double a, double b) { return isnan(a) ? a : isnan(b) ? b : (a < b ? a : b); }

/* Sum and product of two NaNs: a's, made quiet (the library's documented choice). */
static float quietF(float a) { return bitsf(fbits(a) | 0x400000u); }
static double quietD(double a) {
  uint64_t u;
  memcpy(&u, &a, 8);
  u |= 1ull << 51;
  memcpy(&a, &u, 8);
  return a;
}
static float refF32(enum mode m, weftRedOp_t op, float a, float b, int nranks) {
  if (m == COPY) return op == weftAvg ? a / (float)nranks : a;
  switch (op) {
    case weftSum: return isnan(a) ? quietF(a) : a + b;
    case weftProd: return isnan(a) ? quietF(a) : a * b;
    case weftMax: return refMaxF(a, b);
    case weftMin: return refMinF(a, b);
    default: {
      float s = isnan(a) ? quietF(a) : a + b;
      return m == FINAL ? s / (float)nranks : s;
    }
  }
}
static double refF64(enum mode m, weftRedOp_t op, double a, double b, int nranks) {
  if (m == COPY) return op == weftAvg ? a / (double)nranks : a;
  switch (op) {
    case weftSum: return isnan(a) ? quietD(a) : a + b;
    case weftProd: return isnan(a) ? quietD(a) : a * b;
    case weftMax: return refMaxD(a, b);
    case weftMin: return refMinD(a, b);
    default: {
      double s = isnan(a) ? quietD(a) : a + b;
      return m == FINAL ? s / (double)nranks : s;
    }
  }
}
static uint64_t refInt(enum mode m, weftRedOp_t op, weftDataType_t t, uint64_t a, uint64_t b,
                       int nranks) {
  size_t sz = weftTypeSize(t);
  int sgn = isSigned(t);
  uint64_t mask = sz == 8 ? ~0ull : (1ull << (8 * sz)) - 1;
  a &= mask;
  b &= mask;
  if (m == COPY) {
    if (op != weftAvg) return a;
    return sgn ? (uint64_t)(sext(a, sz) / nranks) : a / (uint64_t)nranks;
  }
  switch (op) {
    case weftSum: return a + b;
    case weftProd: return a * b;
    case weftMax: return sgn ? (sext(a, sz) > sext(b, sz) ? a : b) : (a > b ? a : b);
    case weftMin: return sgn ? (sext(a, sz) < sext(b, sz) ? a : b) : (a < b ? a : b);
    default: {
      uint64_t s = (a + b) & mask; /* the sum wraps in the type, then divides */
      if (m != FINAL) return s;
      return sgn ? (uint64_t)(sext(s, sz) / nranks) : s / (uint64_t)nranks;
    }
  }
}

static void refRun(enum mode m, void *dst, const void *a, const void *b, size_t n,
                   weftDataType_t t, weftRedOp_t op, int nranks) {
  size_t sz = weftTypeSize(t);
  for (size_t i = 0; i < n; i++) {
    uint64_t x = ld(a, i, sz), y = m == COPY ? 0 : ld(b, i, sz), r;
    if (m == COPY && op != weftAvg) { /* a plain copy of the bits, NaN payloads included */
      st(dst, i, sz, x);
      continue;
    }
    switch (t) {
      case weftFloat16:
        r = refFloatToHalf(refF32(m, op, refHalfToFloat((uint16_t)x), refHalfToFloat((uint16_t)y), nranks));
        break;
      case weftBfloat16:
        r = refFloatToBf16(refF32(m, op, refBf16ToFloat((uint16_t)x), refBf16ToFloat((uint16_t)y), nranks));
        break;
      case weftFloat8e4m3:
      case weftFloat8e5m2: {
        const struct refFp8Format *f = t == weftFloat8e4m3 ? &refE4m3 : &refE5m2;
        r = refFloatToFp8(f, refF32(m, op, refFp8ToFloat(f, (uint8_t)x), refFp8ToFloat(f, (uint8_t)y), nranks));
        break;
      }
      case weftFloat32: r = fbits(refF32(m, op, bitsf((uint32_t)x), bitsf((uint32_t)y), nranks)); break;
      case weftFloat64: {
        double dx, dy, dr;
        memcpy(&dx, &x, 8);
        memcpy(&dy, &y, 8);
        dr = refF64(m, op, dx, dy, nranks);
        memcpy(&r, &dr, 8);
        break;
      }
      default: r = refInt(m, op, t, x, y, nranks);
    }
    st(dst, i, sz, r);
  }
}

static void expectSame(const void *got, const void *want, size_t n, weftDataType_t t,
                       const char *what) {
  size_t sz = weftTypeSize(t);
  if (memcmp(got, want, n * sz) == 0) return;
  for (size_t i = 0; i < n; i++) {
    if (ld(got, i, sz) != ld(want, i, sz))
      cr_assert_fail("%s: %s element %zu of %zu: got 0x%llx, expected 0x%llx", what, weftTypeName(t),
                     i, n, (unsigned long long)ld(got, i, sz), (unsigned long long)ld(want, i, sz));
  }
}

/* ---- Every type x op x mode x length, unaligned, with guard bytes around dst -------------- */

#define GUARD 64
static void checkMatrix(const char *kernel) {
  size_t maxN = lengths[NLENGTHS - 1];
  size_t bytes = maxN * 8 + 2 * GUARD + 64;
  unsigned char *a = malloc(bytes), *b = malloc(bytes), *d = malloc(bytes), *want = malloc(maxN * 8);
  cr_assert(a && b && d && want);
  /* Element offsets of a, b and dst from malloc's alignment: not vector-aligned together. */
  static const size_t offs[][3] = {{0, 0, 0}, {1, 2, 3}, {3, 1, 2}};
  for (int t = 0; t < weftNumTypes; t++) {
    size_t sz = weftTypeSize((weftDataType_t)t);
    for (size_t li = 0; li < NLENGTHS; li++) {
      size_t n = lengths[li];
      for (size_t oi = 0; oi < (n > 100000 ? 1u : 3u); oi++) {
        unsigned char *pa = a + GUARD + offs[oi][0] * sz, *pb = b + GUARD + offs[oi][1] * sz;
        unsigned char *pd = d + GUARD + offs[oi][2] * sz;
        rngState = (uint64_t)t * 1000 + li * 10 + oi;
        fillRandom(pa, n, (weftDataType_t)t);
        fillRandom(pb, n, (weftDataType_t)t);
        for (int m = REDUCE; m <= COPY; m++) {
          for (int op = 0; op < weftNumOps; op++) {
            int nranks = m == FINAL ? 3 : 7;
            memset(d, 0xa5, n * sz + 2 * GUARD + 3 * sz);
            runLib((enum mode)m, pd, pa, pb, n, (weftDataType_t)t, (weftRedOp_t)op, nranks);
            refRun((enum mode)m, want, pa, pb, n, (weftDataType_t)t, (weftRedOp_t)op, nranks);
            char what[160];
            snprintf(what, sizeof what, "[%s] %s %s n=%zu offsets=%zu,%zu,%zu", kernel, modeName[m],
                     weftOpName((weftRedOp_t)op), n, offs[oi][0], offs[oi][1], offs[oi][2]);
            expectSame(pd, want, n, (weftDataType_t)t, what);
            for (unsigned char *p = d; p < pd; p++) cr_assert_eq(*p, 0xa5, "%s: wrote before dst", what);
            for (unsigned char *p = pd + n * sz; p < pd + n * sz + GUARD; p++)
              cr_assert_eq(*p, 0xa5, "%s: wrote past dst", what);
          }
        }
      }
    }
  }
  free(a);
  free(b);
  free(d);
  free(want);
}

/* The kernel set the library must pick for WEFT_SIMD=-1 (or a level it does not know): the
 * widest this CPU runs, by a probe of the tests' own (tests/common/caps.c). */
static const char *bestKernels(void) {
  char why[256];
  if (capHave("avx512", why, sizeof why) == 1) return "avx512";
  return capHave("avx2", why, sizeof why) == 1 ? "avx2" : "portable";
}

static void checkMatrixWith(const char *level, const char *name) {
  if (strcmp(name, "portable") != 0) SKIP_UNLESS(name);
  setenv("WEFT_SIMD", level, 1);
  cr_assert_str_eq(weftReduceKernelName(), name, "WEFT_SIMD=%s on a CPU that has %s", level, name);
  checkMatrix(name);
}
Test(reduce, all_types_ops_lengths_portable) { checkMatrixWith("0", "portable"); }
Test(reduce, all_types_ops_lengths_avx2) { checkMatrixWith("2", "avx2"); }
Test(reduce, all_types_ops_lengths_avx512) { checkMatrixWith("512", "avx512"); }

/* ---- Every kernel set gives the same bits ------------------------------------------------ */

/* Each set runs in a child process (WEFT_SIMD is read once) and writes its results into shared
 * memory; the parent compares them bit for bit. Each SIMD set is compared with the portable
 * one; a CPU without it skips that comparison (it would compare a fallback with itself). */
static void kernelSetsBitIdentical(const char *simdLevel, const char *simdName) {
  SKIP_UNLESS(simdName);
  const char *levels[] = {"0", simdLevel}, *want[] = {"portable", simdName};
  enum { NLEVELS = 2, N = 100003, MODES = 3 };
  static const size_t ns[] = {N, 33, 15, 1};
  const size_t nns = sizeof ns / sizeof ns[0];
  size_t inBytes = 0, outBytes = 0;
  for (int t = 0; t < weftNumTypes; t++) inBytes += (N + 1) * weftTypeSize((weftDataType_t)t);
  outBytes = inBytes * MODES * weftNumOps * nns;
  unsigned char *in = malloc(2 * inBytes);
  unsigned char *out = mmap(NULL, outBytes * NLEVELS + NLEVELS * 16, PROT_READ | PROT_WRITE,
                            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert(in != NULL && out != MAP_FAILED);
  char *names = (char *)out + outBytes * NLEVELS;
  rngState = 42;
  for (size_t t = 0, o = 0; t < weftNumTypes; t++) {
    size_t sz = weftTypeSize((weftDataType_t)t);
    fillRandom(in + o, N + 1, (weftDataType_t)t);
    fillRandom(in + inBytes + o, N + 1, (weftDataType_t)t);
    o += (N + 1) * sz;
  }
  for (int l = 0; l < NLEVELS; l++) {
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
      setenv("WEFT_SIMD", levels[l], 1);
      snprintf(names + 16 * l, 16, "%s", weftReduceKernelName());
      unsigned char *o = out + outBytes * l;
      size_t inOff = 0;
      for (int t = 0; t < weftNumTypes; t++) {
        size_t sz = weftTypeSize((weftDataType_t)t);
        /* a one element past a 64-byte boundary, b two: unaligned, and a != b. */
        const unsigned char *a = in + inOff + sz, *b = in + inBytes + inOff;
        for (size_t k = 0; k < nns; k++)
          for (int m = REDUCE; m <= COPY; m++)
            for (int op = 0; op < weftNumOps; op++) {
              runLib((enum mode)m, o, a, b, ns[k], (weftDataType_t)t, (weftRedOp_t)op, 5);
              o += (N + 1) * sz;
            }
        inOff += (N + 1) * sz;
      }
      _exit(0);
    }
    int status;
    cr_assert(waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the child for WEFT_SIMD=%s failed", levels[l]);
  }
  for (int l = 0; l < NLEVELS; l++)
    cr_assert_str_eq(names + 16 * l, want[l], "WEFT_SIMD=%s ran the %s kernels", levels[l], names + 16 * l);
  for (int l = 1; l < NLEVELS; l++) {
    const unsigned char *ref = out, *o = out + outBytes * l;
    for (int t = 0; t < weftNumTypes; t++) {
      size_t sz = weftTypeSize((weftDataType_t)t);
      for (size_t k = 0; k < nns; k++)
        for (int m = REDUCE; m <= COPY; m++)
          for (int op = 0; op < weftNumOps; op++) {
            char what[128];
            snprintf(what, sizeof what, "%s vs %s: %s %s n=%zu", names + 16 * l, names,
                     modeName[m], weftOpName((weftRedOp_t)op), ns[k]);
            expectSame(o, ref, ns[k], (weftDataType_t)t, what);
            o += (N + 1) * sz;
            ref += (N + 1) * sz;
          }
    }
  }
  munmap(out, outBytes * NLEVELS + NLEVELS * 16);
  free(in);
}

/* ---- fp8: every pair of codes, every op, through each kernel set's vector body -------------- */

static void fp8AllPairs(const char *level, const char *name) {
  if (strcmp(name, "portable") != 0) SKIP_UNLESS(name);
  setenv("WEFT_SIMD", level, 1);
  cr_assert_str_eq(weftReduceKernelName(), name);
  enum { N = 65536 };
  uint8_t *a = malloc(N), *b = malloc(N), *d = malloc(N), *want = malloc(N);
  for (int i = 0; i < N; i++) a[i] = (uint8_t)i, b[i] = (uint8_t)(i >> 8);
  static const weftDataType_t fp8[] = {weftFloat8e4m3, weftFloat8e5m2};
  for (int k = 0; k < 2; k++)
    for (int m = REDUCE; m <= COPY; m++)
      for (int op = 0; op < weftNumOps; op++) {
        runLib((enum mode)m, d, a, b, N, fp8[k], (weftRedOp_t)op, 3);
        refRun((enum mode)m, want, a, b, N, fp8[k], (weftRedOp_t)op, 3);
        char what[96];
        snprintf(what, sizeof what, "[%s] %s %s, all pairs", name, modeName[m], weftOpName((weftRedOp_t)op));
        expectSame(d, want, N, fp8[k], what);
      }
  free(a);
  free(b);
  free(d);
  free(want);
}
Test(reduce, fp8_all_pairs_portable) { fp8AllPairs("0", "portable"); }
Test(reduce, fp8_all_pairs_avx2) { fp8AllPairs("2", "avx2"); }
Test(reduce, fp8_all_pairs_avx512) { fp8AllPairs("512", "avx512"); }

Test(reduce, kernel_sets_bit_identical_avx2) { kernelSetsBitIdentical("2", "avx2"); }
Test(reduce, kernel_sets_bit_identical_avx512) { kernelSetsBitIdentical("512", "avx512"); }

/* ---- Names and sizes ---------------------------------------------------------------------- */

Test(reduce, names_and_sizes) {
  static const char *tn[] = {"int8",  "uint8", "int32",  "uint32",   "int64",  "uint64",
                             "half",  "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};
  static const size_t ts[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  cr_assert_eq(sizeof tn / sizeof tn[0], weftNumTypes);
  for (int t = 0; t < weftNumTypes; t++) {
    cr_expect_str_eq(weftTypeName((weftDataType_t)t), tn[t]);
    cr_expect_eq(weftTypeSize((weftDataType_t)t), ts[t]);
    cr_expect_eq(weftTypeIsFloat((weftDataType_t)t), t >= weftFloat16);
  }
  static const char *on[] = {"sum", "prod", "max", "min", "avg"};
  for (int op = 0; op < weftNumOps; op++) cr_expect_str_eq(weftOpName((weftRedOp_t)op), on[op]);
  cr_expect_str_eq(weftOpName(WEFT_OP_PREMULSUM), "premulsum");
  cr_expect_str_eq(weftOpName((weftRedOp_t)(WEFT_OP_PREMULSUM + 1)), "unknown");
  cr_expect_str_eq(weftTypeName(weftNumTypes), "unknown");
  cr_expect_eq(weftTypeSize(weftNumTypes), 0);
  unsetenv("WEFT_SIMD");
  cr_expect_str_eq(weftReduceKernelName(), bestKernels(), "the widest set this CPU runs");
}

Test(reduce, simd_param_out_of_range_uses_best) {
  setenv("WEFT_SIMD", "7", 1);
  cr_expect_str_eq(weftReduceKernelName(), bestKernels());
}

Test(reduce, simd_param_portable) {
  setenv("WEFT_SIMD", "0", 1);
  cr_expect_str_eq(weftReduceKernelName(), "portable");
}

/* ---- Conversions against independent references ----------------------------------------- */

static double halfValue(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 0x3ff;
  double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

Test(reduce, half_to_float_exhaustive) {
  for (uint32_t h = 0; h < 0x10000; h++) {
    float f = weftHalfToFloat((uint16_t)h);
    uint32_t e = (h >> 10) & 31, m = h & 0x3ff;
    if (e == 31) { /* Inf, or NaN made quiet with sign and payload kept */
      uint32_t want = ((h & 0x8000u) << 16) | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0);
      cr_assert_eq(fbits(f), want, "half 0x%04x -> 0x%08x", h, fbits(f));
    } else {
      cr_assert((double)f == halfValue((uint16_t)h) && !signbit(f) == !(h & 0x8000),
                "half 0x%04x -> %a", h, (double)f);
    }
  }
}

Test(reduce, float_to_half_cases) {
  static const struct { float f; uint16_t h; } cases[] = {
      {1.0f, 0x3c00}, {-2.0f, 0xc000}, {65504.0f, 0x7bff}, {65519.99f, 0x7bff},
      {65520.0f, 0x7c00} /* tie: the even neighbour is 2^16, i.e. Inf */, {1e9f, 0x7c00},
      {-1e9f, 0xfc00}, {INFINITY, 0x7c00}, {-INFINITY, 0xfc00}, {0.0f, 0x0000}, {-0.0f, 0x8000},
      {0x1p-14f, 0x0400}, {0x1p-24f, 0x0001}, {0x1p-25f, 0x0000} /* tie to even 0 */,
      {0x1.000002p-25f, 0x0001}, {0x3p-25f, 0x0002} /* 1.5 ulp: tie to even 2 */,
      {0x1.ffcp-15f, 0x0400} /* largest subnormal + half ulp rounds up to the smallest normal */,
      {1.0f + 0x1p-11f, 0x3c00} /* tie, down to even */, {1.0f + 0x3p-11f, 0x3c02} /* tie, up */,
      {1.0f + 0x1p-11f + 0x1p-20f, 0x3c01}, {1e-10f, 0x0000}, {0x1p-149f, 0x0000},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    cr_expect_eq(weftFloatToHalf(cases[i].f), cases[i].h, "%a -> 0x%04x, expected 0x%04x",
                 (double)cases[i].f, weftFloatToHalf(cases[i].f), cases[i].h);
  uint16_t n = weftFloatToHalf(NAN), sn = weftFloatToHalf(bitsf(0xff800001u));
  cr_expect((n & 0x7c00) == 0x7c00 && (n & 0x3ff) != 0, "NaN -> 0x%04x", n);
  cr_expect(sn == 0xfe00, "signalling NaN keeps its sign and becomes quiet: 0x%04x", sn);
}

Test(reduce, float_to_half_and_bf16_sampled) {
  /* ~4 million floats spread over every exponent, plus every float near the thresholds. */
  for (uint64_t u = 0; u < (1ull << 32); u += 1021) {
    float f = bitsf((uint32_t)u);
    cr_assert_eq(weftFloatToHalf(f), refFloatToHalf(f), "half(%a / 0x%08x)", (double)f, (uint32_t)u);
    cr_assert_eq(weftFloatToBf16(f), refFloatToBf16(f), "bf16(%a / 0x%08x)", (double)f, (uint32_t)u);
  }
  static const uint32_t around[] = {0x477ff000u, 0x38800000u, 0x33800000u, 0x33000000u,
                                    0x7f7f8000u, 0x00800000u, 0x3f800000u, 0x7f800000u};
  for (size_t i = 0; i < sizeof around / sizeof around[0]; i++)
    for (uint32_t s = 0; s < 2; s++)
      for (uint32_t u = around[i] - 20000; u != around[i] + 20000; u++) {
        float f = bitsf(u | s << 31);
        cr_assert_eq(weftFloatToHalf(f), refFloatToHalf(f), "half(0x%08x)", u | s << 31);
        cr_assert_eq(weftFloatToBf16(f), refFloatToBf16(f), "bf16(0x%08x)", u | s << 31);
      }
}

Test(reduce, bf16_cases) {
  for (uint32_t b = 0; b < 0x10000; b++) cr_assert_eq(fbits(weftBf16ToFloat((uint16_t)b)), b << 16);
  static const struct { uint32_t f; uint16_t b; } cases[] = {
      {0x3f800000u, 0x3f80}, {0x3f808000u, 0x3f80} /* tie, even */, {0x3f818000u, 0x3f82},
      {0x3f808001u, 0x3f81}, {0x7f7f8000u, 0x7f80} /* past the largest finite: Inf */,
      {0x7f7f7fffu, 0x7f7f}, {0x00008000u, 0x0000} /* subnormal tie */, {0x00018000u, 0x0002},
      {0x80000001u, 0x8000}, {0x7f800000u, 0x7f80}, {0xff800000u, 0xff80},
      {0x7f800001u, 0x7fc0} /* NaN that would truncate to Inf stays NaN */, {0xffc12345u, 0xffc1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    cr_expect_eq(weftFloatToBf16(bitsf(cases[i].f)), cases[i].b, "0x%08x -> 0x%04x, expected 0x%04x",
                 cases[i].f, weftFloatToBf16(bitsf(cases[i].f)), cases[i].b);
}

#if TEST_X86
__attribute__((target("avx2,f16c"))) static void hwToHalf(const float *f, uint16_t *h) {
  _mm_storeu_si128((__m128i *)h, _mm256_cvtps_ph(_mm256_loadu_ps(f), _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("avx2,f16c"))) static void hwFromHalf(const uint16_t *h, float *f) {
  _mm256_storeu_ps(f, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h)));
}
#endif

/* The SIMD kernels convert with F16C; the software conversions must give the same bits. */
Test(reduce, software_half_matches_f16c) {
#if TEST_X86
  SKIP_UNLESS("avx2"); /* the intrinsics below need AVX2 and F16C */
  float f[8];
  uint16_t h[8];
  for (uint64_t u = 0; u < (1ull << 32); u += 8 * 257) { /* floats of every exponent */
    for (int j = 0; j < 8; j++) f[j] = bitsf((uint32_t)(u + 257 * j));
    hwToHalf(f, h);
    for (int j = 0; j < 8; j++) cr_assert_eq(weftFloatToHalf(f[j]), h[j], "0x%08x", fbits(f[j]));
  }
  for (uint32_t x = 0; x < 0x10000; x += 8) { /* every half, NaN payloads included */
    for (int j = 0; j < 8; j++) h[j] = (uint16_t)(x + j);
    hwFromHalf(h, f);
    for (int j = 0; j < 8; j++)
      cr_assert_eq(fbits(weftHalfToFloat(h[j])), fbits(f[j]), "0x%04x", h[j]);
  }
#else
  SKIP_UNLESS("x86");
#endif
}

/* ---- Corner cases through weftReduceApply ---------------------------------------------- */

/* Runs each case replicated over 100 elements, so both the vector body and the tail see it. */
#define REP 100
static void checkCases(weftDataType_t t, weftRedOp_t op, enum mode m, int nranks,
                       uint64_t (*c)[3], size_t nc) {
  size_t sz = weftTypeSize(t), n = nc * REP;
  unsigned char *a = malloc(n * sz), *b = malloc(n * sz), *d = malloc(n * sz);
  for (size_t i = 0; i < n; i++) {
    st(a, i, sz, c[i % nc][0]);
    st(b, i, sz, c[i % nc][1]);
  }
  runLib(m, d, a, b, n, t, op, nranks);
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(ld(d, i, sz), ld(&c[i % nc][2], 0, sz),
                 "%s %s %s: 0x%llx, 0x%llx -> 0x%llx, expected 0x%llx", modeName[m],
                 weftTypeName(t), weftOpName(op), (unsigned long long)c[i % nc][0],
                 (unsigned long long)c[i % nc][1], (unsigned long long)ld(d, i, sz),
                 (unsigned long long)c[i % nc][2]);
  free(a);
  free(b);
  free(d);
}
#define CASES(t, op, m, nranks, ...)                                                   \
  do {                                                                                  \
    static uint64_t c_[][3] = {__VA_ARGS__};                                      \
    checkCases(t, op, m, nranks, c_, sizeof c_ / sizeof c_[0]);                        \
  } while (0)
#define U(x) ((uint64_t)(x))

Test(reduce, integer_wraparound) {
  CASES(weftInt8, weftSum, REDUCE, 1, {127, 1, U(-128)}, {U(-128), U(-1), 127}, {U(-5), 3, U(-2)});
  CASES(weftInt8, weftProd, REDUCE, 1, {16, 16, 0}, {U(-128), U(-1), U(-128)}, {100, 3, 44},
        {U(-3), 5, U(-15)});
  CASES(weftInt8, weftMax, REDUCE, 1, {U(-1), 1, 1}, {U(-128), 127, 127});
  CASES(weftInt8, weftMin, REDUCE, 1, {U(-1), 1, U(-1)}, {U(-128), 127, U(-128)});
  CASES(weftUint8, weftSum, REDUCE, 1, {255, 1, 0}, {200, 100, 44});
  CASES(weftUint8, weftProd, REDUCE, 1, {16, 17, 16}, {255, 255, 1});
  CASES(weftUint8, weftMax, REDUCE, 1, {255, 1, 255}, {0, 128, 128});
  CASES(weftUint8, weftMin, REDUCE, 1, {255, 1, 1}, {0, 128, 0});
  CASES(weftInt32, weftSum, REDUCE, 1, {INT32_MAX, 1, U(INT32_MIN)}, {U(INT32_MIN), U(-1), INT32_MAX});
  CASES(weftInt32, weftProd, REDUCE, 1, {65536, 65536, 0}, {46341, 46341, U(-2147479015)},
        {U(INT32_MIN), U(-1), U(INT32_MIN)});
  CASES(weftInt32, weftMax, REDUCE, 1, {U(-1), 0, 0}, {U(INT32_MIN), INT32_MAX, INT32_MAX});
  CASES(weftInt32, weftMin, REDUCE, 1, {U(-1), 0, U(-1)});
  CASES(weftUint32, weftSum, REDUCE, 1, {UINT32_MAX, 1, 0});
  CASES(weftUint32, weftProd, REDUCE, 1, {UINT32_MAX, UINT32_MAX, 1}, {65536, 65536, 0});
  CASES(weftUint32, weftMax, REDUCE, 1, {UINT32_MAX, 0, UINT32_MAX}, {0x80000000u, 1, 0x80000000u});
  CASES(weftUint32, weftMin, REDUCE, 1, {UINT32_MAX, 0, 0}, {0x80000000u, 1, 1});
  CASES(weftInt64, weftSum, REDUCE, 1, {INT64_MAX, 1, U(INT64_MIN)}, {U(INT64_MIN), U(-1), INT64_MAX});
  CASES(weftInt64, weftProd, REDUCE, 1, {3037000500ll, 3037000500ll, U(-9223372036709301616ll)},
        {U(INT64_MIN), U(-1), U(INT64_MIN)}, {U(-7), 6, U(-42)});
  CASES(weftInt64, weftMax, REDUCE, 1, {U(-1), 0, 0}, {U(INT64_MIN), INT64_MAX, INT64_MAX});
  CASES(weftInt64, weftMin, REDUCE, 1, {U(-1), 0, U(-1)}, {U(INT64_MIN), INT64_MAX, U(INT64_MIN)});
  CASES(weftUint64, weftSum, REDUCE, 1, {UINT64_MAX, 1, 0});
  CASES(weftUint64, weftProd, REDUCE, 1, {1ull << 32, 1ull << 32, 0}, {UINT64_MAX, UINT64_MAX, 1});
  CASES(weftUint64, weftMax, REDUCE, 1, {UINT64_MAX, 1, UINT64_MAX}, {1ull << 63, 1, 1ull << 63});
  CASES(weftUint64, weftMin, REDUCE, 1, {UINT64_MAX, 1, 1}, {1ull << 63, 1, 1});
}

Test(reduce, integer_avg) {
  /* Avg reduces as Sum; the final step wraps the sum in the type, then divides toward zero. */
  CASES(weftInt32, weftAvg, REDUCE, 4, {5, 6, 11});
  CASES(weftInt32, weftAvg, FINAL, 2, {5, 6, 5}, {U(-5), U(-6), U(-5)}, {INT32_MAX, 1, U(INT32_MIN / 2)});
  CASES(weftInt8, weftAvg, FINAL, 2, {100, 100, U(-28)}, {U(-7), 0, U(-3)});
  CASES(weftInt8, weftAvg, FINAL, 200, {100, 27, 0}, {U(-128), 0, 0});
  CASES(weftUint8, weftAvg, FINAL, 2, {200, 100, 22}, {255, 0, 127});
  CASES(weftUint8, weftAvg, FINAL, 300, {255, 0, 0});
  CASES(weftUint64, weftAvg, FINAL, 3, {UINT64_MAX, 0, UINT64_MAX / 3}, {UINT64_MAX, 1, 0});
  CASES(weftInt64, weftAvg, FINAL, 3, {U(-9), 0, U(-3)}, {INT64_MAX, 1, U(INT64_MIN / 3)});
  CASES(weftUint32, weftAvg, COPY, 4, {7, 0, 1}, {UINT32_MAX, 0, UINT32_MAX / 4});
  CASES(weftInt64, weftAvg, COPY, 4, {U(-7), 0, U(-1)});
}

Test(reduce, half_rounding) {
  CASES(weftFloat16, weftSum, REDUCE, 1,
        {0x3c00, 0x1000, 0x3c00},  /* 1 + 2^-11: tie, down to even */
        {0x3c01, 0x1000, 0x3c02},  /* tie, up to even */
        {0x3c00, 0x1001, 0x3c01},  /* just past the tie */
        {0x7bff, 0x7bff, 0x7c00},  /* overflow to Inf */
        {0x7bff, 0x4c00, 0x7c00},  /* 65504 + 16 = 65520: tie, to Inf */
        {0x7bff, 0x4b80, 0x7bff},  /* 65519 stays finite */
        {0xfbff, 0xfbff, 0xfc00},  /* -Inf */
        {0x0001, 0x0001, 0x0002},  /* subnormals */
        {0x03ff, 0x0001, 0x0400},  /* subnormal to normal */
        {0x8001, 0x0001, 0x0000},  /* x + -x = +0 */
        {0x7c00, 0x3c00, 0x7c00},  /* Inf + 1 */
        {0x7c00, 0xfc00, 0xfe00},  /* Inf - Inf: the default NaN */
        {0x7e00, 0x3c00, 0x7e00},  /* NaN + 1 */
        {0x3c00, 0x7d55, 0x7f55},  /* 1 + signalling NaN: quiet, payload kept */
        {0xfe01, 0x3c00, 0xfe01}); /* the sign of a NaN is kept */
  CASES(weftFloat16, weftProd, REDUCE, 1,
        {0x0001, 0x3800, 0x0000},  /* 2^-25: tie, to even 0 */
        {0x0003, 0x3800, 0x0002},  /* 1.5 * 2^-24: tie, to even 2 */
        {0x0001, 0x3a00, 0x0001},  /* 0.75 * 2^-24 rounds up */
        {0x5c00, 0x5c00, 0x7c00},  /* 256 * 256: overflow */
        {0x7c00, 0x0000, 0xfe00}); /* Inf * 0: the default NaN */
}

Test(reduce, bf16_rounding) {
  CASES(weftBfloat16, weftSum, REDUCE, 1,
        {0x3f80, 0x3b80, 0x3f80},  /* 1 + 2^-8: tie, down to even */
        {0x3f81, 0x3b80, 0x3f82},  /* tie, up to even */
        {0x7f7f, 0x7f7f, 0x7f80},  /* overflow to Inf */
        {0x7f7f, 0x7b00, 0x7f80},  /* largest finite + half an ulp: tie, to Inf */
        {0x0001, 0x0001, 0x0002},  /* subnormals */
        {0x807f, 0x0001, 0x807e},
        {0x7f80, 0xff80, 0xffc0},  /* Inf - Inf: the default NaN */
        {0x7fc1, 0x3f80, 0x7fc1},  /* NaN + 1 */
        {0x3f80, 0x7f81, 0x7fc1}); /* 1 + signalling NaN: quiet, payload kept */
  CASES(weftBfloat16, weftProd, REDUCE, 1, {0x0001, 0x3f00, 0x0000} /* tie to 0 */,
        {0x0003, 0x3f00, 0x0002} /* tie to 2 */, {0x7f00, 0x4200, 0x7f80});
}

Test(reduce, float_max_min_nan_and_zeros) {
  uint64_t nan32 = fbits(NAN), one = fbits(1.0f), pz = 0, nz = 0x80000000u, ninf = 0xff800000u;
  uint64_t c32[][3] = {{nan32, one, nan32}, {one, nan32, nan32}, {pz, nz, nz}, {nz, pz, pz},
                       {ninf, one, one}, {0x7fc00001u, 0x7fc00002u, 0x7fc00001u}};
  checkCases(weftFloat32, weftMax, REDUCE, 1, c32, 6);
  c32[4][2] = ninf;
  checkCases(weftFloat32, weftMin, REDUCE, 1, c32, 6);
  uint64_t nan64 = 0x7ff8000000000000ull, one64 = 0x3ff0000000000000ull;
  uint64_t c64[][3] = {{nan64, one64, nan64}, {one64, nan64, nan64}, {0, 1ull << 63, 1ull << 63}};
  checkCases(weftFloat64, weftMax, REDUCE, 1, c64, 3);
  checkCases(weftFloat64, weftMin, REDUCE, 1, c64, 3);
  CASES(weftFloat16, weftMax, REDUCE, 1, {0x7e00, 0x3c00, 0x7e00}, {0x3c00, 0x7e00, 0x7e00},
        {0x3c00, 0xbc00, 0x3c00}, {0x0000, 0x8000, 0x8000}, {0x7bff, 0x7c00, 0x7c00});
  CASES(weftFloat16, weftMin, REDUCE, 1, {0x7e00, 0x3c00, 0x7e00}, {0x3c00, 0x7e00, 0x7e00},
        {0x3c00, 0xbc00, 0xbc00});
  CASES(weftBfloat16, weftMax, REDUCE, 1, {0x7fc0, 0x3f80, 0x7fc0}, {0x3f80, 0x7fc0, 0x7fc0},
        {0x3f80, 0xbf80, 0x3f80});
  CASES(weftBfloat16, weftMin, REDUCE, 1, {0x7fc0, 0x3f80, 0x7fc0}, {0x3f80, 0x7fc0, 0x7fc0},
        {0x3f80, 0xbf80, 0xbf80});
}

Test(reduce, avg_final_floats) {
  /* Divided before the one rounding: the fp16 sum 131008 overflows fp16 but not fp32. */
  CASES(weftFloat16, weftAvg, FINAL, 2, {0x7bff, 0x7bff, 0x7bff}, {0x3c00, 0x4000, 0x3e00});
  CASES(weftFloat16, weftAvg, REDUCE, 2, {0x7bff, 0x7bff, 0x7c00}); /* not final: a sum */
  /* bf16: the largest finite + half an ulp rounds to Inf, but its half is finite. */
  CASES(weftBfloat16, weftAvg, FINAL, 2, {0x7f7f, 0x7b00, 0x7f00});
  CASES(weftFloat16, weftAvg, COPY, 2, {0x7bff, 0, 0x77ff}, {0x0001, 0, 0x0000}, {0x0003, 0, 0x0002});
  CASES(weftBfloat16, weftAvg, COPY, 2, {0x3f81, 0, 0x3f01});

  /* IEEE division, not a multiplication by 1/nranks (which differs for many values). */
  enum { N = 4099 };
  float *a = malloc(N * 4), *b = malloc(N * 4), *d = malloc(N * 4);
  double *da = malloc(N * 8), *db = malloc(N * 8), *dd = malloc(N * 8);
  rngState = 7;
  for (int i = 0; i < N; i++) {
    a[i] = (float)(rnd() % 100000) / 7.0f;
    b[i] = (float)(rnd() % 100000) / 3.0f;
    da[i] = (double)(rnd() % 10000000) / 7.0;
    db[i] = (double)(rnd() % 10000000) / 3.0;
  }
  for (int nranks = 3; nranks <= 7; nranks += 2) {
    int differ = 0, differD = 0;
    weftReduceFinal(d, a, b, N, weftFloat32, weftAvg, nranks);
    weftReduceFinal(dd, da, db, N, weftFloat64, weftAvg, nranks);
    volatile float rcp = 1.0f / (float)nranks;
    volatile double rcpD = 1.0 / (double)nranks;
    for (int i = 0; i < N; i++) {
      float want = (a[i] + b[i]) / (float)nranks;
      double wantD = (da[i] + db[i]) / (double)nranks;
      cr_assert_eq(fbits(d[i]), fbits(want), "float (%a + %a) / %d", (double)a[i], (double)b[i], nranks);
      cr_assert(memcmp(&dd[i], &wantD, 8) == 0, "double (%a + %a) / %d", da[i], db[i], nranks);
      differ += d[i] != (a[i] + b[i]) * rcp;
      differD += dd[i] != (da[i] + db[i]) * rcpD;
    }
    cr_assert(differ > 0 && differD > 0, "the data should tell division from reciprocal");
  }
  free(a);
  free(b);
  free(d);
  free(da);
  free(db);
  free(dd);
}

Test(reduce, final_copy) {
  enum { N = 37 };
  float src[N], dst[N];
  uint32_t bits[N];
  for (int i = 0; i < N; i++) src[i] = (float)i - 10.5f;
  src[3] = bitsf(0x7fa12345u); /* a signalling NaN: a copy keeps every bit */
  memcpy(bits, src, sizeof bits);
  for (int op = 0; op < weftNumOps; op++) {
    if (op == weftAvg) continue;
    memset(dst, 0, sizeof dst);
    weftReduceFinalCopy(dst, src, N, weftFloat32, (weftRedOp_t)op, 4);
    cr_assert(memcmp(dst, bits, sizeof dst) == 0, "%s copies", weftOpName((weftRedOp_t)op));
    weftReduceFinalCopy(src, src, N, weftFloat32, (weftRedOp_t)op, 4); /* in place: no-op */
    cr_assert(memcmp(src, bits, sizeof dst) == 0);
  }
  weftReduceFinalCopy(dst, src, N, weftFloat32, weftAvg, 4);
  for (int i = 0; i < N; i++)
    if (i != 3) cr_assert_eq(dst[i], src[i] / 4.0f);
  cr_assert(isnan(dst[3]));
  weftReduceFinalCopy(src, src, N, weftFloat32, weftAvg, 4); /* in place */
  cr_assert(memcmp(src, dst, sizeof dst) == 0);
  int32_t iv[N], io[N];
  for (int i = 0; i < N; i++) iv[i] = i - 18;
  weftReduceFinalCopy(io, iv, N, weftInt32, weftAvg, 4);
  for (int i = 0; i < N; i++) cr_assert_eq(io[i], (i - 18) / 4);
  weftReduceFinalCopy(io, iv, 0, weftInt32, weftAvg, 4); /* count 0: nothing */
}

/* ---- dst aliasing a, b, or both ---------------------------------------------------------- */

Test(reduce, dst_aliases_inputs) {
  enum { N = 1003 };
  for (int t = 0; t < weftNumTypes; t++) {
    size_t sz = weftTypeSize((weftDataType_t)t);
    unsigned char *a = malloc(N * sz), *b = malloc(N * sz), *want = malloc(N * sz);
    for (int m = REDUCE; m <= COPY; m++)
      for (int op = 0; op < weftNumOps; op++)
        for (int alias = 0; alias < 3; alias++) { /* dst == a, dst == b, dst == a == b */
          rngState = (uint64_t)(t * 100 + op * 10 + alias);
          fillRandom(a, N, (weftDataType_t)t);
          fillRandom(b, N, (weftDataType_t)t);
          const unsigned char *pb = alias == 2 ? a : b;
          refRun((enum mode)m, want, a, pb, N, (weftDataType_t)t, (weftRedOp_t)op, 3);
          unsigned char *dst = alias == 1 ? b : a;
          runLib((enum mode)m, dst, a, pb, N, (weftDataType_t)t, (weftRedOp_t)op, 3);
          char what[96];
          snprintf(what, sizeof what, "%s %s, dst aliasing %s", modeName[m],
                   weftOpName((weftRedOp_t)op), alias == 0 ? "a" : alias == 1 ? "b" : "a and b");
          expectSame(dst, want, N, (weftDataType_t)t, what);
        }
    free(a);
    free(b);
    free(want);
  }
}

/* ---- The tests' own converters (tests/common/refconv.c) are right ------------------------ */

Test(reduce, reference_converters_round_trip) {
  for (uint32_t x = 0; x < 0x10000; x++) {
    uint16_t h = (uint16_t)x;
    int hNan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0, bNan = (h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0;
    cr_assert_eq(refFloatToHalf(refHalfToFloat(h)), hNan ? h | 0x200 : h, "half 0x%04x", h);
    cr_assert_eq(refFloatToBf16(refBf16ToFloat(h)), bNan ? h | 0x40 : h, "bf16 0x%04x", h);
    cr_assert_eq(fbits(refBf16ToFloat(h)), x << 16, "bf16 0x%04x widens to its bits << 16", h);
  }
  /* fp8: every code but the NaNs (to 0x7f) and e5m2's infinities (saturated) comes back. */
  for (int k = 0; k < 2; k++) {
    const struct refFp8Format *f = k ? &refE5m2 : &refE4m3;
    for (int c = 0; c < 256; c++) {
      int nan;
      double v = refFp8Value(f, (uint8_t)c, &nan);
      uint8_t want = nan ? 0x7f : isinf(v) ? (uint8_t)((c & 0x80) | 0x7b) : (uint8_t)c;
      cr_assert_eq(refFloatToFp8(f, refFp8ToFloat(f, (uint8_t)c)), want, "%s 0x%02x", f->name, c);
    }
  }
}

/* ---- weftReduceScale (PreMulSum's scaling) ------------------------------------------------ */

/* dst = src * scalar per element, against the reference's Prod of each element with the
 * scalar: every type, a count spanning several of its internal blocks, unaligned, in place. */
Test(reduce, scale_every_type) {
  enum { N = 5003 };
  for (int t = 0; t < weftNumTypes; t++) {
    size_t sz = weftTypeSize((weftDataType_t)t);
    unsigned char *src = malloc((N + 1) * sz), *dst = malloc((N + 1) * sz);
    unsigned char *rep = malloc(N * sz), *want = malloc(N * sz);
    for (int k = 0; k < 20; k++) {
      uint64_t scalar = 0;
      rngState = (uint64_t)(t * 100 + k);
      fillRandom(&scalar, 1, (weftDataType_t)t); /* specials too: NaN, Inf, 0 scalars */
      fillRandom(src + sz, N, (weftDataType_t)t);
      for (size_t i = 0; i < N; i++) memcpy(rep + i * sz, &scalar, sz);
      refRun(REDUCE, want, src + sz, rep, N, (weftDataType_t)t, weftProd, 1);
      weftReduceScale(dst + sz, src + sz, &scalar, N, (weftDataType_t)t);
      expectSame(dst + sz, want, N, (weftDataType_t)t, "weftReduceScale");
      weftReduceScale(src + sz, src + sz, &scalar, N, (weftDataType_t)t); /* in place */
      expectSame(src + sz, want, N, (weftDataType_t)t, "weftReduceScale in place");
    }
    free(src);
    free(dst);
    free(rep);
    free(want);
  }
}
