/* The one interface between weft and an accelerator runtime (issue 12): memory, copies, streams,
 * events, the reduction kernels and IPC handles. weft's own code (the device collectives'
 * path, lib/devcoll.c; the cudaipc transport; weftMemAlloc) calls only this; each runtime is
 * one folder behind one ops table (devices/cuda/ today), so another accelerator runtime is one
 * more folder, not a rewrite.
 *
 * Streams and events are the runtime's own handles, passed as void * (a cudaStream_t; NULL is
 * the runtime's default stream). Every call that fails sets the thread's last error
 * (weftSetError) with the runtime's own words for it (cudaGetErrorString), and returns
 * weftUnhandledCudaError for the CUDA runtime's errors. */
#ifndef WEFT_DEVICE_H_
#define WEFT_DEVICE_H_

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

#define WEFT_DEVICE_IPC_BYTES 64 /* an IPC handle, as it travels in a connection blob */

/* What a buffer pointer is, to the runtime. */
enum weftMemKind {
  WEFT_MEM_HOST = 0,   /* host memory (pageable, or pinned / registered with the runtime) */
  WEFT_MEM_DEVICE = 1, /* device memory (managed memory counts as device) */
};

struct weftDeviceIpc {
  unsigned char bytes[WEFT_DEVICE_IPC_BYTES];
};

struct weftDeviceOps {
  const char *name; /* "cuda" */
  int version;      /* the runtime's version as built: 1000 * major + 10 * minor (CUDART_VERSION) */
  /* Devices this process can use (> 0), or 0 with the reason in why (no driver, no device,
   * driver older than the runtime; why NULL: not asked). Cheap after the first call (the
   * answer is kept). */
  int (*count)(char *why, size_t len);
  /* What p is; device: its device ordinal (-1 for host memory). A pointer the runtime cannot
   * classify is WEFT_MEM_HOST (plain malloc memory is one). Never initialises a runtime that
   * count() found unusable. */
  weftResult_t (*pointerKind)(const void *p, enum weftMemKind *kind, int *device);
  weftResult_t (*getDevice)(int *device);
  weftResult_t (*setDevice)(int device);

  weftResult_t (*alloc)(void **p, size_t bytes);    /* device memory, suited to IPC */
  weftResult_t (*free)(void *p);
  /* Pinned host memory, mapped into the device's address space (*devp: the device's view of
   * it, which stream memory operations and kernels may read). */
  weftResult_t (*hostAlloc)(void **p, void **devp, size_t bytes);
  weftResult_t (*hostFree)(void *p);

  weftResult_t (*streamCreate)(void **stream); /* non-blocking with respect to stream 0 */
  weftResult_t (*streamDestroy)(void *stream);
  weftResult_t (*streamSync)(void *stream);
  /* Any direction (unified addressing); enqueued on stream, never synchronous. */
  weftResult_t (*copyAsync)(void *dst, const void *src, size_t bytes, void *stream);

  weftResult_t (*eventCreate)(void **event); /* timing disabled */
  weftResult_t (*eventDestroy)(void *event);
  weftResult_t (*eventRecord)(void *event, void *stream);
  /* 1 when the work the event marks is done, 0 while it is not; < 0 on error. */
  int (*eventQuery)(void *event);
  weftResult_t (*eventSync)(void *event);

  /* The stream waits until *flag >= value, compared as the driver's CU_STREAM_WAIT_VALUE_GEQ
   * does: (int32_t)(*flag - value) >= 0, the uint32 order while the two are within 2^31 of
   * each other (a counter that wraps keeps working); flagDev is hostAlloc's device view of
   * flag's word. A host thread writes the flag. Stream-ordered: no kernel of this process
   * spins on another process's kernel (several ranks per GPU time-slice). */
  weftResult_t (*streamWaitFlag)(void *stream, void *flagDev, uint32_t value);

  /* dst[i] = a[i] op b[i], i < count, on stream: the same element functions as the host
   * reductions (lib/redelem.h), bit for bit. final (weftAvg only): the last step, which
   * divides by nranks. scale != NULL: dst = a * *scale (PreMulSum's scaling, b unused), the
   * scalar in host memory, read at enqueue. */
  weftResult_t (*reduceAsync)(void *dst, const void *a, const void *b, size_t count,
                              weftDataType_t type, weftRedOp_t op, int final, int nranks,
                              const void *scale, void *stream);

  /* IPC: a handle for the start of an allocation of alloc(), opened by another process of
   * the host (its pointer), closed there. */
  weftResult_t (*ipcGet)(void *p, struct weftDeviceIpc *handle);
  weftResult_t (*ipcOpen)(const struct weftDeviceIpc *handle, void **p);
  weftResult_t (*ipcClose)(void *p);
  /* Lets the current device read and write peer's memory where the hardware allows it; 0
   * when it did (or already had), 1 when the pair cannot (copies then go through the
   * runtime's own path), < 0 on error. */
  int (*enablePeer)(int peer);
};

/* The runtime this build has (NULL in a build without one: every buffer is host memory). */
const struct weftDeviceOps *weftDeviceRuntime(void);

/* Devices usable now (0 in a build without a runtime, or none found: why says which). */
int weftDeviceCount(char *why, size_t len);

/* Replaces the runtime (NULL: back to the build's own). For tests only: tests/common/emudev.c
 * emulates a device on the CPU so that the stream-ordered path runs where no GPU is. */
void weftDeviceSetRuntime(const struct weftDeviceOps *ops);

#endif
