/* The library's fp8 conversions (lib/lowfloat.h, through reduce.h's weftE4m3ToFloat ...)
 * against the tests' own (tests/common/refconv.c: values from the bit fields, narrowing by an
 * exhaustive nearest search): all 256 codes of both formats, and fp32 values of every
 * exponent, every tie between two fp8 neighbours and the floats next to it, subnormals,
 * saturation, NaNs and zeros. The kernels' vector conversions are checked by
 * tests/unit/test_reduce.c (every pair of codes through every kernel set). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "reduce.h"
#include "refconv.h"

TestSuite(fp8, .timeout = 120);

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

struct format {
  const struct refFp8Format *ref;
  float (*toFloat)(uint8_t);
  uint8_t (*fromFloat)(float);
};
static const struct format formats[] = {{&refE4m3, weftE4m3ToFloat, weftFloatToE4m3},
                                        {&refE5m2, weftE5m2ToFloat, weftFloatToE5m2}};

static void expectNarrow(const struct format *f, float v) {
  uint8_t got = f->fromFloat(v), want = refFloatToFp8(f->ref, v);
  cr_assert_eq(got, want, "%s(%a / 0x%08x) = 0x%02x, expected 0x%02x", f->ref->name, (double)v,
               fbits(v), got, want);
}

Test(fp8, widen_every_code) {
  for (int k = 0; k < 2; k++)
    for (int c = 0; c < 256; c++) {
      float got = formats[k].toFloat((uint8_t)c), want = refFp8ToFloat(formats[k].ref, (uint8_t)c);
      cr_assert_eq(fbits(got), fbits(want), "%s 0x%02x -> 0x%08x, expected 0x%08x",
                   formats[k].ref->name, c, fbits(got), fbits(want));
    }
  /* Anchors of the two specifications, so the reference cannot be wrong the same way. */
  cr_expect_eq(weftE4m3ToFloat(0x7e), 448.0f);
  cr_expect_eq(weftE4m3ToFloat(0xfe), -448.0f);
  cr_expect_eq(weftE4m3ToFloat(0x01), 0x1p-9f);
  cr_expect_eq(weftE4m3ToFloat(0x07), 0x7p-9f);
  cr_expect_eq(weftE4m3ToFloat(0x08), 0x1p-6f);
  cr_expect_eq(weftE4m3ToFloat(0x38), 1.0f);
  cr_expect_eq(weftE4m3ToFloat(0x78), 256.0f); /* exponent 15 holds finite values in e4m3 */
  cr_expect(isnan(weftE4m3ToFloat(0x7f)) && isnan(weftE4m3ToFloat(0xff)));
  cr_expect(signbit(weftE4m3ToFloat(0x80)) && weftE4m3ToFloat(0x80) == 0.0f);
  cr_expect_eq(weftE5m2ToFloat(0x7b), 57344.0f);
  cr_expect_eq(weftE5m2ToFloat(0x7c), INFINITY);
  cr_expect_eq(weftE5m2ToFloat(0xfc), -INFINITY);
  cr_expect(isnan(weftE5m2ToFloat(0x7d)) && isnan(weftE5m2ToFloat(0xfe)));
  cr_expect_eq(weftE5m2ToFloat(0x01), 0x1p-16f);
  cr_expect_eq(weftE5m2ToFloat(0x04), 0x1p-14f);
  cr_expect_eq(weftE5m2ToFloat(0x3c), 1.0f);
  /* NaNs widen quiet, with their sign (and e5m2's mantissa bits on top). */
  cr_expect_eq(fbits(weftE4m3ToFloat(0xff)), 0xfff00000u);
  cr_expect_eq(fbits(weftE5m2ToFloat(0x7d)), 0x7fe00000u);
}

Test(fp8, narrow_every_code_back) {
  for (int k = 0; k < 2; k++)
    for (int c = 0; c < 256; c++) expectNarrow(&formats[k], formats[k].toFloat((uint8_t)c));
}

