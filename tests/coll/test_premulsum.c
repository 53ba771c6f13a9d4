/* PreMulSum (weftRedOpCreatePreMulSum / weftRedOpDestroy): AllReduce, Reduce (first and last
 * root) and ReduceScatter x every datatype x two scalars (one whose products round, one that
 * tells products rounded to the type from wider ones: tests/common/pattern.c) x counts x in
 * place and out of place, on 1-4 ranks as threads, as processes and on emulated hosts, and
 * every AllReduce algorithm; every result exact, sendbuff never written, Reduce's recvbuff
 * off the root untouched. Then every refusal with its message, an op destroyed while a
 * non-blocking collective given it is in flight, several ops in one group (each call keeps
 * its own scalar), and ranks that mix Sum and PreMulSum. */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "algo.h"
#include "core.h"
#include "harness.h"
#include "reduce.h"

TestSuite(premulsum, .timeout = 600);

#define POISON 0xA5

static const weftDataType_t allTypes[] = {weftInt8,    weftUint8,    weftInt32,      weftUint32,
                                          weftInt64,   weftUint64,   weftFloat16,    weftFloat32,
                                          weftFloat64, weftBfloat16, weftFloat8e4m3, weftFloat8e5m2};
#define NTYPES (int)(sizeof allTypes / sizeof allTypes[0])
static const size_t counts[] = {1, 2, 7, 1021, 65537};
#define NCOUNTS (int)(sizeof counts / sizeof counts[0])

struct bufs {
  char *send, *recv, *input;
};

static int untouched(const char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if ((unsigned char)p[i] != POISON) return 0;
  return 1;
}

/* Runs one call of coll with a fresh op; returns 1 with a message when anything is wrong. */
static long oneCase(weftComm_t comm, int rank, int n, weftColl_t coll, weftDataType_t t,
                    enum premulKind kind, size_t count, int root, int inPlace, struct bufs *b) {
  unsigned char scalar[8];
  premulScalar(t, kind, scalar);
  weftRedOp_t op;
  weftResult_t rc = weftRedOpCreatePreMulSum(&op, scalar, t, weftScalarHostImmediate, comm);
  if (rc != weftSuccess) {
    fprintf(stderr, "rank %d: create: %s\n", rank, weftGetLastError(comm));
    return 1;
  }
  size_t bytes = count * weftTypeSize(t), inBytes = coll == weftCollReduceScatter ? bytes * (size_t)n : bytes;
  memset(b->send, POISON, inBytes);
  memset(b->recv, POISON, inBytes);
  fillPreMulInput(b->send, inBytes / weftTypeSize(t), t, kind, rank, n);
  memcpy(b->input, b->send, inBytes);
  char *out = b->recv, what[160] = "";
  size_t wrong = 0, first = 0;
  int check = 1;
  switch (coll) {
    case weftCollAllReduce:
      if (inPlace) out = b->send;
      rc = weftAllReduce(b->send, out, count, t, op, comm, NULL);
      break;
    case weftCollReduce:
      if (inPlace && rank == root) out = b->send;
      rc = weftReduce(b->send, out, count, t, op, root, comm, NULL);
      check = rank == root;
      break;
    default:
      if (inPlace) out = b->send + (size_t)rank * bytes;
      first = (size_t)rank * count;
      rc = weftReduceScatter(b->send, out, count, t, op, comm, NULL);
      break;
  }
  if (rc == weftSuccess && check) wrong = countWrongPreMul(out, first, count, t, kind, n, scalar, what, sizeof what);
  else if (rc == weftSuccess && !untouched(b->recv, bytes)) wrong = 1, snprintf(what, sizeof what, "recvbuff written off the root");
  if (rc == weftSuccess && !inPlace && memcmp(b->send, b->input, inBytes) != 0)
    wrong = 1, snprintf(what, sizeof what, "sendbuff was written");
  weftResult_t drc = weftRedOpDestroy(op, comm);
  if (rc != weftSuccess || wrong || drc != weftSuccess)
    fprintf(stderr, "rank %d/%d WEFT_ALGO=%s: %s %zu %s %s root %d %s: %s%zu wrong %s\n", rank, n,
            getenv("WEFT_ALGO"), weftCollName(coll), count, weftTypeName(t),
            kind == PREMUL_DYADIC ? "dyadic" : "witness", root, inPlace ? "in place" : "out of place",
            rc != weftSuccess || drc != weftSuccess ? weftGetLastError(comm) : "", wrong, what);
  return rc != weftSuccess || wrong || drc != weftSuccess;
}

