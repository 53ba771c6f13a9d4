/* Unit tests of the CUDA reduction kernels (devices/cuda/cuda_reduce.cu): weftCudaReduceAsync
 * against the host's weftReduceApply / weftReduceFinal / weftReduceScale, bit for bit, for
 * every type, op, final step and scaling, at counts that leave no vector, one vector and a
 * tail, many of both, with vector-aligned and misaligned buffers and in place. A GPU test
 * needs a GPU (skipped "[needs gpu]" with the reason, also in a build without CUDA); the
 * argument checks and a failing launch on a machine without one run wherever CUDA is built. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reduce.h"

#ifdef WEFT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "../../devices/cuda/cuda_reduce.h"
#include "device.h"
#include "log.h"
#endif

TestSuite(cuda_reduce, .timeout = 300);

#ifdef WEFT_HAVE_CUDA

/* 1 when a GPU is usable; 0 with why: the library's own answer (weftDeviceCount), not a
 * second probe of CUDA's. */
static int haveGpu(char *why, size_t len) { return weftDeviceCount(why, len) > 0; }
#define NEED_GPU()                                                        \
  do {                                                                    \
    char why_[256];                                                       \
    if (!haveGpu(why_, sizeof why_)) cr_skip_test("[needs gpu] %s", why_); \
  } while (0)

