/* Broadcast and AllGather, the two collectives a data-parallel job calls before its first step
 * (PyTorch's DDP broadcasts rank 0's weights, then gathers every rank's metadata), with NRANKS
 * ranks in one process driven by one thread:
 *
 *   ./broadcast_allgather [NRANKS]        (default 4)
 *
 * weftCommInitAll makes every rank's communicator here; a thread that drives several
 * communicators puts the calls of one collective, one per communicator, between
 * weftGroupStart and weftGroupEnd, which runs them together (alone, the first call would wait
 * for ranks whose calls were never made). With one process per rank (MPI, a launcher) each
 * process makes the same calls on its own communicator, without the group.
 *
 * The program checks every received value and prints one line per collective; it exits 1 on
 * any wrong value or failed call. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "weft.h"

#define MAX_RANKS 16
#define WEIGHTS 100003 /* a prime: no collective needs a round size */
#define SHARD 7

#define CHECK(call)                                                                   \
  do {                                                                                \
    weftResult_t rc_ = (call);                                                        \
    if (rc_ != weftSuccess) {                                                         \
      fprintf(stderr, "%s failed: %s: %s\n", #call, weftGetErrorString(rc_),          \
              weftGetLastError(NULL));                                                \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

/* Rank 0's weights reach every rank: in place, each rank's buffer is its receive buffer. */
static int broadcastWeights(weftComm_t *comms, int n) {
  static float weights[MAX_RANKS][WEIGHTS];
  for (int r = 0; r < n; r++)
    for (int i = 0; i < WEIGHTS; i++) weights[r][i] = r == 0 ? 0.5f * (float)i : -1.0f;
  CHECK(weftGroupStart());
  for (int r = 0; r < n; r++)
    CHECK(weftBroadcast(weights[r], weights[r], WEIGHTS, weftFloat32, 0, comms[r], NULL));
  CHECK(weftGroupEnd());
  int wrong = 0;
  for (int r = 0; r < n; r++)
    for (int i = 0; i < WEIGHTS; i++) wrong += weights[r][i] != 0.5f * (float)i;
  printf("Broadcast: %d floats from rank 0 to %d ranks, %d wrong\n", WEIGHTS, n, wrong);
  return wrong;
}

/* Every rank contributes SHARD values; every rank receives all of them in rank order. */
static int gatherShards(weftComm_t *comms, int n) {
  static int32_t mine[MAX_RANKS][SHARD], all[MAX_RANKS][MAX_RANKS * SHARD];
  for (int r = 0; r < n; r++)
    for (int i = 0; i < SHARD; i++) mine[r][i] = 1000 * r + i;
  CHECK(weftGroupStart());
  for (int r = 0; r < n; r++)
    CHECK(weftAllGather(mine[r], all[r], SHARD, weftInt32, comms[r], NULL));
  CHECK(weftGroupEnd());
  int wrong = 0;
  for (int r = 0; r < n; r++)
    for (int from = 0; from < n; from++)
      for (int i = 0; i < SHARD; i++) wrong += all[r][from * SHARD + i] != 1000 * from + i;
  printf("AllGather: %d ints from each of %d ranks, %d wrong\n", SHARD, n, wrong);
  return wrong;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 4;
  if (n < 1 || n > MAX_RANKS) {
    fprintf(stderr, "usage: %s [NRANKS 1..%d]\n", argv[0], MAX_RANKS);
    return 2;
  }
  weftComm_t comms[MAX_RANKS];
  CHECK(weftCommInitAll(comms, n, NULL)); /* NULL: host memory, no devices */
  int wrong = broadcastWeights(comms, n) + gatherShards(comms, n);
  for (int r = 0; r < n; r++) CHECK(weftCommDestroy(comms[r]));
  return wrong != 0;
}