struct plan {
  int allReduceOnly;
};

static long matrixBody(weftComm_t comm, int rank, int n, void *arg) {
  const struct plan *p = arg;
  static const weftColl_t colls[] = {weftCollAllReduce, weftCollReduce, weftCollReduceScatter};
  size_t cap = counts[NCOUNTS - 1] * 8 * (size_t)n + 64;
  struct bufs b = {malloc(cap), malloc(cap), malloc(cap)};
  long failures = 0;
  for (int c = 0; c < (p->allReduceOnly ? 1 : 3); c++)
    for (int t = 0; t < NTYPES; t++)
      for (int k = PREMUL_DYADIC; k <= PREMUL_WITNESS; k++)
        for (int i = 0; i < NCOUNTS; i++)
          for (int root = 0; root < (colls[c] == weftCollReduce ? n : 1); root += n > 1 ? n - 1 : 1)
            for (int inPlace = 0; inPlace < 2; inPlace++)
              failures += oneCase(comm, rank, n, colls[c], allTypes[t], (enum premulKind)k,
                                  counts[i], root, inPlace, &b);
  free(b.send), free(b.recv), free(b.input);
  return failures;
}

static const struct plan everyColl = {0}, allReduceOnly = {1};

Test(premulsum, threads_1) { cr_expect_eq(runRanks(1, 1, matrixBody, (void *)&everyColl, 600), 0); }
Test(premulsum, threads_2) { cr_expect_eq(runRanks(1, 2, matrixBody, (void *)&everyColl, 600), 0); }
Test(premulsum, threads_3) { cr_expect_eq(runRanks(1, 3, matrixBody, (void *)&everyColl, 600), 0); }
Test(premulsum, threads_4) { cr_expect_eq(runRanks(1, 4, matrixBody, (void *)&everyColl, 600), 0); }
Test(premulsum, procs_2) { cr_expect_eq(runRanks(2, 1, matrixBody, (void *)&everyColl, 600), 0); }
Test(premulsum, procs_4) { cr_expect_eq(runRanks(4, 1, matrixBody, (void *)&everyColl, 600), 0); }
Test(premulsum, hosts_2x1) {
  cr_expect_eq(runRanksOnHosts(2, 1, matrixBody, (void *)&everyColl, 600), 0);
}

/* The scaling is at the entry, so every AllReduce algorithm sees a Sum; each must give it. */
Test(premulsum, every_allreduce_algorithm) {
  for (int a = 0; weftAlgos[a] != NULL; a++) {
    char spec[64], why[160];
    if (!(weftAlgos[a]->colls & WEFT_COLL_BIT(weftCollAllReduce))) continue;
    if (!algoRunsOn(weftAlgos[a]->name, 1, 3, why, sizeof why)) continue; /* test_allreduce checks the refusal */
    snprintf(spec, sizeof spec, "allreduce:%s", weftAlgos[a]->name);
    setenv("WEFT_ALGO", spec, 1);
    cr_expect_eq(runRanks(1, 3, matrixBody, (void *)&allReduceOnly, 600), 0, "WEFT_ALGO=%s", spec);
    cr_expect_eq(runRanks(3, 1, matrixBody, (void *)&allReduceOnly, 600), 0, "processes, WEFT_ALGO=%s", spec);
  }
  unsetenv("WEFT_ALGO");
  char names[512];
  int left = segmentsLeft(names, sizeof names);
  cr_expect_eq(left, 0, "%d weft segments left in /dev/shm:%s", left, names);
}

/* ---- Refusals -------------------------------------------------------------------------- */

#define EXPECT_RC(call, want, c, needle)                                                    \
  do {                                                                                      \
    weftResult_t rc_ = (call);                                                              \
    const char *msg_ = weftGetLastError(c);                                                 \
    if (rc_ != (want) || strstr(msg_, needle) == NULL) {                                    \
      fprintf(stderr, "rank %d: %s: rc %d, \"%s\" (wanted %d, \"%s\")\n", rank, #call, rc_, \
              msg_, want, needle);                                                          \
      bad++;                                                                                \
    }                                                                                       \
  } while (0)
#define REFUSED(call, c, needle) EXPECT_RC(call, weftInvalidArgument, c, needle)

