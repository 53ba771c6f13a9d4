/* Send/Recv and group calls, and the collectives built on them (AlltoAll, Gather, Scatter):
 * rings, random permutations and all-to-all patterns of Send/Recv in one group; blocking
 * Send/Recv outside a group; one thread driving four communicators through every collective;
 * mismatched and refused calls. Ranks as threads, processes, mixed and emulated hosts (TCP).
 * Every byte received is checked against the pattern its sender put in (fillInput, seeded by
 * sender and receiver, so a block delivered to the wrong place is caught too). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "core.h"
#include "collcases.h"
#include "harness.h"
#include "reduce.h"

TestSuite(p2p, .timeout = 600);

Test(p2p, patterns_threads_1) { cr_expect_eq(runRanks(1, 1, p2pPatternsBody, NULL, 300), 0); }
Test(p2p, patterns_threads_4) { cr_expect_eq(runRanks(1, 4, p2pPatternsBody, NULL, 300), 0); }
Test(p2p, patterns_procs_3) { cr_expect_eq(runRanks(3, 1, p2pPatternsBody, NULL, 300), 0); }
Test(p2p, patterns_procs_8) { cr_expect_eq(runRanks(8, 1, p2pPatternsBody, NULL, 500), 0); }
Test(p2p, patterns_mixed_2x2) { cr_expect_eq(runRanks(2, 2, p2pPatternsBody, NULL, 300), 0); }
Test(p2p, patterns_hosts_3x1) { cr_expect_eq(runRanksOnHosts(3, 1, p2pPatternsBody, NULL, 300), 0); }
Test(p2p, patterns_hosts_2x2) { cr_expect_eq(runRanksOnHosts(2, 2, p2pPatternsBody, NULL, 300), 0); }

/* Blocking Send/Recv outside a group: rank 0 sends each rank a message, they answer. Large
 * messages wait for their receiver, so the order is the one that cannot deadlock. */
static long blockingBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  size_t count = 200003;
  char *buf = malloc(count * 4), *scratch = malloc(count * 4);
  long bad = 0;
  for (int round = 0; round < 3; round++)
    for (int r = 1; r < n; r++) {
      if (rank == 0) {
        fillInput(buf, count, weftInt32, weftSum, p2pSeedOf(0, r));
        bad += p2pCalled(comm, rank, weftSend(buf, count, weftInt32, r, comm, NULL), "weftSend");
        bad += p2pCalled(comm, rank, weftRecv(buf, count, weftInt32, r, comm, NULL), "weftRecv");
        bad += p2pCheckBlock(buf, count, weftInt32, r, 0, scratch, "blocking answer", rank);
      } else if (rank == r) {
        bad += p2pCalled(comm, rank, weftRecv(buf, count, weftInt32, 0, comm, NULL), "weftRecv");
        bad += p2pCheckBlock(buf, count, weftInt32, 0, r, scratch, "blocking message", rank);
        fillInput(buf, count, weftInt32, weftSum, p2pSeedOf(r, 0));
        bad += p2pCalled(comm, rank, weftSend(buf, count, weftInt32, 0, comm, NULL), "weftSend");
      }
    }
  free(buf), free(scratch);
  return bad;
}

Test(p2p, blocking_procs_3) { cr_expect_eq(runRanks(3, 1, blockingBody, NULL, 120), 0); }
Test(p2p, blocking_threads_2) { cr_expect_eq(runRanks(1, 2, blockingBody, NULL, 120), 0); }
Test(p2p, blocking_hosts_2x1) { cr_expect_eq(runRanksOnHosts(2, 1, blockingBody, NULL, 120), 0); }

Test(p2p, rooted_threads_1) { cr_expect_eq(runRanks(1, 1, p2pRootedBody, NULL, 300), 0); }
Test(p2p, rooted_threads_3) { cr_expect_eq(runRanks(1, 3, p2pRootedBody, NULL, 300), 0); }
Test(p2p, rooted_procs_4) { cr_expect_eq(runRanks(4, 1, p2pRootedBody, NULL, 300), 0); }
Test(p2p, rooted_mixed_2x2) { cr_expect_eq(runRanks(2, 2, p2pRootedBody, NULL, 300), 0); }
Test(p2p, rooted_hosts_2x1) { cr_expect_eq(runRanksOnHosts(2, 1, p2pRootedBody, NULL, 300), 0); }
/* On one host the tuner gives AlltoAll to direct: the pairwise AlltoAll over shared-memory
 * links, forced. */
