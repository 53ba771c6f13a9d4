/* Faults, ranks as forked processes: a rank killed (SIGKILL) in the middle of a loop of
 * AllReduces (direct, ring over shm, ring over tcp, tree on one host; ring, tree and hier on
 * two emulated hosts), of Send/Recv and AlltoAll, or of the tree's Broadcasts and Reduces
 * from every root in turn (one host, two emulated hosts): every survivor gets weftRemoteError naming the dead rank, and where it
 * can see the victim's process (same host) its pid and host; a rank stopped (SIGSTOP):
 * weftTimeout naming it, and the flight recorder's dump; mismatched collectives fail on every
 * rank with weftInvalidUsage, both signatures, and no data combined.
 * Time bounds catch a hang or a missed detection (10x what is expected on a loaded machine,
 * far below the timeout); the measured times are in docs/performance.md, printed by
 * WEFT_TEST_VERBOSE=1. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "forked.h"
#include "harness.h"
#include "reduce.h"
#include "caps.h"
#include "topofix.h"

#define nowMs forkedNowMs

/* A hang fails the test (tests/run-all.sh requires a timeout on every test). */
TestSuite(dead_peer, .timeout = 60);
TestSuite(stuck_peer, .timeout = 60);
TestSuite(mismatch, .timeout = 60);

/* Detection takes milliseconds (docs/performance.md); WEFT_TIMEOUT_MS is 60 s in these runs,
 * so a bound of 10 s tells a detection from a timeout on any machine. */
#define DETECT_BOUND_MS 10000

/* ---- ranks as forked processes that report into a shared page ---- */

#define MAX_RANKS 8
struct rankReport {
  volatile int started;  /* in the loop */
  volatile int done;
  volatile int rc;
  volatile int64_t atMs; /* when the failing call returned */
  volatile int64_t callMs; /* mismatch: when the mismatched call started */
  volatile long iters;
  volatile long combined; /* mismatch: elements of recvbuff that hold others' data */
  char sig[96];           /* mismatch: this rank's call, as the library's message writes it */
  char msg[1024];
};
enum mode { MODE_LOOP, MODE_LOOP_SENDRECV, MODE_LOOP_ALLTOALL, MODE_LOOP_BROADCAST, MODE_LOOP_REDUCE, MODE_MISMATCH_COUNT, MODE_MISMATCH_TYPE, MODE_MISMATCH_OP, MODE_MISMATCH_ALGO };

struct shared {
  struct rankReport r[MAX_RANKS];
  volatile int release; /* ranks that reported stay alive until then (so only the victim is gone) */
  char stderrPath[MAX_RANKS][64]; /* where a rank's stderr goes, when set */
  enum mode mode;
  int perHost; /* > 0: rank r is on emulated host r / perHost (WEFT_HOSTID) */
};
#define MAX_COUNT 131072
#define UNTOUCHED 0x7fa5a5a5u /* a NaN no reduction produces */

/* Call iter of the loop: an AllReduce, a grouped Send/Recv ring, an AlltoAll, or a Broadcast
 * or Reduce from each root in turn (the tree makes a root's links at its first call). */
static weftResult_t loopCall(weftComm_t comm, enum mode mode, float *in, float *out, size_t count,
                             long iter) {
  int rank = 0, n = 1;
  weftCommUserRank(comm, &rank);
  weftCommCount(comm, &n);
  if (mode == MODE_LOOP_ALLTOALL) return weftAlltoAll(in, out, count, weftFloat32, comm, NULL);
  if (mode == MODE_LOOP_BROADCAST) return weftBroadcast(in, out, count, weftFloat32, (int)(iter % n), comm, NULL);
  if (mode == MODE_LOOP_REDUCE)
    return weftReduce(in, out, count, weftFloat32, weftSum, (int)(iter % n), comm, NULL);
  if (mode != MODE_LOOP_SENDRECV) return weftAllReduce(in, out, count, weftFloat32, weftSum, comm, NULL);
  weftGroupStart();
  weftSend(in, count * 64, weftFloat32, (rank + 1) % n, comm, NULL);
  weftRecv(out, count * 64, weftFloat32, (rank + n - 1) % n, comm, NULL);
  return weftGroupEnd();
}

