/* Element-wise reductions on host memory, vectorized (AVX-512 / AVX2 picked at run time,
 * portable C otherwise). Integers wrap around; fp16, bf16 and fp8 are computed in fp32 and
 * rounded to nearest even (fp8 saturating, lowfloat.h); weftAvg is a sum until the final step,
 * which divides by nranks. */
#ifndef WEFT_REDUCE_H_
#define WEFT_REDUCE_H_

#include <stddef.h>
#include "weft.h"

/* The op a PreMulSum handle (lib/redop.c) becomes once the collective's entry has scaled its
 * input: reduced as weftSum, but an op of its own in names and in the collective's signature
 * (8 bits, lib/coll.c), so ranks that mix Sum and PreMulSum are told apart. Never a value a
 * user passes: handles are 256 and above, and a user's op of this value is refused. */
#define WEFT_OP_PREMULSUM ((weftRedOp_t)weftNumOps)

size_t weftTypeSize(weftDataType_t type);
int weftTypeIsFloat(weftDataType_t type);
const char *weftTypeName(weftDataType_t type);
const char *weftOpName(weftRedOp_t op);

/* dst[i] = a[i] op b[i], i < count. dst may equal a or b (not partially overlap).
 * weftAvg reduces as weftSum here. */
void weftReduceApply(void *dst, const void *a, const void *b, size_t count, weftDataType_t type,
                weftRedOp_t op);

/* The last reduction of an AllReduce: as weftReduceApply, but for weftAvg the result is
 * (a + b) / nranks, computed before the one rounding to the type. */
void weftReduceFinal(void *dst, const void *a, const void *b, size_t count,
                     weftDataType_t type, weftRedOp_t op, int nranks);

/* For weftAvg with one contribution: dst[i] = src[i] / nranks; other ops: a copy. */
void weftReduceFinalCopy(void *dst, const void *src, size_t count, weftDataType_t type,
                         weftRedOp_t op, int nranks);

/* dst[i] = src[i] * *scalar in the type, i < count, as weftProd computes it (integers wrap,
 * as unsigned arithmetic does, signed ones too; fp16/bf16/fp8 in fp32, rounded once). dst may
 * equal src. PreMulSum's scaling. */
void weftReduceScale(void *dst, const void *src, const void *scalar, size_t count,
                     weftDataType_t type);

/* The check of WEFT_SIMD (a weftParamCheckFn, param.h): a level this CPU has. */
int weftReduceCheckSimd(const char *value, char *allowed, size_t len);

/* Name of the kernel set in use ("avx512", "avx2", "portable"), for logs and tests. */
const char *weftReduceKernelName(void);

/* fp16 / bf16 / fp8 conversions, round to nearest even, fp8 saturating (lowfloat.h; exposed
 * for tests and references, lib/lowfloat.c). */
float weftHalfToFloat(uint16_t h);
uint16_t weftFloatToHalf(float f);
float weftBf16ToFloat(uint16_t b);
uint16_t weftFloatToBf16(float f);
float weftE4m3ToFloat(uint8_t c);
uint8_t weftFloatToE4m3(float f);
float weftE5m2ToFloat(uint8_t c);
uint8_t weftFloatToE5m2(float f);

#endif
