/* Collective cases shared by the Criterion tests (tests/coll) and the mpirun checks
 * (tests/mpi): each is a rankBody (harness.h) that runs a sweep of calls on a communicator
 * and checks every result exactly, so one definition of "right" serves threads, processes,
 * emulated hosts and real launchers alike. collcases.c. */
#ifndef WEFT_TEST_COLLCASES_H_
#define WEFT_TEST_COLLCASES_H_

#include <stddef.h>
#include "weft.h"

/* Broadcast, Reduce, AllGather, ReduceScatter, Gather, Scatter or AlltoAll: every count x
 * type x op (where the collective reduces; avg on floats only) x root x in place and out of
 * place (AlltoAll has no in-place form). A gathered, scattered or broadcast part must be the
 * bits its rank put in (AlltoAll's block j of rank r: the pattern seeded r * n + j), a reduced
 * one the tests' reference (pattern.c); buffers a rank must not write (Reduce's and Gather's
 * recvbuff off the root) stay untouched. */
struct collSweep {
  weftColl_t coll;
  const size_t *counts;
  int nCounts;
  const weftDataType_t *types;
  int nTypes;
  int everyRoot; /* rooted collectives: every rank as the root, else the first, last, middle */
};

/* A rankBody running every case of the struct collSweep in arg; returns the failures. */
long collSweepBody(weftComm_t comm, int rank, int n, void *arg);
/* Computes the sweep's inputs and expected results for n ranks before they are forked
 * (tests/common/pattern.c), so that no rank or algorithm recomputes them. */
void collSweepPrepare(const struct collSweep *m, int n);

/* Point to point (arg NULL): rings, random permutations and all-to-all patterns of Send/Recv
 * in one group, and AlltoAll, Gather and Scatter with every root, in place where the call has
 * a form of it, over counts {0, 1, 7, 1021, 40009, 300007} and four types. Every block
 * received must hold the pattern its sender made for this receiver (p2pSeedOf), so a block
 * delivered to the wrong place is caught too. */
long p2pPatternsBody(weftComm_t comm, int rank, int n, void *arg);
long p2pRootedBody(weftComm_t comm, int rank, int n, void *arg);

/* A Broadcast or Reduce (coll; 64 floats, sum) with the root this rank believes in: rank
 * n - 1 says 1, the others 0 (*root). *named: it failed with weftInvalidUsage naming both
 * calls. For the root-mismatch tests of each algorithm. */
weftResult_t rootDisagreeingCall(weftComm_t comm, int rank, int n, weftColl_t coll,
                                 const float send[64], float recv[64], int *root, int *named);

/* The pieces of those, for other point-to-point tests: the fillInput seed of what rank from
 * sends rank to; whether the count elements at got are that (0) or not (1, said on stderr
 * with what, scratch: room for them); whether a call failed (1, said on stderr). */
int p2pSeedOf(int from, int to);
int p2pCheckBlock(const void *got, size_t count, weftDataType_t type, int from, int to,
                  char *scratch, const char *what, int rank);
int p2pCalled(weftComm_t comm, int rank, weftResult_t rc, const char *what);

#endif
