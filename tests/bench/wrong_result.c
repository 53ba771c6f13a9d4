/* A wrong result on purpose, for tests/bench/test-perf-flags.sh: linked into a weft benchmark
 * (the Makefile's build/tests/bench/<name>_perf), each collective below takes the library's
 * place through the profiling interface (the library's weftX is weak, pweftX its own code),
 * runs it, and then changes one element of rank 0's receive buffer (SendRecv's: at the group's
 * end, where its receive completes): the top byte of element
 * 0, so that the value changes by far more than any tolerance. The benchmark must then report
 * exactly one wrong element in every checked column. On device buffers (the emulated device's
 * build/tests/bench/emu-wrong/, or a GPU) the element is changed on the call's stream, by a copy
 * to the host and back (tests/bench/test-perf-device.sh). */
#include <stddef.h>

#include "device.h"
#include "weft.h"

static size_t wrongTypeSize(weftDataType_t t) {
  switch (t) {
  case weftInt8: case weftUint8: return 1;
  case weftFloat16: case weftBfloat16: return 2;
  case weftInt32: case weftUint32: case weftFloat32: return 4;
  default: return 8;
  }
}

/* Flips the byte's bit in device memory, after what the stream holds: the host cannot touch
 * it. Waiting for the stream here is no part of NCCL's semantics, and the test does not need
 * it to be: the benchmark waits for the stream before it checks anyway. */
static weftResult_t wrongOnDevice(const struct weftDeviceOps *ops, unsigned char *byte, weftStream_t stream) {
  unsigned char b = 0;
  weftResult_t res = ops->copyAsync(&b, byte, 1, stream);
  if (res == weftSuccess) res = ops->streamSync(stream);
  b ^= 0x40;
  if (res == weftSuccess) res = ops->copyAsync(byte, &b, 1, stream);
  if (res == weftSuccess) res = ops->streamSync(stream); /* b lives on this stack */
  return res;
}

/* After a call that worked: rank 0's first element, changed. */
static weftResult_t wrongResult(weftResult_t res, void *recvbuff, size_t count, weftDataType_t t,
                                weftComm_t comm, weftStream_t stream) {
  int rank = -1;
  if (res != weftSuccess || count == 0 || weftCommUserRank(comm, &rank) != weftSuccess || rank != 0) return res;
  unsigned char *byte = (unsigned char *)recvbuff + wrongTypeSize(t) - 1;
  const struct weftDeviceOps *ops = weftDeviceRuntime();
  enum weftMemKind kind = WEFT_MEM_HOST;
  int device = -1;
  if (ops != NULL && ops->pointerKind(byte, &kind, &device) != weftSuccess) return weftInternalError;
  if (kind == WEFT_MEM_DEVICE) return wrongOnDevice(ops, byte, stream);
  *byte ^= 0x40;
  return res;
}

weftResult_t weftAllReduce(const void *sendbuff, void *recvbuff, size_t count, weftDataType_t datatype,
                           weftRedOp_t op, weftComm_t comm, weftStream_t stream) {
  weftResult_t res = pweftAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
  return wrongResult(res, recvbuff, count, datatype, comm, stream);
}

weftResult_t weftBroadcast(const void *sendbuff, void *recvbuff, size_t count, weftDataType_t datatype,
                           int root, weftComm_t comm, weftStream_t stream) {
  weftResult_t res = pweftBroadcast(sendbuff, recvbuff, count, datatype, root, comm, stream);
  return wrongResult(res, recvbuff, count, datatype, comm, stream);
}

/* Rank 0's receive buffer even where it is not the root: it must stay untouched there. */
weftResult_t weftReduce(const void *sendbuff, void *recvbuff, size_t count, weftDataType_t datatype,
                        weftRedOp_t op, int root, weftComm_t comm, weftStream_t stream) {
  weftResult_t res = pweftReduce(sendbuff, recvbuff, count, datatype, op, root, comm, stream);
  return wrongResult(res, recvbuff, count, datatype, comm, stream);
}

weftResult_t weftAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, weftDataType_t datatype,
                           weftComm_t comm, weftStream_t stream) {
  weftResult_t res = pweftAllGather(sendbuff, recvbuff, sendcount, datatype, comm, stream);
  return wrongResult(res, recvbuff, sendcount, datatype, comm, stream);
}

weftResult_t weftReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, weftDataType_t datatype,
                               weftRedOp_t op, weftComm_t comm, weftStream_t stream) {
  weftResult_t res = pweftReduceScatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
  return wrongResult(res, recvbuff, recvcount, datatype, comm, stream);
}

weftResult_t weftAlltoAll(const void *sendbuff, void *recvbuff, size_t count, weftDataType_t datatype,
                          weftComm_t comm, weftStream_t stream) {
  weftResult_t res = pweftAlltoAll(sendbuff, recvbuff, count, datatype, comm, stream);
  return wrongResult(res, recvbuff, count, datatype, comm, stream);
}

/* Rank 0's receive buffer even where it is not the root: it must stay untouched there. */
weftResult_t weftGather(const void *sendbuff, void *recvbuff, size_t count, weftDataType_t datatype, int root,
                        weftComm_t comm, weftStream_t stream) {
  weftResult_t res = pweftGather(sendbuff, recvbuff, count, datatype, root, comm, stream);
  return wrongResult(res, recvbuff, count, datatype, comm, stream);
}

weftResult_t weftScatter(const void *sendbuff, void *recvbuff, size_t count, weftDataType_t datatype, int root,
                         weftComm_t comm, weftStream_t stream) {
  weftResult_t res = pweftScatter(sendbuff, recvbuff, count, datatype, root, comm, stream);
  return wrongResult(res, recvbuff, count, datatype, comm, stream);
}

/* A receive inside a group completes at weftGroupEnd: the element is changed then. */
static _Thread_local struct {
  int depth;
  void *buf;
  size_t count;
  weftDataType_t type;
  weftComm_t comm;
  weftStream_t stream;
} group;

weftResult_t weftGroupStart(void) {
  weftResult_t res = pweftGroupStart();
  if (res == weftSuccess) group.depth++;
  return res;
}

weftResult_t weftRecv(void *recvbuff, size_t count, weftDataType_t datatype, int peer, weftComm_t comm,
                      weftStream_t stream) {
  weftResult_t res = pweftRecv(recvbuff, count, datatype, peer, comm, stream);
  if (group.depth == 0) return wrongResult(res, recvbuff, count, datatype, comm, stream);
  if (res == weftSuccess) {
    group.buf = recvbuff;
    group.count = count;
    group.type = datatype;
    group.comm = comm;
    group.stream = stream;
  }
  return res;
}

weftResult_t weftGroupEnd(void) {
  weftResult_t res = pweftGroupEnd();
  if (group.depth > 0 && --group.depth == 0 && group.buf) {
    res = wrongResult(res, group.buf, group.count, group.type, group.comm, group.stream);
    group.buf = NULL;
  }
  return res;
}
