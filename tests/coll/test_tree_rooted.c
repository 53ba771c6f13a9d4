/* The tree's rooted Reduce beyond the result matrix of test_collectives.c (which checks exact
 * values from every root): with inputs whose sums and products round at every step, a call
 * gives the same bits on every run, in place or out of place, from every root (the order of
 * each element's reduction is fixed by the root and the rank count, docs/algorithms.md), on
 * 3 emulated hosts x 2 (links over shm and tcp) and 5 ranks of one host. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "reduce.h"

TestSuite(tree_rooted, .timeout = 120);

#define COUNT 40009 /* past one slot of shm (128 KiB) as float */
static const weftDataType_t types[] = {weftFloat32, weftFloat64};
static const weftRedOp_t ops[] = {weftSum, weftProd, weftAvg};

/* Out of place, in place, out of place again: the root's three results must be the same bits. */
static long repeatCase(weftComm_t comm, int rank, weftDataType_t type, weftRedOp_t op, int root,
                       char *send, char *runs[3]) {
  size_t bytes = COUNT * weftTypeSize(type);
  for (int k = 0; k < 3; k++) {
    fillRoundingFrom(send, 0, COUNT, type, op, rank); /* harness.h */
    char *out = k == 1 ? send : runs[k];
    weftResult_t rc = weftReduce(send, out, COUNT, type, op, root, comm, NULL);
    if (rc != weftSuccess) {
      fprintf(stderr, "rank %d: Reduce %s %s root %d failed: %s\n", rank, weftTypeName(type),
              weftOpName(op), root, weftGetLastError(comm));
      return 1;
    }
    if (k == 1 && rank == root) memcpy(runs[1], send, bytes);
  }
  if (rank != root || (memcmp(runs[0], runs[1], bytes) == 0 && memcmp(runs[0], runs[2], bytes) == 0))
    return 0;
  fprintf(stderr, "rank %d: Reduce %s %s root %d: the runs gave different bits\n", rank,
          weftTypeName(type), weftOpName(op), root);
  return 1;
}

static long repeatBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  char *send = malloc(COUNT * 8), *runs[3] = {malloc(COUNT * 8), malloc(COUNT * 8), malloc(COUNT * 8)};
  long failures = 0;
  for (int root = 0; root < n; root++)
    for (int t = 0; t < 2; t++)
      for (int o = 0; o < 3; o++) failures += repeatCase(comm, rank, types[t], ops[o], root, send, runs);
  free(send);
  for (int k = 0; k < 3; k++) free(runs[k]);
  return failures;
}

static void sameBits(int hosts, int procs) {
  setenv("WEFT_ALGO", "reduce:tree", 1);
  long failures = hosts > 0 ? runRanksOnHosts(hosts, procs, repeatBody, NULL, 120)
                            : runRanks(procs, 1, repeatBody, NULL, 120);
  unsetenv("WEFT_ALGO");
  cr_expect_eq(failures, 0, "%ld failures with %d host(s) x %d ranks", failures, hosts ? hosts : 1, procs);
}

Test(tree_rooted, same_bits_every_run_hosts_3x2) { sameBits(3, 2); }
Test(tree_rooted, same_bits_every_run_procs_5) { sameBits(0, 5); }
