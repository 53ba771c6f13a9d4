/* Broadcast, Reduce, AllGather and ReduceScatter: every registered algorithm that runs the
 * collective, forced in turn (WEFT_ALGO=<collective>:<algorithm>), and the tuner's choice x
 * ranks as threads, processes, mixed and on emulated hosts x counts {0, 1, 2, primes, past a
 * slot} x every datatype (and op, where the collective reduces) x every root kind (first,
 * last, middle) x in place and out of place. Every result is exact: a gathered or broadcast
 * part is the bits its rank put in (the tests' own fillInput), a reduced one the tests' own
 * reference (tests/common/pattern.c). Buffers a rank must not write (Reduce's recvbuff off the
 * root) are checked untouched. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo.h"
#include "caps.h"
#include "collcases.h"
#include "copy.h"
#include "core.h"
#include "harness.h"
#include "reduce.h"

TestSuite(collectives, .timeout = 600);

static const size_t smallCounts[] = {0, 1, 2, 7, 1021, 40009};
static const weftDataType_t allTypes[] = {weftInt8,  weftUint8,   weftInt32,   weftUint32,
                                          weftInt64, weftUint64,  weftFloat16, weftFloat32,
                                          weftFloat64, weftBfloat16, weftFloat8e4m3,
                                          weftFloat8e5m2};
static const weftDataType_t someTypes[] = {weftInt8, weftFloat16, weftFloat32, weftBfloat16,
                                           weftFloat8e5m2};

/* What each rank runs: the sweep, or the sweep that also checks its copies streamed. */
static rankBody sweepBody = collSweepBody;

/* Every algorithm that runs m->coll, forced in turn, then the tuner, on the shape. */
static void runEveryAlgo(int hosts, int procs, int threads, const struct collSweep *m) {
  int perHost = hosts > 0 ? procs : procs * threads, nHosts = hosts > 0 ? hosts : 1;
  int tried = 0;
  collSweepPrepare(m, perHost * nHosts);
  for (int a = 0; a <= weftAlgoCount(); a++) {
    char spec[64], why[160] = "";
    int runs = 1;
    if (weftAlgos[a] != NULL) {
      if (!(weftAlgos[a]->colls & WEFT_COLL_BIT(m->coll))) continue;
      snprintf(spec, sizeof spec, "%s:%s", weftCollName(m->coll), weftAlgos[a]->name);
      setenv("WEFT_ALGO", spec, 1);
      runs = algoRunsOn(weftAlgos[a]->name, nHosts, perHost, why, sizeof why);
      tried++;
    } else {
      unsetenv("WEFT_ALGO");
      snprintf(spec, sizeof spec, "(tuner)");
    }
    expectRefusal(!runs);
    long failures = hosts > 0 ? runRanksOnHosts(hosts, procs, sweepBody, (void *)m, 600)
                              : runRanks(procs, threads, sweepBody, (void *)m, 600);
    expectRefusal(0);
    cr_expect_eq(failures, 0, "%s: %ld failures with %d host(s) x %d x %d ranks, WEFT_ALGO=%s%s%s",
                 weftCollName(m->coll), failures, nHosts, procs, threads, spec,
                 runs ? "" : " (must be refused: ", why);
  }
  unsetenv("WEFT_ALGO");
  cr_expect_gt(tried, 0, "no registered algorithm runs %s", weftCollName(m->coll));
  char names[512];
  int left = segmentsLeft(names, sizeof names);
  cr_expect_eq(left, 0, "%d weft segments left in /dev/shm:%s", left, names);
}

static const weftColl_t colls[] = {weftCollBroadcast, weftCollReduce, weftCollAllGather,
                                   weftCollReduceScatter};

static void everyColl(int hosts, int procs, int threads, int fullTypes) {
  for (size_t i = 0; i < sizeof colls / sizeof colls[0]; i++) {
    struct collSweep m = {colls[i], smallCounts, 6, fullTypes ? allTypes : someTypes,
                       fullTypes ? 12 : 5, 0};
    runEveryAlgo(hosts, procs, threads, &m);
  }
}