Test(p2p, rooted_pairwise_procs_4) {
  setenv("WEFT_ALGO", "alltoall:pairwise", 1);
  cr_expect_eq(runRanks(4, 1, p2pRootedBody, NULL, 300), 0);
  unsetenv("WEFT_ALGO");
}
/* WEFT_NT_COPY_BYTES=1: AlltoAll's, Gather's and Scatter's copies to the rank itself stream
 * (lib/copy.h) at every size. */
Test(p2p, rooted_streaming_procs_3) {
  setenv("WEFT_NT_COPY_BYTES", "1", 1);
  cr_expect_eq(runRanks(3, 1, p2pRootedBody, NULL, 300), 0);
}

/* A receive that expects another count than the send carries fails on the receiver with both
 * calls named, before anything is written. */
static long mismatchBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  (void)n;
  float buf[64] = {0};
  if (rank == 0) {
    weftResult_t rc = weftSend(buf, 5, weftFloat32, 1, comm, NULL);
    return rc != weftSuccess && rc != weftRemoteError && rc != weftInvalidUsage;
  }
  weftResult_t rc = weftRecv(buf, 6, weftFloat32, 0, comm, NULL);
  const char *msg = weftGetLastError(comm);
  int ok = rc == weftInvalidUsage && strstr(msg, "5 elements of float") != NULL &&
           strstr(msg, "6 elements of float") != NULL;
  if (!ok) fprintf(stderr, "rank %d: rc %d: %s\n", rank, rc, msg);
  return !ok;
}

Test(p2p, mismatched_count_fails_on_receiver) {
  cr_expect_eq(runRanks(2, 1, mismatchBody, NULL, 60), 0);
  cr_expect_eq(runRanks(1, 2, mismatchBody, NULL, 60), 0);
}

/* Refused calls: bad peers, types, buffers; a refused call in a group makes its End fail
 * and run nothing; End without Start; a send to itself without its receive. */
static long refusalsBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  float a[8] = {0};
  long bad = 0;
#define EXPECT(call, code, needle)                                                          \
  do {                                                                                      \
    weftResult_t rc_ = (call);                                                              \
    if (rc_ != (code) || strstr(weftGetLastError(comm), needle) == NULL) {                 \
      fprintf(stderr, "rank %d: %s: rc %d, \"%s\" (wanted %d, \"%s\")\n", rank, #call, rc_, \
              weftGetLastError(comm), code, needle);                                        \
      bad++;                                                                                \
    }                                                                                       \
  } while (0)
  EXPECT(weftSend(a, 1, weftFloat32, n, comm, NULL), weftInvalidArgument, "peer");
  EXPECT(weftRecv(a, 1, weftFloat32, -1, comm, NULL), weftInvalidArgument, "peer -1 outside");
  EXPECT(weftSend(NULL, 1, weftFloat32, 0, comm, NULL), weftInvalidArgument, "NULL");
  EXPECT(weftSend(a, 1, (weftDataType_t)77, 0, comm, NULL), weftInvalidArgument, "unknown datatype");
  if (weftGroupEnd() != weftInvalidUsage ||
      strstr(weftGetLastError(NULL), "without a matching weftGroupStart") == NULL) {
    fprintf(stderr, "rank %d: weftGroupEnd without Start: \"%s\"\n", rank, weftGetLastError(NULL));
    bad++;
  }
  EXPECT(weftSend(a, 1, weftFloat32, rank, comm, NULL), weftInvalidUsage, "no matching receive");
  weftResult_t state = weftInternalError;
  if (weftCommGetAsyncError(comm, &state) != weftSuccess || state != weftSuccess) bad++;
  /* and the communicator still works */
  float b[8] = {0};
  weftGroupStart();
  weftSend(a, 8, weftFloat32, (rank + 1) % n, comm, NULL);
  weftRecv(b, 8, weftFloat32, (rank + n - 1) % n, comm, NULL);
  if (weftGroupEnd() != weftSuccess) bad++;
  return bad;
#undef EXPECT
}

/* A refused call inside a group: End returns its error and sends nothing (the peer's matching
 * receive would otherwise have been satisfied). */
