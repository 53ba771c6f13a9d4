/* The CUDA runtime behind lib/device.h: weftCudaDevice, each op one runtime call or two.
 *
 * The runtime is linked statically (Makefile): it loads the driver, libcuda.so.1, itself on the
 * first call, so a machine without a driver or a GPU loads libweft.so and learns why from
 * count(). The one driver call weft needs, cuStreamWaitValue32, comes through the runtime's
 * cudaGetDriverEntryPointByVersion: cuda.h is included for its types only, nothing links
 * libcuda. Every failure is weftUnhandledCudaError with what weft was doing and CUDA's own name
 * and words for the error. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cuda_reduce.h"
#include "cuda_wait.h"
#include "device.h"
#include "log.h"

_Static_assert(sizeof(cudaIpcMemHandle_t) <= WEFT_DEVICE_IPC_BYTES,
               "a CUDA IPC handle must fit struct weftDeviceIpc");

/* Reports err as this thread's last error. The runtime also keeps err as its last error, which
 * a caller's later cudaGetLastError would take for its own: it is cleared here (a sticky error,
 * one that broke the context, stays whatever is done). */
static weftResult_t cudaFail(cudaError_t err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static weftResult_t cudaFail(cudaError_t err, const char *fmt, ...) {
  char what[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  (void)cudaGetLastError();
  return weftSetError(weftUnhandledCudaError, "%s: %s: %s", what, cudaGetErrorName(err),
                      cudaGetErrorString(err));
}

#define CUDA_TRY(call, ...)                                 \
  do {                                                      \
    cudaError_t err_ = (call);                              \
    if (err_ != cudaSuccess) return cudaFail(err_, __VA_ARGS__); \
  } while (0)

/* ---- devices: asked once, the answer kept (device.h: cheap after the first call) ---- */

static pthread_once_t countOnce = PTHREAD_ONCE_INIT;
static int devCount;
static char countWhy[256];

/* Why the runtime cannot start, in words that name the missing part: "insufficient driver"
 * is also what the runtime says where no driver is installed at all. */
static void countExplain(cudaError_t err) {
  int driver = 0;
  if (err == cudaErrorInsufficientDriver && cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0)
    snprintf(countWhy, sizeof countWhy, "no GPU: no CUDA driver (libcuda.so.1) is installed (cudaGetDeviceCount: %s)",
             cudaGetErrorString(err));
  else if (err == cudaErrorInsufficientDriver)
    snprintf(countWhy, sizeof countWhy, "no GPU: the CUDA driver (%d.%d) is older than the runtime weft was built with (%d.%d): %s",
             driver / 1000, driver % 1000 / 10, CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10,
             cudaGetErrorString(err));
  else if (err == cudaErrorNoDevice)
    snprintf(countWhy, sizeof countWhy, "no GPU: %s", cudaGetErrorString(err));
  else
    snprintf(countWhy, sizeof countWhy, "no GPU: the CUDA runtime failed to start: %s: %s",
             cudaGetErrorName(err), cudaGetErrorString(err));
}

/* CUDA does not survive fork: a child of a process that started it cannot use it, and no
 * device pointer of the parent's is valid there, so in the child every buffer is host memory
 * (its calls on host buffers work as in any process) and count() says why. */
static void forgetDevicesInChild(void) {
  if (devCount == 0) return;
  devCount = 0;
  snprintf(countWhy, sizeof countWhy, "no GPU: this process was forked after its parent started "
           "CUDA, which does not work in a forked child (start CUDA after fork, or exec)");
}

static void countProbe(void) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err == cudaSuccess && n > 0) {
    devCount = n;
    pthread_atfork(NULL, NULL, forgetDevicesInChild);
    return;
  }
  if (err == cudaSuccess) snprintf(countWhy, sizeof countWhy, "no GPU: the CUDA runtime finds no device");
  else countExplain(err);
  (void)cudaGetLastError();
}

static int devicesUsable(void) {
  pthread_once(&countOnce, countProbe);
  return devCount;
}

static int devCountOp(char *why, size_t len) {
  int n = devicesUsable();
  if (n == 0 && why != NULL && len > 0) snprintf(why, len, "%s", countWhy);
  return n;
}

/* ---- pointers and devices ---- */

static weftResult_t devPointerKind(const void *p, enum weftMemKind *kind, int *device) {
  *kind = WEFT_MEM_HOST;
  *device = -1;
  if (devicesUsable() == 0) return weftSuccess; /* no runtime to ask: all memory is the host's */
  struct cudaPointerAttributes attr;
  CUDA_TRY(cudaPointerGetAttributes(&attr, p), "classifying buffer %p (cudaPointerGetAttributes)", p);
  if (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged) {
    *kind = WEFT_MEM_DEVICE;
    *device = attr.device;
  }
  return weftSuccess;
}

static weftResult_t devGetDevice(int *device) {
  CUDA_TRY(cudaGetDevice(device), "asking for the current device (cudaGetDevice)");
  return weftSuccess;
}

static weftResult_t devSetDevice(int device) {
  CUDA_TRY(cudaSetDevice(device), "making device %d current (cudaSetDevice)", device);
  return weftSuccess;
}