Test(collectives, threads_1) { everyColl(0, 1, 1, 1); }
Test(collectives, threads_2) { everyColl(0, 1, 2, 1); }
Test(collectives, threads_3) { everyColl(0, 1, 3, 1); }
Test(collectives, threads_4) { everyColl(0, 1, 4, 0); }
Test(collectives, procs_3) { everyColl(0, 3, 1, 1); }
Test(collectives, procs_5) { everyColl(0, 5, 1, 0); }
Test(collectives, mixed_2x2) { everyColl(0, 2, 2, 0); }
Test(collectives, hosts_2x2) { everyColl(2, 2, 1, 0); }
Test(collectives, hosts_3x1) { everyColl(3, 1, 1, 0); }

/* ---- copies that stream past the cache (lib/copy.h) ----
 * WEFT_NT_COPY_BYTES=1: every copy into a user buffer that would stream for a large collective
 * streams at every size, so the sweep runs them through the streaming copy's head, body and
 * tail at every count, type and offset. Each rank's process must have streamed something (a
 * sweep of AllGather alone copies every rank's own part). */
static long streamedSweepBody(weftComm_t comm, int rank, int n, void *arg) {
  unsigned long long before = weftCopyStreamedBytes();
  long bad = collSweepBody(comm, rank, n, arg);
  const struct collSweep *m = arg;
  if (m->coll == weftCollAllGather && weftCopyStreamedBytes() == before) {
    fprintf(stderr, "rank %d: WEFT_NT_COPY_BYTES=1 and no copy streamed\n", rank);
    bad++;
  }
  return bad;
}

static void streamingEveryColl(int procs, int threads) {
  setenv("WEFT_NT_COPY_BYTES", "1", 1);
  sweepBody = streamedSweepBody;
  everyColl(0, procs, threads, 1);
  sweepBody = collSweepBody;
  unsetenv("WEFT_NT_COPY_BYTES");
}

Test(collectives, streaming_threads_3) { streamingEveryColl(1, 3); }
Test(collectives, streaming_procs_3) { streamingEveryColl(3, 1); }

/* ---- the direct algorithm's paths ----
 * WEFT_ALGO=direct for every collective, with chunks of 16 KiB so that counts cross chunk
 * boundaries (and ReduceScatter's rounds, of 16 KiB / n per part): the one-round path (at most
 * 16 KiB through the segment per rank), staged chunks (processes without cross-memory attach)
 * and in place (threads of one process; processes with cross-memory attach from the smallest
 * size, WEFT_DIRECT_CMA_MIN_BYTES=0; both in one communicator for mixed ranks). Every root. */
static const size_t directCounts[] = {0, 1, 7, 1021, 4099, 12301, 40009};
enum directMode { DIRECT_THREADS, DIRECT_STAGED, DIRECT_CMA };

static void directEveryColl(int procs, int threads, enum directMode mode, int fullTypes) {
  if (mode == DIRECT_CMA) SKIP_UNLESS("cma");
  setenv("WEFT_DIRECT_CHUNK_BYTES", "16384", 1);
  setenv("WEFT_DIRECT_CMA", mode == DIRECT_STAGED ? "0" : mode == DIRECT_CMA ? "2" : "1", 1);
  setenv("WEFT_DIRECT_CMA_MIN_BYTES", "0", 1);
  setenv("WEFT_ALGO", "direct", 1);
  for (size_t i = 0; i < sizeof colls / sizeof colls[0]; i++) {
    struct collSweep m = {colls[i], directCounts, 7, fullTypes ? allTypes : someTypes,
                       fullTypes ? 10 : 4, 1};
    collSweepPrepare(&m, procs * threads);
    long failures = runRanks(procs, threads, collSweepBody, &m, 600);
    cr_expect_eq(failures, 0, "%s: %ld failures with %d x %d ranks, WEFT_ALGO=direct (mode %d)",
                 weftCollName(m.coll), failures, procs, threads, mode);
  }
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_DIRECT_CHUNK_BYTES");
  unsetenv("WEFT_DIRECT_CMA");
  unsetenv("WEFT_DIRECT_CMA_MIN_BYTES");
  char names[512];
  int left = segmentsLeft(names, sizeof names);
  cr_expect_eq(left, 0, "%d weft segments left in /dev/shm:%s", left, names);
}

