/* The low-precision float formats of the reductions and their conversions to and from fp32:
 * fp16, bf16, and the two OCP FP8 formats (NCCL's ncclFloat8e4m3 / ncclFloat8e5m2). Host and
 * device functions (WEFT_HD, hostdev.h): the kernels of lib/reduce.c and of
 * devices/cuda/cuda_reduce.cu call them per element, through redelem.h; lib/lowfloat.c exports
 * them for tests and references (reduce.h). The vector forms at the end are the host's only.
 *
 * Narrowing rounds to nearest even. Widening is exact.
 *
 * FP8, as the OCP 8-bit floating point specification and CUDA's __nv_fp8_* types:
 *  - e4m3 ("fn": finite, NaN only): 1 sign, 4 exponent bits (bias 7), 3 mantissa bits; no
 *    infinities; 0x7f and 0xff are NaN; the largest finite is 448 (0x7e), the smallest
 *    subnormal 2^-9.
 *  - e5m2 (IEEE-like): 1 sign, 5 exponent bits (bias 15), 2 mantissa bits; infinities
 *    0x7c / 0xfc, NaNs 0x7d-0x7f / 0xfd-0xff; the largest finite is 57344 (0x7b), the smallest
 *    subnormal 2^-16.
 * Narrowing to fp8 saturates, as CUDA's __NV_SATFINITE mode, which NCCL's fp8 reductions use
 * (the __nv_fp8_e4m3 / __nv_fp8_e5m2 constructors they convert with pass __NV_SATFINITE): a
 * value whose magnitude lies beyond the largest finite, infinities included, becomes the
 * largest finite of its sign, in both formats (so an e5m2 infinity does not survive a
 * reduction step). Results are therefore those NCCL gives on a GPU. Every NaN becomes 0x7f
 * (CUDA's canonical NaN: the sign of a NaN is not kept). Widening a NaN gives a quiet fp32 NaN
 * with its sign and its mantissa bits on top (as for fp16); an e5m2 infinity widens to one. */
#ifndef WEFT_LOWFLOAT_H_
#define WEFT_LOWFLOAT_H_

#include <stdint.h>
#include <string.h>

#include "hostdev.h"

/* Bit casts: memcpy on the host (C's way, free at -O2), CUDA's register moves on the device. */
WEFT_HD uint32_t floatBits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
#endif
}
WEFT_HD float bitsFloat(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
#endif
}

/* ---- fp16 --------------------------------------------------------------------------------- */

/* Exact. NaNs keep sign and payload and come out quiet, as VCVTPH2PS does. */
WEFT_HD float halfToFloat(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) /* Inf, NaN */
    return bitsFloat(sign | 0x7f800000u | (mant << 13) | (mant ? 0x00400000u : 0));
  if (exp != 0) return bitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
  if (mant == 0) return bitsFloat(sign);
  /* Subnormal mant * 2^-24: normal in fp32; shift the leading 1 up to the implicit bit. */
  exp = 113;
  while (!(mant & 0x400u)) {
    mant <<= 1;
    exp--;
  }
  return bitsFloat(sign | (exp << 23) | ((mant & 0x3ffu) << 13));
}

/* Round to nearest even, as VCVTPS2PH with _MM_FROUND_TO_NEAREST_INT: overflow gives Inf,
 * small values give subnormals, NaNs keep sign and the top payload bits and come out quiet. */
WEFT_HD uint16_t floatToHalf(float f) {
  uint32_t u = floatBits(f);
  uint32_t sign = (u >> 16) & 0x8000u, ax = u & 0x7fffffffu;
  if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to Inf */
  if (ax >= 0x38800000u) { /* normal: rebias the exponent, round at bit 13 (carries are fine) */
    ax -= 112u << 23;
    return (uint16_t)(sign | ((ax + 0xfffu + ((ax >> 13) & 1u)) >> 13));
  }
  /* Below 2^-14: the result is a multiple of 2^-24 (possibly rounding up to 2^-14). */
  uint32_t e = ax >> 23;
  if (e < 102) return (uint16_t)sign; /* below 2^-25: rounds to zero (2^-25 itself ties to 0) */
  uint32_t mant = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e; /* 14..24 */
  uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) q++;
  return (uint16_t)(sign | q);
}

