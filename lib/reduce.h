/* Element-wise reductions on host memory, vectorized (AVX-512 / AVX2 picked at run time,
 * portable C otherwise). Integers wrap around; fp16 and bf16 are computed in fp32 and rounded
 * to nearest even; weftAvg is a sum until the final step, which divides by nranks. */
#ifndef WEFT_REDUCE_H_
#define WEFT_REDUCE_H_

#include <stddef.h>
#include "weft.h"

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

/* The check of WEFT_SIMD (a weftParamCheckFn, param.h): a level this CPU has. */
int weftReduceCheckSimd(const char *value, char *allowed, size_t len);

/* Name of the kernel set in use ("avx512", "avx2", "portable"), for logs and tests. */
const char *weftReduceKernelName(void);

/* fp16 / bf16 conversions, round to nearest even (exposed for tests and references). */
float weftHalfToFloat(uint16_t h);
uint16_t weftFloatToHalf(float f);
float weftBf16ToFloat(uint16_t b);
uint16_t weftFloatToBf16(float f);

#endif
