/* A wrong result on purpose, for tests/bench/test-perf-flags.sh: linked into a weft benchmark
 * (the Makefile's build/tests/bench/<name>_perf), each collective below takes the library's
 * place through the profiling interface (the library's weftX is weak, pweftX its own code),
 * runs it, and then changes one element of rank 0's receive buffer: the top byte of element
 * 0, so that the value changes by far more than any tolerance. The benchmark must then report
 * exactly one wrong element in every checked column. */
#include <stddef.h>

#include "weft.h"

static size_t wrongTypeSize(weftDataType_t t) {
  switch (t) {
  case weftInt8: case weftUint8: return 1;
  case weftFloat16: case weftBfloat16: return 2;
  case weftInt32: case weftUint32: case weftFloat32: return 4;
  default: return 8;
  }
}

/* After a call that worked: rank 0's first element, changed. */
static weftResult_t wrongResult(weftResult_t res, void *recvbuff, size_t count, weftDataType_t t,
                                weftComm_t comm) {
  int rank = -1;
  if (res != weftSuccess || count == 0 || weftCommUserRank(comm, &rank) != weftSuccess || rank != 0) return res;
  ((unsigned char *)recvbuff)[wrongTypeSize(t) - 1] ^= 0x40;
  return res;
}

weftResult_t weftAllReduce(const void *sendbuff, void *recvbuff, size_t count, weftDataType_t datatype,
                           weftRedOp_t op, weftComm_t comm, weftStream_t stream) {
  weftResult_t res = pweftAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
  return wrongResult(res, recvbuff, count, datatype, comm);
}

weftResult_t weftBroadcast(const void *sendbuff, void *recvbuff, size_t count, weftDataType_t datatype,
                           int root, weftComm_t comm, weftStream_t stream) {
  weftResult_t res = pweftBroadcast(sendbuff, recvbuff, count, datatype, root, comm, stream);
  return wrongResult(res, recvbuff, count, datatype, comm);
}

/* Rank 0's receive buffer even where it is not the root: it must stay untouched there. */
weftResult_t weftReduce(const void *sendbuff, void *recvbuff, size_t count, weftDataType_t datatype,
                        weftRedOp_t op, int root, weftComm_t comm, weftStream_t stream) {
  weftResult_t res = pweftReduce(sendbuff, recvbuff, count, datatype, op, root, comm, stream);
  return wrongResult(res, recvbuff, count, datatype, comm);
}

weftResult_t weftAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, weftDataType_t datatype,
                           weftComm_t comm, weftStream_t stream) {
  weftResult_t res = pweftAllGather(sendbuff, recvbuff, sendcount, datatype, comm, stream);
  return wrongResult(res, recvbuff, sendcount, datatype, comm);
}

weftResult_t weftReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, weftDataType_t datatype,
                               weftRedOp_t op, weftComm_t comm, weftStream_t stream) {
  weftResult_t res = pweftReduceScatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
  return wrongResult(res, recvbuff, recvcount, datatype, comm);
}