Test(collectives, direct_threads_1) { directEveryColl(1, 1, DIRECT_THREADS, 1); }
Test(collectives, direct_threads_2) { directEveryColl(1, 2, DIRECT_THREADS, 1); }
Test(collectives, direct_threads_3) { directEveryColl(1, 3, DIRECT_THREADS, 1); }
Test(collectives, direct_threads_4) { directEveryColl(1, 4, DIRECT_THREADS, 0); }
Test(collectives, direct_threads_8) { directEveryColl(1, 8, DIRECT_THREADS, 0); }
Test(collectives, direct_procs_2_staged) { directEveryColl(2, 1, DIRECT_STAGED, 1); }
Test(collectives, direct_procs_3_staged) { directEveryColl(3, 1, DIRECT_STAGED, 1); }
Test(collectives, direct_procs_4_staged) { directEveryColl(4, 1, DIRECT_STAGED, 0); }
Test(collectives, direct_procs_8_staged) { directEveryColl(8, 1, DIRECT_STAGED, 0); }
Test(collectives, direct_procs_2_cma) { directEveryColl(2, 1, DIRECT_CMA, 1); }
Test(collectives, direct_procs_3_cma) { directEveryColl(3, 1, DIRECT_CMA, 1); }
Test(collectives, direct_procs_4_cma) { directEveryColl(4, 1, DIRECT_CMA, 0); }
Test(collectives, direct_mixed_2x2_cma) { directEveryColl(2, 2, DIRECT_CMA, 0); }

/* ---- the tree's rooted Broadcast and Reduce ----
 * WEFT_ALGO=broadcast:tree;reduce:tree, every root, on 4, 6 and 8 ranks (threads, mixed,
 * processes, 4 emulated hosts x 2 where most tree links are tcp; the matrix above covers 1-5
 * ranks with the first, last and middle root, which is every root up to 3), every op, every
 * type on 4 ranks and one of each size on more, on small counts; with 4 KiB slots, so that the
 * counts cross many pieces, and one count whose halves pass TREE_CHUNK_BYTES (512 KiB), so
 * the two trees alternate chunks. */
static const size_t treeCounts[] = {0, 1, 2, 7, 1021, 40009};
static const size_t treeLongCount[] = {300007};
static const weftDataType_t treeLongTypes[] = {weftFloat32};
/* One type of each size, for the larger shapes. */
static const weftDataType_t treeTypes[] = {weftFloat8e4m3, weftBfloat16, weftFloat32, weftUint64};

static long treeBody(weftComm_t comm, int rank, int n, void *arg) {
  int fullTypes = *(const int *)arg;
  long failures = 0;
  for (int c = 0; c < 2; c++) {
    weftColl_t coll = c == 0 ? weftCollBroadcast : weftCollReduce;
    struct collSweep small = {coll, treeCounts, 6, fullTypes ? allTypes : treeTypes,
                           fullTypes ? 12 : 4, 1};
    struct collSweep lengthy = {coll, treeLongCount, 1, treeLongTypes, 1, 1};
    failures += collSweepBody(comm, rank, n, &small) + collSweepBody(comm, rank, n, &lengthy);
  }
  return failures;
}

static void treeEveryRoot(int hosts, int procs, int threads, int fullTypes) {
  setenv("WEFT_ALGO", "broadcast:tree;reduce:tree", 1);
  setenv("WEFT_SHM_SLOT_BYTES", "4096", 1);
  setenv("WEFT_TCP_SLOT_BYTES", "4096", 1);
  long failures = hosts > 0 ? runRanksOnHosts(hosts, procs, treeBody, &fullTypes, 600)
                            : runRanks(procs, threads, treeBody, &fullTypes, 600);
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_SHM_SLOT_BYTES");
  unsetenv("WEFT_TCP_SLOT_BYTES");
  cr_expect_eq(failures, 0, "%ld failures with %d host(s) x %d x %d ranks, WEFT_ALGO=tree",
               failures, hosts > 0 ? hosts : 1, procs, threads);
  char names[512];
  int left = segmentsLeft(names, sizeof names);
  cr_expect_eq(left, 0, "%d weft segments left in /dev/shm:%s", left, names);
}

Test(collectives, tree_threads_4) { treeEveryRoot(0, 1, 4, 1); }
Test(collectives, tree_procs_8) { treeEveryRoot(0, 8, 1, 0); }
Test(collectives, tree_mixed_2x3) { treeEveryRoot(0, 2, 3, 0); }
Test(collectives, tree_hosts_4x2) { treeEveryRoot(4, 2, 1, 0); }

