/* weftCommInitAll: ndev ranks in this process. Each communicator is driven by a thread of its
 * own (a collective waits for every rank) through exact AllReduces; comms[i] is rank i with
 * and without a devlist; refusals (ndev, comms, devlist, a bad setting) leave comms unchanged;
 * an init that fails on every rank (a forced algorithm that cannot run here) leaves no
 * communicator, thread, descriptor or segment behind. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

TestSuite(initall, .timeout = 60);

#define MAX_DEV 8

struct driver {
  pthread_t tid;
  weftComm_t comm;
  int rank, nranks;
  long failures;
};

static void *drive(void *arg) {
  struct driver *d = arg;
  static const size_t counts[] = {1, 13, 4099};
  static const weftDataType_t types[] = {weftInt32, weftFloat32, weftFloat64};
  int64_t *send = malloc(4099 * 8), *recv = malloc(4099 * 8);
  for (size_t c = 0; c < 3; c++)
    for (size_t t = 0; t < 3; t++) {
      d->failures += checkAllReduce(d->comm, d->rank, d->nranks, counts[c], types[t], weftSum,
                                    (int)(c & 1), send, recv);
      if (types[t] != weftInt32)
        d->failures += checkAllReduce(d->comm, d->rank, d->nranks, counts[c], types[t], weftAvg, 0,
                                      send, recv);
    }
  free(send);
  free(recv);
  return NULL;
}

/* comms[i] must be rank i of ndev; each is driven by its own thread, then destroyed. */
static void useAll(weftComm_t *comms, int ndev) {
  struct driver d[MAX_DEV];
  for (int i = 0; i < ndev; i++) {
    int n = -1, r = -1;
    cr_expect_eq(weftCommCount(comms[i], &n), weftSuccess);
    cr_expect_eq(weftCommUserRank(comms[i], &r), weftSuccess);
    cr_expect_eq(n, ndev, "comms[%d] has %d ranks", i, n);
    cr_expect_eq(r, i, "comms[%d] is rank %d", i, r);
    d[i] = (struct driver){.comm = comms[i], .rank = i, .nranks = ndev};
    pthread_create(&d[i].tid, NULL, drive, &d[i]);
  }
  for (int i = 0; i < ndev; i++) {
    pthread_join(d[i].tid, NULL);
    cr_expect_eq(d[i].failures, 0, "rank %d: %ld wrong AllReduces", i, d[i].failures);
    cr_expect_eq(weftCommDestroy(comms[i]), weftSuccess);
  }
}

Test(initall, four_ranks_each_driven_by_its_thread) {
  int fds = countOpenFds(), threads = countThreads();
  weftComm_t comms[4];
  cr_assert_eq(weftCommInitAll(comms, 4, NULL), weftSuccess, "%s", weftGetLastError(NULL));
  useAll(comms, 4);
  cr_expect_eq(countOpenFds(), fds, "descriptors left");
  cr_expect_eq(countThreadsSettled(threads, 1000), threads, "threads left");
}

Test(initall, one_rank) {
  weftComm_t comm;
  cr_assert_eq(weftCommInitAll(&comm, 1, NULL), weftSuccess, "%s", weftGetLastError(NULL));
  useAll(&comm, 1);
}

Test(initall, devlist_binds_nothing) {
  static const int inOrder[] = {0, 1, 2}, shuffled[] = {7, 0, 3};
  weftComm_t comms[3];
  cr_assert_eq(weftCommInitAll(comms, 3, inOrder), weftSuccess, "%s", weftGetLastError(NULL));
  useAll(comms, 3);
  cr_assert_eq(weftCommInitAll(comms, 3, shuffled), weftSuccess, "%s", weftGetLastError(NULL));
  useAll(comms, 3); /* comms[i] is rank i whatever devlist[i] is */
}

static void expectRefused(weftComm_t *comms, int ndev, const int *devlist, const char *says) {
  weftComm_t sentinel = (weftComm_t)&sentinel;
  for (int i = 0; comms != NULL && i < ndev && i < MAX_DEV; i++) comms[i] = sentinel;
  cr_expect_eq(weftCommInitAll(comms, ndev, devlist), weftInvalidArgument, "ndev %d", ndev);
  cr_expect(strstr(weftGetLastError(NULL), says) != NULL, "message '%s' lacks '%s'",
            weftGetLastError(NULL), says);
  for (int i = 0; comms != NULL && i < ndev && i < MAX_DEV; i++)
    cr_expect_eq(comms[i], sentinel, "comms[%d] changed by a refused call", i);
}

Test(initall, refusals) {
  weftComm_t comms[MAX_DEV];
  static const int negative[] = {0, -1, 2}, twice[] = {1, 0, 1};
  expectRefused(comms, 0, NULL, "ndev 0");
  expectRefused(comms, -3, NULL, "ndev -3");
  expectRefused(NULL, 2, NULL, "comms is NULL");
  expectRefused(comms, 3, negative, "devlist[1] = -1");
  expectRefused(comms, 3, twice, "both device 1");
  setenv("WEFT_TIMEOUT_MS", "0", 1); /* below its minimum: refused, never replaced */
  int threads = countThreads();
  expectRefused(comms, 2, NULL, "WEFT_TIMEOUT_MS");
  unsetenv("WEFT_TIMEOUT_MS");
  cr_expect_eq(countThreadsSettled(threads, 1000), threads, "threads left by a refused call");
}

/* Every rank's init fails at its end (the forced algorithm cannot run on one host): each
 * rank's communicator was built, then freed; nothing stays. */
Test(initall, failed_init_leaves_nothing) {
  int fds = countOpenFds(), threads = countThreads();
  weftComm_t comms[4], sentinel = (weftComm_t)&sentinel;
  for (int i = 0; i < 4; i++) comms[i] = sentinel;
  setenv("WEFT_ALGO", "hier", 1);
  weftResult_t rc = weftCommInitAll(comms, 4, NULL);
  unsetenv("WEFT_ALGO");
  cr_expect_eq(rc, weftInvalidArgument);
  cr_expect(strstr(weftGetLastError(NULL), "weftCommInitAll: rank 0 of 4") != NULL &&
                strstr(weftGetLastError(NULL), "cannot run on this communicator") != NULL,
            "%s", weftGetLastError(NULL));
  for (int i = 0; i < 4; i++) cr_expect_eq(comms[i], sentinel, "comms[%d] changed", i);
  cr_expect_eq(countOpenFds(), fds, "descriptors left");
  cr_expect_eq(countThreadsSettled(threads, 1000), threads, "threads left");
  char names[256];
  cr_expect_eq(segmentsLeft(names, sizeof names), 0, "segments left:%s", names);
}