/* Creation's arguments; *op is not written on failure. */
static long createRefusals(weftComm_t comm, int rank) {
  long bad = 0;
  float one = 1;
  weftRedOp_t op = weftMin;
  REFUSED(weftRedOpCreatePreMulSum(NULL, &one, weftFloat32, weftScalarHostImmediate, comm), comm,
          "op is NULL");
  REFUSED(weftRedOpCreatePreMulSum(&op, NULL, weftFloat32, weftScalarHostImmediate, comm), comm,
          "scalar is NULL");
  REFUSED(weftRedOpCreatePreMulSum(&op, &one, (weftDataType_t)99, weftScalarHostImmediate, comm),
          comm, "unknown datatype 99");
  REFUSED(weftRedOpCreatePreMulSum(&op, &one, weftFloat32, weftScalarDevice, comm), comm,
          "weftScalarDevice: this build has no device memory");
  REFUSED(weftRedOpCreatePreMulSum(&op, &one, weftFloat32, (weftScalarResidence_t)7, comm), comm,
          "unknown scalar residence 7");
  REFUSED(weftRedOpCreatePreMulSum(&op, &one, weftFloat32, weftScalarHostImmediate, NULL), NULL,
          "comm is NULL");
  REFUSED(weftRedOpDestroy(weftSum, NULL), NULL, "comm is NULL");
  if (op != weftMin) fprintf(stderr, "rank %d: op written by a refused create\n", rank), bad++;
  return bad;
}

/* An op used where it does not belong, or destroyed wrongly. */
static long useRefusals(weftComm_t comm, weftComm_t other, int rank) {
  long bad = 0;
  float two = 2, a[8] = {0}, b[8 * 4] = {0};
  weftRedOp_t op, otherOp;
  if (weftRedOpCreatePreMulSum(&op, &two, weftFloat32, weftScalarHostImmediate, comm) != weftSuccess ||
      weftRedOpCreatePreMulSum(&otherOp, &two, weftFloat32, weftScalarHostImmediate, other) != weftSuccess)
    return 1;
  if ((int)op < 256 || op == otherOp) fprintf(stderr, "rank %d: handles %d, %d\n", rank, op, otherOp), bad++;
  REFUSED(weftAllReduce(a, b, 8, weftFloat64, op, comm, NULL), comm, "made for datatype float, not double");
  REFUSED(weftReduce(a, b, 8, weftInt32, op, 0, comm, NULL), comm, "Reduce: op");
  REFUSED(weftReduceScatter(b, a, 8, weftBfloat16, op, comm, NULL), comm, "not bfloat16");
  REFUSED(weftAllReduce(a, b, 8, weftFloat32, op, other, NULL), other, "of another communicator");
  REFUSED(weftRedOpDestroy(op, other), other, "of another communicator");
  REFUSED(weftAllReduce(a, b, 8, weftFloat32, (weftRedOp_t)(op + 1), comm, NULL), comm,
          "unknown reduction op");
  REFUSED(weftAllReduce(a, b, 8, weftFloat32, (weftRedOp_t)weftNumOps, comm, NULL), comm,
          "unknown reduction op 5");
  REFUSED(weftAllReduce(a, b, 8, weftFloat32, (weftRedOp_t)-3, comm, NULL), comm,
          "unknown reduction op -3");
  REFUSED(weftAllReduce(a, b, 8, (weftDataType_t)99, op, comm, NULL), comm, "unknown datatype 99");
  REFUSED(weftRedOpDestroy(weftSum, comm), comm, "built-in");
  REFUSED(weftRedOpDestroy((weftRedOp_t)77, comm), comm, "unknown reduction op 77");
  if (weftAllReduce(a, b, 0, weftFloat32, op, comm, NULL) != weftSuccess) bad++; /* count 0: fine */
  if (weftRedOpDestroy(op, comm) != weftSuccess) bad++;
  REFUSED(weftRedOpDestroy(op, comm), comm, "destroyed already");
  REFUSED(weftAllReduce(a, b, 8, weftFloat32, op, comm, NULL), comm, "unknown reduction op");
  /* An op of a communicator that is gone (weftCommDestroy frees the ops it has). */
  if (weftCommDestroy(other) != weftSuccess) bad++;
  REFUSED(weftAllReduce(a, b, 8, weftFloat32, otherOp, comm, NULL), comm, "unknown reduction op");
  return bad;
}

