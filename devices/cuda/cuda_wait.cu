// streamWaitFlag's fallback kernel (devices/cuda/cuda_wait.h). It occupies one thread of one SM
// for as long as it waits, and while it runs the GPU does not switch to another process's
// kernels before a time slice ends: that is why the driver's cuStreamWaitValue32, which waits in
// the stream's front end, comes first, and this kernel only where the driver refuses it.
#include "cuda_wait.h"

// volatile: every iteration loads the word from the host's memory again (a host thread writes
// it); __nanosleep spaces the loads, which cross PCIe or C2C, and leaves the SM's issue slots
// to the other kernels of this process.
__global__ void weftWaitFlagKernel(const volatile uint32_t *flag, uint32_t value) {
  unsigned ns = 32;
  while ((int32_t)(*flag - value) < 0) {
    __nanosleep(ns);
    if (ns < 4096) ns *= 2;
  }
}

extern "C" cudaError_t weftCudaLaunchWaitFlag(cudaStream_t stream, const void *flagDev, uint32_t value) {
  weftWaitFlagKernel<<<1, 1, 0, stream>>>(static_cast<const volatile uint32_t *>(flagDev), value);
  return cudaGetLastError();
}