/* ---- memory ---- */

/* cudaMalloc's memory, not a pool's: cudaIpcGetMemHandle takes only such allocations. */
static weftResult_t devAlloc(void **p, size_t bytes) {
  CUDA_TRY(cudaMalloc(p, bytes), "allocating %zu bytes of device memory (cudaMalloc)", bytes);
  return weftSuccess;
}

static weftResult_t devFree(void *p) {
  CUDA_TRY(cudaFree(p), "freeing device memory %p (cudaFree)", p);
  return weftSuccess;
}

/* Mapped: the device reads the words (streamWaitFlag); portable: every device of the process
 * sees them, whichever was current at the allocation. */
static weftResult_t devHostAlloc(void **p, void **devp, size_t bytes) {
  CUDA_TRY(cudaHostAlloc(p, bytes, cudaHostAllocMapped | cudaHostAllocPortable),
           "allocating %zu bytes of mapped host memory (cudaHostAlloc)", bytes);
  cudaError_t err = cudaHostGetDevicePointer(devp, *p, 0);
  if (err == cudaSuccess) return weftSuccess;
  weftResult_t rc = cudaFail(err, "the device's view of mapped host memory %p (cudaHostGetDevicePointer)", *p);
  (void)cudaFreeHost(*p);
  *p = NULL;
  return rc;
}

static weftResult_t devHostFree(void *p) {
  CUDA_TRY(cudaFreeHost(p), "freeing mapped host memory %p (cudaFreeHost)", p);
  return weftSuccess;
}

/* ---- streams, copies, events ---- */

/* Non-blocking: weft's streams never wait for, nor hold up, the legacy default stream. */
static weftResult_t devStreamCreate(void **stream) {
  cudaStream_t s;
  CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "creating a stream (cudaStreamCreateWithFlags)");
  *stream = s;
  return weftSuccess;
}

static weftResult_t devStreamDestroy(void *stream) {
  CUDA_TRY(cudaStreamDestroy((cudaStream_t)stream), "destroying stream %p (cudaStreamDestroy)", stream);
  return weftSuccess;
}

static weftResult_t devStreamSync(void *stream) {
  CUDA_TRY(cudaStreamSynchronize((cudaStream_t)stream), "waiting for stream %p (cudaStreamSynchronize)", stream);
  return weftSuccess;
}

/* cudaMemcpyDefault: unified addressing tells the runtime where each side lives. */
static weftResult_t devCopyAsync(void *dst, const void *src, size_t bytes, void *stream) {
  CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream),
           "copying %zu bytes from %p to %p on stream %p (cudaMemcpyAsync)", bytes, src, dst, stream);
  return weftSuccess;
}

/* Timing disabled: weft's events only order and complete, which makes them cheaper to record. */
static weftResult_t devEventCreate(void **event) {
  cudaEvent_t e;
  CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "creating an event (cudaEventCreateWithFlags)");
  *event = e;
  return weftSuccess;
}

static weftResult_t devEventDestroy(void *event) {
  CUDA_TRY(cudaEventDestroy((cudaEvent_t)event), "destroying event %p (cudaEventDestroy)", event);
  return weftSuccess;
}

static weftResult_t devEventRecord(void *event, void *stream) {
  CUDA_TRY(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream),
           "recording event %p on stream %p (cudaEventRecord)", event, stream);
  return weftSuccess;
}

/* cudaErrorNotReady is an answer, not a failure; the runtime keeps it as its last error all
 * the same, so it is cleared (as PyTorch's CUDAEvent::query does). */
static int devEventQuery(void *event) {
  cudaError_t err = cudaEventQuery((cudaEvent_t)event);
  if (err == cudaSuccess) return 1;
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return 0;
  }
  cudaFail(err, "asking whether event %p is done (cudaEventQuery)", event);
  return -1;
}

static weftResult_t devEventSync(void *event) {
  CUDA_TRY(cudaEventSynchronize((cudaEvent_t)event), "waiting for event %p (cudaEventSynchronize)", event);
  return weftSuccess;
}

/* ---- the stream's wait for a host flag ---- */

/* cuStreamWaitValue32 waits in the stream's front end and holds no SM, so ranks that share a
 * GPU keep running while one waits. CUDA 12 and later have the 32-bit stream memory operations
 * on every platform (the V2 API, no NVreg_EnableStreamMemOPs and no device attribute to check:
 * the attributes that remain are for the 64-bit and NOR forms, which weft does not use). The
 * entry point is asked for as of CUDA 12.0, which every driver that runs this runtime has;
 * where it is missing, or the driver answers CUDA_ERROR_NOT_SUPPORTED, the kernel of
 * cuda_wait.cu polls the flag instead. */
static pthread_once_t waitOnce = PTHREAD_ONCE_INIT;
static PFN_cuStreamWaitValue32_v11070 waitValue32;
static PFN_cuGetErrorString_v6000 driverErrorString;
static int memOpsRefused; /* set once the driver answered CUDA_ERROR_NOT_SUPPORTED */

static void *driverEntry(const char *symbol) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &status) != cudaSuccess ||
      status != cudaDriverEntryPointSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  return fn;
}