/* ---- bf16 --------------------------------------------------------------------------------- */

/* bf16 is the top half of an fp32: widening is a shift, and keeps NaNs as they are. */
WEFT_HD float bf16ToFloat(uint16_t b) { return bitsFloat((uint32_t)b << 16); }

/* Round to nearest even by adding 0x7fff plus the lowest kept bit (a carry into the exponent
 * is the correct rounding up, to Inf past the largest finite value). A NaN could round to Inf,
 * so it is truncated and made quiet instead. The SIMD kernels do the same integer steps. */
WEFT_HD uint16_t floatToBf16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* ---- fp8 ----------------------------------------------------------------------------------
 * One pair of functions serves both formats, given its parameters (constants at every call,
 * so each call compiles to straight-line code). The vector forms below do the same steps lane
 * by lane; the two must stay in step, since a kernel's tail uses the scalar form. */

#define WEFT_E4M3 3, 7, 0 /* mantissa bits, exponent bias, has infinities */
#define WEFT_E5M2 2, 15, 1

/* The fp32 bits of the largest finite value: 448 and 57344. */
#define FP8_MAX_BITS(mb, bias, ieee) ((uint32_t)(127 + (ieee ? 30 : 15) - (bias)) << 23 | \
                                      (ieee ? 3u : 6u) << (23 - (mb)))
/* The fp32 bits of the smallest normal value: 2^-6 and 2^-14. */
#define FP8_MIN_NORMAL_BITS(mb, bias, ieee) ((uint32_t)(128 - (bias)) << 23)
/* Subnormals: k * 2^(1 - bias - mb). Adding 2^(1 - bias - mb + 23) to a smaller magnitude
 * leaves a float whose last bit is worth exactly that unit, so the FPU's own round to nearest
 * even computes k: the bits of the sum minus those of the constant. */
#define FP8_SUB_MAGIC(mb, bias, ieee) bitsFloat((uint32_t)(127 + 1 - (bias) - (mb) + 23) << 23)
#define FP8_SUB_UNIT(mb, bias, ieee) bitsFloat((uint32_t)(127 + 1 - (bias) - (mb)) << 23)

/* Exact. NaN: quiet, sign and mantissa bits kept. */
WEFT_HD float fp8Decode(uint32_t c, unsigned mb, unsigned bias, int ieee) {
  uint32_t sign = (c & 0x80u) << 24, mag = c & 0x7fu;
  uint32_t e = mag >> mb, m = mag & ((1u << mb) - 1);
  if (ieee ? e == (0x7fu >> mb) : mag == 0x7fu) /* e5m2: Inf or NaN; e4m3: NaN */
    return bitsFloat(sign | 0x7f800000u | m << (23 - mb) | (m != 0 ? 0x400000u : 0));
  if (e == 0) return bitsFloat(sign | floatBits((float)m * FP8_SUB_UNIT(mb, bias, ieee)));
  return bitsFloat(sign | (e + 127 - bias) << 23 | m << (23 - mb));
}

/* Round to nearest even, saturating (see the top of the file). */
WEFT_HD uint8_t fp8Encode(float f, unsigned mb, unsigned bias, int ieee) {
  uint32_t u = floatBits(f), sign = (u >> 24) & 0x80u, ax = u & 0x7fffffffu;
  if (ax > 0x7f800000u) return 0x7f;
  /* Everything past the largest finite value (which needs no rounding) becomes it. */
  if (ax > FP8_MAX_BITS(mb, bias, ieee)) ax = FP8_MAX_BITS(mb, bias, ieee);
  if (ax >= FP8_MIN_NORMAL_BITS(mb, bias, ieee)) { /* rebias, round at bit 23 - mb */
    uint32_t shift = 23 - mb;
    ax -= (127 - bias) << 23;
    return (uint8_t)(sign | ((ax + (1u << (shift - 1)) - 1 + ((ax >> shift) & 1u)) >> shift));
  }
  float magic = FP8_SUB_MAGIC(mb, bias, ieee);
  return (uint8_t)(sign | (floatBits(bitsFloat(ax) + magic) - floatBits(magic)));
}