static long refusedGroupBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  (void)n;
  float a[4] = {1, 2, 3, 4};
  weftGroupStart();
  weftSend(a, 4, weftFloat32, 0, comm, NULL);
  weftResult_t queued = weftRecv(a, 4, weftFloat32, 99, comm, NULL);
  weftResult_t end = weftGroupEnd();
  (void)rank;
  return queued != weftInvalidArgument || end != weftInvalidArgument;
}

Test(p2p, refusals) {
  cr_expect_eq(runRanks(1, 2, refusalsBody, NULL, 60), 0);
  cr_expect_eq(runRanks(1, 1, refusedGroupBody, NULL, 60), 0);
}

/* One thread drives four communicators (ranks of this process) through every collective and
 * a Send/Recv ring, each inside one group. */
#define DRIVEN 4
struct initArg {
  weftComm_t *comm;
  weftUniqueId id;
  int rank;
  weftResult_t rc;
};

static void *initRank(void *p) {
  struct initArg *a = p;
  a->rc = weftCommInitRank(a->comm, DRIVEN, a->id, a->rank);
  return NULL;
}

static int initDriven(weftComm_t *comms) {
  weftUniqueId id;
  if (weftGetUniqueId(&id) != weftSuccess) return -1;
  pthread_t th[DRIVEN];
  struct initArg args[DRIVEN];
  for (int r = 0; r < DRIVEN; r++) {
    args[r] = (struct initArg){&comms[r], id, r, weftSuccess};
    pthread_create(&th[r], NULL, initRank, &args[r]);
  }
  int bad = 0;
  for (int r = 0; r < DRIVEN; r++) {
    pthread_join(th[r], NULL);
    bad += args[r].rc != weftSuccess;
  }
  return bad;
}

Test(p2p, one_thread_drives_four_comms) {
  weftComm_t comms[DRIVEN];
  cr_assert_eq(initDriven(comms), 0, "init of %d thread ranks", DRIVEN);
  size_t count = 40009, all = count * DRIVEN;
  int32_t *send[DRIVEN], *recv[DRIVEN];
  char *scratch = malloc(all * 8);
  for (int r = 0; r < DRIVEN; r++) send[r] = malloc(all * 4), recv[r] = malloc(all * 4);
  for (weftColl_t c = 0; c < weftNumColls; c++) {
    for (int r = 0; r < DRIVEN; r++) fillInput(send[r], all, weftInt32, weftSum, r);
    cr_assert_eq(weftGroupStart(), weftSuccess);
    for (int r = 0; r < DRIVEN; r++) {
      weftResult_t rc = weftSuccess;
      switch (c) {
        case weftCollAllReduce: rc = weftAllReduce(send[r], recv[r], count, weftInt32, weftSum, comms[r], NULL); break;
        case weftCollBroadcast: rc = weftBroadcast(send[r], recv[r], count, weftInt32, 2, comms[r], NULL); break;
        case weftCollReduce: rc = weftReduce(send[r], recv[r], count, weftInt32, weftSum, 1, comms[r], NULL); break;
        case weftCollAllGather: rc = weftAllGather(send[r], recv[r], count, weftInt32, comms[r], NULL); break;
        case weftCollReduceScatter: rc = weftReduceScatter(send[r], recv[r], count, weftInt32, weftSum, comms[r], NULL); break;
        case weftCollAlltoAll: rc = weftAlltoAll(send[r], recv[r], count, weftInt32, comms[r], NULL); break;
        case weftCollGather: rc = weftGather(send[r], recv[r], count, weftInt32, 3, comms[r], NULL); break;
        default: rc = weftScatter(send[r], recv[r], count, weftInt32, 0, comms[r], NULL); break;
      }
      cr_assert_eq(rc, weftSuccess, "%s queued on rank %d: %s", weftCollName(c), r, weftGetLastError(comms[r]));
    }
    cr_assert_eq(weftGroupEnd(), weftSuccess, "%s: %s", weftCollName(c), weftGetLastError(NULL));
    for (int r = 0; r < DRIVEN; r++) {
      int wrong = 0;
      switch (c) {
        case weftCollAllReduce: wrong = countWrong(recv[r], count, weftInt32, weftSum, DRIVEN) != 0; break;
        case weftCollBroadcast: fillInput(scratch, count, weftInt32, weftSum, 2); wrong = memcmp(recv[r], scratch, count * 4) != 0; break;
        case weftCollReduce: wrong = r == 1 && countWrong(recv[r], count, weftInt32, weftSum, DRIVEN) != 0; break;
        case weftCollAllGather:
          for (int j = 0; j < DRIVEN; j++) {
            fillInput(scratch, count, weftInt32, weftSum, j);
            wrong |= memcmp((char *)recv[r] + (size_t)j * count * 4, scratch, count * 4) != 0;
          }
          break;
        case weftCollReduceScatter: wrong = countWrongFrom(recv[r], (size_t)r * count, count, weftInt32, weftSum, DRIVEN) != 0; break;
        case weftCollAlltoAll:
          for (int j = 0; j < DRIVEN; j++) { /* block r of rank j's input */
            fillInput(scratch, all, weftInt32, weftSum, j);
            wrong |= memcmp((char *)recv[r] + (size_t)j * count * 4, scratch + (size_t)r * count * 4, count * 4) != 0;
          }
          break;
        case weftCollGather:
          for (int j = 0; j < DRIVEN && r == 3; j++) {
            fillInput(scratch, count, weftInt32, weftSum, j);
            wrong |= memcmp((char *)recv[r] + (size_t)j * count * 4, scratch, count * 4) != 0;
          }
          break;
        default:
          fillInput(scratch, all, weftInt32, weftSum, 0);
          wrong = memcmp(recv[r], scratch + (size_t)r * count * 4, count * 4) != 0;
          break;
      }
      cr_expect(!wrong, "%s driven by one thread: rank %d's result is wrong", weftCollName(c), r);
    }
  }
  /* A Send/Recv ring across the four, in one group. */
  cr_assert_eq(weftGroupStart(), weftSuccess);
  for (int r = 0; r < DRIVEN; r++) {
    fillInput(send[r], count, weftInt32, weftSum, p2pSeedOf(r, (r + 1) % DRIVEN));
    cr_assert_eq(weftSend(send[r], count, weftInt32, (r + 1) % DRIVEN, comms[r], NULL), weftSuccess);
    cr_assert_eq(weftRecv(recv[r], count, weftInt32, (r + DRIVEN - 1) % DRIVEN, comms[r], NULL), weftSuccess);
  }
  cr_assert_eq(weftGroupEnd(), weftSuccess, "%s", weftGetLastError(NULL));
  for (int r = 0; r < DRIVEN; r++)
    cr_expect_eq(p2pCheckBlock(recv[r], count, weftInt32, (r + DRIVEN - 1) % DRIVEN, r, scratch, "ring", r), 0);
  for (int r = 0; r < DRIVEN; r++) {
    cr_expect_eq(weftCommDestroy(comms[r]), weftSuccess);
    free(send[r]), free(recv[r]);
  }
  free(scratch);
}

