/* The fallback of weftCudaDevice's streamWaitFlag (devices/cuda/cuda_wait.cu): where the driver
 * refuses stream memory operations, a one-thread kernel on the stream polls the flag. */
#ifndef WEFT_CUDA_WAIT_H_
#define WEFT_CUDA_WAIT_H_

#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueues on stream a kernel that returns once (int32_t)(*flagDev - value) >= 0; flagDev is the
 * device's view of a mapped host word. The launch's error (cudaGetLastError), cudaSuccess when
 * it was enqueued. */
cudaError_t weftCudaLaunchWaitFlag(cudaStream_t stream, const void *flagDev, uint32_t value);

#ifdef __cplusplus
}
#endif

#endif
