/* weft: collective communication for data-parallel training.
 * The API has the shape of NCCL's: a communicator per rank, collectives on buffers.
 * Host (CPU) buffers: a collective is complete when the call returns. */
#ifndef WEFT_H_
#define WEFT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define WEFT_MAJOR 0
#define WEFT_MINOR 1
#define WEFT_PATCH 0
#define WEFT_VERSION_CODE (WEFT_MAJOR * 10000 + WEFT_MINOR * 100 + WEFT_PATCH)

#define WEFT_UNIQUE_ID_BYTES 128

typedef struct weftComm *weftComm_t;
typedef void *weftStream_t; /* reserved for device streams; ignored for host buffers */

typedef struct {
  char internal[WEFT_UNIQUE_ID_BYTES];
} weftUniqueId;

typedef enum {
  weftSuccess = 0,
  weftUnhandledCudaError = 1,
  weftSystemError = 2,
  weftInternalError = 3,
  weftInvalidArgument = 4,
  weftInvalidUsage = 5,
  weftRemoteError = 6,
  weftInProgress = 7,
  weftTimeout = 8,
  weftNumResults = 9
} weftResult_t;

typedef enum {
  weftInt8 = 0, weftChar = 0,
  weftUint8 = 1,
  weftInt32 = 2, weftInt = 2,
  weftUint32 = 3,
  weftInt64 = 4,
  weftUint64 = 5,
  weftFloat16 = 6, weftHalf = 6,
  weftFloat32 = 7, weftFloat = 7,
  weftFloat64 = 8, weftDouble = 8,
  weftBfloat16 = 9,
  weftNumTypes = 10
} weftDataType_t;

typedef enum {
  weftSum = 0,
  weftProd = 1,
  weftMax = 2,
  weftMin = 3,
  weftAvg = 4,
  weftNumOps = 5
} weftRedOp_t;

/* Version as WEFT_VERSION_CODE. */
weftResult_t weftGetVersion(int *version);

/* Called once, by one process; the id is then passed to every rank (MPI_Bcast, a file, ...).
 * Starts the bootstrap root listener in this process. */
weftResult_t weftGetUniqueId(weftUniqueId *uniqueId);

/* Collective over nranks ranks: each rank calls it once with the same id. Blocks until all
 * ranks have arrived or WEFT_TIMEOUT_MS has passed. */
weftResult_t weftCommInitRank(weftComm_t *comm, int nranks, weftUniqueId commId, int rank);

/* Frees every resource of the communicator. The handle must not be used afterwards. */
weftResult_t weftCommDestroy(weftComm_t comm);

weftResult_t weftCommCount(const weftComm_t comm, int *count);
weftResult_t weftCommUserRank(const weftComm_t comm, int *rank);

/* recvbuff[i] = op over ranks of sendbuff[i], for i < count. sendbuff == recvbuff is in-place. */
weftResult_t weftAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                           weftStream_t stream);

const char *weftGetErrorString(weftResult_t result);

/* The message of the last error seen by this communicator (or by this thread when comm is
 * NULL or no longer valid). Never NULL. */
const char *weftGetLastError(weftComm_t comm);

#ifdef __cplusplus
}
#endif
#endif
