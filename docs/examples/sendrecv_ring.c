/* Point to point in a group: pipeline parallelism passes each stage's activations to the next
 * stage and its gradients back to the previous one. Here NRANKS stages in one process, driven
 * by one thread, each send to the next rank and receive from the previous one (a ring shift),
 * and at the same time send back to the previous and receive from the next:
 *
 *   ./sendrecv_ring [NRANKS]        (default 4)
 *
 * Every rank both sends and receives, so called one by one the first weftSend would wait for a
 * receive that is never posted; between weftGroupStart and weftGroupEnd weft runs all the
 * transfers of the group at once, in any pattern, without deadlock. Sends and receives between
 * the same two ranks are matched in the order they are called. With one process per rank,
 * each process puts its own weftSend and weftRecv calls in a group the same way.
 *
 * The program checks every received value; it exits 1 on any wrong value or failed call. */
#include <stdio.h>
#include <stdlib.h>

#include "weft.h"

#define MAX_RANKS 16
#define ACTIVATIONS 65537 /* a prime: more than one shared-memory slot, not a round size */
#define GRADIENTS 31

#define CHECK(call)                                                                   \
  do {                                                                                \
    weftResult_t rc_ = (call);                                                        \
    if (rc_ != weftSuccess) {                                                         \
      fprintf(stderr, "%s failed: %s: %s\n", #call, weftGetErrorString(rc_),          \
              weftGetLastError(NULL));                                                \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

static double activation(int stage, int i) { return stage * 1e6 + i; }
static float gradient(int stage, int i) { return (float)(-stage) - 0.25f * (float)i; }

static double fwdOut[MAX_RANKS][ACTIVATIONS], fwdIn[MAX_RANKS][ACTIVATIONS];
static float bwdOut[MAX_RANKS][GRADIENTS], bwdIn[MAX_RANKS][GRADIENTS];

/* One pipeline step on every stage: activations forward, gradients backward, one group. */
static void step(weftComm_t *comms, int n) {
  CHECK(weftGroupStart());
  for (int r = 0; r < n; r++) {
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    CHECK(weftSend(fwdOut[r], ACTIVATIONS, weftFloat64, next, comms[r], NULL));
    CHECK(weftRecv(fwdIn[r], ACTIVATIONS, weftFloat64, prev, comms[r], NULL));
    CHECK(weftSend(bwdOut[r], GRADIENTS, weftFloat32, prev, comms[r], NULL));
    CHECK(weftRecv(bwdIn[r], GRADIENTS, weftFloat32, next, comms[r], NULL));
  }
  CHECK(weftGroupEnd());
}

static int wrongValues(int n) {
  int wrong = 0;
  for (int r = 0; r < n; r++) {
    int next = (r + 1) % n, prev = (r + n - 1) % n;
    for (int i = 0; i < ACTIVATIONS; i++) wrong += fwdIn[r][i] != activation(prev, i);
    for (int i = 0; i < GRADIENTS; i++) wrong += bwdIn[r][i] != gradient(next, i);
  }
  return wrong;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 4;
  if (n < 1 || n > MAX_RANKS) {
    fprintf(stderr, "usage: %s [NRANKS 1..%d]\n", argv[0], MAX_RANKS);
    return 2;
  }
  for (int r = 0; r < n; r++) {
    for (int i = 0; i < ACTIVATIONS; i++) fwdOut[r][i] = activation(r, i);
    for (int i = 0; i < GRADIENTS; i++) bwdOut[r][i] = gradient(r, i);
  }
  weftComm_t comms[MAX_RANKS];
  CHECK(weftCommInitAll(comms, n, NULL)); /* NULL: host memory, no devices */
  step(comms, n);
  int wrong = wrongValues(n);
  printf("Send/Recv: %d stages, %d doubles forward and %d floats back on each, %d wrong\n", n,
         ACTIVATIONS, GRADIENTS, wrong);
  for (int r = 0; r < n; r++) CHECK(weftCommDestroy(comms[r]));
  return wrong != 0;
}