/* 256 ops live at most; a destroyed one's handle is handed out again. */
static long tooMany(weftComm_t comm, int rank) {
  long bad = 0;
  static weftRedOp_t ops[256];
  double s = 1;
  for (int i = 0; i < 256; i++)
    if (weftRedOpCreatePreMulSum(&ops[i], &s, weftFloat64, weftScalarHostImmediate, comm) != weftSuccess) return 1;
  weftRedOp_t more;
  EXPECT_RC(weftRedOpCreatePreMulSum(&more, &s, weftFloat64, weftScalarHostImmediate, comm),
            weftInvalidUsage, comm, "256 PreMulSum ops are live");
  if (weftRedOpDestroy(ops[100], comm) != weftSuccess) bad++;
  if (weftRedOpCreatePreMulSum(&more, &s, weftFloat64, weftScalarHostImmediate, comm) != weftSuccess ||
      more != ops[100])
    bad++;
  for (int i = 0; i < 256; i++) bad += weftRedOpDestroy(ops[i], comm) != weftSuccess;
  return bad;
}

static long refusalsBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)n, (void)arg;
  weftComm_t other = NULL;
  if (weftCommShrink(comm, NULL, 0, &other, NULL, WEFT_SHRINK_DEFAULT) != weftSuccess) {
    fprintf(stderr, "rank %d: a second communicator: %s\n", rank, weftGetLastError(comm));
    return 1;
  }
  return createRefusals(comm, rank) + useRefusals(comm, other, rank) + tooMany(comm, rank);
}

Test(premulsum, refusals) {
  cr_expect_eq(runRanks(1, 2, refusalsBody, NULL, 120), 0);
  cr_expect_eq(runRanks(1, 1, refusalsBody, NULL, 120), 0);
}

/* ---- Destroyed while its collective is in flight ---------------------------------------- */

/* Rank 0 starts a non-blocking AllReduce with the op and destroys the op at once (NCCL: an op
 * may be destroyed as soon as the call that was given it returns); the collective cannot
 * finish before rank 1 calls too, which rank 1 does only after that destroy. The result must
 * still be scaled by the op's scalar, read when the call was made. */
static atomic_int destroyTried;

static weftResult_t waitDone(weftComm_t c) {
  weftResult_t state;
  do {
    if (weftCommGetAsyncError(c, &state) != weftSuccess) return weftInternalError;
    if (state == weftInProgress) usleep(1000);
  } while (state == weftInProgress);
  return state;
}

static long inFlightBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  long bad = 0;
  weftConfig_t config = WEFT_CONFIG_INITIALIZER;
  config.blocking = 0;
  weftComm_t nb = NULL;
  weftResult_t rc = weftCommShrink(comm, NULL, 0, &nb, &config, WEFT_SHRINK_DEFAULT);
  if ((rc != weftSuccess && rc != weftInProgress) || waitDone(nb) != weftSuccess) return 1;
  enum { N = 1000 };
  float x[N], y[N], two = 2;
  for (int i = 0; i < N; i++) x[i] = (float)(i + rank);
  weftRedOp_t op;
  if (weftRedOpCreatePreMulSum(&op, &two, weftFloat32, weftScalarHostImmediate, nb) != weftSuccess) return 1;
  if (rank == 1)
    while (!atomic_load(&destroyTried)) usleep(1000);
  if (weftAllReduce(x, y, N, weftFloat32, op, nb, NULL) != weftInProgress) bad++;
  if (rank == 0) {
    EXPECT_RC(weftRedOpDestroy(op, nb), weftSuccess, nb, "");
    atomic_store(&destroyTried, 1);
  }
  if (waitDone(nb) != weftSuccess) bad++;
  for (int i = 0; i < N; i++) bad += y[i] != 2.0f * (float)(n * i + n * (n - 1) / 2);
  if (rank == 1 && weftRedOpDestroy(op, nb) != weftSuccess) bad++;
  weftCommDestroy(nb);
  return bad;
}

Test(premulsum, destroyed_while_in_flight) {
  atomic_store(&destroyTried, 0);
  cr_expect_eq(runRanks(1, 2, inFlightBody, NULL, 120), 0);
}

/* ---- Several ops in one group ------------------------------------------------------------ */

