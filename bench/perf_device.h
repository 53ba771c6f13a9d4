/* Device buffers for the weft benchmarks (-g 1, -B; issue 12): where the build's accelerator
 * runtime (lib/device.h) has a usable device, each rank allocates its send and receive buffers
 * there, on device rank % devices, creates one stream and passes it to every call, as
 * nccl-tests does. The table's data is made and checked on the host: the driver keeps host
 * mirrors of both buffers and copies between them and the device (perfDev*Copy). Without a
 * device (or with -B host, or in an MPI baseline) every function here is a no-op on host
 * buffers, so the host path stays what it was. */
#ifndef WEFT_BENCH_PERF_DEVICE_H_
#define WEFT_BENCH_PERF_DEVICE_H_

#include <stddef.h>

#include "perf_opts.h"
#include "perf_team.h"

/* The process's choice, made once before its ranks start. */
typedef struct {
  const struct weftDeviceOps *ops; /* NULL: host buffers */
  int nDevices;
  int ranksPerHost; /* the most ranks on one host of the job (threads x local processes) */
  char why[256];    /* host buffers: why */
} perfMemory;

/* Chooses the buffers from -B, the benchmark (hostOnly: an MPI baseline) and the runtime.
 * Returns NULL, or a message refusing the run (-B device where none can be had). Collective
 * over the processes once MPI has started (the ranks per host). */
const char *perfMemoryChoose(perfMemory *m, const perfOpts *o, int hostOnly);
/* The header's "# Buffers: ..." lines (world rank 0): which memory, why host, and a warning
 * when ranks share a device. */
void perfMemoryHeader(const perfMemory *m);
/* The device rank uses (-1: host buffers), and "[cuda]" / "[cpu]" for "# Using devices". */
int perfMemoryDeviceOf(const perfMemory *m, int rank);
const char *perfMemoryTag(const perfMemory *m);

/* One rank's device buffers and stream; ops NULL for host buffers. */
typedef struct {
  const struct weftDeviceOps *ops;
  void *stream;
  char *send, *recv; /* device buffers, bytes each */
  size_t bytes;
} perfDevRank;

/* On the rank's own thread, before its communicator is made (the runtime's current device is
 * per thread): selects the device, creates the stream, allocates bytes for each buffer. */
void perfDevRankInit(perfDevRank *d, const perfMemory *m, int rank, size_t bytes);
void perfDevRankFree(perfDevRank *d);
/* Waits for everything enqueued on the rank's stream (nothing to wait for on host buffers). */
void perfDevSync(const perfDevRank *d);
/* Enqueues a copy of bytes from host to device (dst in the device buffers) or back; at most
 * one direction is a device buffer. Nothing on host buffers. */
void perfDevCopy(const perfDevRank *d, void *dst, const void *src, size_t bytes);

#endif
