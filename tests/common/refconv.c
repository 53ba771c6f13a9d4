#include "refconv.h"

#include <math.h>
#include <pthread.h>
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

/* ---- fp8: from the fields, and narrowing by exhaustive search ---- */

const struct refFp8Format refE4m3 = {"e4m3", 4, 3, 7, 0};
const struct refFp8Format refE5m2 = {"e5m2", 5, 2, 15, 1};

double refFp8Value(const struct refFp8Format *f, uint8_t code, int *isNan) {
  int sign = code >> 7, e = (code >> f->mantBits) & ((1 << f->expBits) - 1);
  int m = code & ((1 << f->mantBits) - 1), eMax = (1 << f->expBits) - 1;
  *isNan = f->ieee ? e == eMax && m != 0 : (code & 0x7f) == 0x7f;
  if (*isNan) return 0;
  double v;
  if (f->ieee && e == eMax) v = INFINITY;
  else if (e == 0) v = ldexp(m, 1 - f->bias - f->mantBits);
  else v = ldexp((1 << f->mantBits) + m, e - f->bias - f->mantBits);
  return sign ? -v : v;
}

float refFp8ToFloat(const struct refFp8Format *f, uint8_t code) {
  int nan;
  double v = refFp8Value(f, code, &nan);
  if (!nan) return (float)v;
  uint32_t mant = code & ((1u << f->mantBits) - 1);
  return floatOf((uint32_t)(code & 0x80) << 24 | 0x7fc00000u | mant << (23 - f->mantBits));
}

/* The non-negative codes' values, computed once (pthread_once: ranks run as threads). */
static double fp8Table[2][0x80];
static char fp8Usable[2][0x80]; /* finite */
static double fp8Largest[2];
static int fp8Top[2]; /* the largest finite code */
static pthread_once_t fp8Once = PTHREAD_ONCE_INIT;
static void fillFp8Tables(void) {
  for (int k = 0; k < 2; k++)
    for (int c = 0; c < 0x80; c++) {
      int nan;
      fp8Table[k][c] = refFp8Value(k ? &refE5m2 : &refE4m3, (uint8_t)c, &nan);
      fp8Usable[k][c] = !nan && !isinf(fp8Table[k][c]);
      if (fp8Usable[k][c] && fp8Table[k][c] > fp8Largest[k]) fp8Largest[k] = fp8Table[k][c], fp8Top[k] = c;
    }
}

/* The finite non-negative codes are 0..fp8Top, their values increasing. From the largest
 * finite value up (infinities too) the largest is the nearest code: they are all below. Under
 * it, the nearest is one of the two codes around a, found by bisection; distances are exact in
 * double for those two (within a factor of 2 of a, or 0); a tie goes to the even code. */
uint8_t refFloatToFp8(const struct refFp8Format *f, float v) {
  if (isnan(v)) return 0x7f;
  pthread_once(&fp8Once, fillFp8Tables);
  int k = f == &refE5m2; /* the two formats there are */
  const double *value = fp8Table[k];
  uint8_t sign = signbit(v) ? 0x80 : 0;
  double a = fabs((double)v);
  if (a >= fp8Largest[k]) return sign | (uint8_t)fp8Top[k];
  int lo = 0, hi = fp8Top[k]; /* value[lo] <= a < value[hi] */
  while (hi - lo > 1) {
    int mid = (lo + hi) / 2;
    if (value[mid] <= a) lo = mid;
    else hi = mid;
  }
  double below = a - value[lo], above = value[hi] - a;
  int nearest = below < above || (below == above && (lo & 1) == 0) ? lo : hi;
  return sign | (uint8_t)nearest;
}
