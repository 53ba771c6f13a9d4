/* The element-wise reduction: one element of every type x op, written once for the host (gcc /
 * clang, C11) and the device (nvcc, CUDA C++): WEFT_HD (hostdev.h). lib/reduce.c's portable
 * kernels and the scalar tails of its SIMD kernels call these functions, and so does every
 * CUDA reduction kernel (devices/cuda/cuda_reduce.cu), so the CPU tests check the arithmetic
 * the kernels run (tests/unit/test_redelem.c).
 *
 * Each type has tag_sum, tag_prod, tag_max, tag_min, tag_avg (the final (a + b) / n), tag_div
 * (x / n) and tag_apply (one of the five by op, as a kernel calls them). n only matters to avg
 * and div; other steps pass 1. What each choice means, and why every kernel set gives the same
 * bits, is at the top of lib/reduce.c.
 *
 * The same bits on both sides need the same operations, each rounded once: nvcc must not
 * contract a * b + c into an FMA (-fmad=false, the Makefile's nvcc flags) nor turn x / n into
 * a reciprocal (no fast math: IEEE division, as --prec-div=true, nvcc's default). Both sides
 * use the same C rules otherwise: integer promotion and wrapping conversions are those of C++
 * too, and every conversion here is written as a cast. */
#ifndef WEFT_REDELEM_H_
#define WEFT_REDELEM_H_

#include <math.h>
#include <stdint.h>

#include "hostdev.h"
#include "lowfloat.h"
#include "weft.h"

/* Integers compute in the unsigned type W so that overflow wraps instead of being undefined;
 * converting back to a signed T wraps too (gcc, clang and nvcc define it; C++20 requires it).
 * D is the type the Avg division runs in, wide enough to hold n. */
#define WEFT_INT_ELEMENTS(tag, T, W, D)                                                        \
  WEFT_HD T tag##_sum(T a, T b, int n) { (void)n; return (T)(W)((W)a + (W)b); }               \
  WEFT_HD T tag##_prod(T a, T b, int n) { (void)n; return (T)(W)((W)a * (W)b); }              \
  WEFT_HD T tag##_max(T a, T b, int n) { (void)n; return a > b ? a : b; }                     \
  WEFT_HD T tag##_min(T a, T b, int n) { (void)n; return a < b ? a : b; }                     \
  WEFT_HD T tag##_div(T x, int n) { return (T)((D)x / (D)n); }                                \
  WEFT_HD T tag##_avg(T a, T b, int n) { return tag##_div(tag##_sum(a, b, n), n); }

WEFT_INT_ELEMENTS(i8, int8_t, unsigned, int)
WEFT_INT_ELEMENTS(u8, uint8_t, unsigned, int)
WEFT_INT_ELEMENTS(i32, int32_t, uint32_t, int32_t)
WEFT_INT_ELEMENTS(u32, uint32_t, uint32_t, uint32_t)
WEFT_INT_ELEMENTS(i64, int64_t, uint64_t, int64_t)
WEFT_INT_ELEMENTS(u64, uint64_t, uint64_t, uint64_t)

/* With two NaN operands x86 returns the first, but a compiler may swap the operands of a
 * commutative op, so which NaN came out would depend on code generation (and a GPU returns a
 * canonical NaN). Every path therefore returns a's NaN explicitly when a is one (a + a: a made
 * quiet, as a + b would on x86). isnan is C's macro on the host, CUDA's overloads on the
 * device. */
#define WEFT_FLOAT_ELEMENTS(tag, T)                                                            \
  WEFT_HD T tag##_sum(T a, T b, int n) { (void)n; return isnan(a) ? a + a : a + b; }          \
  WEFT_HD T tag##_prod(T a, T b, int n) { (void)n; return isnan(a) ? a + a : a * b; }         \
  WEFT_HD T tag##_max(T a, T b, int n) { (void)n; return (a > b || isnan(a)) ? a : b; }       \
  WEFT_HD T tag##_min(T a, T b, int n) { (void)n; return (a < b || isnan(a)) ? a : b; }       \
  WEFT_HD T tag##_div(T x, int n) { return x / (T)n; }                                        \
  WEFT_HD T tag##_avg(T a, T b, int n) { return tag##_sum(a, b, n) / (T)n; }

