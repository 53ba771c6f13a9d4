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

/* The library exports these functions and nothing else (it is built with hidden visibility). */
#if defined(__GNUC__) || defined(__clang__)
#define WEFT_API __attribute__((visibility("default")))
#else
#define WEFT_API
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
  /* OCP FP8 (NCCL's values): e4m3 is the finite "fn" variant (bias 7, largest 448, NaN
   * 0x7f / 0xff, no infinities), e5m2 IEEE-like (bias 15, largest 57344, infinities, NaNs).
   * Reduced in fp32, rounded to nearest even and saturating: a result beyond the largest finite
   * value (an infinity too) becomes it, as NCCL's fp8 (CUDA's __NV_SATFINITE); a NaN is 0x7f. */
  weftFloat8e4m3 = 10,
  weftFloat8e5m2 = 11,
  weftNumTypes = 12
} weftDataType_t;

/* The built-in ops, and from 256 up the ops made by weftRedOpCreatePreMulSum. */
typedef enum {
  weftSum = 0,
  weftProd = 1,
  weftMax = 2,
  weftMin = 3,
  weftAvg = 4,
  weftNumOps = 5,
  weftMaxRedOp = 0x7fffffff /* the enum holds every op handle */
} weftRedOp_t;

/* Where the scalar of weftRedOpCreatePreMulSum lives (NCCL's ncclScalarResidence_t). */
typedef enum {
  weftScalarDevice = 0,        /* device memory: refused, this build has no device */
  weftScalarHostImmediate = 1  /* host memory, read once when the op is created */
} weftScalarResidence_t;

/* The collectives, for weftCommGetCollAlgorithm (weft extension). */
typedef enum {
  weftCollAllReduce = 0,
  weftCollBroadcast = 1,
  weftCollReduce = 2,
  weftCollAllGather = 3,
  weftCollReduceScatter = 4,
  weftCollAlltoAll = 5,
  weftCollGather = 6,
  weftCollScatter = 7,
  weftNumColls = 8
} weftColl_t;

/* Version as WEFT_VERSION_CODE. */
WEFT_API weftResult_t weftGetVersion(int *version);

/* Called once, by one process; the id is then passed to every rank (MPI_Bcast, a file, ...).
 * Starts the bootstrap root listener in this process. */
WEFT_API weftResult_t weftGetUniqueId(weftUniqueId *uniqueId);

/* Collective over nranks ranks: each rank calls it once with the same id. Blocks until all
 * ranks have arrived or WEFT_TIMEOUT_MS has passed. */
WEFT_API weftResult_t weftCommInitRank(weftComm_t *comm, int nranks, weftUniqueId commId, int rank);

/* NCCL's ncclCommInitAll: the ndev ranks of one new communicator, all in this process (from
 * one unique id, one thread per rank); comms (room for ndev) receives rank i in comms[i].
 * Host memory has no devices to bind: devlist (NULL, or ndev device numbers as NCCL users
 * pass them, {0, 1, ...}) must hold distinct non-negative numbers, else weftInvalidArgument,
 * and carries no other meaning: comms[i] is rank i whatever devlist[i] is. Returns once every
 * rank is ready (or WEFT_TIMEOUT_MS has passed); on failure no communicator is left and comms
 * is unchanged. A collective waits for every rank, so each communicator is then driven by a
 * thread of its own. */
WEFT_API weftResult_t weftCommInitAll(weftComm_t *comms, int ndev, const int *devlist);

/* Options of weftCommInitRankConfig. Start from WEFT_CONFIG_INITIALIZER and change fields;
 * fields left at WEFT_CONFIG_UNDEF_INT take the library default (the environment). */
