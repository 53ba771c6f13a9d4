/* Calls on device buffers (lib/devcoll.c): every collective and Send/Recv, enqueued on the
 * caller's stream, on the emulated device of tests/common/emudev.h (device memory the host
 * cannot touch, streams that run later than the call), and on a real GPU where there is one
 * (suite devcoll_gpu: [needs gpu] otherwise). Results exact: reductions against pattern.c's
 * reference, moved data byte for byte against what its sender put in. Also: the call returns
 * while its stream is held (it never waits for the stream), mixed host and device buffers are
 * refused, destroy and abort with calls still queued, PreMulSum, and nothing left behind. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "caps.h"
#include "core.h"
#include "device.h"
#include "emudev.h"
#include "forked.h"
#include "harness.h"
#include "reduce.h"

static const struct weftDeviceOps *dev(void) { return weftDeviceRuntime(); }

static void useEmulator(void) { emuInstall(); }

/* The real runtime, or a skip that says why there is none (the probe runs in a child: CUDA
 * started here would not work in the rank processes forked later). */
static void useGpu(void) {
  weftDeviceSetRuntime(NULL);
  SKIP_UNLESS("gpu");
}

TestSuite(devcoll, .init = useEmulator, .timeout = 300);
TestSuite(devcoll_gpu, .init = useGpu, .timeout = 300);

/* ---- Buffers: a device buffer, filled from and read back into host memory ---- */

struct dbuf {
  void *d;
  size_t bytes;
};

static int dalloc(struct dbuf *b, size_t bytes) {
  b->bytes = bytes;
  return dev()->alloc(&b->d, bytes > 0 ? bytes : 1) == weftSuccess ? 0 : -1;
}
static void dput(void *stream, void *d, const void *h, size_t bytes) {
  dev()->copyAsync(d, h, bytes, stream);
  dev()->streamSync(stream);
}
static void dget(void *stream, void *h, const void *d, size_t bytes) {
  dev()->copyAsync(h, d, bytes, stream);
  dev()->streamSync(stream);
}

/* ---- One call and its check ---- */

struct devCase {
  weftColl_t coll; /* weftNumColls: Send/Recv around a ring */
  size_t count;
  weftDataType_t type;
  weftRedOp_t op;
  int root, inPlace;
};

/* The seed of the block rank `from` sends rank `to` in the data-moving calls. */
static int seedOf(int from, int to, int n) { return 1000 + from * n + to; }

static void fillMoved(char *buf, size_t count, weftDataType_t type, int from, int n, int blocks,
                      int to) {
  size_t unit = count * weftTypeSize(type);
  for (int b = 0; b < blocks; b++)
    fillInput(buf + (size_t)b * unit, count, type, weftSum, seedOf(from, blocks > 1 ? b : to, n));
}

static weftResult_t callCase(weftComm_t comm, const struct devCase *c, const void *s, void *r,
                             int rank, int n, void *stream) {
  switch (c->coll) {
  case weftCollAllReduce: return weftAllReduce(s, r, c->count, c->type, c->op, comm, stream);
  case weftCollBroadcast: return weftBroadcast(s, r, c->count, c->type, c->root, comm, stream);
  case weftCollReduce: return weftReduce(s, r, c->count, c->type, c->op, c->root, comm, stream);
  case weftCollAllGather: return weftAllGather(s, r, c->count, c->type, comm, stream);
  case weftCollReduceScatter: return weftReduceScatter(s, r, c->count, c->type, c->op, comm, stream);
  case weftCollAlltoAll: return weftAlltoAll(s, r, c->count, c->type, comm, stream);
  case weftCollGather: return weftGather(s, r, c->count, c->type, c->root, comm, stream);
  case weftCollScatter: return weftScatter(s, r, c->count, c->type, c->root, comm, stream);
  default: break;
  }
  weftGroupStart();
  weftSend(s, c->count, c->type, (rank + 1) % n, comm, stream);
  weftRecv(r, c->count, c->type, (rank + n - 1) % n, comm, stream);
  return weftGroupEnd();
}

/* Input blocks and output blocks of the case, in units of count. */
static void spans(const struct devCase *c, int n, int *in, int *out) {
  *in = *out = 1;
  if (c->coll == weftCollAllGather || c->coll == weftCollGather) *out = n;
  if (c->coll == weftCollReduceScatter || c->coll == weftCollScatter) *in = n;
  if (c->coll == weftCollAlltoAll) *in = *out = n;
}