static void loop(struct rankReport *me, weftComm_t comm, float *in, float *out, enum mode mode) {
  weftResult_t rc = weftSuccess;
  for (int64_t end = nowMs() + 20000; rc == weftSuccess && nowMs() < end; me->iters++) {
    size_t count = 1 + (size_t)(me->iters % 1024);
    rc = loopCall(comm, mode, in, out, count, me->iters);
  }
  me->rc = rc;
}

/* A few good calls, then rank 1 disagrees. Every rank's input is a different power of 16, so
 * any element of recvbuff that is neither untouched nor this rank's own input was combined. */
static void mismatchedCall(struct rankReport *me, weftComm_t comm, float *in, float *out,
                           enum mode mode, int rank) {
  weftResult_t rc = weftSuccess;
  for (int i = 0; i < 5 && rc == weftSuccess; i++)
    rc = weftAllReduce(in, out, 100, weftFloat32, weftSum, comm, NULL);
  size_t count = 100;
  weftDataType_t type = weftFloat32;
  weftRedOp_t op = weftSum;
  if (rank == 1 && mode == MODE_MISMATCH_COUNT) count = 101;
  if (rank == 1 && mode == MODE_MISMATCH_TYPE) type = weftInt32;
  if (rank == 1 && mode == MODE_MISMATCH_OP) op = weftMax;
  if (rank == 1 && mode == MODE_MISMATCH_ALGO) count = MAX_COUNT; /* the tuner picks another */
  snprintf(me->sig, sizeof me->sig, "AllReduce(count %zu, %s, %s)", count, weftTypeName(type), weftOpName(op));
  for (size_t i = 0; i < count; i++) {
    in[i] = (float)(1 << (4 * rank));
    memcpy(&out[i], &(uint32_t){UNTOUCHED}, 4);
  }
  me->callMs = nowMs();
  if (rc == weftSuccess) rc = weftAllReduce(in, out, count, type, op, comm, NULL);
  for (size_t i = 0; i < count; i++) {
    uint32_t o, mine;
    memcpy(&o, &out[i], 4);
    memcpy(&mine, &in[i], 4);
    me->combined += o != UNTOUCHED && o != mine;
  }
  me->rc = rc;
}

static void rankProcess(struct shared *sh, weftUniqueId id, int rank, int nranks, enum mode mode) {
  struct rankReport *me = &sh->r[rank];
  if (sh->stderrPath[rank][0] != '\0' && freopen(sh->stderrPath[rank], "w", stderr) == NULL) _exit(2);
  if (sh->perHost > 0) {
    char host[32];
    snprintf(host, sizeof host, "faulthost%d", rank / sh->perHost);
    setenv("WEFT_HOSTID", host, 1);
  }
  bindRoundRobin(rank);
  weftComm_t comm;
  weftResult_t rc = weftCommInitRank(&comm, nranks, id, rank);
  if (rc != weftSuccess) {
    me->rc = 100 + rc;
    snprintf(me->msg, sizeof me->msg, "init: %s", weftGetLastError(NULL));
    me->done = 1;
    _exit(1);
  }
  float *in = malloc(MAX_COUNT * sizeof *in), *out = malloc(MAX_COUNT * sizeof *out);
  for (int i = 0; i < MAX_COUNT; i++) in[i] = (float)rank;
  me->started = 1;
  if (mode <= MODE_LOOP_REDUCE) loop(me, comm, in, out, mode);
  else mismatchedCall(me, comm, in, out, mode, rank);
  me->atMs = nowMs();
  snprintf(me->msg, sizeof me->msg, "%s", weftGetLastError(comm));
  weftCommDestroy(comm);
  free(in);
  free(out);
  me->done = 1;
  for (int64_t until = nowMs() + 20000; !sh->release && nowMs() < until;) usleep(1000);
  _exit(0);
}

struct run {
  struct shared *sh;
  pid_t pids[MAX_RANKS];
  int nranks;
};

static void rankEntry(void *shared, weftUniqueId id, int rank, int nranks) {
  struct shared *sh = shared;
  rankProcess(sh, id, rank, nranks, sh->mode);
}