#define WEFT_CONFIG_UNDEF_INT (-2147483647 - 1)
#define WEFT_CONFIG_MAGIC 0x77656663u /* "wefc" */
typedef struct {
  size_t size;           /* sizeof(weftConfig_t): set by the initializer */
  unsigned int magic;    /* WEFT_CONFIG_MAGIC: set by the initializer */
  unsigned int version;  /* WEFT_VERSION_CODE: set by the initializer */
  int blocking;          /* 1 (default): init returns when done. 0: init returns weftInProgress
                            at once and completes in a background thread; poll
                            weftCommGetAsyncError until it reports something else */
  int timeoutMs;         /* deadline of init and of every wait, ms (default WEFT_TIMEOUT_MS) */
} weftConfig_t;

#define WEFT_CONFIG_INITIALIZER                                                  \
  {                                                                              \
    sizeof(weftConfig_t), WEFT_CONFIG_MAGIC, WEFT_VERSION_CODE,                  \
        WEFT_CONFIG_UNDEF_INT, WEFT_CONFIG_UNDEF_INT                             \
  }

/* weftCommInitRank with options (config may be NULL: every default). A config not made from
 * WEFT_CONFIG_INITIALIZER (wrong size or magic) is weftInvalidArgument.
 * Non-blocking (config->blocking == 0): *comm is set and weftInProgress returned at once; the
 * communicator is usable for collectives once weftCommGetAsyncError reports weftSuccess. While
 * init is in progress only weftCommGetAsyncError, weftCommAbort and weftCommDestroy (which waits
 * for init to end) may be called. Collectives on a non-blocking communicator return
 * weftInProgress at once and run in the background, one at a time as in NCCL's non-blocking
 * mode: poll weftCommGetAsyncError until it reports weftSuccess (recvbuff then holds the
 * result) or an error before the next call on the communicator (another collective meanwhile
 * is weftInvalidUsage; weftCommAbort stops the collective, weftCommDestroy waits for it). The
 * buffers must stay valid until then. */
WEFT_API weftResult_t weftCommInitRankConfig(weftComm_t *comm, int nranks, weftUniqueId commId,
                                             int rank, weftConfig_t *config);

/* Frees every resource of the communicator. The handle must not be used afterwards. */
WEFT_API weftResult_t weftCommDestroy(weftComm_t comm);

/* Frees every resource of the communicator without talking to its peers, whatever state it is
 * in: a non-blocking init still running is stopped, and a collective blocked on comm in
 * another thread returns promptly with weftRemoteError and the message "... aborted". Returns
 * once those calls have left the library; the handle must not be used afterwards. Peers of an
 * aborted communicator see it as a dead rank (weftRemoteError) or, on a link that cannot tell,
 * a timeout. comm == NULL is a no-op. */
WEFT_API weftResult_t weftCommAbort(weftComm_t comm);

/* The communicator's state in *asyncError: weftInProgress while a non-blocking init or
 * collective runs,
 * weftSuccess when usable, else the error that broke it (init failed, or a collective failed:
 * after any collective error the communicator only accepts destroy/abort). The message is in
 * weftGetLastError(comm). */
WEFT_API weftResult_t weftCommGetAsyncError(weftComm_t comm, weftResult_t *asyncError);

/* Completes outstanding operations (collectives are synchronous, so there are none) and
 * refuses further collectives; call weftCommDestroy afterwards. weftInProgress while a
 * non-blocking init runs. */
WEFT_API weftResult_t weftCommFinalize(weftComm_t comm);

/* Flags of weftCommShrink. WEFT_SHRINK_ABORT: comm had an error, or is to be given up: its
 * links are closed first (collectives still blocked on them, here or on peers, return with an
 * error) and it accepts no further collective; destroy or abort it after the shrink. */
#define WEFT_SHRINK_DEFAULT 0x00
#define WEFT_SHRINK_ABORT 0x01