static int reduces(weftColl_t coll) {
  return coll == weftCollAllReduce || coll == weftCollReduce || coll == weftCollReduceScatter;
}

static void fillCase(const struct devCase *c, char *in, int rank, int n, int inBlocks) {
  if (reduces(c->coll)) fillInput(in, c->count * (size_t)inBlocks, c->type, c->op, rank);
  else if (c->coll == weftNumColls) fillMoved(in, c->count, c->type, rank, n, 1, (rank + 1) % n);
  else fillMoved(in, c->count, c->type, rank, n, inBlocks, rank);
}

/* Failures in out (outBlocks * count elements) after the case ran on rank. */
static long checkCase(const struct devCase *c, const char *out, int rank, int n) {
  size_t unit = c->count * weftTypeSize(c->type);
  char *want = malloc(unit * (size_t)n + 1);
  long bad = 0;
  switch (c->coll) {
  case weftCollAllReduce: bad = countWrong(out, c->count, c->type, c->op, n) != 0; break;
  case weftCollReduce:
    bad = rank == c->root && countWrong(out, c->count, c->type, c->op, n) != 0;
    break;
  case weftCollReduceScatter:
    bad = countWrongFrom(out, (size_t)rank * c->count, c->count, c->type, c->op, n) != 0;
    break;
  case weftCollBroadcast:
    fillMoved(want, c->count, c->type, c->root, n, 1, c->root);
    bad = memcmp(out, want, unit) != 0;
    break;
  case weftCollScatter:
    fillInput(want, c->count, c->type, weftSum, seedOf(c->root, rank, n));
    bad = memcmp(out, want, unit) != 0;
    break;
  case weftNumColls:
    fillMoved(want, c->count, c->type, (rank + n - 1) % n, n, 1, rank);
    bad = memcmp(out, want, unit) != 0;
    break;
  default: /* AllGather, Gather (on the root), AlltoAll: block j from rank j */
    if (c->coll == weftCollGather && rank != c->root) break;
    for (int j = 0; j < n && !bad; j++) {
      int seed = seedOf(j, c->coll == weftCollAlltoAll ? rank : j, n);
      fillInput(want, c->count, c->type, weftSum, seed);
      bad = memcmp(out + (size_t)j * unit, want, unit) != 0;
    }
  }
  free(want);
  return bad;
}

/* Runs the case on device buffers; returns the failures (said on stderr). */
static long runCase(weftComm_t comm, const struct devCase *c, int rank, int n, void *stream) {
  int inB, outB;
  spans(c, n, &inB, &outB);
  size_t ts = weftTypeSize(c->type), inBytes = c->count * ts * (size_t)inB,
         outBytes = c->count * ts * (size_t)outB;
  struct dbuf sb;
  if (dalloc(&sb, inBytes + outBytes) != 0) return 1;
  char *hin = calloc(1, inBytes + 1), *hout = calloc(1, outBytes + 1);
  /* In place: AllReduce on one buffer, AllGather's input at its block of the output,
   * ReduceScatter's output at its block of the input; else two regions of one allocation. */
  char *s = sb.d, *r = (char *)sb.d + inBytes;
  if (c->inPlace && c->coll == weftCollAllReduce) r = s;
  if (c->inPlace && c->coll == weftCollAllGather) s = r + (size_t)rank * c->count * ts;
  if (c->inPlace && c->coll == weftCollReduceScatter) r = s + (size_t)rank * c->count * ts;
  fillCase(c, hin, rank, n, inB);
  if (inBytes > 0) dput(stream, s, hin, inBytes);
  weftResult_t rc = callCase(comm, c, s, r, rank, n, stream);
  long bad = 0;
  if (rc != weftSuccess) {
    fprintf(stderr, "rank %d: coll %d count %zu %s: %s\n", rank, (int)c->coll, c->count,
            weftTypeName(c->type), weftGetLastError(comm));
    bad = 1;
  } else {
    dev()->streamSync(stream);
    weftResult_t async;
    weftCommGetAsyncError(comm, &async);
    if (async != weftSuccess) {
      fprintf(stderr, "rank %d: async error: %s\n", rank, weftGetLastError(comm));
      bad = 1;
    } else if (c->count > 0) {
      dget(stream, hout, r, outBytes);
      bad = checkCase(c, hout, rank, n);
      if (bad)
        fprintf(stderr, "rank %d: coll %d count %zu %s %s root %d inPlace %d: wrong result\n",
                rank, (int)c->coll, c->count, weftTypeName(c->type), weftOpName(c->op), c->root,
                c->inPlace);
    }
  }
  dev()->free(sb.d);
  free(hin), free(hout);
  return bad;
}

