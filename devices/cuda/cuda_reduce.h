/* The CUDA reduction kernels (cuda_reduce.cu): the reduceAsync op of the CUDA runtime
 * (lib/device.h), included from C (cuda_device.c) and from CUDA C++. */
#ifndef WEFT_CUDA_REDUCE_H_
#define WEFT_CUDA_REDUCE_H_

#include <stddef.h>

#include "weft.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueues dst[i] = a[i] op b[i], i < count, on stream (a cudaStream_t; NULL the default
 * stream) and returns: lib/reduce.h's functions, bit for bit, on device memory.
 *  - final = 0: weftReduceApply (weftAvg and WEFT_OP_PREMULSUM reduce as weftSum);
 *  - final = 1: weftReduceFinal (weftAvg gives (a + b) / nranks, nranks < 1 taken as 1);
 *  - scale != NULL: weftReduceScale, dst = a * *scale in the type (op, final and b unused);
 *    scale points to one element in host memory, read before this returns.
 * dst may equal a or b. weftInvalidArgument for a type or op reduce.h does not know;
 * weftUnhandledCudaError (with the CUDA error, weftGetLastError) when the launch fails. */
weftResult_t weftCudaReduceAsync(void *dst, const void *a, const void *b, size_t count,
                                 weftDataType_t type, weftRedOp_t op, int final, int nranks,
                                 const void *scale, void *stream);

#ifdef __cplusplus
}
#endif

#endif