/* A new communicator of the ranks of comm that are not in excludeRanksList, without a new
 * unique id, also after the excluded ranks died: the members meet through comm's bootstrap
 * listeners. Collective over the members: every rank not excluded calls it, with the same
 * list, and in the same order relative to the other shrinks and recovers of comm; excluded
 * ranks do not call it (listing one's own rank is weftInvalidArgument). The new ranks keep the
 * old ranks' order. Members that disagree on the list fail (weftRemoteError or weftTimeout)
 * instead of forming a wrong communicator. config as in weftCommInitRankConfig (NULL: comm's
 * timeout, blocking); comm must stay alive until newcomm's init has completed, and is
 * destroyed or aborted on its own. */
WEFT_API weftResult_t weftCommShrink(weftComm_t comm, int *excludeRanksList, int excludeRanksCount,
                                     weftComm_t *newcomm, weftConfig_t *config, int shrinkFlags);

/* weft extension (not in NCCL): after a failure, the ranks of comm that are still alive build
 * a new communicator in one call, agreeing among themselves on who is gone, so an elastic
 * training loop needs no agreement protocol of its own. Every surviving rank calls it (in the
 * same order relative to other shrinks and recovers of comm). A rank is gone when its process
 * is (same host) or its bootstrap listener refuses connections or does not answer (another
 * host); survivors retry until they see the same set, or until the timeout. A stuck rank
 * (SIGSTOP) is alive: recovery waits for it until the timeout; exclude it with
 * weftCommShrink. comm's links are closed first, as with WEFT_SHRINK_ABORT. excludedRanks
 * (room for comm's rank count; may be NULL) receives the old ranks left out, ascending, and
 * *excludedCount (may be NULL) their number, once init has passed the agreement (blocking: on
 * return). New ranks keep the old ranks' order. */
WEFT_API weftResult_t weftCommRecover(weftComm_t comm, weftComm_t *newcomm, weftConfig_t *config,
                                      int *excludedRanks, int *excludedCount);

/* The color of a rank of weftCommSplit that joins no new communicator. */
#define WEFT_SPLIT_NOCOLOR -1

/* NCCL's ncclCommSplit: a new communicator of the ranks of comm that pass the same color, ranked
 * by key, ties by their rank in comm, without a new unique id (they meet through comm's
 * bootstrap listeners, as weftCommShrink's members do). Collective over every rank of comm, in
 * the same order relative to the other splits, shrinks and recovers of comm. A rank passing
 * WEFT_SPLIT_NOCOLOR takes part and gets *newcomm = NULL; any other negative color is
 * weftInvalidArgument. A rank that is gone (dead) before the colors are agreed, or dies
 * while they are, makes the call fail on every rank with weftRemoteError naming it; one that
 * dies later fails the ranks of its own color. config as in weftCommShrink (NULL: comm's
 * timeout, blocking). Non-blocking: weftInProgress at once; a colored rank polls
 * weftCommGetAsyncError(*newcomm), a NOCOLOR rank (*newcomm = NULL) polls comm's, which
 * reports weftInProgress until its part is done and the error if it failed. comm must stay
 * alive until then, and a split of comm must complete before the next split, shrink or
 * recover of comm starts. */
WEFT_API weftResult_t weftCommSplit(weftComm_t comm, int color, int key, weftComm_t *newcomm,
                                    weftConfig_t *config);

/* NCCL 2.29's ncclCommGetUniqueId: an id for weftCommGrow of comm, made by one rank of comm
 * (the grow's root), which hands it to the new ranks as it would any unique id. Its root is a
 * fresh one in this process whatever WEFT_COMM_ID says; it serves one grow, then ends (or at
 * WEFT_TIMEOUT_MS). */
WEFT_API weftResult_t weftCommGetUniqueId(weftComm_t comm, weftUniqueId *uniqueId);

