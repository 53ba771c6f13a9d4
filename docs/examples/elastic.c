/* An elastic data-parallel training loop: when a rank dies, the survivors agree on who is gone
 * with weftCommRecover, get a communicator without it, and redo the step.
 *
 *   WEFT_COMM_ID=127.0.0.1:29500 WEFT_COMM_SECRET=s3cret ./elastic NRANKS RANK [DIE_RANK DIE_STEP]
 *
 * (one process per rank; rank 0 starts the rendezvous). Rank DIE_RANK kills itself with
 * SIGKILL at step DIE_STEP, as a crash would. Each rank's gradients depend on its rank, so the
 * averaged update depends on who contributed: after a death the survivors' weights differ from
 * a run without one. To show that the loop is right (and so tests/run-elastic.sh can tell), every
 * rank checks each averaged gradient against the exact average of the gradients of the ranks
 * that were members at that step, computed here without the library, and prints a checksum of
 * its final weights' bits, which must be the same on every survivor. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "weft.h"

#define PARAMS (1 << 20)
#define STEPS 20
#define MAX_RANKS 64

#define CHECK(call)                                                                   \
  do {                                                                                \
    weftResult_t rc_ = (call);                                                        \
    if (rc_ != weftSuccess) {                                                         \
      fprintf(stderr, "%s failed: %s\n", #call, weftGetErrorString(rc_));             \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

/* Stands in for the backward pass of the rank that started as `rank`. Quarters below 2: any
 * sum of up to 64 of them is exact in float, so the average has one rounding, the division. */
static float gradient(int rank, int step, int i) { return (float)((rank * 3 + step + i) % 8) * 0.25f; }

static void computeGradients(float *grad, int rank, int step) {
  for (int i = 0; i < PARAMS; i++) grad[i] = gradient(rank, step, i);
}

/* The averaged gradient must be exactly (sum of the members' gradients) / members. */
static void checkAverage(const float *grad, const int *members, int n, int step, int me) {
  for (int i = 0; i < PARAMS; i++) {
    float sum = 0;
    for (int m = 0; m < n; m++) sum += gradient(members[m], step, i);
    if (grad[i] != sum / (float)n) {
      fprintf(stderr, "rank %d: step %d element %d: AllReduce gave %a, the average of %d ranks is %a\n",
              me, step, i, (double)grad[i], n, (double)(sum / (float)n));
      exit(3);
    }
  }
}

/* Replaces comm by a communicator of the ranks still alive and drops the gone ones from
 * members (the starting ranks, in communicator order); returns this rank's new rank. */
static int recover(weftComm_t *comm, int oldRank, int *members, int *nmembers) {
  int gone[MAX_RANKS], ngone = 0;
  weftComm_t survivors;
  weftResult_t rc = weftCommRecover(*comm, &survivors, NULL, gone, &ngone);
  if (rc != weftSuccess) {
    fprintf(stderr, "rank %d: recovery failed: %s\n", oldRank, weftGetLastError(*comm));
    exit(1);
  }
  weftCommDestroy(*comm);
  *comm = survivors;
  int kept = 0;
  for (int m = 0; m < *nmembers; m++) {
    int isGone = 0;
    for (int i = 0; i < ngone; i++) isGone |= gone[i] == m;
    if (isGone) fprintf(stderr, "rank %d: rank %d is gone\n", oldRank, members[m]);
    else members[kept++] = members[m];
  }
  *nmembers = kept;
  int rank = 0, left = 0;
  weftCommUserRank(*comm, &rank);
  weftCommCount(*comm, &left);
  fprintf(stderr, "rank %d: continuing as rank %d of %d\n", oldRank, rank, left);
  if (left != kept) {
    fprintf(stderr, "rank %d: %d ranks left but %d gone of %d\n", oldRank, left, ngone, kept + ngone);
    exit(1);
  }
  return rank;
}

int main(int argc, char **argv) {
  if (argc != 3 && argc != 5) {
    fprintf(stderr, "usage: %s NRANKS RANK [DIE_RANK DIE_STEP]\n", argv[0]);
    return 2;
  }
  int nranks = atoi(argv[1]), rank = atoi(argv[2]), startRank = rank;
  int dieRank = argc == 5 ? atoi(argv[3]) : -1, dieStep = argc == 5 ? atoi(argv[4]) : -1;
  if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks) return 2;
  int members[MAX_RANKS], nmembers = nranks;
  for (int m = 0; m < nranks; m++) members[m] = m;
  weftUniqueId unused = {{0}}; /* WEFT_COMM_ID names the rendezvous instead */
  weftComm_t comm;
  CHECK(weftCommInitRank(&comm, nranks, unused, rank));
  float *grad = malloc(PARAMS * sizeof *grad), *weights = calloc(PARAMS, sizeof *weights);
  if (grad == NULL || weights == NULL) return 1;
  for (int step = 0; step < STEPS;) {
    computeGradients(grad, startRank, step);
    if (startRank == dieRank && step == dieStep) raise(SIGKILL);
    weftResult_t rc = weftAllReduce(grad, grad, PARAMS, weftFloat32, weftAvg, comm, NULL);
    if (rc == weftSuccess) {
      checkAverage(grad, members, nmembers, step, startRank);
      for (int i = 0; i < PARAMS; i++) weights[i] -= 0.5f * grad[i];
      step++;
      continue;
    }
    /* A peer died (weftRemoteError) or hangs (weftTimeout): recover and redo this step. */
    fprintf(stderr, "rank %d: step %d failed: %s\n", startRank, step, weftGetLastError(comm));
    rank = recover(&comm, startRank, members, &nmembers);
  }
  /* FNV-1a of the weights' bytes: equal on every survivor only if their weights are bit-equal. */
  uint64_t checksum = 0xcbf29ce484222325ull;
  const unsigned char *bytes = (const unsigned char *)weights;
  for (size_t i = 0; i < PARAMS * sizeof *weights; i++) checksum = (checksum ^ bytes[i]) * 0x100000001b3ull;
  printf("rank %d (now %d of %d): %d steps checked, checksum %016llx\n", startRank, rank, nmembers,
         STEPS, (unsigned long long)checksum);
  weftCommDestroy(comm);
  free(grad);
  free(weights);
  return 0;
}
