#include "refconv.h"

#include <math.h>
#include <string.h>

static uint32_t bitsOf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
static float floatOf(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

float refHalfToFloat(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 0x3ff;
  if (e == 31) /* Inf, or a NaN made quiet */
    return floatOf(((uint32_t)(h & 0x8000) << 16) | 0x7f800000u | (uint32_t)m << 13 | (m ? 0x400000u : 0));
  double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
  return (float)((h & 0x8000) ? -v : v);
}

/* Nearest even by scaling: nearbyint rounds ties to even in the default rounding mode. */
uint16_t refFloatToHalf(float f) {
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  if (isnan(f)) return (uint16_t)(sign | 0x7e00 | ((bitsOf(f) >> 13) & 0x3ff));
  double a = fabs((double)f);
  if (a >= 65520.0) return sign | 0x7c00;
  if (a < 0x1p-14) return (uint16_t)(sign | (uint16_t)nearbyint(a * 0x1p24));
  int e;
  frexp(a, &e); /* a in [2^(e-1), 2^e) */
  int q = (int)nearbyint(ldexp(a, 11 - e)); /* 1024..2048 */
  return (uint16_t)(sign | (((e - 1 + 15) << 10) + q - 1024));
}

float refBf16ToFloat(uint16_t b) {
  int e = (b >> 7) & 255, m = b & 0x7f;
  if (e == 255) return floatOf((uint32_t)b << 16); /* Inf and NaN, every bit kept */
  double v = e == 0 ? ldexp(m, -133) : ldexp(128 + m, e - 134);
  return (float)((b & 0x8000) ? -v : v);
}

uint16_t refFloatToBf16(float f) {
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  if (isnan(f)) return (uint16_t)((bitsOf(f) >> 16) | 0x40);
  double a = fabs((double)f);
  if (a >= ldexp(2.0 - 0x1p-8, 127)) return sign | 0x7f80;
  if (a < 0x1p-126) return (uint16_t)(sign | (uint16_t)nearbyint(a * 0x1p133));
  int e;
  frexp(a, &e);
  int q = (int)nearbyint(ldexp(a, 8 - e)); /* 128..256 */
  return (uint16_t)(sign | (((e - 1 + 127) << 7) + q - 128));
}