/* NCCL 2.29's ncclCommGrow: a new communicator of nRanks ranks made of the ranks of comm, which
 * keep their ranks, and nRanks - (comm's size) new ones. Collective over all of them:
 *   - a rank of comm that made the id: weftCommGrow(comm, nRanks, &id, -1, &newcomm, config);
 *   - every other rank of comm:          weftCommGrow(comm, nRanks, NULL, -1, &newcomm, config);
 *   - a new rank:                        weftCommGrow(NULL, nRanks, &id, rank, &newcomm, config),
 *     each with its own rank from comm's size to nRanks - 1.
 * The ranks of comm agree over comm's bootstrap listeners (so the id reaches them with comm's
 * authentication; more or fewer than one id, or different nRanks, is weftInvalidUsage on every
 * rank of comm), in the same order relative to comm's other splits, shrinks and recovers; a
 * rank of comm that is gone makes it fail on every rank of comm with weftRemoteError naming it
 * (the new ranks then time out, or fail when the root's process ends). Then every rank inits
 * through the id as with weftCommInitRank. config as in weftCommShrink for ranks of comm (NULL:
 * comm's timeout, blocking), as in weftCommInitRankConfig for new ranks; non-blocking:
 * weftInProgress, poll weftCommGetAsyncError(*newcomm). comm stays usable and must stay alive until newcomm's init
 * has completed. */
WEFT_API weftResult_t weftCommGrow(weftComm_t comm, int nRanks, const weftUniqueId *uniqueId,
                                   int rank, weftComm_t *newcomm, weftConfig_t *config);

WEFT_API weftResult_t weftCommCount(const weftComm_t comm, int *count);
WEFT_API weftResult_t weftCommUserRank(const weftComm_t comm, int *rank);

/* recvbuff[i] = op over ranks of sendbuff[i], for i < count. sendbuff == recvbuff is in-place. */
WEFT_API weftResult_t weftAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                    weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                                    weftStream_t stream);

/* recvbuff = root's sendbuff, on every rank (count elements). sendbuff is read on the root
 * only; sendbuff == recvbuff is in place. */
WEFT_API weftResult_t weftBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                    weftDataType_t datatype, int root, weftComm_t comm,
                                    weftStream_t stream);
/* weftBroadcast in place (NCCL's legacy ncclBcast). */
WEFT_API weftResult_t weftBcast(void *buff, size_t count, weftDataType_t datatype, int root,
                                weftComm_t comm, weftStream_t stream);
/* On the root, recvbuff[i] = op over ranks of sendbuff[i], for i < count; recvbuff is written
 * (and needed) on the root only. sendbuff == recvbuff is in place. */
WEFT_API weftResult_t weftReduce(const void *sendbuff, void *recvbuff, size_t count,
                                 weftDataType_t datatype, weftRedOp_t op, int root,
                                 weftComm_t comm, weftStream_t stream);
/* recvbuff (nranks * sendcount elements) = every rank's sendbuff, in rank order. In place when
 * sendbuff == recvbuff + rank * sendcount (in elements). */
WEFT_API weftResult_t weftAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                    weftDataType_t datatype, weftComm_t comm,
                                    weftStream_t stream);
/* recvbuff (recvcount elements) = op over ranks of block `rank` of sendbuff (nranks *
 * recvcount elements). In place when recvbuff == sendbuff + rank * recvcount (in elements). */
WEFT_API weftResult_t weftReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                        weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                                        weftStream_t stream);

/* recvbuff block j (count elements) = rank j's sendbuff block `rank`, for every rank j: each
 * buffer holds nranks * count elements. Not in place: the buffers must not overlap. */
WEFT_API weftResult_t weftAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                   weftDataType_t datatype, weftComm_t comm, weftStream_t stream);
/* On the root, recvbuff block j (count elements) = rank j's sendbuff; recvbuff (nranks * count
 * elements) is needed on the root only. In place when sendbuff == recvbuff + root * count. */
WEFT_API weftResult_t weftGather(const void *sendbuff, void *recvbuff, size_t count,
                                 weftDataType_t datatype, int root, weftComm_t comm,
                                 weftStream_t stream);
/* recvbuff (count elements) = block `rank` of the root's sendbuff (nranks * count elements,
 * needed on the root only). In place when recvbuff == sendbuff + root * count. */
