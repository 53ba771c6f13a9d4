/* WEFT_HD marks a function that gcc/clang compile as C11 and nvcc as CUDA C++ for both the host
 * and the device: the element-wise reduction (redelem.h) and the low-float conversions it uses
 * (lowfloat.h) are written once, so the CPU tests check the arithmetic the kernels run. Such a
 * function uses only what both languages and both sides share: explicit casts, fixed-width
 * integers, the bit casts below, isnan, no libc beyond them. Static, so that under -fPIC the
 * compiler may inline every call (an exported function could be interposed). */
#ifndef WEFT_HOSTDEV_H_
#define WEFT_HOSTDEV_H_

#ifdef __CUDACC__
#define WEFT_HD static __host__ __device__ __forceinline__
#else
#define WEFT_HD static inline
#endif

#endif
