/* A program as a user of the installed package writes it: built against the installed
 * weft.h and libweft.so (tests/pkg/run.sh). Four ranks as threads run one float AllReduce with
 * the algorithm WEFT_ALGO names and check it exactly.
 *
 * It also defines functions that a user may well have: its own weftReduceApply (the name of
 * the library's internal reduction, exported by mistake once, when it was called weftReduce
 * and a program's weftReduce replaced it), which the library must not call in place of its
 * own, and, with -DPROFILER, its own weftAllReduce (as a profiling tool does), which calls
 * through to the library's with pweftAllReduce. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <weft.h>

#define RANKS 4
#define COUNT 4099 /* a prime: every algorithm's uneven split */

/* Not weft's: a program's own function that happens to bear a weft internal's name. */
void weftReduceApply(void);
void weftReduceApply(void) {
  fprintf(stderr, "consumer: the library called the program's weftReduceApply\n");
  abort();
}

#ifdef PROFILER
static int profiledCalls;
static pthread_mutex_t profiledLock = PTHREAD_MUTEX_INITIALIZER;
weftResult_t weftAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           weftDataType_t datatype, weftRedOp_t op, weftComm_t comm,
                           weftStream_t stream) {
  pthread_mutex_lock(&profiledLock);
  profiledCalls++;
  pthread_mutex_unlock(&profiledLock);
  return pweftAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
}
#endif

static weftUniqueId id;

static void *rankMain(void *arg) {
  int rank = (int)(intptr_t)arg;
  weftComm_t comm;
  if (weftCommInitRank(&comm, RANKS, id, rank) != weftSuccess) {
    fprintf(stderr, "consumer: rank %d: init: %s\n", rank, weftGetLastError(NULL));
    return (void *)1;
  }
  static float buf[RANKS][COUNT];
  for (int i = 0; i < COUNT; i++) buf[rank][i] = (float)(rank + 1) * (float)(i % 100);
  weftResult_t rc = weftAllReduce(buf[rank], buf[rank], COUNT, weftFloat32, weftSum, comm, NULL);
  intptr_t bad = rc != weftSuccess;
  if (bad) fprintf(stderr, "consumer: rank %d: %s\n", rank, weftGetLastError(comm));
  for (int i = 0; i < COUNT && !bad; i++) {
    float want = 10.0f * (float)(i % 100); /* 1 + 2 + 3 + 4 times i % 100: exact in float */
    if (buf[rank][i] != want) {
      fprintf(stderr, "consumer: rank %d: [%d] = %g, want %g\n", rank, i, buf[rank][i], want);
      bad = 1;
    }
  }
  if (weftCommDestroy(comm) != weftSuccess) bad = 1;
  return (void *)bad;
}

int main(void) {
  if (weftGetUniqueId(&id) != weftSuccess) {
    fprintf(stderr, "consumer: %s\n", weftGetLastError(NULL));
    return 1;
  }
  pthread_t t[RANKS];
  for (int r = 0; r < RANKS; r++) pthread_create(&t[r], NULL, rankMain, (void *)(intptr_t)r);
  int bad = 0;
  for (int r = 0; r < RANKS; r++) {
    void *res;
    pthread_join(t[r], &res);
    bad |= res != NULL;
  }
#ifdef PROFILER
  if (profiledCalls != RANKS) {
    fprintf(stderr, "consumer: the profiler saw %d AllReduce calls, want %d\n", profiledCalls, RANKS);
    bad = 1;
  }
#endif
  if (!bad) printf("consumer: %d ranks, %d floats: exact\n", RANKS, COUNT);
  return bad;
}
