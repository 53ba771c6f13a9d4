/* The CUDA reduction kernels (cuda_reduce.h): lib/reduce.h's reductions on device memory, on
 * the caller's stream.
 *
 * One grid-stride kernel per datatype; each element goes through the element functions of
 * lib/redelem.h, the very functions the host kernels of lib/reduce.c run (their portable path
 * and their SIMD tails), so the bits are the host's. That also needs the same operations on
 * the GPU as on the CPU: the Makefile compiles this file with -fmad=false (no a * b + c fused
 * into one rounding) and without fast math (IEEE division, --prec-div=true, and denormals kept,
 * --ftz=false: nvcc's defaults).
 *
 * Loads: where dst, a and b are all 16-byte aligned, each thread moves 16 bytes at a time (one
 * uint4 of 16 / sizeof(T) elements), then the elements past the last whole vector one at a time;
 * otherwise every element one at a time (buffers are aligned to their element size, as on the
 * host). dst may equal a or b: each thread reads its elements of a and b before it writes the
 * same elements of dst, and no other thread touches them.
 *
 * Instantiations: 12 kernels, one per type; the op is a run-time argument, switched on once per
 * thread into a loop whose op is a compile-time constant (the switch of redelem.h's tag_apply
 * then folds away), so the inner loops carry no branch on the op. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

extern "C" {
#include "log.h"
#include "reduce.h"
}
#include "cuda_reduce.h"
#include "redelem.h"

static_assert((int)WEFT_OP_PREMULSUM == (int)weftNumOps, "redelem.h's weftElemOp knows PreMulSum so");

namespace {

constexpr int kThreads = 512;
constexpr int kBlocksPerSm = 2;
constexpr int kMaxDevices = 64; /* SM counts kept for this many device ordinals */

/* One type: its storage and its element function (redelem.h's tag_apply). */
#define WEFT_ELEM(tag, T)                                                                      \
  struct tag##Elem {                                                                          \
    typedef T type;                                                                           \
    static __device__ __forceinline__ T apply(T a, T b, int op, int n) {                      \
      return tag##_apply(a, b, op, n);                                                        \
    }                                                                                         \
  };
WEFT_ELEM(i8, int8_t)
WEFT_ELEM(u8, uint8_t)
WEFT_ELEM(i32, int32_t)
WEFT_ELEM(u32, uint32_t)
WEFT_ELEM(i64, int64_t)
WEFT_ELEM(u64, uint64_t)
WEFT_ELEM(f16, uint16_t)
WEFT_ELEM(f32, float)
WEFT_ELEM(f64, double)
WEFT_ELEM(bf16, uint16_t)
WEFT_ELEM(e4m3, uint8_t)
WEFT_ELEM(e5m2, uint8_t)

/* A kernel's arguments. b == NULL: a scaling, every b element is scalar. */
template <class E>
struct Args {
  typedef typename E::type T;
  T *dst;
  const T *a, *b;
  T scalar;
  size_t count;
  int nranks;
  int vectors; /* dst, a and b are 16-byte aligned */
};

/* The whole 16-byte vectors, grid-stride; returns the elements they covered. memcpy between
 * a uint4 and an array of T is the defined way to reinterpret it; nvcc keeps both in
 * registers. */
template <class E, int OP>
__device__ __forceinline__ size_t reduceVectors(const Args<E> &p, size_t tid, size_t stride) {
  typedef typename E::type T;
  constexpr int W = 16 / sizeof(T);
  const size_t nvec = p.count / W;
  const uint4 *va = reinterpret_cast<const uint4 *>(p.a);
  const uint4 *vb = reinterpret_cast<const uint4 *>(p.b);
  uint4 *vd = reinterpret_cast<uint4 *>(p.dst);
  for (size_t v = tid; v < nvec; v += stride) {
    T x[W], y[W], r[W];
    uint4 in = va[v];
    memcpy(x, &in, sizeof in);
    if (vb != nullptr) {
      in = vb[v];
      memcpy(y, &in, sizeof in);
    } else {
#pragma unroll
      for (int k = 0; k < W; k++) y[k] = p.scalar;
    }
#pragma unroll
    for (int k = 0; k < W; k++) r[k] = E::apply(x[k], y[k], OP, p.nranks);
    uint4 out;
    memcpy(&out, r, sizeof out);
    vd[v] = out;
  }
  return nvec * W;
}

/* The elements from `from` on, one at a time (the tail, or everything when unaligned). */
template <class E, int OP>
__device__ __forceinline__ void reduceElements(const Args<E> &p, size_t from, size_t tid,
                                               size_t stride) {
  for (size_t i = from + tid; i < p.count; i += stride) {
    typename E::type y = p.b != nullptr ? p.b[i] : p.scalar;
    p.dst[i] = E::apply(p.a[i], y, OP, p.nranks);
  }
}

template <class E, int OP>
__device__ __forceinline__ void reduceAll(const Args<E> &p) {
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  const size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  size_t done = p.vectors ? reduceVectors<E, OP>(p, tid, stride) : 0;
  reduceElements<E, OP>(p, done, tid, stride);
}

/* op: weftSum .. weftAvg, as redelem.h's weftElemOp maps it. */
template <class E>
__global__ void __launch_bounds__(kThreads) reduceKernel(Args<E> p, int op) {
  switch (op) {
    case weftSum: reduceAll<E, weftSum>(p); break;
    case weftProd: reduceAll<E, weftProd>(p); break;
    case weftMax: reduceAll<E, weftMax>(p); break;
    case weftMin: reduceAll<E, weftMin>(p); break;
    default: reduceAll<E, weftAvg>(p); break;
  }
}