WEFT_API weftResult_t weftScatter(const void *sendbuff, void *recvbuff, size_t count,
                                  weftDataType_t datatype, int root, weftComm_t comm,
                                  weftStream_t stream);

/* Point to point: count elements to rank peer, matched in order with peer's weftRecv of this
 * rank (same count and datatype, else weftInvalidUsage on the receiver). The link between two
 * ranks is made on their first use of it. Outside a group the call returns once sendbuff may
 * be reused (a large send waits for the receiver); calls that depend on each other (two ranks
 * sending to each other) belong in one weftGroupStart/End, which runs any pattern without
 * deadlock. peer may be this rank (then its matching weftRecv must be in the same group). */
WEFT_API weftResult_t weftSend(const void *sendbuff, size_t count, weftDataType_t datatype,
                               int peer, weftComm_t comm, weftStream_t stream);
WEFT_API weftResult_t weftRecv(void *recvbuff, size_t count, weftDataType_t datatype, int peer,
                               weftComm_t comm, weftStream_t stream);

/* Group calls, as NCCL's: calls between weftGroupStart and the matching weftGroupEnd (they
 * nest; the outermost End runs the group) are checked at once and queued, then run together
 * at weftGroupEnd, which returns when they are all done: one thread may so drive several
 * communicators (ranks of one process) and any set of Send/Recv. A call refused when queued
 * makes weftGroupEnd return that error and run nothing. Within a group, a communicator's
 * collectives run in the order they were called, before its Send/Recv. On a non-blocking
 * communicator weftGroupEnd returns weftInProgress and the group runs in the background
 * (weftCommGetAsyncError). */
WEFT_API weftResult_t weftGroupStart(void);
WEFT_API weftResult_t weftGroupEnd(void);
/* A new op for comm: result = sum over ranks of (*scalar * input of that rank), for
 * weftAllReduce, weftReduce and weftReduceScatter on comm with datatype only (anything else is
 * weftInvalidArgument). *scalar is a value of datatype, copied at once (residence must be
 * weftScalarHostImmediate). Each product is datatype's multiplication (fp16, bf16, fp8 in
 * fp32, rounded once to the type; integers wrap, signed ones as two's complement), then the
 * products are summed as weftSum does. The collective first writes the scaled input (into
 * recvbuff where it has room, else into a buffer of the communicator's, kept until it is
 * destroyed): one more pass over the input. Not collective; ranks may pass different
 * scalars. At most 256 ops live per communicator. *op is written only on success. */
WEFT_API weftResult_t weftRedOpCreatePreMulSum(weftRedOp_t *op, void *scalar,
                                               weftDataType_t datatype,
                                               weftScalarResidence_t residence, weftComm_t comm);
/* Frees op, made by weftRedOpCreatePreMulSum on comm. A built-in op, an op of another
 * communicator, or one already destroyed is weftInvalidArgument; an op a collective in
 * progress uses (a blocking one in another thread, or a non-blocking one not yet complete) is
 * weftInvalidUsage. weftCommDestroy frees the ops left. */
WEFT_API weftResult_t weftRedOpDestroy(weftRedOp_t op, weftComm_t comm);

/* NCCL's ncclMemAlloc: *ptr = size bytes of device memory on the current device, suited to
 * CUDA IPC between the processes of a host and to registration; freed by weftMemFree. size 0
 * succeeds with *ptr = NULL, as cudaMalloc does. Without a usable GPU (a build without CUDA,
 * no driver, no device) weftUnhandledCudaError, as ncclMemAlloc's, and weftGetLastError(NULL)
 * says why ("no GPU: ..."); a NULL ptr is weftInvalidArgument. *ptr is written only on
 * success. */
WEFT_API weftResult_t weftMemAlloc(void **ptr, size_t size);
/* NCCL's ncclMemFree: frees memory of weftMemAlloc. A NULL ptr does nothing where a GPU is
 * usable, and is weftMemAlloc's "no GPU" error where none is, as ncclMemFree (whose
 * cudaGetDevice fails first there). */