/* ---- Sweeps ---- */

static const size_t counts[] = {0, 1, 7, 1021, 40009};
static const weftColl_t colls[] = {weftCollAllReduce, weftCollBroadcast, weftCollReduce,
                                   weftCollAllGather, weftCollReduceScatter, weftCollAlltoAll,
                                   weftCollGather, weftCollScatter, weftNumColls};

/* Every call, count and in-place form on int32 and bf16; every type and op on AllReduce. */
static long everyCallBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  void *stream;
  if (dev()->streamCreate(&stream) != weftSuccess) return 1;
  long bad = 0;
  const weftDataType_t types[] = {weftInt32, weftBfloat16};
  for (size_t k = 0; k < sizeof colls / sizeof colls[0]; k++)
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
      for (int t = 0; t < 2; t++)
        for (int inPlace = 0; inPlace < 2; inPlace++) {
          struct devCase c = {colls[k], counts[i], types[t], weftSum, (int)(i % (size_t)n), inPlace};
          if (inPlace && colls[k] != weftCollAllReduce && colls[k] != weftCollAllGather &&
              colls[k] != weftCollReduceScatter)
            continue;
          bad += runCase(comm, &c, rank, n, stream);
        }
  for (int t = 0; t < weftNumTypes; t++)
    for (int op = 0; op < weftNumOps; op++) {
      if (op == weftAvg && !weftTypeIsFloat((weftDataType_t)t)) continue;
      struct devCase c = {weftCollAllReduce, 1021, (weftDataType_t)t, (weftRedOp_t)op, 0, op % 2};
      bad += runCase(comm, &c, rank, n, stream);
    }
  dev()->streamDestroy(stream);
  return bad;
}

Test(devcoll, every_call_threads_3) { cr_expect_eq(runRanks(1, 3, everyCallBody, NULL, 240), 0); }
Test(devcoll, every_call_procs_2) { cr_expect_eq(runRanks(2, 1, everyCallBody, NULL, 240), 0); }
Test(devcoll, every_call_procs_4) { cr_expect_eq(runRanks(4, 1, everyCallBody, NULL, 240), 0); }
Test(devcoll_gpu, every_call_threads_4) { cr_expect_eq(runRanks(1, 4, everyCallBody, NULL, 240), 0); }

/* ---- The call returns while its stream is held; the result comes when the stream runs ---- */

static long heldStreamBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  void *stream;
  if (dev()->streamCreate(&stream) != weftSuccess) return 1;
  const size_t count = 40009;
  struct devCase c = {weftCollAllReduce, count, weftFloat32, weftSum, 0, 0};
  size_t bytes = count * sizeof(float);
  struct dbuf b;
  long bad = dalloc(&b, 2 * bytes);
  char *h = malloc(bytes);
  fillCase(&c, h, rank, n, 1);
  dput(stream, b.d, h, bytes);
  struct emuHold *hold = emuStreamHold(stream);
  /* Enqueued behind the hold: a call that waited for its stream, or for its input, would
   * never return (the test's timeout). */
  weftResult_t rc = weftAllReduce(b.d, (char *)b.d + bytes, count, weftFloat32, weftSum, comm, stream);
  if (rc != weftSuccess) bad++;
  emuStreamRelease(hold);
  dev()->streamSync(stream);
  dget(stream, h, (char *)b.d + bytes, bytes);
  bad += checkCase(&c, h, rank, n);
  dev()->free(b.d);
  free(h);
  dev()->streamDestroy(stream);
  return bad;
}

Test(devcoll, returns_while_its_stream_is_held) {
  cr_expect_eq(runRanks(1, 3, heldStreamBody, NULL, 60), 0);
}

/* ---- Refusals ---- */

