/* An elastic data-parallel training loop: when a rank dies, the survivors agree on who is gone
 * with weftCommRecover, get a communicator without it, and redo the step.
 *
 *   WEFT_COMM_ID=127.0.0.1:29500 WEFT_COMM_SECRET=s3cret ./elastic NRANKS RANK [DIE_RANK DIE_STEP]
 *
 * (one process per rank; rank 0 starts the rendezvous). Rank DIE_RANK kills itself with
 * SIGKILL at step DIE_STEP, as a crash would. Every gradient here is the same on every rank,
 * so the averaged update, and the final checksum each survivor prints, does not depend on how
 * many ranks are left: a run with a death must print what a run without one prints. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "weft.h"

#define PARAMS (1 << 20)
#define STEPS 20

#define CHECK(call)                                                                   \
  do {                                                                                \
    weftResult_t rc_ = (call);                                                        \
    if (rc_ != weftSuccess) {                                                         \
      fprintf(stderr, "%s failed: %s\n", #call, weftGetErrorString(rc_));             \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

/* Stands in for the backward pass; quarters add and average exactly in float. */
static void computeGradients(float *grad, int step) {
  for (int i = 0; i < PARAMS; i++) grad[i] = (float)((step + i) % 8) * 0.25f;
}

/* Replaces comm by a communicator of the ranks still alive; returns this rank's new rank. */
static int recover(weftComm_t *comm, int oldRank) {
  int nranks = 0, gone[64], ngone = 0;
  weftCommCount(*comm, &nranks);
  weftComm_t survivors;
  weftResult_t rc = weftCommRecover(*comm, &survivors, NULL, gone, &ngone);
  if (rc != weftSuccess) {
    fprintf(stderr, "rank %d: recovery failed: %s\n", oldRank, weftGetLastError(*comm));
    exit(1);
  }
  weftCommDestroy(*comm);
  *comm = survivors;
  int rank = 0, left = 0;
  weftCommUserRank(*comm, &rank);
  weftCommCount(*comm, &left);
  for (int i = 0; i < ngone; i++) fprintf(stderr, "rank %d: rank %d is gone\n", oldRank, gone[i]);
  fprintf(stderr, "rank %d: continuing as rank %d of %d\n", oldRank, rank, left);
  return rank;
}

int main(int argc, char **argv) {
  if (argc != 3 && argc != 5) {
    fprintf(stderr, "usage: %s NRANKS RANK [DIE_RANK DIE_STEP]\n", argv[0]);
    return 2;
  }
  int nranks = atoi(argv[1]), rank = atoi(argv[2]), startRank = rank;
  int dieRank = argc == 5 ? atoi(argv[3]) : -1, dieStep = argc == 5 ? atoi(argv[4]) : -1;
  weftUniqueId unused = {{0}}; /* WEFT_COMM_ID names the rendezvous instead */
  weftComm_t comm;
  CHECK(weftCommInitRank(&comm, nranks, unused, rank));
  float *grad = malloc(PARAMS * sizeof *grad), *weights = calloc(PARAMS, sizeof *weights);
  if (grad == NULL || weights == NULL) return 1;
  for (int step = 0; step < STEPS;) {
    computeGradients(grad, step);
    if (startRank == dieRank && step == dieStep) raise(SIGKILL);
    weftResult_t rc = weftAllReduce(grad, grad, PARAMS, weftFloat32, weftAvg, comm, NULL);
    if (rc == weftSuccess) {
      for (int i = 0; i < PARAMS; i++) weights[i] -= 0.5f * grad[i];
      step++;
      continue;
    }
    /* A peer died (weftRemoteError) or hangs (weftTimeout): recover and redo this step. */
    fprintf(stderr, "rank %d: step %d failed: %s\n", startRank, step, weftGetLastError(comm));
    rank = recover(&comm, startRank);
  }
  double checksum = 0;
  for (int i = 0; i < PARAMS; i++) checksum += weights[i];
  printf("rank %d (now %d): checksum %.6f\n", startRank, rank, checksum);
  weftCommDestroy(comm);
  free(grad);
  free(weights);
  return 0;
}