/* One group per rank: AllReduce with op 2x, ReduceScatter with 3x, Reduce (last root) with
 * 5x, AllReduce with 3x again, the 2x op destroyed before weftGroupEnd. Each call keeps its
 * own scalar (inputs i + rank: every product and sum exact in float32). */
enum { GROUP_N = 4099 };
static float groupWant(const float *scale, int call, size_t i, int n) {
  return scale[call] * (float)((double)n * (double)i + n * (n - 1) / 2.0);
}

static long groupBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)arg;
  static const float scale[4] = {2, 3, 5, 3};
  weftRedOp_t op[3];
  for (int k = 0; k < 3; k++)
    if (weftRedOpCreatePreMulSum(&op[k], (void *)&scale[k], weftFloat32, weftScalarHostImmediate, comm) != weftSuccess)
      return 1;
  size_t all = (size_t)GROUP_N * (size_t)n;
  float *in = malloc(all * sizeof *in), *out[4];
  for (size_t i = 0; i < all; i++) in[i] = (float)(i + (size_t)rank);
  for (int c = 0; c < 4; c++) out[c] = calloc(all, sizeof(float));
  long bad = 0;
  weftGroupStart();
  bad += weftAllReduce(in, out[0], GROUP_N, weftFloat32, op[0], comm, NULL) != weftSuccess;
  bad += weftReduceScatter(in, out[1], GROUP_N, weftFloat32, op[1], comm, NULL) != weftSuccess;
  bad += weftReduce(in, out[2], GROUP_N, weftFloat32, op[2], n - 1, comm, NULL) != weftSuccess;
  bad += weftAllReduce(in, out[3], GROUP_N, weftFloat32, op[1], comm, NULL) != weftSuccess;
  bad += weftRedOpDestroy(op[0], comm) != weftSuccess;
  if (weftGroupEnd() != weftSuccess) {
    fprintf(stderr, "rank %d: group: %s\n", rank, weftGetLastError(comm));
    bad++;
  }
  for (size_t i = 0; i < GROUP_N && bad == 0; i++) {
    bad += out[0][i] != groupWant(scale, 0, i, n) || out[3][i] != groupWant(scale, 3, i, n);
    bad += out[1][i] != groupWant(scale, 1, (size_t)rank * GROUP_N + i, n);
    bad += rank == n - 1 && out[2][i] != groupWant(scale, 2, i, n);
    if (bad) fprintf(stderr, "rank %d: [%zu]: %g %g %g %g\n", rank, i, out[0][i], out[1][i], out[2][i], out[3][i]);
  }
  for (int k = 1; k < 3; k++) bad += weftRedOpDestroy(op[k], comm) != weftSuccess;
  for (int c = 0; c < 4; c++) free(out[c]);
  free(in);
  return bad;
}

Test(premulsum, several_ops_in_a_group) {
  cr_expect_eq(runRanks(1, 1, groupBody, NULL, 120), 0, "1 rank");
  cr_expect_eq(runRanks(2, 1, groupBody, NULL, 120), 0, "2 processes");
  cr_expect_eq(runRanks(1, 3, groupBody, NULL, 120), 0, "3 threads");
}

/* ---- Mismatched ops -------------------------------------------------------------------- */

/* Rank 0 calls Sum, rank 1 a PreMulSum of the same count and type: both fail naming both. */
static long mismatchBody(weftComm_t comm, int rank, int n, void *arg) {
  (void)n, (void)arg;
  float a[256] = {0}, b[256], one = 1;
  weftRedOp_t op = weftSum;
  if (rank == 1 && weftRedOpCreatePreMulSum(&op, &one, weftFloat32, weftScalarHostImmediate, comm) != weftSuccess)
    return 1;
  weftResult_t rc = weftAllReduce(a, b, 256, weftFloat32, op, comm, NULL);
  const char *msg = weftGetLastError(comm);
  int ok = rc == weftInvalidUsage && strstr(msg, "AllReduce(count 256, float, sum)") != NULL &&
           strstr(msg, "AllReduce(count 256, float, premulsum)") != NULL;
  if (!ok) fprintf(stderr, "rank %d: rc %d: %s\n", rank, rc, msg);
  return !ok;
}

Test(premulsum, mixed_with_sum_fails_on_every_rank) {
  setenv("WEFT_TIMEOUT_MS", "20000", 1);
  cr_expect_eq(runRanks(2, 1, mismatchBody, NULL, 60), 0);
  unsetenv("WEFT_TIMEOUT_MS");
}