static long mixedBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg, (void)n;
  struct dbuf b;
  if (dalloc(&b, 4096) != 0) return 1;
  float host[16];
  long bad = 0;
  weftResult_t rc = weftAllReduce(b.d, host, 16, weftFloat32, weftSum, comm, NULL);
  const char *msg = weftGetLastError(comm);
  if (rc != weftInvalidArgument || strstr(msg, "sendbuff") == NULL || strstr(msg, "recvbuff") == NULL ||
      strstr(msg, "device memory") == NULL) {
    fprintf(stderr, "rank %d: mixed buffers gave %d: %s\n", rank, (int)rc, msg);
    bad++;
  }
  /* A group whose calls on one communicator mix device and host buffers. */
  weftGroupStart();
  weftAllReduce(b.d, b.d, 16, weftFloat32, weftSum, comm, NULL);
  weftAllReduce(host, host, 16, weftFloat32, weftSum, comm, NULL);
  rc = weftGroupEnd();
  if (rc != weftInvalidUsage || strstr(weftGetLastError(comm), "mix device and host") == NULL) {
    fprintf(stderr, "rank %d: mixed group gave %d: %s\n", rank, (int)rc, weftGetLastError(comm));
    bad++;
  }
  /* The communicator still works: nothing ran. Each rank on a stream of its own: ranks of
   * one process whose calls share a stream wait for each other there (as NCCL's do). */
  struct devCase c = {weftCollAllReduce, 7, weftInt32, weftSum, 0, 0};
  void *stream;
  if (dev()->streamCreate(&stream) != weftSuccess) return bad + 1;
  bad += runCase(comm, &c, rank, n, stream);
  dev()->streamDestroy(stream);
  dev()->free(b.d);
  return bad;
}

Test(devcoll, mixed_buffers_refused) { cr_expect_eq(runRanks(1, 2, mixedBody, NULL, 60), 0); }

/* ---- PreMulSum on device buffers ---- */

/* Two calls queued on the stream, each with an op of its own (different scalars and inputs),
 * both ops destroyed before the stream runs them: each call keeps the scalar it was given. */
static long preMulBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  const size_t count = 1021;
  static const enum premulKind kinds[2] = {PREMUL_DYADIC, PREMUL_WITNESS};
  unsigned char scalar[2][8];
  long bad = 0;
  const weftDataType_t types[] = {weftFloat32, weftBfloat16, weftInt64};
  for (int t = 0; t < 3; t++) {
    weftDataType_t type = types[t];
    size_t bytes = count * weftTypeSize(type);
    weftRedOp_t op[2];
    struct dbuf b;
    if (dalloc(&b, 3 * bytes) != 0) return 1;
    char *h = malloc(bytes);
    for (int k = 0; k < 2; k++) {
      premulScalar(type, kinds[k], scalar[k]);
      if (weftRedOpCreatePreMulSum(&op[k], scalar[k], type, weftScalarHostImmediate, comm) != weftSuccess) return 1;
      fillPreMulInput(h, count, type, kinds[k], rank, n);
      dput(NULL, (char *)b.d + (k == 0 ? 0 : 2 * bytes), h, bytes);
    }
    /* Out of place from [0], in place at [2 * bytes]. */
    weftResult_t rc = weftAllReduce(b.d, (char *)b.d + bytes, count, type, op[0], comm, NULL);
    if (rc == weftSuccess)
      rc = weftAllReduce((char *)b.d + 2 * bytes, (char *)b.d + 2 * bytes, count, type, op[1], comm, NULL);
    for (int k = 0; k < 2; k++) bad += weftRedOpDestroy(op[k], comm) != weftSuccess;
    if (rc != weftSuccess) {
      fprintf(stderr, "rank %d: premulsum: %s\n", rank, weftGetLastError(comm));
      bad++;
    }
    dev()->streamSync(NULL);
    char what[128];
    for (int k = 0; k < 2 && rc == weftSuccess; k++) {
      dget(NULL, h, (char *)b.d + (k == 0 ? bytes : 2 * bytes), bytes);
      if (countWrongPreMul(h, 0, count, type, kinds[k], n, scalar[k], what, sizeof what) != 0) {
        fprintf(stderr, "rank %d: premulsum %s call %d: %s\n", rank, weftTypeName(type), k, what);
        bad++;
      }
    }
    dev()->free(b.d);
    free(h);
  }
  return bad;
}

Test(devcoll, premulsum) { cr_expect_eq(runRanks(2, 1, preMulBody, NULL, 60), 0); }

/* ---- The communicator's end with calls still queued ---- */

static void *releaseLater(void *hold) {
  usleep(100000);
  emuStreamRelease(hold);
  return NULL;
}