/* Arguments each collective refuses, with its own message. */
static long refusalsBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  float a[64] = {0}, b[64 * 8] = {0};
  long bad = 0;
#define REFUSED(call, needle)                                                               \
  do {                                                                                      \
    weftResult_t rc_ = (call);                                                              \
    if (rc_ != weftInvalidArgument || strstr(weftGetLastError(comm), needle) == NULL) {     \
      fprintf(stderr, "rank %d: %s: rc %d, \"%s\" (wanted \"%s\")\n", rank, #call, rc_,     \
              weftGetLastError(comm), needle);                                              \
      bad++;                                                                                \
    }                                                                                       \
  } while (0)
  REFUSED(weftBroadcast(a, b, 4, weftFloat32, n, comm, NULL), "Broadcast: root");
  REFUSED(weftBroadcast(a, b, 4, weftFloat32, -1, comm, NULL), "Broadcast: root -1 outside");
  REFUSED(weftReduce(a, b, 4, weftFloat32, weftNumOps, 0, comm, NULL), "Reduce: unknown reduction op");
  REFUSED(weftReduce(a, b, 4, weftInt32, weftAvg, 0, comm, NULL), "floating-point types only");
  REFUSED(weftAllGather(NULL, b, 4, weftFloat32, comm, NULL), "AllGather: sendbuff is NULL");
  REFUSED(weftAllGather(a, b, 4, (weftDataType_t)99, comm, NULL), "AllGather: unknown datatype");
  REFUSED(weftReduceScatter(b, NULL, 4, weftFloat32, weftSum, comm, NULL), "ReduceScatter: recvbuff is NULL");
  if (n > 1) /* recvbuff inside sendbuff, but not at this rank's part */
    REFUSED(weftReduceScatter(b, b + 4 * ((rank + 1) % n), 4, weftFloat32, weftSum, comm, NULL),
            "not the in-place form");
  REFUSED(weftAllGather(b + 1, b, 4, weftFloat32, comm, NULL), "overlap");
  REFUSED(weftAllGather(a, b, SIZE_MAX / 2, weftFloat32, comm, NULL), "overflows");
  /* Off the root, Reduce needs no recvbuff and Broadcast no sendbuff: accepted, and both run. */
  float x[4] = {1, 2, 3, 4}, y[4] = {0};
  if (weftReduce(x, rank == 0 ? y : NULL, 4, weftFloat32, weftSum, 0, comm, NULL) != weftSuccess) bad++;
  if (weftBroadcast(rank == 0 ? x : NULL, y, 4, weftFloat32, 0, comm, NULL) != weftSuccess) bad++;
  if (y[3] != 4) bad++;
  if (weftBcast(y, 4, weftFloat32, n - 1, comm, NULL) != weftSuccess) bad++;
  return bad;
#undef REFUSED
}

Test(collectives, refusals) {
  cr_expect_eq(runRanks(1, 3, refusalsBody, NULL, 60), 0);
  cr_expect_eq(runRanks(1, 1, refusalsBody, NULL, 60), 0);
}

/* Ranks that call different collectives (here AllGather against ReduceScatter of the same
 * count and type, which the ring runs on the same links) fail with weftInvalidUsage naming
 * both calls, on every rank. */
static long mismatchBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  float a[256] = {0}, b[256 * 4] = {0};
  weftResult_t rc = rank == 0 ? weftAllGather(a, b, 256, weftFloat32, comm, NULL)
                              : weftReduceScatter(b, a, 256 / n, weftFloat32, weftSum, comm, NULL);
  const char *msg = weftGetLastError(comm);
  int ok = rc == weftInvalidUsage && strstr(msg, "AllGather(count 256, float)") != NULL &&
           strstr(msg, "ReduceScatter(count 128, float, sum)") != NULL;
  if (!ok) fprintf(stderr, "rank %d: rc %d: %s\n", rank, rc, msg);
  return !ok;
}

Test(collectives, mismatched_kinds_fail_on_every_rank) {
  setenv("WEFT_TIMEOUT_MS", "20000", 1);
  cr_expect_eq(runRanks(2, 1, mismatchBody, NULL, 60), 0);
  unsetenv("WEFT_TIMEOUT_MS");
}