WEFT_API weftResult_t weftMemFree(void *ptr);

/* weft extension (not in NCCL): *name = the algorithm ("ring", "tree", "hier", "direct", ...)
 * that collective coll on this communicator would run for count elements of datatype (count
 * as the collective's own count argument): the tuner's choice (every rank gets the same
 * answer), or the one WEFT_ALGO forces; "none" for count 0, where the call returns at once.
 * The string is static: never freed, valid after the communicator is destroyed. Not
 * collective; runs nothing. weftInvalidArgument for a NULL name, an unknown collective or
 * datatype, or an overflowing count; weftInvalidUsage for a collective this build does not
 * run yet. */
WEFT_API weftResult_t weftCommGetCollAlgorithm(const weftComm_t comm, weftColl_t coll,
                                               size_t count, weftDataType_t datatype,
                                               const char **name);
/* weftCommGetCollAlgorithm for weftCollAllReduce. */
WEFT_API weftResult_t weftCommGetAlgorithm(const weftComm_t comm, size_t count,
                                           weftDataType_t datatype, const char **name);

/* weft extension (not in NCCL): how this rank reaches rank peer. *transport = the transport
 * that links the two ("shm", "verbs", "ucx", "tcp"; "self" for this rank; "none" when none can),
 * chosen as the collectives' links choose it (the first of the registry that can connect the
 * pair, within WEFT_TRANSPORTS); and, when device is not NULL, into it (len bytes, truncated,
 * NUL-terminated) what this rank uses for that peer: the interface and address, the RDMA
 * device, port and GID, ...; "" when the transport says no more than its name. Not
 * collective; connects nothing. The string *transport is static. weftInvalidArgument for a
 * NULL transport, a peer outside the communicator, or len 0 with a device. */
WEFT_API weftResult_t weftCommGetPeerTransport(const weftComm_t comm, int peer,
                                               const char **transport, char *device, size_t len);

/* weft extension: a rank the others waited for, as the straggler report found it
 * (WEFT_STRAGGLER_REPORT, docs/stragglers.md). In each collective the last rank to arrive is
 * the one that waited least; its lateness is the median of the other ranks' waits minus its
 * own. A rank is named when, in the last window of windowOps collectives, it was last (by at
 * least WEFT_STRAGGLER_MIN_US) in at least a tenth of them and in more than 1.5 times its
 * fair share (1 / nranks) of the collectives where any rank was that late. A rank is also
 * named when it sits on the most slow links, in both directions: links whose data trickled in
 * (metered by the tcp transport) or was waited for more than 4 times longer per byte than the
 * typical link's, for long enough to matter; a rank on a slow link that is not the one named
 * is then not named as last either (that link fed it late). */
typedef struct {
  int rank;
  int lastOps;            /* collectives of the window in which it was last */
  int windowOps;          /* collectives in the window */
  double medianLateUs;    /* median lateness over those lastOps collectives, microseconds */
  double waitedOnUs;      /* what all other ranks' waits attributed to it in the window, us */
  int slowLinks;          /* links to or from it found slow in the window (0: named as last) */
  double slowestLinkMBps; /* the slowest of those: bytes over the time they trickled in (or,
                           * when they did not, were waited for), MB/s */
} weftStraggler_t;

/* weft extension: the ranks the last complete window of the straggler report named, the
 * most often last first, the same on every rank. *count = how many were named (0 when none,
 * or no window has completed yet); the first min(*count, capacity) are written to
 * stragglers. Out-parameters are written only on success. weftInvalidArgument for a NULL
 * count, a negative capacity, or a NULL stragglers with capacity > 0; weftInvalidUsage when
 * WEFT_STRAGGLER_REPORT was 0 at init, or while a non-blocking collective is in flight. Not
 * collective; sends nothing. */
