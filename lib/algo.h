/* The algorithm interface: one file per algorithm in algorithms/, one exported ops table,
 * registered in lib/registry.c. Algorithms are written against lib/prims.h (or a shared
 * host segment) and never name a transport. */
#ifndef WEFT_ALGO_H_
#define WEFT_ALGO_H_

#include <stddef.h>
#include "weft.h"

struct weftComm;

/* One AllReduce call as the algorithms see it: arguments already validated. */
struct weftCollArgs {
  const void *sendbuff;
  void *recvbuff;
  size_t count;
  size_t bytes;
  weftDataType_t type;
  weftRedOp_t op;
  uint64_t seq; /* operation sequence number of this communicator */
};

struct weftAlgoOps {
  size_t size;      /* sizeof(struct weftAlgoOps) */
  const char *name; /* WEFT_ALGO key and log tag */
  /* Collective over the communicator (every rank calls it, in registry order). Sets *state to
   * NULL, with the reason in why, when the algorithm cannot run on this communicator. */
  weftResult_t (*init)(struct weftComm *comm, void **state, char *why, size_t whyLen);
  /* Predicted time in microseconds of one AllReduce of count elements (`bytes` in all) on this
   * communicator. Pure: every rank computes the same value, so every rank picks the same
   * algorithm. The count matters where it leaves parts of a schedule empty (a ring's chunks). */
  double (*cost)(void *state, const struct weftComm *comm, size_t count, size_t bytes);
  /* Runs one AllReduce; returns when recvbuff holds the result. */
  weftResult_t (*allReduce)(void *state, struct weftComm *comm, const struct weftCollArgs *args);
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
