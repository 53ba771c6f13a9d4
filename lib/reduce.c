/* Element-wise reductions (see reduce.h).
 *
 * Three kernel sets compute the same function: portable C (generic GCC/Clang vectors, so SSE2
 * or NEON; fp16 and bf16 one element at a time), AVX2 + F16C, and AVX-512 (F, BW, VL) + F16C
 * intrinsics; fp8 on generic vectors of each set's width (x86 has no fp8 instructions). One set is picked once per process from the CPU and WEFT_SIMD. Results are
 * bit-identical whichever set runs, because:
 *  - every kernel computes exactly `a op b` per element, in the same precision (fp16, bf16 and
 *    fp8 in fp32), with IEEE division (never a reciprocal) for Avg and no multiply-add anywhere, so
 *    nothing can be contracted to an FMA (the SIMD targets leave "fma" off for the same reason);
 *  - the scalar tails of the SIMD loops call the element functions of the portable path
 *    (lib/redelem.h, which the device kernels run too);
 *  - the software fp16 conversions (lowfloat.h) replicate F16C bit for bit, NaN payloads
 *    included, the bf16 conversion is the same integer rounding in every path, and the fp8
 *    conversions are the same steps in their scalar and vector forms;
 *  - where IEEE leaves a choice (which NaN comes out of NaN op NaN) the code makes it.
 *
 * NaN: Sum, Prod and Avg of two NaNs give a's, made quiet. Max/Min propagate NaN:
 * max(a, b) = (a > b || isnan(a)) ? a : b, likewise min with <. A NaN from any rank therefore
 * reaches the result whatever the reduction order (plain a > b ? a : b would drop a NaN in a
 * and keep one in b). With +0 and -0, max and min give b. Integer Avg wraps the sum in the
 * type, then divides truncating toward zero.
 *
 * Buffers must be aligned to their element size (C's rule for the pointers); they need no
 * vector alignment. dst may equal a or b: each vector of a and b is loaded before the
 * matching vector of dst is stored, and the portable loops carry no `restrict`. */
#include "reduce.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "lowfloat.h"
#include "param.h"
#include "redelem.h"

#if defined(__x86_64__) || defined(__i386__)
#define WEFT_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define WEFT_X86 0
#endif

/* ---- Types and names ---------------------------------------------------------------------- */

/* Indexed by weftDataType_t: a type added to weft.h without a row here fails to compile. */
static const struct {
  size_t size;
  const char *name; /* nccl-tests' names */
  int isFloat;
} types[] = {
    [weftInt8] = {1, "int8", 0},         [weftUint8] = {1, "uint8", 0},
    [weftInt32] = {4, "int32", 0},       [weftUint32] = {4, "uint32", 0},
    [weftInt64] = {8, "int64", 0},       [weftUint64] = {8, "uint64", 0},
    [weftFloat16] = {2, "half", 1},      [weftFloat32] = {4, "float", 1},
    [weftFloat64] = {8, "double", 1},    [weftBfloat16] = {2, "bfloat16", 1},
    [weftFloat8e4m3] = {1, "f8e4m3", 1}, [weftFloat8e5m2] = {1, "f8e5m2", 1},
};
_Static_assert(sizeof types / sizeof types[0] == weftNumTypes, "a row for every datatype");
static const char *const opNames[WEFT_OP_PREMULSUM + 1] = {"sum", "prod", "max", "min", "avg",
                                                           "premulsum"};

static int validType(weftDataType_t type) { return (unsigned)type < weftNumTypes; }
/* The built-in ops and the internal PreMulSum code (reduce.h). */
static int validOp(weftRedOp_t op) { return (unsigned)op <= (unsigned)WEFT_OP_PREMULSUM; }

size_t weftTypeSize(weftDataType_t type) { return validType(type) ? types[type].size : 0; }
int weftTypeIsFloat(weftDataType_t type) { return validType(type) && types[type].isFloat; }
const char *weftTypeName(weftDataType_t type) {
  return validType(type) ? types[type].name : "unknown";
}
const char *weftOpName(weftRedOp_t op) { return validOp(op) ? opNames[op] : "unknown"; }

/* ---- Element functions: lib/redelem.h, shared with the device kernels; the portable kernels
 * and the SIMD tails both use them. ---------------------------------------------------------- */

/* ---- Kernels ------------------------------------------------------------------------------ */

typedef void (*binaryFn)(void *dst, const void *a, const void *b, size_t n, int nranks);
typedef void (*unaryFn)(void *dst, const void *src, size_t n, int nranks);

struct kernelSet {
  const char *name;
  binaryFn binary[weftNumTypes][weftNumOps]; /* [weftAvg]: the final (a + b) / nranks */
  unaryFn divide[weftNumTypes];              /* dst = src / nranks */
};

/* Plain loops over an element function: fp16/bf16 in the portable set, and integer Avg and
 * division everywhere (there is no SIMD integer division). */