/* Destroy runs what was queued first; abort skips it, and the stream still goes on (the
 * output undefined, as NCCL's after an abort). Nothing
 * is left: no device allocation, no thread. Forked ranks that end their communicator
 * themselves (the harness's would end it again). */
static long endCalls(weftComm_t comm, int rank, int n, int abort) {
  void *stream;
  if (dev()->streamCreate(&stream) != weftSuccess) return 1;
  const size_t count = 1021;
  struct devCase c = {weftCollAllReduce, count, weftInt32, weftSum, 0, 0};
  size_t bytes = count * 4;
  struct dbuf b;
  long bad = dalloc(&b, 2 * bytes);
  char *h = malloc(bytes);
  fillCase(&c, h, rank, n, 1);
  dput(stream, b.d, h, bytes);
  memset(h, 0x5a, bytes);
  dput(stream, (char *)b.d + bytes, h, bytes);
  struct emuHold *hold = abort ? emuStreamHold(stream) : NULL;
  for (int k = 0; k < 3; k++)
    if (weftAllReduce(b.d, (char *)b.d + bytes, count, weftInt32, weftSum, comm, stream) != weftSuccess) bad++;
  if (abort) {
    /* Every rank aborts with its calls not yet begun (their inputs are behind the hold,
     * which a thread lets go in 100 ms: the abort frees the staging once the stream's copies
     * are done, as cudaFreeHost would wait for them). */
    pthread_t releaser;
    pthread_create(&releaser, NULL, releaseLater, hold);
    bad += weftCommAbort(comm) != weftSuccess;
    pthread_join(releaser, NULL);
  } else {
    bad += weftCommDestroy(comm) != weftSuccess;
  }
  dev()->streamSync(stream);
  dget(stream, h, (char *)b.d + bytes, bytes);
  if (!abort) bad += checkCase(&c, h, rank, n); /* after an abort the output is undefined, as NCCL's */
  dev()->free(b.d);
  free(h);
  dev()->streamDestroy(stream);
  return bad;
}

struct endShared {
  int abort;
  long failures[4];
};

static void endMain(void *shared, weftUniqueId id, int rank, int nranks) {
  struct endShared *s = shared;
  int threads = countThreads();
  weftComm_t comm;
  long bad = 1;
  if (weftCommInitRank(&comm, nranks, id, rank) == weftSuccess) {
    bad = endCalls(comm, rank, nranks, s->abort);
    if (emuLiveAllocations() != 0) fprintf(stderr, "rank %d: device allocations left\n", rank), bad++;
    if (countThreadsSettled(threads, 2000) > threads) fprintf(stderr, "rank %d: threads left\n", rank), bad++;
  }
  s->failures[rank] = bad;
  _exit(0);
}

static void endCase(int abort) {
  struct endShared *s = forkedShared(sizeof *s);
  s->abort = abort;
  for (int r = 0; r < 3; r++) s->failures[r] = -1;
  pid_t pids[3];
  forkedLaunch(3, endMain, s, pids);
  forkedReap(pids, 3, 60000);
  for (int r = 0; r < 3; r++) cr_expect_eq(s->failures[r], 0, "rank %d: %ld failures", r, s->failures[r]);
}

Test(devcoll, destroy_runs_the_calls_queued) { endCase(0); }
Test(devcoll, abort_skips_the_calls_queued) { endCase(1); }

/* ---- A dead peer: every survivor's stream goes on, and the error is the communicator's ---- */

struct deadShared {
  int midCall; /* the last rank dies inside its calls (a thread kills it), else before them */
  long failures[4];
  int64_t ms[4];
};

static void *killLater(void *arg) {
  (void)arg;
  usleep(50000);
  raise(SIGKILL);
  return NULL;
}

/* Calls until one fails (the sticky error then refuses the next), syncing the stream after
 * each: every sync returns, since a failed call still raises its flag. Returns the calls made. */
static int callUntilFailed(weftComm_t comm, struct dbuf *b, size_t count, void *stream, weftResult_t *async) {
  int calls = 0;
  *async = weftSuccess;
  while (*async == weftSuccess && calls < 10000) {
    if (weftAllReduce(b->d, (char *)b->d + count * 4, count, weftInt32, weftSum, comm, stream) != weftSuccess) {
      weftCommGetAsyncError(comm, async);
      if (*async == weftSuccess) *async = weftInternalError; /* refused without a sticky error */
      break;
    }
    calls++;
    dev()->streamSync(stream);
    weftCommGetAsyncError(comm, async);
  }
  return calls;
}

