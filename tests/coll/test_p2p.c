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
#include "harness.h"
#include "reduce.h"

TestSuite(p2p, .timeout = 600);

static const size_t counts[] = {0, 1, 7, 1021, 40009, 300007};
#define NCOUNTS (sizeof counts / sizeof counts[0])
static const weftDataType_t types[] = {weftUint8, weftFloat16, weftInt32, weftFloat64};
#define NTYPES (sizeof types / sizeof types[0])

/* The pattern of what rank `from` sends rank `to`. */
static int seedOf(int from, int to) { return from * 1000 + to + 1; }

static int checkBlock(const void *got, size_t count, weftDataType_t type, int from, int to,
                      char *scratch, const char *what, int rank) {
  fillInput(scratch, count, type, weftSum, seedOf(from, to));
  size_t bytes = count * weftTypeSize(type);
  if (bytes == 0 || memcmp(got, scratch, bytes) == 0) return 0;
  fprintf(stderr, "rank %d: %s: the %zu %s from rank %d are wrong\n", rank, what, count,
          weftTypeName(type), from);
  return 1;
}

static int called(weftComm_t comm, int rank, weftResult_t rc, const char *what) {
  if (rc == weftSuccess) return 0;
  fprintf(stderr, "rank %d: %s failed (%d): %s\n", rank, what, rc, weftGetLastError(comm));
  return 1;
}

/* A pattern: rank r sends to to[r] and receives from from[r] (to[from[r]] == r). */
struct pattern {
  int kind; /* 0 ring, 1 random permutation, 2 all to all */
};

static void permutation(int n, unsigned seed, int *to) {
  for (int i = 0; i < n; i++) to[i] = i;
  for (int i = n - 1; i > 0; i--) {
    seed = seed * 1103515245u + 12345u;
    int j = (int)((seed >> 8) % (unsigned)(i + 1));
    int t = to[i];
    to[i] = to[j], to[j] = t;
  }
}

/* One group of Send/Recv of the pattern; every rank lists its calls in its own order. */
static long patternCase(weftComm_t comm, int rank, int n, int kind, size_t count,
                        weftDataType_t type, char *send, char *recv, char *scratch) {
  size_t bytes = count * weftTypeSize(type);
  int to[64], from[64], npeers = 0;
  if (kind == 0) to[0] = (rank + 1) % n, from[0] = (rank + n - 1) % n, npeers = 1;
  if (kind == 1) {
    int perm[64];
    permutation(n, (unsigned)(count * 31 + type), perm);
    to[0] = perm[rank];
    for (int r = 0; r < n; r++)
      if (perm[r] == rank) from[0] = r;
    npeers = 1;
  }
  if (kind == 2) { /* every rank, itself included, in a rank-dependent order */
    permutation(n, (unsigned)rank * 7919u + (unsigned)count, to);
    for (int i = 0; i < n; i++) from[i] = to[(i + 1) % n];
    npeers = n;
  }
  for (int i = 0; i < npeers; i++) fillInput(send + (size_t)i * bytes, count, type, weftSum, seedOf(rank, to[i]));
  memset(recv, 0xA5, bytes * (size_t)npeers);
  long bad = called(comm, rank, weftGroupStart(), "weftGroupStart");
  for (int i = 0; i < npeers; i++) {
    /* receives first on odd ranks, sends first on even ones: the order must not matter */
    if (rank % 2) bad += called(comm, rank, weftRecv(recv + (size_t)i * bytes, count, type, from[i], comm, NULL), "weftRecv");
    bad += called(comm, rank, weftSend(send + (size_t)i * bytes, count, type, to[i], comm, NULL), "weftSend");
    if (rank % 2 == 0) bad += called(comm, rank, weftRecv(recv + (size_t)i * bytes, count, type, from[i], comm, NULL), "weftRecv");
  }
  bad += called(comm, rank, weftGroupEnd(), "weftGroupEnd");
  for (int i = 0; i < npeers && bad == 0; i++)
    bad += checkBlock(recv + (size_t)i * bytes, count, type, from[i], rank, scratch, "group Send/Recv", rank);
  return bad;
}