#define BINARY_LOOP(name, ATTR, T, F)                                                          \
  ATTR static void name(void *dst, const void *a, const void *b, size_t n, int nranks) {      \
    T *d = dst;                                                                               \
    const T *x = a, *y = b;                                                                   \
    for (size_t i = 0; i < n; i++) d[i] = F(x[i], y[i], nranks);                              \
  }
#define UNARY_LOOP(name, ATTR, T, F)                                                           \
  ATTR static void name(void *dst, const void *src, size_t n, int nranks) {                   \
    T *d = dst;                                                                               \
    const T *x = src;                                                                         \
    for (size_t i = 0; i < n; i++) d[i] = F(x[i], nranks);                                    \
  }

/* Generic vectors (GCC/Clang vector extensions) of W bytes. gcc -O2 does not vectorize a loop
 * of unknown trip count (its "very cheap" cost model), so the loops say it explicitly; the
 * compiler emits the instructions of the target in effect: SSE2 (or NEON) in the portable set,
 * AVX2 or AVX-512 inside the target-attributed functions. Lane-wise +, *, / and compares are
 * the scalar IEEE / wrapping operations, so the results equal the element functions'. */
#define VEC_TYPES(W)                                                                           \
  typedef int8_t i8_v##W __attribute__((vector_size(W)));                                     \
  typedef uint8_t u8_v##W __attribute__((vector_size(W)));                                    \
  typedef int32_t i32_v##W __attribute__((vector_size(W)));                                   \
  typedef uint32_t u32_v##W __attribute__((vector_size(W)));                                  \
  typedef int64_t i64_v##W __attribute__((vector_size(W)));                                   \
  typedef uint64_t u64_v##W __attribute__((vector_size(W)));                                  \
  typedef float f32_v##W __attribute__((vector_size(W)));                                     \
  typedef double f64_v##W __attribute__((vector_size(W)));                                    \
  typedef uint8_t u8q_v##W __attribute__((vector_size(W / 4))); /* fp8 codes of W bytes of fp32 */
VEC_TYPES(16)
VEC_TYPES(32)
VEC_TYPES(64)

/* Lane ops. A compare gives a signed integer vector of 0 / -1 lanes; VSEL(m, x, y) picks x
 * where m is set (C has no ?: on vectors). Sum and product run on unsigned lanes, which wrap. */
#define VSEL(m, x, y) ((__typeof__(x))(((m) & (__typeof__(m))(x)) | (~(m) & (__typeof__(m))(y))))
#define VX_SUM(x, y, n) ((x) + (y))
#define VX_PROD(x, y, n) ((x) * (y))
#define VX_MAX(x, y, n) VSEL((x) > (y), x, y)
#define VX_MIN(x, y, n) VSEL((x) < (y), x, y)
#define VX_FSUM(x, y, n) VSEL((x) != (x), (x) + (x), (x) + (y)) /* a's NaN first, as f32_sum */
#define VX_FPROD(x, y, n) VSEL((x) != (x), (x) + (x), (x) * (y))
#define VX_FMAX(x, y, n) VSEL(((x) > (y)) | ((x) != (x)), x, y)
#define VX_FMIN(x, y, n) VSEL(((x) < (y)) | ((x) != (x)), x, y)
#define VX_AVG(x, y, n) (VX_FSUM(x, y, n) / (__typeof__((x)[0]))(n))
#define VX_DIV(x, n) ((x) / (__typeof__((x)[0]))(n))

/* Whole vectors of VT through VOP (memcpy: unaligned loads; a and b are read before dst is
 * written), then the tail through the element function F. */
#define VEC_BINARY(name, ATTR, T, VT, VOP, F)                                                  \
  ATTR static void name(void *dst, const void *a, const void *b, size_t n, int nranks) {      \
    T *d = dst;                                                                               \
    const T *x = a, *y = b;                                                                   \
    const size_t w = sizeof(VT) / sizeof(T);                                                  \
    size_t i = 0;                                                                             \
    for (; i + w <= n; i += w) {                                                              \
      VT va, vb, vr;                                                                          \
      memcpy(&va, x + i, sizeof va);                                                          \
      memcpy(&vb, y + i, sizeof vb);                                                          \
      vr = VOP(va, vb, nranks);                                                               \
      memcpy(d + i, &vr, sizeof vr);                                                          \
    }                                                                                         \
    for (; i < n; i++) d[i] = F(x[i], y[i], nranks);                                          \
  }
#define VEC_UNARY(name, ATTR, T, VT, VOP, F)                                                   \
  ATTR static void name(void *dst, const void *src, size_t n, int nranks) {                   \
    T *d = dst;                                                                               \
    const T *x = src;                                                                         \
    const size_t w = sizeof(VT) / sizeof(T);                                                  \
    size_t i = 0;                                                                             \
    for (; i + w <= n; i += w) {                                                              \
      VT vx;                                                                                  \
      memcpy(&vx, x + i, sizeof vx);                                                          \
      vx = VOP(vx, nranks);                                                                   \
      memcpy(d + i, &vx, sizeof vx);                                                          \
    }                                                                                         \
    for (; i < n; i++) d[i] = F(x[i], nranks);                                                \
  }