/* Ranks that disagree on a Broadcast's or a Reduce's root (the last rank says 1, the others 0)
 * on an algorithm where data flows one way (ring, tree): the ranks that meet another root's
 * signature fail in that call (with 2 ranks, both) with weftInvalidUsage naming both calls;
 * with more ranks, a rank that saw only its own root's data fails at its next collective at
 * the latest, never hangs (the harness's limit). With `warm`, every rank first makes the
 * call with root 0 and with root 1, agreeing, so that the links of both roots are up (the
 * tree makes a root's links on its first call). */
struct rootMismatch {
  weftColl_t coll;
  int warm;
};

static long warmRoots(weftComm_t comm, int rank, weftColl_t coll, const float *send, float *recv) {
  for (int root = 0; root < 2; root++) {
    weftResult_t rc = coll == weftCollBroadcast
                          ? weftBroadcast(send, recv, 64, weftFloat32, root, comm, NULL)
                          : weftReduce(send, recv, 64, weftFloat32, weftSum, root, comm, NULL);
    if (rc != weftSuccess) {
      fprintf(stderr, "rank %d: %s with root %d (all agreeing): %s\n", rank, weftCollName(coll),
              root, weftGetLastError(comm));
      return 1;
    }
  }
  return 0;
}

static long rootMismatchBody(weftComm_t comm, int rank, int n, void *arg) {
  const struct rootMismatch *m = arg;
  float send[64], recv[64];
  for (int i = 0; i < 64; i++) send[i] = (float)rank;
  if (m->warm && warmRoots(comm, rank, m->coll, send, recv) != 0) return 1;
  int root, named;
  weftResult_t rc = rootDisagreeingCall(comm, rank, n, m->coll, send, recv, &root, &named);
  if ((n == 2 && !named) || (rc != weftSuccess && !named && rc != weftRemoteError)) {
    fprintf(stderr, "rank %d: %s with root %d: rc %d: %s\n", rank, weftCollName(m->coll), root,
            rc, weftGetLastError(comm));
    return 1;
  }
  if (rc != weftSuccess) return 0;
  rc = weftBroadcast(send, recv, 64, weftFloat32, 0, comm, NULL); /* the next call fails */
  if (rc == weftSuccess) fprintf(stderr, "rank %d: the call after the mismatch succeeded\n", rank);
  return rc == weftSuccess;
}

/* Broadcast and Reduce with disagreeing roots, WEFT_ALGO=algo, links cold and warm: on 2, 3
 * and 4 processes, 2 and 3 threads (unless hostsOnly), and 2 emulated hosts of 1 and of 2, 3
 * hosts of 1 and of 2. */
static void rootMismatchShapes(const char *algo, int hostsOnly) {
  setenv("WEFT_ALGO", algo, 1);
  setenv("WEFT_TIMEOUT_MS", "20000", 1);
  static const struct rootMismatch cases[] = {
      {weftCollBroadcast, 0}, {weftCollReduce, 0}, {weftCollBroadcast, 1}, {weftCollReduce, 1}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    void *arg = (void *)&cases[k];
    const char *name = weftCollName(cases[k].coll), *links = cases[k].warm ? "warm" : "cold";
    for (int procs = 2; procs <= 4 && !hostsOnly; procs++)
      cr_expect_eq(runRanks(procs, 1, rootMismatchBody, arg, 60), 0, "%s (%s), %d processes",
                   name, links, procs);
    for (int threads = 2; threads <= 3 && !hostsOnly; threads++)
      cr_expect_eq(runRanks(1, threads, rootMismatchBody, arg, 60), 0, "%s (%s), %d threads",
                   name, links, threads);
    for (int hosts = 2; hosts <= 3; hosts++)
      for (int per = 1; per <= 2; per++)
        cr_expect_eq(runRanksOnHosts(hosts, per, rootMismatchBody, arg, 60), 0,
                     "%s (%s), %d hosts x %d", name, links, hosts, per);
  }
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_TIMEOUT_MS");
}

Test(collectives, ring_root_mismatch_fails) { rootMismatchShapes("ring", 0); }
Test(collectives, tree_root_mismatch_fails) { rootMismatchShapes("tree", 0); }
Test(collectives, hier_root_mismatch_fails) { rootMismatchShapes("hier", 1); }