static long patternsBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  size_t cap = counts[NCOUNTS - 1] * 8 * (size_t)n + 64;
  char *send = malloc(cap), *recv = malloc(cap), *scratch = malloc(cap);
  long bad = 0;
  for (int kind = 0; kind < 3; kind++)
    for (size_t c = 0; c < NCOUNTS; c++)
      for (size_t t = 0; t < NTYPES; t++) {
        if (kind == 2 && counts[c] > 40009 && n > 4) continue; /* keep the all-to-all small */
        bad += patternCase(comm, rank, n, kind, counts[c], types[t], send, recv, scratch);
      }
  free(send), free(recv), free(scratch);
  return bad;
}

Test(p2p, patterns_threads_1) { cr_expect_eq(runRanks(1, 1, patternsBody, NULL, 300), 0); }
Test(p2p, patterns_threads_4) { cr_expect_eq(runRanks(1, 4, patternsBody, NULL, 300), 0); }
Test(p2p, patterns_procs_3) { cr_expect_eq(runRanks(3, 1, patternsBody, NULL, 300), 0); }
Test(p2p, patterns_procs_8) { cr_expect_eq(runRanks(8, 1, patternsBody, NULL, 500), 0); }
Test(p2p, patterns_mixed_2x2) { cr_expect_eq(runRanks(2, 2, patternsBody, NULL, 300), 0); }
Test(p2p, patterns_hosts_3x1) { cr_expect_eq(runRanksOnHosts(3, 1, patternsBody, NULL, 300), 0); }
Test(p2p, patterns_hosts_2x2) { cr_expect_eq(runRanksOnHosts(2, 2, patternsBody, NULL, 300), 0); }

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
        fillInput(buf, count, weftInt32, weftSum, seedOf(0, r));
        bad += called(comm, rank, weftSend(buf, count, weftInt32, r, comm, NULL), "weftSend");
        bad += called(comm, rank, weftRecv(buf, count, weftInt32, r, comm, NULL), "weftRecv");
        bad += checkBlock(buf, count, weftInt32, r, 0, scratch, "blocking answer", rank);
      } else if (rank == r) {
        bad += called(comm, rank, weftRecv(buf, count, weftInt32, 0, comm, NULL), "weftRecv");
        bad += checkBlock(buf, count, weftInt32, 0, r, scratch, "blocking message", rank);
        fillInput(buf, count, weftInt32, weftSum, seedOf(r, 0));
        bad += called(comm, rank, weftSend(buf, count, weftInt32, 0, comm, NULL), "weftSend");
      }
    }
  free(buf), free(scratch);
  return bad;
}

Test(p2p, blocking_procs_3) { cr_expect_eq(runRanks(3, 1, blockingBody, NULL, 120), 0); }
Test(p2p, blocking_threads_2) { cr_expect_eq(runRanks(1, 2, blockingBody, NULL, 120), 0); }
Test(p2p, blocking_hosts_2x1) { cr_expect_eq(runRanksOnHosts(2, 1, blockingBody, NULL, 120), 0); }

/* AlltoAll, Gather and Scatter, every root, in place where the call has a form of it. */
static long rootedCase(weftComm_t comm, int rank, int n, weftColl_t coll, size_t count,
                       weftDataType_t type, int root, int inPlace, char *send, char *recv,
                       char *scratch) {
  size_t bytes = count * weftTypeSize(type);
  memset(recv, 0xA5, bytes * (size_t)n);
  weftResult_t rc;
  long bad = 0;
  if (coll == weftCollAlltoAll) {
    for (int j = 0; j < n; j++) fillInput(send + (size_t)j * bytes, count, type, weftSum, seedOf(rank, j));
    rc = weftAlltoAll(send, recv, count, type, comm, NULL);
    for (int j = 0; j < n && rc == weftSuccess; j++)
      bad += checkBlock(recv + (size_t)j * bytes, count, type, j, rank, scratch, "AlltoAll", rank);
  } else if (coll == weftCollGather) {
    char *in = inPlace && rank == root ? recv + (size_t)root * bytes : send;
    fillInput(in, count, type, weftSum, seedOf(rank, root));
    rc = weftGather(in, recv, count, type, root, comm, NULL);
    for (int j = 0; j < n && rc == weftSuccess && rank == root; j++)
      bad += checkBlock(recv + (size_t)j * bytes, count, type, j, root, scratch, "Gather", rank);
  } else {
    char *out = inPlace && rank == root ? send + (size_t)root * bytes : recv;
    if (rank == root)
      for (int j = 0; j < n; j++) fillInput(send + (size_t)j * bytes, count, type, weftSum, seedOf(root, j));
    rc = weftScatter(send, out, count, type, root, comm, NULL);
    if (rc == weftSuccess) bad += checkBlock(out, count, type, root, rank, scratch, "Scatter", rank);
  }
  return bad + called(comm, rank, rc, weftCollName(coll));
}