/* Integer kernels of a set: sum and product on the unsigned lanes utag, max and min on tag's. */
#define INT_KERNELS(tag, utag, T, set, ATTR, W)                                                \
  VEC_BINARY(tag##_sum_##set, ATTR, T, utag##_v##W, VX_SUM, tag##_sum)                        \
  VEC_BINARY(tag##_prod_##set, ATTR, T, utag##_v##W, VX_PROD, tag##_prod)                     \
  VEC_BINARY(tag##_max_##set, ATTR, T, tag##_v##W, VX_MAX, tag##_max)                         \
  VEC_BINARY(tag##_min_##set, ATTR, T, tag##_v##W, VX_MIN, tag##_min)                         \
  BINARY_LOOP(tag##_avg_##set, ATTR, T, tag##_avg)                                            \
  UNARY_LOOP(tag##_div_##set, ATTR, T, tag##_div)
#define ALL_INT_KERNELS(set, ATTR, W)                                                          \
  INT_KERNELS(i8, u8, int8_t, set, ATTR, W)                                                   \
  INT_KERNELS(u8, u8, uint8_t, set, ATTR, W)                                                  \
  INT_KERNELS(i32, u32, int32_t, set, ATTR, W)                                                \
  INT_KERNELS(u32, u32, uint32_t, set, ATTR, W)                                               \
  INT_KERNELS(i64, u64, int64_t, set, ATTR, W)                                                \
  INT_KERNELS(u64, u64, uint64_t, set, ATTR, W)

#define ROW(tag, set) {tag##_sum_##set, tag##_prod_##set, tag##_max_##set, tag##_min_##set, tag##_avg_##set}
#define KERNEL_SET(set)                                                                        \
  static const struct kernelSet set##Kernels = {                                             \
      #set,                                                                                   \
      {ROW(i8, set), ROW(u8, set), ROW(i32, set), ROW(u32, set), ROW(i64, set),               \
       ROW(u64, set), ROW(f16, set), ROW(f32, set), ROW(f64, set), ROW(bf16, set),            \
       ROW(e4m3, set), ROW(e5m2, set)},                                                       \
      {i8_div_##set, u8_div_##set, i32_div_##set, u32_div_##set, i64_div_##set,               \
       u64_div_##set, f16_div_##set, f32_div_##set, f64_div_##set, bf16_div_##set,            \
       e4m3_div_##set, e5m2_div_##set}};

#define FLOAT_KERNELS(tag, T, set, ATTR, W)                                                    \
  VEC_BINARY(tag##_sum_##set, ATTR, T, tag##_v##W, VX_FSUM, tag##_sum)                        \
  VEC_BINARY(tag##_prod_##set, ATTR, T, tag##_v##W, VX_FPROD, tag##_prod)                     \
  VEC_BINARY(tag##_max_##set, ATTR, T, tag##_v##W, VX_FMAX, tag##_max)                        \
  VEC_BINARY(tag##_min_##set, ATTR, T, tag##_v##W, VX_FMIN, tag##_min)                        \
  VEC_BINARY(tag##_avg_##set, ATTR, T, tag##_v##W, VX_AVG, tag##_avg)                         \
  VEC_UNARY(tag##_div_##set, ATTR, T, tag##_v##W, VX_DIV, tag##_div)
#define LOOP_KERNELS(tag, T, set, ATTR)                                                        \
  BINARY_LOOP(tag##_sum_##set, ATTR, T, tag##_sum)                                            \
  BINARY_LOOP(tag##_prod_##set, ATTR, T, tag##_prod)                                          \
  BINARY_LOOP(tag##_max_##set, ATTR, T, tag##_max)                                            \
  BINARY_LOOP(tag##_min_##set, ATTR, T, tag##_min)                                            \
  BINARY_LOOP(tag##_avg_##set, ATTR, T, tag##_avg)                                            \
  UNARY_LOOP(tag##_div_##set, ATTR, T, tag##_div)

/* fp8: W / 4 codes at a time, widened to one fp32 vector of W bytes (lowfloat.h's
 * FP8_VDECODE), combined by the fp32 lane ops above, narrowed back (FP8_VENCODE); the tail
 * through the element function F, which computes the same bits. */
#define FP8_BINARY(name, ATTR, W, LOAD, STORE, VOP, F)                                         \
  ATTR static void name(void *dst, const void *a, const void *b, size_t n, int nranks) {      \
    uint8_t *d = dst;                                                                         \
    const uint8_t *x = a, *y = b;                                                             \
    size_t i = 0;                                                                             \
    for (; i + W / 4 <= n; i += W / 4) {                                                      \
      f32_v##W va = LOAD(x + i), vb = LOAD(y + i);                                            \
      STORE(d + i, VOP(va, vb, nranks));                                                      \
    }                                                                                         \
    for (; i < n; i++) d[i] = F(x[i], y[i], nranks);                                          \
  }
#define FP8_UNARY(name, ATTR, W, LOAD, STORE, F)                                               \
  ATTR static void name(void *dst, const void *src, size_t n, int nranks) {                   \
    uint8_t *d = dst;                                                                         \
    const uint8_t *x = src;                                                                   \
    size_t i = 0;                                                                             \
    for (; i + W / 4 <= n; i += W / 4) {                                                      \
      f32_v##W vx = LOAD(x + i);                                                              \
      STORE(d + i, VX_DIV(vx, nranks));                                                       \
    }                                                                                         \
    for (; i < n; i++) d[i] = F(x[i], nranks);                                                \
  }
/* The kernels of format fmt (its parameters MB, BIAS, IEEE: lowfloat.h's WEFT_E4M3 ...). */
#define FP8_KERNELS(fmt, MB, BIAS, IEEE, set, ATTR, W)                                         \
  ATTR static inline f32_v##W fmt##Load_##set(const uint8_t *p) {                             \
    u8q_v##W b;                                                                               \
    memcpy(&b, p, sizeof b);                                                                  \
    return FP8_VDECODE(u32_v##W, i32_v##W, f32_v##W, __builtin_convertvector(b, u32_v##W),    \
                       MB, BIAS, IEEE);                                                       \
  }                                                                                           \
  ATTR static inline void fmt##Store_##set(uint8_t *p, f32_v##W v) {                          \
    u8q_v##W b = __builtin_convertvector(FP8_VENCODE(u32_v##W, i32_v##W, f32_v##W, v, MB,     \
                                                     BIAS, IEEE), u8q_v##W);                  \
    memcpy(p, &b, sizeof b);                                                                  \
  }                                                                                           \
  FP8_BINARY(fmt##_sum_##set, ATTR, W, fmt##Load_##set, fmt##Store_##set, VX_FSUM, fmt##_sum) \
  FP8_BINARY(fmt##_prod_##set, ATTR, W, fmt##Load_##set, fmt##Store_##set, VX_FPROD,          \
             fmt##_prod)                                                                      \
  FP8_BINARY(fmt##_max_##set, ATTR, W, fmt##Load_##set, fmt##Store_##set, VX_FMAX, fmt##_max) \
  FP8_BINARY(fmt##_min_##set, ATTR, W, fmt##Load_##set, fmt##Store_##set, VX_FMIN, fmt##_min) \
  FP8_BINARY(fmt##_avg_##set, ATTR, W, fmt##Load_##set, fmt##Store_##set, VX_AVG, fmt##_avg)  \
  FP8_UNARY(fmt##_div_##set, ATTR, W, fmt##Load_##set, fmt##Store_##set, fmt##_div)
/* Both formats in set (the extra level expands WEFT_E4M3 into its three parameters). */
#define FP8_KERNELS_OF(...) FP8_KERNELS(__VA_ARGS__)
#define ALL_FP8_KERNELS(set, ATTR, W)                                                          \
  FP8_KERNELS_OF(e4m3, WEFT_E4M3, set, ATTR, W)                                               \
  FP8_KERNELS_OF(e5m2, WEFT_E5M2, set, ATTR, W)

/* Portable: 16-byte generic vectors, fp16/bf16 an element at a time. */
ALL_INT_KERNELS(portable, , 16)
FLOAT_KERNELS(f32, float, portable, , 16)
FLOAT_KERNELS(f64, double, portable, , 16)
LOOP_KERNELS(f16, uint16_t, portable, )
LOOP_KERNELS(bf16, uint16_t, portable, )
ALL_FP8_KERNELS(portable, , 16)
KERNEL_SET(portable)

#if WEFT_X86

/* SIMD loops for the floating-point types. LOAD gives W elements as fp32 or fp64 vectors (fp16
 * and bf16 widened), VOP combines them (nranks broadcast in vn by SET1), STORE writes them back
 * (rounded). Every vector of a and b is loaded before dst is written. The tail goes through the
 * element function F, which computes the same bits. */
#define SIMD_BINARY(name, ATTR, T, W, LOAD, STORE, SET1, VOP, F)                               \
  ATTR static void name(void *dst, const void *a, const void *b, size_t n, int nranks) {      \
    T *d = dst;                                                                               \
    const T *x = a, *y = b;                                                                   \
    const __typeof__(SET1(1)) vn = SET1(nranks);                                              \
    (void)vn;                                                                                 \
    size_t i = 0;                                                                             \
    for (; i + 2 * W <= n; i += 2 * W) {                                                      \
      __typeof__(LOAD(x)) x0 = LOAD(x + i), y0 = LOAD(y + i);                                 \
      __typeof__(LOAD(x)) x1 = LOAD(x + i + W), y1 = LOAD(y + i + W);                         \
      STORE(d + i, VOP(x0, y0, vn));                                                          \
      STORE(d + i + W, VOP(x1, y1, vn));                                                      \
    }                                                                                         \
    for (; i + W <= n; i += W) {                                                              \
      __typeof__(LOAD(x)) x0 = LOAD(x + i), y0 = LOAD(y + i);                                 \
      STORE(d + i, VOP(x0, y0, vn));                                                          \
    }                                                                                         \
    for (; i < n; i++) d[i] = F(x[i], y[i], nranks);                                          \
  }
#define SIMD_UNARY(name, ATTR, T, W, LOAD, STORE, SET1, VOP, F)                                \
  ATTR static void name(void *dst, const void *src, size_t n, int nranks) {                   \
    T *d = dst;                                                                               \
    const T *x = src;                                                                         \
    const __typeof__(SET1(1)) vn = SET1(nranks);                                              \
    size_t i = 0;                                                                             \
    for (; i + W <= n; i += W) {                                                              \
      __typeof__(LOAD(x)) x0 = LOAD(x + i);                                                   \
      STORE(d + i, VOP(x0, vn));                                                              \
    }                                                                                         \
    for (; i < n; i++) d[i] = F(x[i], nranks);                                                \
  }

/* The five binary ops and the division of one vector family OPS (op macros OPS##_SUM ...). */
#define SIMD_KERNELS(tag, T, set, ATTR, W, LOAD, STORE, SET1, OPS)                             \
  SIMD_BINARY(tag##_sum_##set, ATTR, T, W, LOAD, STORE, SET1, OPS##_SUM, tag##_sum)           \
  SIMD_BINARY(tag##_prod_##set, ATTR, T, W, LOAD, STORE, SET1, OPS##_PROD, tag##_prod)        \
  SIMD_BINARY(tag##_max_##set, ATTR, T, W, LOAD, STORE, SET1, OPS##_MAX, tag##_max)           \
  SIMD_BINARY(tag##_min_##set, ATTR, T, W, LOAD, STORE, SET1, OPS##_MIN, tag##_min)           \
  SIMD_BINARY(tag##_avg_##set, ATTR, T, W, LOAD, STORE, SET1, OPS##_AVG, tag##_avg)           \
  SIMD_UNARY(tag##_div_##set, ATTR, T, W, LOAD, STORE, SET1, OPS##_DIV, tag##_div)

/* No "fma": see the top of the file. */
#define ATTR_AVX2 __attribute__((target("avx2,f16c")))
#define ATTR_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,f16c")))
#define ROUND_NEAREST (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

/* -- AVX2: 8 fp32 or 4 fp64 lanes -- */

/* The vector forms of the element functions: sum and product return a's NaN (a + a) where a
 * is one; max and min add the isnan(a) selection to MAXPS's a > b ? a : b. */
#define AVX2_PS_NANFIRST(x, r) _mm256_blendv_ps(r, _mm256_add_ps(x, x), _mm256_cmp_ps(x, x, _CMP_UNORD_Q))
#define AVX2_PS_SUM(x, y, n) AVX2_PS_NANFIRST(x, _mm256_add_ps(x, y))
#define AVX2_PS_PROD(x, y, n) AVX2_PS_NANFIRST(x, _mm256_mul_ps(x, y))
#define AVX2_PS_MAX(x, y, n) _mm256_blendv_ps(_mm256_max_ps(x, y), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q))
#define AVX2_PS_MIN(x, y, n) _mm256_blendv_ps(_mm256_min_ps(x, y), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q))
#define AVX2_PS_AVG(x, y, n) _mm256_div_ps(AVX2_PS_SUM(x, y, n), n)
#define AVX2_PS_DIV(x, n) _mm256_div_ps(x, n)
#define AVX2_PD_NANFIRST(x, r) _mm256_blendv_pd(r, _mm256_add_pd(x, x), _mm256_cmp_pd(x, x, _CMP_UNORD_Q))
#define AVX2_PD_SUM(x, y, n) AVX2_PD_NANFIRST(x, _mm256_add_pd(x, y))
#define AVX2_PD_PROD(x, y, n) AVX2_PD_NANFIRST(x, _mm256_mul_pd(x, y))
#define AVX2_PD_MAX(x, y, n) _mm256_blendv_pd(_mm256_max_pd(x, y), x, _mm256_cmp_pd(x, x, _CMP_UNORD_Q))
#define AVX2_PD_MIN(x, y, n) _mm256_blendv_pd(_mm256_min_pd(x, y), x, _mm256_cmp_pd(x, x, _CMP_UNORD_Q))
#define AVX2_PD_AVG(x, y, n) _mm256_div_pd(AVX2_PD_SUM(x, y, n), n)
#define AVX2_PD_DIV(x, n) _mm256_div_pd(x, n)

ATTR_AVX2 static inline __m256 avx2LoadF32(const float *p) { return _mm256_loadu_ps(p); }
ATTR_AVX2 static inline void avx2StoreF32(float *p, __m256 v) { _mm256_storeu_ps(p, v); }
ATTR_AVX2 static inline __m256 avx2SetF32(int n) { return _mm256_set1_ps((float)n); }
ATTR_AVX2 static inline __m256d avx2LoadF64(const double *p) { return _mm256_loadu_pd(p); }
ATTR_AVX2 static inline void avx2StoreF64(double *p, __m256d v) { _mm256_storeu_pd(p, v); }
ATTR_AVX2 static inline __m256d avx2SetF64(int n) { return _mm256_set1_pd((double)n); }

ATTR_AVX2 static inline __m256 avx2LoadF16(const uint16_t *p) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
ATTR_AVX2 static inline void avx2StoreF16(uint16_t *p, __m256 v) {
  _mm_storeu_si128((__m128i *)p, _mm256_cvtps_ph(v, ROUND_NEAREST));
}

/* 16 bf16 as two fp32 vectors. Interleaving with zeros puts each bf16 in the top half of a
 * 32-bit lane; these in-lane unpacks (cheaper than widening moves, which cross lanes) permute
 * the elements the same way in a, b and dst, and the in-lane pack of the store undoes it. */
typedef struct {
  __m256 lo, hi;
} avx2Bf16;
ATTR_AVX2 static inline avx2Bf16 avx2LoadBf16(const uint16_t *p) {
  __m256i v = _mm256_loadu_si256((const __m256i *)p), z = _mm256_setzero_si256();
  avx2Bf16 r = {_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, v)),
                _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, v))};
  return r;
}
/* floatToBf16 on 8 lanes; the result is in the low half of each 32-bit lane. */
ATTR_AVX2 static inline __m256i avx2RoundBf16(__m256 v) {
  __m256i u = _mm256_castps_si256(v), hi = _mm256_srli_epi32(u, 16);
  __m256i bias = _mm256_add_epi32(_mm256_and_si256(hi, _mm256_set1_epi32(1)), _mm256_set1_epi32(0x7fff));
  __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(u, bias), 16);
  __m256i quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}
ATTR_AVX2 static inline void avx2StoreBf16(uint16_t *p, avx2Bf16 v) {
  /* Lanes hold 0..0xffff, so the signed-saturating pack is exact. */
  _mm256_storeu_si256((__m256i *)p, _mm256_packus_epi32(avx2RoundBf16(v.lo), avx2RoundBf16(v.hi)));
}
#define AVX2_BF_PAIR(OP, x, y, n) ((avx2Bf16){OP((x).lo, (y).lo, n), OP((x).hi, (y).hi, n)})
#define AVX2_BF_SUM(x, y, n) AVX2_BF_PAIR(AVX2_PS_SUM, x, y, n)
#define AVX2_BF_PROD(x, y, n) AVX2_BF_PAIR(AVX2_PS_PROD, x, y, n)
#define AVX2_BF_MAX(x, y, n) AVX2_BF_PAIR(AVX2_PS_MAX, x, y, n)
#define AVX2_BF_MIN(x, y, n) AVX2_BF_PAIR(AVX2_PS_MIN, x, y, n)
#define AVX2_BF_AVG(x, y, n) AVX2_BF_PAIR(AVX2_PS_AVG, x, y, n)
#define AVX2_BF_DIV(x, n) ((avx2Bf16){AVX2_PS_DIV((x).lo, n), AVX2_PS_DIV((x).hi, n)})

ALL_INT_KERNELS(avx2, ATTR_AVX2, 32)
SIMD_KERNELS(f32, float, avx2, ATTR_AVX2, 8, avx2LoadF32, avx2StoreF32, avx2SetF32, AVX2_PS)
SIMD_KERNELS(f64, double, avx2, ATTR_AVX2, 4, avx2LoadF64, avx2StoreF64, avx2SetF64, AVX2_PD)
SIMD_KERNELS(f16, uint16_t, avx2, ATTR_AVX2, 8, avx2LoadF16, avx2StoreF16, avx2SetF32, AVX2_PS)
SIMD_KERNELS(bf16, uint16_t, avx2, ATTR_AVX2, 16, avx2LoadBf16, avx2StoreBf16, avx2SetF32, AVX2_BF)
ALL_FP8_KERNELS(avx2, ATTR_AVX2, 32)
KERNEL_SET(avx2)

/* -- AVX-512: 16 fp32 or 8 fp64 lanes; the same operations as AVX2 -- */

#define AVX512_PS_NANFIRST(x, r) _mm512_mask_add_ps(r, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x, x)
#define AVX512_PS_SUM(x, y, n) AVX512_PS_NANFIRST(x, _mm512_add_ps(x, y))
#define AVX512_PS_PROD(x, y, n) AVX512_PS_NANFIRST(x, _mm512_mul_ps(x, y))
#define AVX512_PS_MAX(x, y, n) _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_max_ps(x, y), x)
#define AVX512_PS_MIN(x, y, n) _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), _mm512_min_ps(x, y), x)
#define AVX512_PS_AVG(x, y, n) _mm512_div_ps(AVX512_PS_SUM(x, y, n), n)
#define AVX512_PS_DIV(x, n) _mm512_div_ps(x, n)
#define AVX512_PD_NANFIRST(x, r) _mm512_mask_add_pd(r, _mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q), x, x)
#define AVX512_PD_SUM(x, y, n) AVX512_PD_NANFIRST(x, _mm512_add_pd(x, y))
#define AVX512_PD_PROD(x, y, n) AVX512_PD_NANFIRST(x, _mm512_mul_pd(x, y))
#define AVX512_PD_MAX(x, y, n) _mm512_mask_blend_pd(_mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q), _mm512_max_pd(x, y), x)
#define AVX512_PD_MIN(x, y, n) _mm512_mask_blend_pd(_mm512_cmp_pd_mask(x, x, _CMP_UNORD_Q), _mm512_min_pd(x, y), x)
#define AVX512_PD_AVG(x, y, n) _mm512_div_pd(AVX512_PD_SUM(x, y, n), n)
#define AVX512_PD_DIV(x, n) _mm512_div_pd(x, n)

ATTR_AVX512 static inline __m512 avx512LoadF32(const float *p) { return _mm512_loadu_ps(p); }
ATTR_AVX512 static inline void avx512StoreF32(float *p, __m512 v) { _mm512_storeu_ps(p, v); }
ATTR_AVX512 static inline __m512 avx512SetF32(int n) { return _mm512_set1_ps((float)n); }
ATTR_AVX512 static inline __m512d avx512LoadF64(const double *p) { return _mm512_loadu_pd(p); }
ATTR_AVX512 static inline void avx512StoreF64(double *p, __m512d v) { _mm512_storeu_pd(p, v); }
ATTR_AVX512 static inline __m512d avx512SetF64(int n) { return _mm512_set1_pd((double)n); }

ATTR_AVX512 static inline __m512 avx512LoadF16(const uint16_t *p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
ATTR_AVX512 static inline void avx512StoreF16(uint16_t *p, __m512 v) {
  _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(v, ROUND_NEAREST));
}

/* 32 bf16 as two fp32 vectors, interleaved as in AVX2. */
typedef struct {
  __m512 lo, hi;
} avx512Bf16;
ATTR_AVX512 static inline avx512Bf16 avx512LoadBf16(const uint16_t *p) {
  __m512i v = _mm512_loadu_si512(p), z = _mm512_setzero_si512();
  avx512Bf16 r = {_mm512_castsi512_ps(_mm512_unpacklo_epi16(z, v)),
                  _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, v))};
  return r;
}
ATTR_AVX512 static inline __m512i avx512RoundBf16(__m512 v) {
  __m512i u = _mm512_castps_si512(v), hi = _mm512_srli_epi32(u, 16);
  __m512i bias = _mm512_add_epi32(_mm512_and_si512(hi, _mm512_set1_epi32(1)), _mm512_set1_epi32(0x7fff));
  __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  __m512i quiet = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
  return _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), rounded, quiet);
}
ATTR_AVX512 static inline void avx512StoreBf16(uint16_t *p, avx512Bf16 v) {
  _mm512_storeu_si512(p, _mm512_packus_epi32(avx512RoundBf16(v.lo), avx512RoundBf16(v.hi)));
}
#define AVX512_BF_PAIR(OP, x, y, n) ((avx512Bf16){OP((x).lo, (y).lo, n), OP((x).hi, (y).hi, n)})
#define AVX512_BF_SUM(x, y, n) AVX512_BF_PAIR(AVX512_PS_SUM, x, y, n)
#define AVX512_BF_PROD(x, y, n) AVX512_BF_PAIR(AVX512_PS_PROD, x, y, n)
#define AVX512_BF_MAX(x, y, n) AVX512_BF_PAIR(AVX512_PS_MAX, x, y, n)
#define AVX512_BF_MIN(x, y, n) AVX512_BF_PAIR(AVX512_PS_MIN, x, y, n)
#define AVX512_BF_AVG(x, y, n) AVX512_BF_PAIR(AVX512_PS_AVG, x, y, n)
#define AVX512_BF_DIV(x, n) ((avx512Bf16){AVX512_PS_DIV((x).lo, n), AVX512_PS_DIV((x).hi, n)})

ALL_INT_KERNELS(avx512, ATTR_AVX512, 64)
SIMD_KERNELS(f32, float, avx512, ATTR_AVX512, 16, avx512LoadF32, avx512StoreF32, avx512SetF32, AVX512_PS)
SIMD_KERNELS(f64, double, avx512, ATTR_AVX512, 8, avx512LoadF64, avx512StoreF64, avx512SetF64, AVX512_PD)
SIMD_KERNELS(f16, uint16_t, avx512, ATTR_AVX512, 16, avx512LoadF16, avx512StoreF16, avx512SetF32, AVX512_PS)
SIMD_KERNELS(bf16, uint16_t, avx512, ATTR_AVX512, 32, avx512LoadBf16, avx512StoreBf16, avx512SetF32, AVX512_BF)
ALL_FP8_KERNELS(avx512, ATTR_AVX512, 64)
KERNEL_SET(avx512)

#endif /* WEFT_X86 */

/* ---- Selection, once per process ---------------------------------------------------------- */

static const struct kernelSet *activeKernels;
static pthread_once_t kernelsOnce = PTHREAD_ONCE_INIT;

/* The widest set this CPU (and OS: __builtin_cpu_supports checks the saved vector state) runs:
 * 0 portable, 2 AVX2, 512 AVX-512. */
static int cpuSimdLevel(void) {
#if WEFT_X86
  __builtin_cpu_init();
  unsigned eax, ebx, ecx = 0, edx;
  /* Clang's __builtin_cpu_supports does not know "f16c"; ask CPUID leaf 1 directly. */
  int f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C);
  if (!f16c || !__builtin_cpu_supports("avx2")) return 0;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl"))
    return 512;
  return 2;
#else
  return 0;
#endif
}

static const struct kernelSet *kernelSetFor(int level) {
#if WEFT_X86
  if (level == 512) return &avx512Kernels;
  if (level == 2) return &avx2Kernels;
#endif
  (void)level;
  return &portableKernels;
}

/* Without a value (docs/env.md, generated) the allowed values are the same on every machine;
 * a value being checked (a refusal's message, weft-info) adds the best this CPU has. */
int weftReduceCheckSimd(const char *value, char *allowed, size_t len) {
  int best = cpuSimdLevel();
  snprintf(allowed, len, "-1 (the best this CPU has), 0 (portable), 2 (AVX2) or 512 (AVX-512) "
                         "where the CPU has it");
  if (value == NULL) return 0;
  size_t o = strlen(allowed);
  snprintf(allowed + o, len - o, "; this CPU has %s", kernelSetFor(best)->name);
  int64_t v;
  if (weftParseInt(value, &v) != 0) return -1;
  return v == -1 || v == 0 || (v == 2 && best >= 2) || (v == 512 && best >= 512) ? 0 : -1;
}

/* WEFT_SIMD asks for a level (lib/settings.c refused one this CPU lacks before any reduction;
 * the fallback serves internal callers, tests among them, that skip that check). */
static void pickKernels(void) {
  int best = cpuSimdLevel(), level = best;
  int64_t want = weftParamSimd();
  if (want == 0 || want == 2 || want == 512) {
    level = want < best ? (int)want : best;
    if (want > best)
      WARN("WEFT_SIMD=%lld: this CPU lacks those instructions; using %s", (long long)want,
           kernelSetFor(best)->name);
  } else if (want != -1) {
    WARN("WEFT_SIMD=%lld is not -1, 0, 2 or 512; using %s", (long long)want, kernelSetFor(best)->name);
  }
  activeKernels = kernelSetFor(level);
  INFO(WEFT_INIT, "Reduction kernels: %s", activeKernels->name);
}

static const struct kernelSet *kernels(void) {
  pthread_once(&kernelsOnce, pickKernels);
  return activeKernels;
}

const char *weftReduceKernelName(void) { return kernels()->name; }

/* ---- Entry points ------------------------------------------------------------------------- */

/* Callers validate arguments at the API; an invalid pair here is a bug, reported not executed.
 * nranks below 1 would divide by zero: treat it as 1. */
static int checkArgs(weftDataType_t type, weftRedOp_t op) {
  if (validType(type) && validOp(op)) return 1;
  WARN("weftReduceApply: invalid datatype %d or op %d", (int)type, (int)op);
  return 0;
}

/* The op each element applies: redelem.h's weftElemOp, which the device kernels use too. */
_Static_assert((int)WEFT_OP_PREMULSUM == (int)weftNumOps, "weftElemOp knows PreMulSum so");

void weftReduceApply(void *dst, const void *a, const void *b, size_t count, weftDataType_t type,
                weftRedOp_t op) {
  if (count == 0 || !checkArgs(type, op)) return;
  kernels()->binary[type][weftElemOp(op, 0)](dst, a, b, count, 1);
}

void weftReduceFinal(void *dst, const void *a, const void *b, size_t count,
                     weftDataType_t type, weftRedOp_t op, int nranks) {
  if (count == 0 || !checkArgs(type, op)) return;
  kernels()->binary[type][weftElemOp(op, 1)](dst, a, b, count, nranks < 1 ? 1 : nranks);
}

/* The Prod kernel against a block of copies of the scalar: the same bits as weftProd of each
 * element with the scalar, from the same (vectorized) code. */
void weftReduceScale(void *dst, const void *src, const void *scalar, size_t count,
                     weftDataType_t type) {
  if (count == 0 || !checkArgs(type, weftProd)) return;
  size_t ts = types[type].size;
  uint64_t block[512]; /* 4 KiB, aligned for every type */
  size_t per = sizeof block / ts;
  for (size_t i = 0; i < per; i++) memcpy((char *)block + i * ts, scalar, ts);
  for (size_t i = 0; i < count; i += per) {
    size_t n = count - i < per ? count - i : per;
    kernels()->binary[type][weftProd]((char *)dst + i * ts, (const char *)src + i * ts, block, n, 1);
  }
}

void weftReduceFinalCopy(void *dst, const void *src, size_t count, weftDataType_t type,
                         weftRedOp_t op, int nranks) {
  if (count == 0 || !checkArgs(type, op)) return;
  if (op == weftAvg) kernels()->divide[type](dst, src, count, nranks < 1 ? 1 : nranks);
  else if (dst != src) memcpy(dst, src, count * types[type].size);
}