/* what: the step that failed, NULL for the launch itself. */
weftResult_t cudaFailed(const char *what, weftDataType_t type, weftRedOp_t op, size_t count,
                        cudaError_t err) {
  return weftSetError(weftUnhandledCudaError, "reduction kernel (%s %s, %zu elements): %s%s%s: %s",
                      weftTypeName(type), weftOpName(op), count, what ? what : "",
                      what ? ": " : "", cudaGetErrorName(err), cudaGetErrorString(err));
}

/* The current device's SM count, read once per device (a relaxed race between two first
 * callers only reads it twice). */
cudaError_t smCount(int *sms) {
  static int known[kMaxDevices];
  int dev;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  if (dev >= 0 && dev < kMaxDevices && (*sms = __atomic_load_n(&known[dev], __ATOMIC_RELAXED)) > 0)
    return cudaSuccess;
  err = cudaDeviceGetAttribute(sms, cudaDevAttrMultiProcessorCount, dev);
  if (err != cudaSuccess) return err;
  if (dev >= 0 && dev < kMaxDevices) __atomic_store_n(&known[dev], *sms, __ATOMIC_RELAXED);
  return cudaSuccess;
}

/* One thread per vector (or element), capped at kBlocksPerSm blocks per SM: more would only
 * queue behind them, and each thread strides over the rest. */
unsigned gridFor(size_t units, int sms) {
  size_t blocks = (units + kThreads - 1) / kThreads;
  size_t cap = (size_t)kBlocksPerSm * (size_t)(sms > 0 ? sms : 1);
  return (unsigned)(blocks < cap ? blocks : cap);
}

struct Call {
  void *dst;
  const void *a, *b, *scale;
  size_t count;
  weftDataType_t type;
  weftRedOp_t op; /* the caller's, for messages */
  int elemOp, nranks;
  cudaStream_t stream;
};

template <class E>
weftResult_t launch(const Call &c) {
  typedef typename E::type T;
  Args<E> p;
  p.dst = static_cast<T *>(c.dst);
  p.a = static_cast<const T *>(c.a);
  p.b = c.scale != nullptr ? nullptr : static_cast<const T *>(c.b);
  p.scalar = T();
  if (c.scale != nullptr) memcpy(&p.scalar, c.scale, sizeof p.scalar); /* read at enqueue */
  p.count = c.count;
  p.nranks = c.nranks;
  uintptr_t bits = (uintptr_t)c.dst | (uintptr_t)c.a | (uintptr_t)p.b;
  p.vectors = bits % 16 == 0;
  int sms;
  cudaError_t err = smCount(&sms);
  if (err != cudaSuccess) return cudaFailed("the SM count", c.type, c.op, c.count, err);
  size_t units = p.vectors ? (c.count * sizeof(T) + 15) / 16 : c.count;
  reduceKernel<E><<<gridFor(units, sms), kThreads, 0, c.stream>>>(p, c.elemOp);
  err = cudaGetLastError();
  if (err != cudaSuccess) return cudaFailed(NULL, c.type, c.op, c.count, err);
  return weftSuccess;
}

weftResult_t launchType(const Call &c) {
  switch (c.type) {
    case weftInt8: return launch<i8Elem>(c);
    case weftUint8: return launch<u8Elem>(c);
    case weftInt32: return launch<i32Elem>(c);
    case weftUint32: return launch<u32Elem>(c);
    case weftInt64: return launch<i64Elem>(c);
    case weftUint64: return launch<u64Elem>(c);
    case weftFloat16: return launch<f16Elem>(c);
    case weftFloat32: return launch<f32Elem>(c);
    case weftFloat64: return launch<f64Elem>(c);
    case weftBfloat16: return launch<bf16Elem>(c);
    case weftFloat8e4m3: return launch<e4m3Elem>(c);
    case weftFloat8e5m2: return launch<e5m2Elem>(c);
    default: return weftSetError(weftInvalidArgument, "reduction kernel: invalid datatype %d", (int)c.type);
  }
}

} // namespace

extern "C" weftResult_t weftCudaReduceAsync(void *dst, const void *a, const void *b, size_t count,
                                            weftDataType_t type, weftRedOp_t op, int final,
                                            int nranks, const void *scale, void *stream) {
  if ((unsigned)type >= weftNumTypes)
    return weftSetError(weftInvalidArgument, "reduction kernel: invalid datatype %d", (int)type);
  if (scale == nullptr && (unsigned)op > (unsigned)WEFT_OP_PREMULSUM)
    return weftSetError(weftInvalidArgument, "reduction kernel: invalid op %d", (int)op);
  if (count == 0) return weftSuccess; /* a grid of 0 blocks is a launch error */
  Call c;
  c.dst = dst;
  c.a = a;
  c.b = b;
  c.scale = scale;
  c.count = count;
  c.type = type;
  c.op = scale != nullptr ? weftProd : op;
  /* The host's weftReduceScale is weftProd against the scalar; weftReduceFinal's nranks, like
   * the host's, only matters to Avg. */
  c.elemOp = scale != nullptr ? (int)weftProd : weftElemOp(op, final);
  c.nranks = final && scale == nullptr && nranks > 1 ? nranks : 1;
  c.stream = static_cast<cudaStream_t>(stream);
  return launchType(c);
}
