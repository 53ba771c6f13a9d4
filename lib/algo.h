/* The algorithm interface: one file per algorithm in algorithms/, one exported ops table,
 * registered in lib/algo_registry.c. An algorithm says which collectives it runs (`colls`),
 * gives a cost per call, and runs any of them from one argument struct, as NCCL's ncclInfo
 * carries any collective. Algorithms are written against lib/prims.h (or a shared host
 * segment) and never name a transport. */
#ifndef WEFT_ALGO_H_
#define WEFT_ALGO_H_

#include <stddef.h>
#include <stdint.h>
#include "collname.h"
#include "weft.h"

struct weftComm;

/* The collectives the tuner chooses an algorithm for (weft.h's weftColl_t). */
#define WEFT_COLL_BIT(coll) (1u << (unsigned)(coll))

/* One collective call as the algorithms see it: arguments already validated. count is the
 * count argument of the NCCL call (AllReduce, Broadcast, Reduce: the buffer; AllGather: each
 * rank's part, sendcount; ReduceScatter: each rank's part, recvcount; AlltoAll, Gather,
 * Scatter: each peer's part) and bytes is count times the type's size. */
struct weftCollArgs {
  weftColl_t coll;
  const void *sendbuff;
  void *recvbuff;
  size_t count;
  size_t bytes;
  weftDataType_t type;
  weftRedOp_t op;   /* reductions only */
  int root;         /* rooted collectives only, else -1 */
  uint64_t seq;     /* operation sequence number of this communicator */
  /* op == WEFT_OP_PREMULSUM: the op's scalar, read when the call was made (lib/redop.c), so
   * the op may be destroyed as soon as the call returns, as NCCL allows */
  unsigned char scalar[8];
};

struct weftAlgoOps {
  size_t size;      /* sizeof(struct weftAlgoOps) */
  const char *name; /* WEFT_ALGO key and log tag */
  unsigned colls;   /* WEFT_COLL_BIT of each collective it runs */
  /* Collective over the communicator (every rank calls it, in registry order). Sets *state to
   * NULL, with the reason in why, when the algorithm cannot run on this communicator. */
  weftResult_t (*init)(struct weftComm *comm, void **state, char *why, size_t whyLen);
  /* Predicted time in microseconds of one call (args->coll is one of `colls`) on this
   * communicator. Pure: every rank computes the same value, so every rank picks the same
   * algorithm. The count matters where it leaves parts of a schedule empty (a ring's chunks). */
  double (*cost)(void *state, const struct weftComm *comm, const struct weftCollArgs *args);
  /* Runs one call (args->coll is one of `colls`); returns when this rank's part is done
   * (recvbuff holds its result, sendbuff may be reused). */
  weftResult_t (*run)(void *state, struct weftComm *comm, const struct weftCollArgs *args);
  weftResult_t (*finalize)(void *state);
  /* Optional (NULL): called for every collective, whichever algorithm runs it, before it
   * starts; never blocks. Lets an algorithm with a view of every rank publish what this rank
   * is doing (direct: the signature, in the shared segment). */
  void (*begin)(void *state, const struct weftCollArgs *args);
  /* Optional (NULL): called by waits that have lasted (weftWaitPause, at most every
   * WEFT_WATCH_MS), whichever algorithm waits; never blocks. An error ends the wait (direct:
   * weftInvalidUsage when a rank at the same operation published another signature, which
   * catches mismatches that made ranks choose different algorithms). */
  weftResult_t (*watch)(void *state, struct weftComm *comm);
};

extern const struct weftAlgoOps *const weftAlgos[];

#endif