static void deadMain(void *shared, weftUniqueId id, int rank, int nranks) {
  struct deadShared *s = shared;
  weftComm_t comm;
  if (weftCommInitRank(&comm, nranks, id, rank) != weftSuccess) _exit(1);
  pthread_t killer;
  if (rank == nranks - 1 && !s->midCall) raise(SIGKILL); /* gone before its first call */
  if (rank == nranks - 1) pthread_create(&killer, NULL, killLater, NULL);
  void *stream;
  const size_t count = 1 << 22;
  struct dbuf b;
  long bad = dev()->streamCreate(&stream) != weftSuccess || dalloc(&b, 2 * count * 4) != 0;
  int64_t t0 = forkedNowMs();
  weftResult_t async;
  callUntilFailed(comm, &b, count, stream, &async);
  s->ms[rank] = forkedNowMs() - t0;
  if (async != weftRemoteError) {
    fprintf(stderr, "rank %d: async error %d, not weftRemoteError: %s\n", rank, (int)async, weftGetLastError(comm));
    bad++;
  }
  weftCommAbort(comm);
  dev()->free(b.d);
  dev()->streamDestroy(stream);
  s->failures[rank] = bad;
  _exit(0);
}

static void deadCase(int nranks, int midCall) {
  struct deadShared *s = forkedShared(sizeof *s);
  s->midCall = midCall;
  for (int r = 0; r < nranks; r++) s->failures[r] = -1;
  pid_t pids[4];
  forkedLaunch(nranks, deadMain, s, pids);
  forkedReap(pids, nranks, 60000);
  for (int r = 0; r < nranks - 1; r++) {
    cr_expect_eq(s->failures[r], 0, "rank %d: %ld failures", r, s->failures[r]);
    cr_expect_lt(s->ms[r], 30000, "rank %d took %lld ms to fail", r, (long long)s->ms[r]);
  }
}

Test(devcoll, dead_peer_before_its_calls) { deadCase(3, 0); }
Test(devcoll, dead_peer_mid_call) { deadCase(3, 1); }
Test(devcoll_gpu, kill_9_mid_call_procs_4) { deadCase(4, 1); }

/* ---- On a GPU: every call, type and op, 1 to 8 ranks ---- */

/* Every call x every type x every op where it reduces (avg on floats) x counts x in place. */
static long fullMatrixBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  void *stream;
  if (dev()->streamCreate(&stream) != weftSuccess) return 1;
  long bad = 0;
  for (size_t k = 0; k < sizeof colls / sizeof colls[0]; k++)
    for (int t = 0; t < weftNumTypes; t++)
      for (int op = 0; op < (reduces(colls[k]) ? weftNumOps : 1); op++)
        for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
          for (int inPlace = 0; inPlace < 2; inPlace++) {
            if (op == weftAvg && !weftTypeIsFloat((weftDataType_t)t)) continue;
            if (inPlace && colls[k] != weftCollAllReduce && colls[k] != weftCollAllGather &&
                colls[k] != weftCollReduceScatter)
              continue;
            struct devCase c = {colls[k], counts[i], (weftDataType_t)t, (weftRedOp_t)op,
                                (int)(i % (size_t)n), inPlace};
            bad += runCase(comm, &c, rank, n, stream);
          }
  dev()->streamDestroy(stream);
  return bad;
}

Test(devcoll_gpu, full_matrix_procs_1) { cr_expect_eq(runRanks(1, 1, fullMatrixBody, NULL, 280), 0); }
Test(devcoll_gpu, full_matrix_procs_2) { cr_expect_eq(runRanks(2, 1, fullMatrixBody, NULL, 280), 0); }
Test(devcoll_gpu, full_matrix_procs_4) { cr_expect_eq(runRanks(4, 1, fullMatrixBody, NULL, 280), 0); }
Test(devcoll_gpu, full_matrix_procs_8) { cr_expect_eq(runRanks(8, 1, fullMatrixBody, NULL, 280), 0); }
/* The same matrix on the emulated device, so that its checks are known right before a GPU
 * runs them. */
Test(devcoll, full_matrix_procs_3) { cr_expect_eq(runRanks(3, 1, fullMatrixBody, NULL, 280), 0); }
