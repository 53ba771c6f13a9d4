/* Device buffers of the weft benchmarks (see perf_device.h). */
#include "perf_device.h"

#include <stdio.h>
#include <string.h>

#include "device.h"
#include "weft.h"

static void perfDevCheck(weftResult_t res, const char *what) {
  if (res != weftSuccess) perfFatal("%s: %s: %s", what, weftGetErrorString(res), weftGetLastError(NULL));
}

/* The most ranks on one host: a device is shared when they outnumber its devices. */
static int perfRanksPerHost(int nThreads) {
  int local = 1;
  if (perfUseMpi) {
    MPI_Comm host;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
    MPI_Comm_size(host, &local);
    MPI_Comm_free(&host);
    MPI_Allreduce(MPI_IN_PLACE, &local, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  }
  return local * nThreads;
}

const char *perfMemoryChoose(perfMemory *m, const perfOpts *o, int hostOnly) {
  static char msg[320];
  memset(m, 0, sizeof(*m));
  m->ranksPerHost = perfRanksPerHost(o->nThreads);
  if (hostOnly) {
    snprintf(m->why, sizeof(m->why), "MPI baselines time host memory only");
    return o->buffers == PERF_BUF_DEVICE ? "-B device: MPI baselines run on host buffers only" : NULL;
  }
  if (o->buffers == PERF_BUF_HOST) {
    snprintf(m->why, sizeof(m->why), "-B host");
    return NULL;
  }
  m->nDevices = weftDeviceCount(m->why, sizeof(m->why));
  if (m->nDevices > 0) {
    m->ops = weftDeviceRuntime();
    return NULL;
  }
  m->nDevices = 0;
  if (o->buffers != PERF_BUF_DEVICE) return NULL;
  snprintf(msg, sizeof(msg), "-B device: no usable device: %s", m->why);
  return msg;
}

void perfMemoryHeader(const perfMemory *m) {
  if (!m->ops) {
    printf("# Buffers: host\n# Using host buffers: %s\n", m->why);
    return;
  }
  printf("# Buffers: device (%s, GPU 0 of %d)\n", m->ops->name, m->nDevices);
  if (m->ranksPerHost > m->nDevices)
    printf("# Warning: %d ranks on a host share %d GPU%s: rank r uses GPU r %% %d\n", m->ranksPerHost,
           m->nDevices, m->nDevices == 1 ? "" : "s", m->nDevices);
}

int perfMemoryDeviceOf(const perfMemory *m, int rank) {
  return m->ops ? rank % m->nDevices : -1;
}

const char *perfMemoryTag(const perfMemory *m) {
  return m->ops ? m->ops->name : "cpu";
}

void perfDevRankInit(perfDevRank *d, const perfMemory *m, int rank, size_t bytes) {
  memset(d, 0, sizeof(*d));
  if (!m->ops) return;
  d->ops = m->ops;
  d->bytes = bytes;
  perfDevCheck(d->ops->setDevice(perfMemoryDeviceOf(m, rank)), "setDevice");
  perfDevCheck(d->ops->streamCreate(&d->stream), "streamCreate");
  void *s = NULL, *r = NULL;
  perfDevCheck(d->ops->alloc(&s, bytes), "device alloc (send buffer)");
  perfDevCheck(d->ops->alloc(&r, bytes), "device alloc (receive buffer)");
  d->send = s;
  d->recv = r;
}

void perfDevRankFree(perfDevRank *d) {
  if (!d->ops) return;
  perfDevSync(d);
  perfDevCheck(d->ops->free(d->send), "device free");
  perfDevCheck(d->ops->free(d->recv), "device free");
  perfDevCheck(d->ops->streamDestroy(d->stream), "streamDestroy");
  d->ops = NULL;
}

void perfDevSync(const perfDevRank *d) {
  if (d->ops) perfDevCheck(d->ops->streamSync(d->stream), "streamSync");
}

void perfDevCopy(const perfDevRank *d, void *dst, const void *src, size_t bytes) {
  if (d->ops && bytes) perfDevCheck(d->ops->copyAsync(dst, src, bytes, d->stream), "copyAsync");
}