static long rootedBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  size_t cap = counts[NCOUNTS - 1] * 8 * (size_t)n + 64;
  char *send = malloc(cap), *recv = malloc(cap), *scratch = malloc(cap);
  static const weftColl_t colls[] = {weftCollAlltoAll, weftCollGather, weftCollScatter};
  long bad = 0;
  for (int k = 0; k < 3; k++)
    for (size_t c = 0; c < NCOUNTS; c++)
      for (size_t t = 0; t < NTYPES; t++)
        for (int root = 0; root < (k == 0 ? 1 : n); root++)
          for (int inPlace = 0; inPlace < (k == 0 ? 1 : 2); inPlace++)
            bad += rootedCase(comm, rank, n, colls[k], counts[c], types[t], root, inPlace, send,
                              recv, scratch);
  free(send), free(recv), free(scratch);
  return bad;
}

Test(p2p, rooted_threads_1) { cr_expect_eq(runRanks(1, 1, rootedBody, NULL, 300), 0); }
Test(p2p, rooted_threads_3) { cr_expect_eq(runRanks(1, 3, rootedBody, NULL, 300), 0); }
Test(p2p, rooted_procs_4) { cr_expect_eq(runRanks(4, 1, rootedBody, NULL, 300), 0); }
Test(p2p, rooted_mixed_2x2) { cr_expect_eq(runRanks(2, 2, rootedBody, NULL, 300), 0); }
Test(p2p, rooted_hosts_2x1) { cr_expect_eq(runRanksOnHosts(2, 1, rootedBody, NULL, 300), 0); }

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
    fillInput(send[r], count, weftInt32, weftSum, seedOf(r, (r + 1) % DRIVEN));
    cr_assert_eq(weftSend(send[r], count, weftInt32, (r + 1) % DRIVEN, comms[r], NULL), weftSuccess);
    cr_assert_eq(weftRecv(recv[r], count, weftInt32, (r + DRIVEN - 1) % DRIVEN, comms[r], NULL), weftSuccess);
  }
  cr_assert_eq(weftGroupEnd(), weftSuccess, "%s", weftGetLastError(NULL));
  for (int r = 0; r < DRIVEN; r++)
    cr_expect_eq(checkBlock(recv[r], count, weftInt32, (r + DRIVEN - 1) % DRIVEN, r, scratch, "ring", r), 0);
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
  long bad = called(comm, rank, weftGroupStart(), "weftGroupStart");
  for (int k = 0; k < 3; k++) {
    send[k] = malloc(sizes[k] * 4), recv[k] = malloc(sizes[k] * 4);
    fillInput(send[k], sizes[k], weftInt32, weftSum, seedOf(rank, to) + 100 * k);
    bad += called(comm, rank, weftSend(send[k], sizes[k], weftInt32, to, comm, NULL), "weftSend");
    bad += called(comm, rank, weftRecv(recv[k], sizes[k], weftInt32, from, comm, NULL), "weftRecv");
  }
  bad += called(comm, rank, weftGroupEnd(), "weftGroupEnd");
  for (int k = 0; k < 3; k++) {
    fillInput(scratch, sizes[k], weftInt32, weftSum, seedOf(from, rank) + 100 * k);
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