WEFT_HD float e4m3ToFloat(uint8_t c) { return fp8Decode(c, WEFT_E4M3); }
WEFT_HD uint8_t floatToE4m3(float f) { return fp8Encode(f, WEFT_E4M3); }
WEFT_HD float e5m2ToFloat(uint8_t c) { return fp8Decode(c, WEFT_E5M2); }
WEFT_HD uint8_t floatToE5m2(float f) { return fp8Encode(f, WEFT_E5M2); }

#ifndef __CUDACC__ /* GCC/Clang vector extensions: the host kernels of lib/reduce.c only */
/* The vector forms, on GCC/Clang generic vectors: U a vector of uint32_t lanes, I of int32_t,
 * F of float, all the same width (a lane compare gives I's 0 / -1). SEL(m, x, y) picks x where
 * m is set. c holds one code per lane; the result is F. */
#define FP8_SEL(m, x, y) ((__typeof__(x))(((m) & (__typeof__(m))(x)) | (~(m) & (__typeof__(m))(y))))
#define FP8_VDECODE(U, I, F, c, mb, bias, ieee)                                                  \
  __extension__({                                                                              \
    U c_ = (c), sign_ = (c_ & 0x80u) << 24, mag_ = c_ & 0x7fu;                                 \
    U e_ = mag_ >> (mb), m_ = mag_ & ((1u << (mb)) - 1);                                       \
    U normal_ = sign_ | (e_ + (127u - (bias))) << 23 | m_ << (23 - (mb));                      \
    F subF_ = __builtin_convertvector((I)m_, F) * FP8_SUB_UNIT(mb, bias, ieee);                \
    U sub_ = sign_ | (U)subF_;                                                                 \
    U special_ = sign_ | 0x7f800000u | m_ << (23 - (mb)) | ((U)(m_ != 0u) & 0x400000u);        \
    I isSpecial_ = (ieee) ? (e_ == (0x7fu >> (mb))) : (mag_ == 0x7fu);                         \
    (F)FP8_SEL(isSpecial_, special_, FP8_SEL(e_ == 0u, sub_, normal_));                        \
  })
/* v: F; the result is U, one code per lane. */
#define FP8_VENCODE(U, I, F, v, mb, bias, ieee)                                                  \
  __extension__({                                                                              \
    U u_ = (U)(v), sign_ = (u_ >> 24) & 0x80u, ax_ = u_ & 0x7fffffffu, zero_ = u_ ^ u_;        \
    I nan_ = ax_ > 0x7f800000u;                                                                \
    ax_ = FP8_SEL(ax_ > FP8_MAX_BITS(mb, bias, ieee), zero_ + FP8_MAX_BITS(mb, bias, ieee), ax_); \
    U t_ = ax_ - ((127u - (bias)) << 23);                                                      \
    U q_ = (t_ + ((1u << (22 - (mb))) - 1) + ((t_ >> (23 - (mb))) & 1u)) >> (23 - (mb));       \
    float magic_ = FP8_SUB_MAGIC(mb, bias, ieee);                                              \
    U sub_ = (U)((F)ax_ + magic_) - floatBits(magic_);                                         \
    U code_ = sign_ | FP8_SEL(ax_ >= FP8_MIN_NORMAL_BITS(mb, bias, ieee), q_, sub_);           \
    FP8_SEL(nan_, zero_ + 0x7fu, code_);                                                       \
  })

#endif /* __CUDACC__ */

#endif