static void startRanks(struct run *run, int nranks, int perHost, enum mode mode, int captureStderr) {
  run->nranks = nranks;
  run->sh = mmap(NULL, sizeof *run->sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(run->sh, MAP_FAILED);
  memset(run->sh, 0, sizeof *run->sh);
  for (int r = 0; captureStderr && r < nranks; r++)
    snprintf(run->sh->stderrPath[r], sizeof run->sh->stderrPath[r], "/tmp/weft-faults-%d-%d.log",
             (int)getpid(), r);
  run->sh->mode = mode;
  run->sh->perHost = perHost;
  forkedLaunch(nranks, rankEntry, run->sh, run->pids);
}

static void waitStarted(struct run *run) {
  int64_t end = nowMs() + 20000;
  for (int r = 0; r < run->nranks; r++)
    while (!run->sh->r[r].started && !run->sh->r[r].done && nowMs() < end) usleep(1000);
}

/* Waits (at most timeoutMs) for every rank but `except` to report; kills what is left. */
static void finish(struct run *run, int except, int timeoutMs) {
  int64_t end = nowMs() + timeoutMs;
  for (int r = 0; r < run->nranks; r++)
    while (r != except && !run->sh->r[r].done && nowMs() < end) usleep(1000);
  run->sh->release = 1;
  for (int r = 0; r < run->nranks; r++) {
    kill(run->pids[r], SIGKILL);
    waitpid(run->pids[r], NULL, 0);
  }
}

static void endRun(struct run *run) { munmap(run->sh, sizeof *run->sh); }

/* What a survivor's message must say of the victim: its rank, and where the survivor judges
 * it by its process (same host), its pid and host. */
static void expectNamed(const struct rankReport *rep, int r, int victim, pid_t victimPid,
                        int sameHost, const char *what) {
  char needle[32], pidNeedle[32], host[64] = "";
  snprintf(needle, sizeof needle, "rank %d ", victim);
  snprintf(pidNeedle, sizeof pidNeedle, "pid %d ", (int)victimPid);
  gethostname(host, sizeof host - 1);
  char *dot = strchr(host, '.');
  if (dot) *dot = '\0';
  cr_expect(strstr(rep->msg, needle) != NULL, "%s: rank %d's message does not name rank %d: %s",
            what, r, victim, rep->msg);
  if (sameHost)
    cr_expect(strstr(rep->msg, pidNeedle) != NULL && strstr(rep->msg, host) != NULL,
              "%s: rank %d's message does not name rank %d's %s on %s: %s", what, r, victim,
              pidNeedle, host, rep->msg);
}

/* Kills a random rank at a random moment of the loop; checks every survivor. perHost > 0:
 * ranks on emulated hosts of perHost ranks each. */
static void killOneIn(int nranks, int perHost, const char *algo, const char *transports,
                      enum mode mode) {
  if (algo) setenv("WEFT_ALGO", algo, 1);
  setenv("WEFT_TIMEOUT_MS", "60000", 1);
  if (transports) setenv("WEFT_TRANSPORTS", transports, 1);
  else unsetenv("WEFT_TRANSPORTS");
  struct run run;
  startRanks(&run, nranks, perHost, mode, 0);
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_TIMEOUT_MS");
  unsetenv("WEFT_TRANSPORTS");
  waitStarted(&run);
  unsigned seed = (unsigned)getpid() ^ (unsigned)nowMs();
  srand(seed);
  int victim = rand() % nranks;
  usleep(20000 + (useconds_t)(rand() % 200) * 1000);
  int64_t killedAt = nowMs();
  kill(run.pids[victim], SIGKILL); /* not reaped until the end: survivors see a zombie */
  finish(&run, victim, DETECT_BOUND_MS + 5000);
  char what[96];
  static const char *const loops[] = {"AllReduce", "Send/Recv", "AlltoAll", "Broadcast", "Reduce"};
  snprintf(what, sizeof what, "%s %s%s%s, %d per host, seed %u", loops[mode], algo ? algo : "tuner", transports ? " over " : "",
           transports ? transports : "", perHost ? perHost : nranks, seed);
  for (int r = 0; r < nranks; r++) {
    if (r == victim) continue;
    struct rankReport *rep = &run.sh->r[r];
    long long after = (long long)(rep->atMs - killedAt);
    if (getenv("WEFT_TEST_VERBOSE"))
      fprintf(stderr, "dead_peer %s: rank %d: rc %d after %lld ms: %s\n", what, r, rep->rc, after, rep->msg);
    cr_expect(rep->done, "%s: rank %d never returned after rank %d was killed", what, r, victim);
    cr_expect_eq(rep->rc, weftRemoteError, "%s: rank %d got %d (%s) after %ld calls", what, r,
                 rep->rc, rep->msg, rep->iters);
    cr_expect_lt(after, DETECT_BOUND_MS, "%s: rank %d took %lld ms", what, r, after);
    expectNamed(rep, r, victim, run.pids[victim], perHost == 0 || r / perHost == victim / perHost, what);
  }
  endRun(&run);
  char names[512];
  int left = segmentsLeft(names, sizeof names);
  cr_expect_eq(left, 0, "%d weft segments left in /dev/shm:%s", left, names);
}

static void killOne(int nranks, int perHost, const char *algo, const char *transports) {
  killOneIn(nranks, perHost, algo, transports, MODE_LOOP);
}

Test(dead_peer, direct_4) { killOne(4, 0, "direct", NULL); }
Test(dead_peer, ring_shm_4) { killOne(4, 0, "ring", "shm"); }
Test(dead_peer, ring_tcp_4) { killOne(4, 0, "ring", "tcp"); }
Test(dead_peer, tree_4) { killOne(4, 0, "tree", NULL); }
#ifdef WEFT_HAVE_UCX
/* UCX (asked for by name: every link over it), on one host and between two emulated hosts
 * (shm inside a host). */
Test(dead_peer, ring_ucx_4) { killOne(4, 0, "ring", "ucx"); }
Test(dead_peer, ring_ucx_2x2) { killOne(4, 2, "ring", "shm,ucx"); }
Test(dead_peer, alltoall_ucx_2x2) { killOneIn(4, 2, NULL, "shm,ucx", MODE_LOOP_ALLTOALL); }
#endif
/* Two emulated hosts of two ranks: shm inside a host, tcp between them. */
Test(dead_peer, hier_2x2) { killOne(4, 2, "hier", NULL); }
Test(dead_peer, ring_2x2) { killOne(4, 2, "ring", NULL); }
Test(dead_peer, tree_2x2) { killOne(4, 2, "tree", NULL); }
/* hiernuma on the 1-socket, 2-NUMA-node fixture, processes bound alternately to its nodes: one
 * host of 2 x 2 (every ring over shm), two emulated hosts of 2 x 2 (tcp between them). */
static void killOneOnNumaNodes(int nranks, int perHost) {
  setenv("WEFT_TOPO_FILE", topoFixturePath("topo-1s2n-2pu.xml"), 1);
  setenv("WEFT_TEST_BIND_ROUND_ROBIN", "2", 1);
  killOne(nranks, perHost, "hiernuma", NULL);
  unsetenv("WEFT_TOPO_FILE");
  unsetenv("WEFT_TEST_BIND_ROUND_ROBIN");
}
Test(dead_peer, hiernuma_4) {
  SKIP_UNLESS("cpu01");
  killOneOnNumaNodes(4, 0);
}
Test(dead_peer, hiernuma_2x4) {
  SKIP_UNLESS("cpu01");
  killOneOnNumaNodes(8, 4);
}
/* Point-to-point links made on first use: a grouped Send/Recv ring and the pairwise AlltoAll,
 * over shm on one host and over shm and tcp on two emulated hosts; on one host also the
 * direct AlltoAll (the tuner's pick there). */
Test(dead_peer, sendrecv_4) { killOneIn(4, 0, NULL, NULL, MODE_LOOP_SENDRECV); }
Test(dead_peer, sendrecv_2x2) { killOneIn(4, 2, NULL, NULL, MODE_LOOP_SENDRECV); }
Test(dead_peer, alltoall_4) { killOneIn(4, 0, "alltoall:pairwise", NULL, MODE_LOOP_ALLTOALL); }
Test(dead_peer, alltoall_direct_4) { killOneIn(4, 0, "alltoall:direct", NULL, MODE_LOOP_ALLTOALL); }
Test(dead_peer, alltoall_2x2) { killOneIn(4, 2, NULL, NULL, MODE_LOOP_ALLTOALL); }
/* The tree's rooted Broadcast and Reduce (point-to-point links), every root in turn. */
Test(dead_peer, tree_broadcast_4) { killOneIn(4, 0, "broadcast:tree", NULL, MODE_LOOP_BROADCAST); }
Test(dead_peer, tree_broadcast_2x2) { killOneIn(4, 2, "broadcast:tree", NULL, MODE_LOOP_BROADCAST); }
Test(dead_peer, tree_reduce_4) { killOneIn(4, 0, "reduce:tree", NULL, MODE_LOOP_REDUCE); }
Test(dead_peer, tree_reduce_2x2) { killOneIn(4, 2, "reduce:tree", NULL, MODE_LOOP_REDUCE); }

/* A file's whole text (empty when it cannot be read), NUL-terminated; its length in *len. */
static char *readWhole(const char *path, size_t *len) {
  char *text = NULL;
  *len = 0;
  FILE *f = fopen(path, "r");
  if (f != NULL) {
    FILE *out = open_memstream(&text, len);
    char buf[4096];
    size_t got;
    while (out != NULL && (got = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, got, out);
    if (out != NULL) fclose(out);
    fclose(f);
  }
  if (text == NULL) text = strdup("");
  cr_assert_not_null(text);
  return text;
}

/* A stopped rank: the others time out after WEFT_TIMEOUT_MS (1.5 s), not before, naming it;
 * well within 10 x the timeout. */
static void stopOne(int nranks, const char *algo, int victim) {
  setenv("WEFT_ALGO", algo, 1);
  setenv("WEFT_TIMEOUT_MS", "1500", 1);
  setenv("WEFT_FLIGHT_RECORDER", "1", 1);
  struct run run;
  startRanks(&run, nranks, 0, MODE_LOOP, 1);
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_TIMEOUT_MS");
  unsetenv("WEFT_FLIGHT_RECORDER");
  waitStarted(&run);
  usleep(50000);
  int64_t stoppedAt = nowMs();
  kill(run.pids[victim], SIGSTOP);
  finish(&run, victim, 20000);
  char needle[32];
  snprintf(needle, sizeof needle, "rank %d ", victim);
  for (int r = 0; r < nranks; r++) {
    if (r == victim) continue;
    struct rankReport *rep = &run.sh->r[r];
    long long after = (long long)(rep->atMs - stoppedAt);
    if (getenv("WEFT_TEST_VERBOSE"))
      fprintf(stderr, "stuck_peer %s: rank %d: rc %d after %lld ms: %s\n", algo, r, rep->rc, after, rep->msg);
    cr_expect(rep->done, "%s: rank %d never returned", algo, r);
    cr_expect_eq(rep->rc, weftTimeout, "%s: rank %d got %d (%s)", algo, r, rep->rc, rep->msg);
    cr_expect(after >= 1400 && after < 15000, "%s: rank %d returned after %lld ms", algo, r, after);
    cr_expect(strstr(rep->msg, needle) != NULL && strstr(rep->msg, "operation") != NULL,
              "%s: rank %d's message does not name rank %d and the operation: %s", algo, r,
              victim, rep->msg);
    /* WEFT_FLIGHT_RECORDER=1: the dump ends with the operation that timed out */
    /* the whole of it: other reports (WEFT_STRAGGLER_REPORT, debug output) may come first */
    size_t n = 0;
    char *text = readWhole(run.sh->stderrPath[r], &n);
    if (getenv("WEFT_TEST_VERBOSE")) fprintf(stderr, "%s", n > 600 ? text + n - 600 : text);
    cr_expect(strstr(text, "WEFT flight recorder") != NULL && strstr(text, "AllReduce count") != NULL &&
                  strstr(text, "rc 8") != NULL,
              "%s: rank %d printed no flight recorder: %s", algo, r, n > 4000 ? text + n - 4000 : text);
    free(text);
  }
  for (int r = 0; r < nranks; r++) unlink(run.sh->stderrPath[r]);
  endRun(&run);
}

Test(stuck_peer, direct_3) { stopOne(3, "direct", 2); }
Test(stuck_peer, ring_2) { stopOne(2, "ring", 1); }
#ifdef WEFT_HAVE_UCX
Test(stuck_peer, ring_ucx_2) {
  setenv("WEFT_TRANSPORTS", "ucx", 1);
  stopOne(2, "ring", 1);
  unsetenv("WEFT_TRANSPORTS");
}
#endif

/* Mismatched calls at the same operation: weftInvalidUsage on every rank, with both
 * signatures, before any data is combined (docs/fault-tolerance.md). */
static void mismatch(const char *algo, enum mode mode) {
  if (algo) setenv("WEFT_ALGO", algo, 1);
  setenv("WEFT_TIMEOUT_MS", "20000", 1);
  struct run run;
  startRanks(&run, 3, 0, mode, 0);
  unsetenv("WEFT_ALGO");
  unsetenv("WEFT_TIMEOUT_MS");
  int64_t start = nowMs();
  finish(&run, -1, 15000);
  const char *name = algo ? algo : "tuner";
  for (int r = 0; r < 3; r++) {
    struct rankReport *rep = &run.sh->r[r];
    if (getenv("WEFT_TEST_VERBOSE"))
      fprintf(stderr, "mismatch %s %d: rank %d: rc %d after %lld ms: %s\n", name, mode, r, rep->rc,
              (long long)(rep->atMs - rep->callMs), rep->msg);
    cr_expect(rep->done, "mode %d: rank %d never returned", mode, r);
    cr_expect_eq(rep->rc, weftInvalidUsage, "mode %d, %s: rank %d got %d (%s)", mode, name, r,
                 rep->rc, rep->msg);
    cr_expect(strstr(rep->msg, "mismatched collectives") != NULL && strstr(rep->msg, run.sh->r[0].sig) != NULL &&
                  strstr(rep->msg, run.sh->r[1].sig) != NULL,
              "mode %d, %s: rank %d's message lacks \"%s\" or \"%s\": %s", mode, name, r,
              run.sh->r[0].sig, run.sh->r[1].sig, rep->msg);
    cr_expect_eq(rep->combined, 0, "mode %d, %s: rank %d's recvbuff holds %ld combined elements",
                 mode, name, r, rep->combined);
  }
  cr_expect_lt(nowMs() - start, DETECT_BOUND_MS, "mismatch took %lld ms", (long long)(nowMs() - start));
  endRun(&run);
}

Test(mismatch, direct_count) { mismatch("direct", MODE_MISMATCH_COUNT); }
Test(mismatch, direct_type) { mismatch("direct", MODE_MISMATCH_TYPE); }
Test(mismatch, direct_op) { mismatch("direct", MODE_MISMATCH_OP); }
Test(mismatch, tuner_type) { mismatch(NULL, MODE_MISMATCH_TYPE); }
/* Sizes so different that the tuner picks different algorithms (direct vs ring): the ranks
 * wait on different things, and the direct segment's signatures still show the mismatch. */
Test(mismatch, tuner_different_algorithms) { mismatch(NULL, MODE_MISMATCH_ALGO); }
Test(mismatch, ring_count) { mismatch("ring", MODE_MISMATCH_COUNT); }
Test(mismatch, ring_type) { mismatch("ring", MODE_MISMATCH_TYPE); }
Test(mismatch, ring_op) { mismatch("ring", MODE_MISMATCH_OP); }
Test(mismatch, tree_op) { mismatch("tree", MODE_MISMATCH_OP); }
#ifdef WEFT_HAVE_UCX
/* Over UCX the ranks that meet the other signature tell their peers through the close
 * message (transports/ucx), as tcp's close record does. */
Test(mismatch, ring_ucx_op) {
  setenv("WEFT_TRANSPORTS", "ucx", 1);
  mismatch("ring", MODE_MISMATCH_OP);
  unsetenv("WEFT_TRANSPORTS");
}
#endif