#define CUDA_OK(call)                                                                  \
  do {                                                                                 \
    cudaError_t err_ = (call);                                                         \
    cr_assert_eq(err_, cudaSuccess, "%s: %s", #call, cudaGetErrorString(err_));        \
  } while (0)

static uint64_t rngState;
static uint64_t rnd(void) { /* splitmix64 */
  uint64_t z = (rngState += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Corner cases by element size, as bits: NaNs, infinities, +-0, denormals, the largest finite
 * values and 1 of the float types of that size, and the integers' extremes. */
static const uint64_t corners[9][10] = {
    [1] = {0x7f, 0xff, 0x7c, 0xfc, 0x00, 0x80, 0x01, 0x7e, 0x7b, 0x38},
    [2] = {0x7e00, 0x7fc1, 0x7c00, 0xff80, 0x0000, 0x8000, 0x0001, 0x7bff, 0x7f7f, 0x3c00},
    [4] = {0x7fc12345, 0xffc00000, 0x7f800000, 0xff800000, 0, 0x80000000, 1, 0x7f7fffff,
           0x80000001, 0x3f800000},
    [8] = {0x7ff8000000012345, 0xfff8000000000000, 0x7ff0000000000000, 0xfff0000000000000, 0,
           0x8000000000000000, 1, 0x7fefffffffffffff, 0x7fffffffffffffff, 0x3ff0000000000000},
};

static void fill(unsigned char *p, size_t n, size_t sz) {
  for (size_t i = 0; i < n; i++) {
    uint64_t r = rnd(), v = (r & 3) == 0 ? corners[sz][(r >> 8) % 10] : r >> 3;
    memcpy(p + i * sz, &v, sz);
  }
}

static const size_t counts[] = {0, 1, 7, 1021, 40009};
#define MAXCOUNT 40009
#define GUARD 64 /* bytes before and after dst that must stay as they were */

/* Element offsets of dst, a, b from 256-byte aligned allocations: all vector-aligned; dst
 * alone off; all three off by one element. */
static const size_t offsets[][3] = {{0, 0, 0}, {1, 0, 0}, {1, 1, 1}};

enum mode { APPLY, FINAL, SCALE, INPLACE };
static const char *modeNames[] = {"apply", "final", "scale", "in place"};

struct bufs {
  unsigned char *dA, *dB, *dD; /* device */
  unsigned char *hA, *hB, *hD, *want;
  void *stream;
};

/* The host's answer for one case. */
static void hostReduce(enum mode m, void *want, const void *a, const void *b, size_t n,
                       weftDataType_t t, weftRedOp_t op, const void *scalar) {
  if (m == SCALE) weftReduceScale(want, a, scalar, n, t);
  else if (m == FINAL) weftReduceFinal(want, a, b, n, t, op, 3);
  else weftReduceApply(want, a, b, n, t, op);
}

static void runCase(struct bufs *bf, weftDataType_t t, weftRedOp_t op, enum mode m, size_t n,
                    const size_t *off) {
  size_t sz = weftTypeSize(t), bytes = n * sz;
  unsigned char *dA = bf->dA + GUARD + off[1] * sz, *dB = bf->dB + GUARD + off[2] * sz;
  unsigned char *dD = m == INPLACE ? dA : bf->dD + GUARD + off[0] * sz;
  uint64_t scalar = corners[sz][rnd() % 10];
  fill(bf->hA, n, sz);
  fill(bf->hB, n, sz);
  CUDA_OK(cudaMemcpy(dA, bf->hA, bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dB, bf->hB, bytes, cudaMemcpyHostToDevice));
  if (m != INPLACE) CUDA_OK(cudaMemset(bf->dD, 0xa5, MAXCOUNT * 8 + 2 * GUARD + 64));
  weftResult_t rc = weftCudaReduceAsync(dD, dA, dB, n, t, op, m == FINAL, 3,
                                        m == SCALE ? &scalar : NULL, bf->stream);
  cr_assert_eq(rc, weftSuccess, "%s %s %s n=%zu: %s", weftTypeName(t), weftOpName(op),
               modeNames[m], n, weftThreadLastError());
  scalar = ~scalar; /* read at enqueue: a later change must not matter */
  CUDA_OK(cudaStreamSynchronize((cudaStream_t)bf->stream));
  scalar = ~scalar;
  hostReduce(m, bf->want, bf->hA, bf->hB, n, t, op, &scalar);
  unsigned char *back = m == INPLACE ? dD : bf->dD;
  size_t backBytes = m == INPLACE ? bytes : bytes + 2 * GUARD + off[0] * sz;
  CUDA_OK(cudaMemcpy(bf->hD, back, backBytes, cudaMemcpyDeviceToHost));
  const unsigned char *got = m == INPLACE ? bf->hD : bf->hD + GUARD + off[0] * sz;
  for (size_t i = 0; i < n; i++) {
    if (memcmp(got + i * sz, bf->want + i * sz, sz) == 0) continue;
    uint64_t g = 0, w = 0, x = 0, y = 0;
    memcpy(&g, got + i * sz, sz), memcpy(&w, bf->want + i * sz, sz);
    memcpy(&x, bf->hA + i * sz, sz), memcpy(&y, bf->hB + i * sz, sz);
    cr_assert_fail("%s %s %s n=%zu offsets %zu,%zu,%zu: element %zu (a 0x%llx, b 0x%llx): GPU "
                   "0x%llx, host 0x%llx", weftTypeName(t), weftOpName(op), modeNames[m], n,
                   off[0], off[1], off[2], i, (unsigned long long)x, (unsigned long long)y,
                   (unsigned long long)g, (unsigned long long)w);
  }
  if (m == INPLACE) return;
  for (size_t i = 0; i < GUARD + off[0] * sz; i++) cr_assert_eq(bf->hD[i], 0xa5, "wrote before dst");
  for (size_t i = 0; i < GUARD; i++)
    cr_assert_eq(got[bytes + i], 0xa5, "%s %s n=%zu: wrote past dst", weftTypeName(t),
                 modeNames[m], n);
}

Test(cuda_reduce, every_type_op_mode_count_alignment) {
  NEED_GPU();
  size_t bytes = MAXCOUNT * 8 + 2 * GUARD + 64;
  struct bufs bf = {0};
  CUDA_OK(cudaMalloc((void **)&bf.dA, bytes));
  CUDA_OK(cudaMalloc((void **)&bf.dB, bytes));
  CUDA_OK(cudaMalloc((void **)&bf.dD, bytes));
  bf.hA = malloc(bytes), bf.hB = malloc(bytes), bf.hD = malloc(bytes), bf.want = malloc(bytes);
  cr_assert(bf.hA && bf.hB && bf.hD && bf.want);
  CUDA_OK(cudaStreamCreateWithFlags((cudaStream_t *)&bf.stream, cudaStreamNonBlocking));
  static const weftRedOp_t ops[] = {weftSum, weftProd, weftMax, weftMin, weftAvg, WEFT_OP_PREMULSUM};
  rngState = 12;
  for (int t = 0; t < weftNumTypes; t++)
    for (size_t o = 0; o < sizeof ops / sizeof ops[0]; o++)
      for (int m = APPLY; m <= INPLACE; m++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
          for (size_t k = 0; k < sizeof offsets / sizeof offsets[0]; k++)
            runCase(&bf, (weftDataType_t)t, ops[o], (enum mode)m, counts[c], offsets[k]);
  CUDA_OK(cudaStreamDestroy((cudaStream_t)bf.stream));
  CUDA_OK(cudaFree(bf.dA));
  CUDA_OK(cudaFree(bf.dB));
  CUDA_OK(cudaFree(bf.dD));
  free(bf.hA), free(bf.hB), free(bf.hD), free(bf.want);
}

/* No CUDA call is made before the arguments are checked: these hold with or without a GPU. */
Test(cuda_reduce, invalid_arguments) {
  char x[8] = {0};
  cr_assert_eq(weftCudaReduceAsync(x, x, x, 1, weftNumTypes, weftSum, 0, 1, NULL, NULL),
               weftInvalidArgument);
  cr_assert(strstr(weftThreadLastError(), "invalid datatype"), "%s", weftThreadLastError());
  cr_assert_eq(weftCudaReduceAsync(x, x, x, 1, weftFloat32, (weftRedOp_t)(weftNumOps + 1), 0, 1,
                                   NULL, NULL), weftInvalidArgument);
  cr_assert(strstr(weftThreadLastError(), "invalid op"), "%s", weftThreadLastError());
  cr_assert_eq(weftCudaReduceAsync(x, x, x, 0, weftFloat32, weftSum, 0, 1, NULL, NULL), weftSuccess,
               "nothing to reduce is no launch");
}

/* Where no GPU is usable, a reduction is weftUnhandledCudaError with CUDA's words for why;
 * where one is, the same launch works. */
Test(cuda_reduce, launch_without_gpu_is_a_cuda_error) {
  char why[256];
  float x[2] = {1, 2}, *p = x;
  int gpu = haveGpu(why, sizeof why);
  if (gpu) {
    CUDA_OK(cudaMalloc((void **)&p, sizeof x));
    CUDA_OK(cudaMemcpy(p, x, sizeof x, cudaMemcpyHostToDevice));
  }
  weftResult_t rc = weftCudaReduceAsync(p, p, p, 2, weftFloat32, weftSum, 0, 1, NULL, NULL);
  if (gpu) {
    cr_assert_eq(rc, weftSuccess, "%s", weftThreadLastError());
    CUDA_OK(cudaMemcpy(x, p, sizeof x, cudaMemcpyDeviceToHost));
    cr_assert(x[0] == 2 && x[1] == 4, "%g %g", x[0], x[1]);
    CUDA_OK(cudaFree(p));
    return;
  }
  cr_assert_eq(rc, weftUnhandledCudaError);
  const char *msg = weftThreadLastError();
  cr_assert(strstr(msg, "reduction kernel (float sum, 2 elements): ") && strstr(msg, ": cuda"),
            "%s", msg);
}

#else /* a build without CUDA */

Test(cuda_reduce, every_type_op_mode_count_alignment) { cr_skip_test("[needs gpu] this build has no CUDA"); }

#endif