WEFT_API weftResult_t weftCommGetStragglers(const weftComm_t comm, weftStraggler_t *stragglers,
                                            int capacity, int *count);

WEFT_API const char *weftGetErrorString(weftResult_t result);

/* The message of the last error seen by this communicator (or by this thread when comm is
 * NULL or no longer valid). Never NULL. */
WEFT_API const char *weftGetLastError(weftComm_t comm);

/* The profiling interface, as NCCL's pncclX: pweftX is the library's own weftX under a second
 * name. A tool that defines weftX itself (in the program, or in a library loaded before weft)
 * replaces weft's, and reaches the real one through pweftX. */
#if defined(__GNUC__) || defined(__clang__)
WEFT_API __typeof__(weftGetVersion) pweftGetVersion;
WEFT_API __typeof__(weftGetUniqueId) pweftGetUniqueId;
WEFT_API __typeof__(weftCommInitRank) pweftCommInitRank;
WEFT_API __typeof__(weftCommInitRankConfig) pweftCommInitRankConfig;
WEFT_API __typeof__(weftCommInitAll) pweftCommInitAll;
WEFT_API __typeof__(weftCommDestroy) pweftCommDestroy;
WEFT_API __typeof__(weftCommAbort) pweftCommAbort;
WEFT_API __typeof__(weftCommGetAsyncError) pweftCommGetAsyncError;
WEFT_API __typeof__(weftCommFinalize) pweftCommFinalize;
WEFT_API __typeof__(weftCommShrink) pweftCommShrink;
WEFT_API __typeof__(weftCommRecover) pweftCommRecover;
WEFT_API __typeof__(weftCommSplit) pweftCommSplit;
WEFT_API __typeof__(weftCommGetUniqueId) pweftCommGetUniqueId;
WEFT_API __typeof__(weftCommGrow) pweftCommGrow;
WEFT_API __typeof__(weftCommCount) pweftCommCount;
WEFT_API __typeof__(weftCommUserRank) pweftCommUserRank;
WEFT_API __typeof__(weftAllReduce) pweftAllReduce;
WEFT_API __typeof__(weftBroadcast) pweftBroadcast;
WEFT_API __typeof__(weftBcast) pweftBcast;
WEFT_API __typeof__(weftReduce) pweftReduce;
WEFT_API __typeof__(weftAllGather) pweftAllGather;
WEFT_API __typeof__(weftReduceScatter) pweftReduceScatter;
WEFT_API __typeof__(weftAlltoAll) pweftAlltoAll;
WEFT_API __typeof__(weftGather) pweftGather;
WEFT_API __typeof__(weftScatter) pweftScatter;
WEFT_API __typeof__(weftSend) pweftSend;
WEFT_API __typeof__(weftRecv) pweftRecv;
WEFT_API __typeof__(weftGroupStart) pweftGroupStart;
WEFT_API __typeof__(weftGroupEnd) pweftGroupEnd;
WEFT_API __typeof__(weftRedOpCreatePreMulSum) pweftRedOpCreatePreMulSum;
WEFT_API __typeof__(weftRedOpDestroy) pweftRedOpDestroy;
WEFT_API __typeof__(weftCommGetAlgorithm) pweftCommGetAlgorithm;
WEFT_API __typeof__(weftCommGetCollAlgorithm) pweftCommGetCollAlgorithm;
WEFT_API __typeof__(weftCommGetStragglers) pweftCommGetStragglers;
WEFT_API __typeof__(weftCommGetPeerTransport) pweftCommGetPeerTransport;
WEFT_API __typeof__(weftMemAlloc) pweftMemAlloc;
WEFT_API __typeof__(weftMemFree) pweftMemFree;
WEFT_API __typeof__(weftGetErrorString) pweftGetErrorString;
WEFT_API __typeof__(weftGetLastError) pweftGetLastError;
#endif

#ifdef __cplusplus
}
#endif
#endif
