/* One size of one (type, op, root) in a collective's terms, and the check of its result: the
 * buffers are filled with known data before an untimed call, and each part of the result is
 * compared afterwards with where perf_shape.h says it comes from. */
#ifndef WEFT_BENCH_PERF_CHECK_H_
#define WEFT_BENCH_PERF_CHECK_H_

#include "perf_data.h"
#include "perf_shape.h"

typedef struct {
  perfCounts c;  /* elements */
  size_t count;  /* elements passed to the call (c.paramCount) */
  int type, op, root;
  size_t esize, sendBytes, recvBytes, rowBytes; /* rowBytes: the size column */
  size_t sendInplace, recvInplace;              /* this rank's in-place offsets, bytes */
  size_t extentBytes; /* in place: the bytes of the receive buffer the call uses */
} perfCase;

void perfCaseOf(const perfShape *s, int type, int op, int root, size_t count, int rank, int nRanks,
                perfCase *k);

/* Before the call: send holds this rank's input; out of place, recv (the result and the guard
 * after it) is sentinel bytes, so that elements left unwritten show; in place, the extent is
 * sentinel bytes but for the send part, which holds the input. recv is the receive buffer's
 * start (in place: of the extent). */
void perfCheckPrepare(const perfData *d, const perfCase *k, char *send, char *recv, int inPlace);
/* After it: this rank's wrong elements. Each part of the result against its source; the
 * PERF_GUARD bytes after the result (in place: after the extent) must be untouched, and out
 * of place the send buffer must be unchanged. In place, the extent outside the result is the
 * send buffer's and not checked, as nccl-tests does not (MPI's in-place forms leave it
 * undefined). The data must have been made with the reduction if the shape reduces. */
long long perfCheckResult(perfData *d, const perfShape *s, const perfCase *k, const char *send,
                          const char *recv, int inPlace, int rank, int nRanks);
/* The bytes from recv's start that Prepare writes, Result reads and Restore rewrites (the
 * result, in place the extent, and the guard): what device buffers copy to and from. */
size_t perfCheckRecvBytes(const perfCase *k, int inPlace);
/* Then: valid numbers where the sentinel was, so that later timed calls reduce ordinary
 * numbers (sentinel products would underflow to slow subnormals). */
void perfCheckRestore(const perfData *d, const perfCase *k, char *recv, int inPlace);

#endif
