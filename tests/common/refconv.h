/* fp16, bf16 and fp8 conversions for test references and inputs, written independently of
 * lib/lowfloat.h (arithmetic with frexp/ldexp/nearbyint, and for fp8 the values of the bit
 * fields and an exhaustive nearest search, where the library manipulates bits), so a
 * bug in the library's converters cannot hide in a reference that uses them too. Round to
 * nearest even; NaNs as the library documents them (widening makes a NaN quiet and keeps sign
 * and payload for fp16, keeps every bit for bf16; narrowing keeps the payload's top bits and
 * makes it quiet). */
#ifndef WEFT_TEST_REFCONV_H_
#define WEFT_TEST_REFCONV_H_

#include <stdint.h>

/* The OCP FP8 formats, described only by their fields. */
struct refFp8Format {
  const char *name;
  int expBits, mantBits, bias;
  int ieee; /* 1: an all-ones exponent is Inf (mantissa 0) or NaN (e5m2); 0: only the
               all-ones code is NaN (e4m3, "fn") */
};
extern const struct refFp8Format refE4m3, refE5m2;

/* The value of a code: +-0, subnormal, normal, +-Inf or NaN (then 0 with *isNan set). */
double refFp8Value(const struct refFp8Format *f, uint8_t code, int *isNan);
/* The fp32 the library widens a code to: the value, or for a NaN the quiet fp32 NaN with the
 * code's sign and its mantissa bits on top (lib/lowfloat.h), for an Inf the fp32 Inf. */
float refFp8ToFloat(const struct refFp8Format *f, uint8_t code);
/* Narrowing as CUDA's __NV_SATFINITE (what NCCL's fp8 reductions do): the finite code
 * nearest to f by an exhaustive search over all of them, a tie to the one with an even
 * mantissa; infinities to the largest finite of their sign; any NaN to 0x7f. */
uint8_t refFloatToFp8(const struct refFp8Format *f, float v);

float refHalfToFloat(uint16_t h);
uint16_t refFloatToHalf(float f);
float refBf16ToFloat(uint16_t b);
uint16_t refFloatToBf16(float f);

#endif
