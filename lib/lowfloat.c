/* The conversions of lowfloat.h as functions, for tests and references (reduce.h). */
#include "lowfloat.h"

#include "reduce.h"

float weftHalfToFloat(uint16_t h) { return halfToFloat(h); }
uint16_t weftFloatToHalf(float f) { return floatToHalf(f); }
float weftBf16ToFloat(uint16_t b) { return bf16ToFloat(b); }
uint16_t weftFloatToBf16(float f) { return floatToBf16(f); }
float weftE4m3ToFloat(uint8_t c) { return e4m3ToFloat(c); }
uint8_t weftFloatToE4m3(float f) { return floatToE4m3(f); }
float weftE5m2ToFloat(uint8_t c) { return e5m2ToFloat(c); }
uint8_t weftFloatToE5m2(float f) { return floatToE5m2(f); }
