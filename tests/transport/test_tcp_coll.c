/* AllReduce over the TCP transport (WEFT_TRANSPORTS=tcp, WEFT_ALGO=ring): 2, 3 and 4 ranks as
 * threads and as processes, counts {0, 1, 2, odd primes, past a slot, ~10 MiB}, several
 * datatypes and ops, in-place and out-of-place; then IPv6 and one stream per connection. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "caps.h"
#include "core.h"
#include "harness.h"
#include "reduce.h"

/* The matrix, after checking that the ring really runs over tcp. */
static long matrixBody(weftComm_t comm, int rank, int nranks, void *arg) {
  if (nranks > 1 && strcmp(comm->ring.send.ops->name, "tcp") != 0) {
    fprintf(stderr, "rank %d: the ring uses %s, not tcp\n", rank, comm->ring.send.ops->name);
    return 1;
  }
  return collMatrixBody(comm, rank, nranks, arg);
}

static void runMatrix(int procs, int threads, const struct collMatrix *m) {
  setenv("WEFT_TRANSPORTS", "tcp", 1);
  setenv("WEFT_ALGO", "ring", 1);
  int fds = procs == 1 ? countOpenFds() : 0;
  collMatrixPrepare(m, procs * threads);
  long failures = runRanks(procs, threads, matrixBody, (void *)m, 120);
  cr_assert_eq(failures, 0, "%ld failures with %d x %d ranks over tcp", failures, procs, threads);
  if (procs == 1) {
    for (int i = 0; i < 300 && countOpenFds() != fds; i++) usleep(10000);
    cr_assert_eq(countOpenFds(), fds, "descriptors leaked");
  }
}

/* 0, 1, 2, odd primes, one past a 512 KiB slot of floats, and a ring loop's worth. */
static const size_t smallCounts[] = {0, 1, 2, 7, 31, 1021, 65537, 131101, 786433};
static const weftDataType_t smallTypes[] = {weftInt8,    weftUint32,  weftInt64,   weftFloat16,
                                            weftFloat32, weftFloat64, weftBfloat16};
static const weftRedOp_t smallOps[] = {weftSum, weftProd, weftMax, weftMin, weftAvg};
static const struct collMatrix small = {smallCounts, 9, smallTypes, 7, smallOps, 5};

/* ~10 MiB, an odd prime count of elements, so no piece is aligned. */
static const size_t largeCounts[] = {2621447};
static const weftDataType_t largeTypes[] = {weftFloat32};
static const weftRedOp_t largeOps[] = {weftSum};
static const struct collMatrix large = {largeCounts, 1, largeTypes, 1, largeOps, 1};
static const size_t largeByteCounts[] = {10485767};
static const weftDataType_t byteTypes[] = {weftUint8};
static const weftRedOp_t maxOp[] = {weftMax};
static const struct collMatrix largeBytes = {largeByteCounts, 1, byteTypes, 1, maxOp, 1};

#define TCP_MATRIX_TEST(name, procs, threads) \
  Test(tcp_allreduce, name, .timeout = 120) { \
    runMatrix(procs, threads, &small);        \
    runMatrix(procs, threads, &large);        \
  }

TCP_MATRIX_TEST(threads_2, 1, 2)
TCP_MATRIX_TEST(threads_3, 1, 3)
TCP_MATRIX_TEST(threads_4, 1, 4)
TCP_MATRIX_TEST(procs_2, 2, 1)
TCP_MATRIX_TEST(procs_3, 3, 1)
TCP_MATRIX_TEST(procs_4, 4, 1)

Test(tcp_allreduce, bytes_10MiB_procs_3, .timeout = 120) { runMatrix(3, 1, &largeBytes); }

Test(tcp_allreduce, ipv6_threads_2, .timeout = 120) {
  SKIP_UNLESS("ipv6");
  setenv("WEFT_SOCKET_FAMILY", "AF_INET6", 1);
  runMatrix(1, 2, &small);
}

/* One stream, small slots and a tiny stripe: many pieces per collective, every path of the
 * striping code with a different shape. */
Test(tcp_allreduce, one_stream_small_slots, .timeout = 120) {
  setenv("WEFT_TCP_NSOCKS", "1", 1);
  setenv("WEFT_TCP_SLOT_BYTES", "8192", 1);
  runMatrix(1, 3, &large);
  setenv("WEFT_TCP_NSOCKS", "4", 1);
  setenv("WEFT_TCP_MIN_STRIPE_BYTES", "4096", 1);
  setenv("WEFT_TCP_SLOTS", "2", 1);
  runMatrix(2, 1, &small);
  runMatrix(2, 1, &large);
}