WEFT_FLOAT_ELEMENTS(f32, float)
WEFT_FLOAT_ELEMENTS(f64, double)

/* fp16, bf16 and fp8 (T their storage): widen to fp32, apply the fp32 function, round once. */
#define WEFT_NARROW_ELEMENTS(tag, T, TOF, FROMF)                                               \
  WEFT_HD T tag##_sum(T a, T b, int n) { return FROMF(f32_sum(TOF(a), TOF(b), n)); }          \
  WEFT_HD T tag##_prod(T a, T b, int n) { return FROMF(f32_prod(TOF(a), TOF(b), n)); }        \
  WEFT_HD T tag##_max(T a, T b, int n) { return FROMF(f32_max(TOF(a), TOF(b), n)); }          \
  WEFT_HD T tag##_min(T a, T b, int n) { return FROMF(f32_min(TOF(a), TOF(b), n)); }          \
  WEFT_HD T tag##_div(T x, int n) { return FROMF(f32_div(TOF(x), n)); }                       \
  WEFT_HD T tag##_avg(T a, T b, int n) { return FROMF(f32_avg(TOF(a), TOF(b), n)); }

WEFT_NARROW_ELEMENTS(f16, uint16_t, halfToFloat, floatToHalf)
WEFT_NARROW_ELEMENTS(bf16, uint16_t, bf16ToFloat, floatToBf16)
WEFT_NARROW_ELEMENTS(e4m3, uint8_t, e4m3ToFloat, floatToE4m3)
WEFT_NARROW_ELEMENTS(e5m2, uint8_t, e5m2ToFloat, floatToE5m2)

/* The element op of a reduction step (weftSum .. weftAvg) for a reduction's op: PreMulSum
 * (WEFT_OP_PREMULSUM, reduce.h: weftNumOps; its inputs were scaled at the collective's entry)
 * reduces as Sum, and Avg divides only in the final step, so it is Sum before. A scaling is
 * Prod against the scalar. */
WEFT_HD int weftElemOp(int op, int final) {
  return op == (int)weftNumOps || (op == (int)weftAvg && !final) ? (int)weftSum : op;
}

/* One element by op, as weftElemOp gives it (Avg is the final (a + b) / n). A kernel's op is
 * the same for all its threads, so the switch is a uniform branch; a caller whose op is a
 * constant has it folded away. */
#define WEFT_APPLY_ELEMENT(tag, T)                                                             \
  WEFT_HD T tag##_apply(T a, T b, int op, int n) {                                            \
    switch (op) {                                                                             \
      case weftSum: return tag##_sum(a, b, n);                                                \
      case weftProd: return tag##_prod(a, b, n);                                              \
      case weftMax: return tag##_max(a, b, n);                                                \
      case weftMin: return tag##_min(a, b, n);                                                \
      default: return tag##_avg(a, b, n);                                                     \
    }                                                                                         \
  }

WEFT_APPLY_ELEMENT(i8, int8_t)
WEFT_APPLY_ELEMENT(u8, uint8_t)
WEFT_APPLY_ELEMENT(i32, int32_t)
WEFT_APPLY_ELEMENT(u32, uint32_t)
WEFT_APPLY_ELEMENT(i64, int64_t)
WEFT_APPLY_ELEMENT(u64, uint64_t)
WEFT_APPLY_ELEMENT(f16, uint16_t)
WEFT_APPLY_ELEMENT(f32, float)
WEFT_APPLY_ELEMENT(f64, double)
WEFT_APPLY_ELEMENT(bf16, uint16_t)
WEFT_APPLY_ELEMENT(e4m3, uint8_t)
WEFT_APPLY_ELEMENT(e5m2, uint8_t)

#endif