static void waitResolve(void) {
  waitValue32 = (PFN_cuStreamWaitValue32_v11070)driverEntry("cuStreamWaitValue32");
  driverErrorString = (PFN_cuGetErrorString_v6000)driverEntry("cuGetErrorString");
  if (waitValue32 == NULL) INFO(WEFT_INIT, "cuStreamWaitValue32 not found in the driver: streams wait on flags with a polling kernel");
}

static weftResult_t driverFail(CUresult rc, const char *what, void *stream, uint32_t value) {
  const char *text = NULL;
  if (driverErrorString == NULL || driverErrorString(rc, &text) != CUDA_SUCCESS || text == NULL)
    text = "unknown driver error";
  return weftSetError(weftUnhandledCudaError, "%s on stream %p until the flag reaches %u: CUresult %d: %s",
                      what, stream, value, (int)rc, text);
}

static weftResult_t devStreamWaitFlag(void *stream, void *flagDev, uint32_t value) {
  pthread_once(&waitOnce, waitResolve);
  if (waitValue32 != NULL && !__atomic_load_n(&memOpsRefused, __ATOMIC_RELAXED)) {
    CUresult rc = waitValue32((CUstream)stream, (CUdeviceptr)(uintptr_t)flagDev, value, CU_STREAM_WAIT_VALUE_GEQ);
    if (rc == CUDA_SUCCESS) return weftSuccess;
    if (rc != CUDA_ERROR_NOT_SUPPORTED) return driverFail(rc, "waiting (cuStreamWaitValue32)", stream, value);
    __atomic_store_n(&memOpsRefused, 1, __ATOMIC_RELAXED);
    INFO(WEFT_INIT, "the driver refuses stream memory operations: streams wait on flags with a polling kernel");
  }
  CUDA_TRY(weftCudaLaunchWaitFlag((cudaStream_t)stream, flagDev, value),
           "launching the kernel that waits on stream %p until the flag reaches %u", stream, value);
  return weftSuccess;
}

/* ---- IPC and peers ---- */

static weftResult_t devIpcGet(void *p, struct weftDeviceIpc *handle) {
  cudaIpcMemHandle_t h;
  CUDA_TRY(cudaIpcGetMemHandle(&h, p), "making an IPC handle for device memory %p (cudaIpcGetMemHandle)", p);
  memset(handle, 0, sizeof *handle);
  memcpy(handle->bytes, &h, sizeof h);
  return weftSuccess;
}

/* Lazy peer access: the mapping enables it where the memory is another device's. */
static weftResult_t devIpcOpen(const struct weftDeviceIpc *handle, void **p) {
  cudaIpcMemHandle_t h;
  memcpy(&h, handle->bytes, sizeof h);
  CUDA_TRY(cudaIpcOpenMemHandle(p, h, cudaIpcMemLazyEnablePeerAccess),
           "opening another process's device memory (cudaIpcOpenMemHandle)");
  return weftSuccess;
}

static weftResult_t devIpcClose(void *p) {
  CUDA_TRY(cudaIpcCloseMemHandle(p), "closing another process's device memory %p (cudaIpcCloseMemHandle)", p);
  return weftSuccess;
}

static int devEnablePeer(int peer) {
  int dev, can = 0;
  if (devGetDevice(&dev) != weftSuccess) return -1;
  if (peer == dev) return 0; /* a device always reaches its own memory */
  cudaError_t err = cudaDeviceCanAccessPeer(&can, dev, peer);
  if (err != cudaSuccess) {
    cudaFail(err, "asking whether device %d reaches device %d (cudaDeviceCanAccessPeer)", dev, peer);
    return -1;
  }
  if (!can) return 1;
  err = cudaDeviceEnablePeerAccess(peer, 0);
  if (err == cudaSuccess) return 0;
  if (err == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError(); /* not sticky: the runtime's last error would otherwise keep it */
    return 0;
  }
  cudaFail(err, "letting device %d reach device %d (cudaDeviceEnablePeerAccess)", dev, peer);
  return -1;
}

const struct weftDeviceOps weftCudaDevice = {
    .name = "cuda",
    .version = CUDART_VERSION,
    .count = devCountOp,
    .pointerKind = devPointerKind,
    .getDevice = devGetDevice,
    .setDevice = devSetDevice,
    .alloc = devAlloc,
    .free = devFree,
    .hostAlloc = devHostAlloc,
    .hostFree = devHostFree,
    .streamCreate = devStreamCreate,
    .streamDestroy = devStreamDestroy,
    .streamSync = devStreamSync,
    .copyAsync = devCopyAsync,
    .eventCreate = devEventCreate,
    .eventDestroy = devEventDestroy,
    .eventRecord = devEventRecord,
    .eventQuery = devEventQuery,
    .eventSync = devEventSync,
    .streamWaitFlag = devStreamWaitFlag,
    .reduceAsync = weftCudaReduceAsync,
    .ipcGet = devIpcGet,
    .ipcOpen = devIpcOpen,
    .ipcClose = devIpcClose,
    .enablePeer = devEnablePeer,
};