/* Several transfers on one link in one group are matched in call order: three sends of
 * different counts to rank+1, three receives from rank-1. */
static long sameLinkBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  static const size_t sizes[3] = {40009, 7, 1021};
  int to = (rank + 1) % n, from = (rank + n - 1) % n;
  int32_t *send[3], *recv[3];
  char *scratch = malloc(sizes[0] * 4);
  long bad = p2pCalled(comm, rank, weftGroupStart(), "weftGroupStart");
  for (int k = 0; k < 3; k++) {
    send[k] = malloc(sizes[k] * 4), recv[k] = malloc(sizes[k] * 4);
    fillInput(send[k], sizes[k], weftInt32, weftSum, p2pSeedOf(rank, to) + 100 * k);
    bad += p2pCalled(comm, rank, weftSend(send[k], sizes[k], weftInt32, to, comm, NULL), "weftSend");
    bad += p2pCalled(comm, rank, weftRecv(recv[k], sizes[k], weftInt32, from, comm, NULL), "weftRecv");
  }
  bad += p2pCalled(comm, rank, weftGroupEnd(), "weftGroupEnd");
  for (int k = 0; k < 3; k++) {
    fillInput(scratch, sizes[k], weftInt32, weftSum, p2pSeedOf(from, rank) + 100 * k);
    if (bad == 0 && memcmp(recv[k], scratch, sizes[k] * 4) != 0) {
      fprintf(stderr, "rank %d: transfer %d from rank %d is wrong\n", rank, k, from);
      bad++;
    }
    free(send[k]), free(recv[k]);
  }
  free(scratch);
  return bad;
}

Test(p2p, same_link_in_call_order) {
  cr_expect_eq(runRanks(3, 1, sameLinkBody, NULL, 60), 0);
  cr_expect_eq(runRanks(1, 2, sameLinkBody, NULL, 60), 0);
}
