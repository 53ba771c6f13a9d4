/* fp16 and bf16 conversions for test references and inputs, written independently of
 * lib/reduce.c (arithmetic with frexp/ldexp/nearbyint where the library manipulates bits), so a
 * bug in the library's converters cannot hide in a reference that uses them too. Round to
 * nearest even; NaNs as the library documents them (widening makes a NaN quiet and keeps sign
 * and payload for fp16, keeps every bit for bf16; narrowing keeps the payload's top bits and
 * makes it quiet). */
#ifndef WEFT_TEST_REFCONV_H_
#define WEFT_TEST_REFCONV_H_

#include <stdint.h>

float refHalfToFloat(uint16_t h);
uint16_t refFloatToHalf(float f);
float refBf16ToFloat(uint16_t b);
uint16_t refFloatToBf16(float f);

#endif