Test(fp8, narrow_cases) {
  static const struct { float v; uint8_t e4m3, e5m2; } cases[] = {
      {1.0f, 0x38, 0x3c},
      {1.0625f, 0x38, 0x3c},       /* e4m3: tie between 1 and 1.125, to even */
      {1.1875f, 0x3a, 0x3d},       /* e4m3: tie between 1.125 and 1.25, to even (up) */
      {1.125f, 0x39, 0x3c},        /* e5m2: tie between 1 and 1.25, to even */
      {1.375f, 0x3b, 0x3e},        /* e5m2: tie between 1.25 and 1.5, to even (up) */
      {448.0f, 0x7e, 0x5f},
      {464.0f, 0x7e, 0x5f},        /* e4m3: tie past the largest: even, and saturated anyway */
      {480.0f, 0x7e, 0x60},        /* e4m3: beyond the largest: saturates; e5m2: tie, to even 512 */
      {57344.0f, 0x7e, 0x7b},
      {61439.996f, 0x7e, 0x7b},
      {61440.0f, 0x7e, 0x7b},      /* e5m2: the tie that IEEE would round to Inf saturates */
      {1e30f, 0x7e, 0x7b},
      {-1e30f, 0xfe, 0xfb},
      {INFINITY, 0x7e, 0x7b},      /* __NV_SATFINITE: infinities too */
      {-INFINITY, 0xfe, 0xfb},
      {0.0f, 0x00, 0x00},
      {-0.0f, 0x80, 0x80},
      {0x1p-10f, 0x00, 0x14},      /* e4m3: half the smallest subnormal ties to 0 */
      {0x1.000002p-10f, 0x01, 0x14},
      {0x3p-10f, 0x02, 0x1a},      /* e4m3: 1.5 subnormal units: tie to even 2 */
      {0xfp-10f, 0x08, 0x24},      /* e4m3: largest subnormal + half a unit: the smallest normal */
      {0x1p-17f, 0x00, 0x00},      /* e5m2: half the smallest subnormal ties to 0 */
      {0x3p-17f, 0x00, 0x02},
      {-0x1p-149f, 0x80, 0x80},    /* fp32 subnormal: to -0 */
      {0x1p-126f, 0x00, 0x00},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    cr_expect_eq(weftFloatToE4m3(cases[i].v), cases[i].e4m3, "e4m3(%a) = 0x%02x, expected 0x%02x",
                 (double)cases[i].v, weftFloatToE4m3(cases[i].v), cases[i].e4m3);
    cr_expect_eq(weftFloatToE5m2(cases[i].v), cases[i].e5m2, "e5m2(%a) = 0x%02x, expected 0x%02x",
                 (double)cases[i].v, weftFloatToE5m2(cases[i].v), cases[i].e5m2);
    for (int k = 0; k < 2; k++) expectNarrow(&formats[k], cases[i].v);
  }
  static const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff812345u, 0x7fffffffu};
  for (size_t i = 0; i < sizeof nans / sizeof nans[0]; i++) {
    cr_expect_eq(weftFloatToE4m3(bitsf(nans[i])), 0x7f, "NaN 0x%08x", nans[i]);
    cr_expect_eq(weftFloatToE5m2(bitsf(nans[i])), 0x7f, "NaN 0x%08x", nans[i]);
  }
}

/* ~4 million floats over every exponent (both signs, NaNs and infinities included). */
Test(fp8, narrow_sampled) {
  for (uint64_t u = 0; u < (1ull << 32); u += 1021)
    for (int k = 0; k < 2; k++) expectNarrow(&formats[k], bitsf((uint32_t)u));
}

/* Every midpoint between neighbouring fp8 values (and past the largest: its tie with the
 * next binade's first value), and the 16 floats on each side of it. */
Test(fp8, narrow_around_every_tie) {
  for (int k = 0; k < 2; k++) {
    const struct format *f = &formats[k];
    for (int c = 0; c < 0x7f; c++) {
      int nanLo, nanHi;
      double lo = refFp8Value(f->ref, (uint8_t)c, &nanLo), hi = refFp8Value(f->ref, (uint8_t)(c + 1), &nanHi);
      if (nanLo || isinf(lo)) continue;
      if (nanHi || isinf(hi)) hi = 2 * lo - refFp8Value(f->ref, (uint8_t)(c - 1), &nanHi); /* one step on */
      float mid = (float)((lo + hi) / 2); /* a few significant bits: exact in fp32 */
      cr_assert_eq((double)mid, (lo + hi) / 2);
      for (int s = 0; s < 2; s++) {
        float v = s ? -mid : mid, up = v, down = v;
        expectNarrow(f, v);
        for (int j = 0; j < 16; j++) {
          up = nextafterf(up, INFINITY);
          down = nextafterf(down, -INFINITY);
          expectNarrow(f, up);
          expectNarrow(f, down);
        }
      }
    }
  }
}
