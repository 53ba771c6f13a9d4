/* API boundary: bad input gets the right code and a specific message, never a crash or hang;
 * parameters parse as documented. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "param.h"

/* A hang fails the test (tests/run-all.sh requires a timeout on every test). */
TestSuite(api, .timeout = 60);
TestSuite(params, .timeout = 60);

static weftComm_t oneRankComm(void) {
  weftUniqueId id;
  cr_assert_eq(weftGetUniqueId(&id), weftSuccess);
  weftComm_t comm = NULL;
  cr_assert_eq(weftCommInitRank(&comm, 1, id, 0), weftSuccess, "%s", weftGetLastError(NULL));
  return comm;
}

#define EXPECT_ERROR(call, code, comm, needle)                                               \
  do {                                                                                       \
    weftResult_t rc_ = (call);                                                               \
    cr_assert_eq(rc_, code, "%s returned %d, expected %d", #call, rc_, code);                \
    cr_assert(strstr(weftGetLastError(comm), needle) != NULL, "message \"%s\" lacks \"%s\"", \
              weftGetLastError(comm), needle);                                               \
  } while (0)

Test(api, version_and_strings) {
  int v = 0;
  cr_assert_eq(weftGetVersion(&v), weftSuccess);
  cr_assert_eq(v, WEFT_VERSION_CODE);
  cr_assert_eq(weftGetVersion(NULL), weftInvalidArgument);
  /* Each code its own string, saying what it is; anything else "unknown". */
  static const struct { weftResult_t code; const char *says; } strings[] = {
      {weftSuccess, "no error"}, {weftUnhandledCudaError, "cuda"},
      {weftSystemError, "system error"}, {weftInternalError, "internal error"},
      {weftInvalidArgument, "invalid argument"}, {weftInvalidUsage, "invalid usage"},
      {weftRemoteError, "remote process exited"}, {weftInProgress, "in progress"},
      {weftTimeout, "timed out"}};
  const int nStrings = sizeof strings / sizeof strings[0];
  cr_assert_eq(nStrings, (int)weftNumResults, "a result code without a row here");
  for (int i = 0; i < nStrings; i++) {
    const char *text = weftGetErrorString(strings[i].code);
    cr_assert(strstr(text, strings[i].says) != NULL, "code %d: \"%s\"", strings[i].code, text);
    for (int j = 0; j < i; j++)
      cr_assert_str_neq(text, weftGetErrorString(strings[j].code), "codes %d and %d", i, j);
  }
  cr_assert_str_eq(weftGetErrorString(weftNumResults), "unknown result code");
  cr_assert_str_eq(weftGetErrorString((weftResult_t)-1), "unknown result code");
  cr_assert_eq(sizeof(weftUniqueId), 128);
  cr_assert_eq(weftFloat, weftFloat32);
  cr_assert_eq(weftHalf, 6);
  cr_assert_eq(weftBfloat16, 9);
  /* NCCL's values, so a program's enums carry over */
  cr_assert_eq(weftFloat8e4m3, 10);
  cr_assert_eq(weftFloat8e5m2, 11);
  cr_assert_eq(weftNumTypes, 12);
  cr_assert_eq(weftAvg, 4);
  cr_assert_eq(weftNumOps, 5);
  cr_assert_eq(weftScalarDevice, 0);
  cr_assert_eq(weftScalarHostImmediate, 1);
  cr_assert_eq(sizeof(weftRedOp_t), sizeof(int));
}

Test(api, init_arguments) {
  weftUniqueId id;
  cr_assert_eq(weftGetUniqueId(&id), weftSuccess);
  weftComm_t comm;
  EXPECT_ERROR(weftCommInitRank(NULL, 1, id, 0), weftInvalidArgument, NULL, "comm is NULL");
  EXPECT_ERROR(weftCommInitRank(&comm, 0, id, 0), weftInvalidArgument, NULL, "nranks 0");
  EXPECT_ERROR(weftCommInitRank(&comm, 2, id, 2), weftInvalidArgument, NULL, "rank 2 outside");
  EXPECT_ERROR(weftCommInitRank(&comm, 2, id, -1), weftInvalidArgument, NULL, "rank -1 outside");
  EXPECT_ERROR(weftGetUniqueId(NULL), weftInvalidArgument, NULL, "uniqueId is NULL");
}

Test(api, allreduce_arguments) {
  weftComm_t comm = oneRankComm();
  float a[4] = {1, 2, 3, 4}, b[4];
  EXPECT_ERROR(weftAllReduce(a, b, 4, weftFloat32, weftSum, NULL, NULL), weftInvalidArgument, NULL,
               "comm is NULL");
  EXPECT_ERROR(weftAllReduce(NULL, b, 4, weftFloat32, weftSum, comm, NULL), weftInvalidArgument,
               comm, "sendbuff is NULL");
  EXPECT_ERROR(weftAllReduce(a, NULL, 4, weftFloat32, weftSum, comm, NULL), weftInvalidArgument,
               comm, "recvbuff is NULL");
  EXPECT_ERROR(weftAllReduce(a, b, 4, (weftDataType_t)42, weftSum, comm, NULL),
               weftInvalidArgument, comm, "unknown datatype 42");
  EXPECT_ERROR(weftAllReduce(a, b, 4, weftFloat32, (weftRedOp_t)-3, comm, NULL),
               weftInvalidArgument, comm, "unknown reduction op -3");
  EXPECT_ERROR(weftAllReduce(a, b, SIZE_MAX / 2, weftFloat32, weftSum, comm, NULL),
               weftInvalidArgument, comm, "overflows");
  EXPECT_ERROR(weftAllReduce(a, b, 4, weftInt32, weftAvg, comm, NULL), weftInvalidArgument, comm,
               "floating-point types only");
  EXPECT_ERROR(weftAllReduce(a, a + 1, 3, weftFloat32, weftSum, comm, NULL), weftInvalidArgument,
               comm, "overlap");
  cr_assert_eq(weftAllReduce(NULL, NULL, 0, weftFloat32, weftSum, comm, NULL), weftSuccess);
  cr_assert_eq(weftAllReduce(a, b, 4, weftFloat32, weftSum, comm, NULL), weftSuccess);
  cr_assert_eq(memcmp(a, b, sizeof a), 0);
  int n = -1, r = -1;
  cr_assert_eq(weftCommCount(comm, &n), weftSuccess);
  cr_assert_eq(weftCommUserRank(comm, &r), weftSuccess);
  cr_assert(n == 1 && r == 0);
  EXPECT_ERROR(weftCommCount(comm, NULL), weftInvalidArgument, comm, "count is NULL");
  cr_assert_eq(weftCommDestroy(comm), weftSuccess);
  EXPECT_ERROR(weftAllReduce(a, b, 4, weftFloat32, weftSum, comm, NULL), weftInvalidUsage, NULL,
               "not a live communicator");
  EXPECT_ERROR(weftCommDestroy(comm), weftInvalidUsage, NULL, "not live");
  EXPECT_ERROR(weftCommCount(comm, &n), weftInvalidUsage, NULL, "not a live communicator");
}

/* weftCommGetAlgorithm (weft extension): the tuner's choice, or the forced one, by name. */
Test(api, get_algorithm) {
  weftComm_t comm = oneRankComm();
  const char *name = NULL;
  cr_assert_eq(weftCommGetAlgorithm(comm, 1024, weftFloat32, &name), weftSuccess, "%s",
               weftGetLastError(comm));
  cr_assert(name != NULL && (strcmp(name, "ring") == 0 || strcmp(name, "direct") == 0),
            "one rank on one host: ring or direct, not %s", name ? name : "NULL");
  const char *again = NULL;
  cr_assert_eq(weftCommGetAlgorithm(comm, 1024, weftFloat32, &again), weftSuccess);
  cr_assert_str_eq(again, name, "the tuner is deterministic");
  cr_assert_eq(weftCommGetAlgorithm(comm, 0, weftFloat32, &name), weftSuccess);
  cr_assert_str_eq(name, "none");
  EXPECT_ERROR(weftCommGetAlgorithm(NULL, 4, weftFloat32, &name), weftInvalidArgument, NULL,
               "comm is NULL");
  EXPECT_ERROR(weftCommGetAlgorithm(comm, 4, weftFloat32, NULL), weftInvalidArgument, comm,
               "name is NULL");
  EXPECT_ERROR(weftCommGetAlgorithm(comm, 4, (weftDataType_t)42, &name), weftInvalidArgument,
               comm, "unknown datatype 42");
  EXPECT_ERROR(weftCommGetAlgorithm(comm, SIZE_MAX / 2, weftFloat32, &name), weftInvalidArgument,
               comm, "overflows");
  cr_assert_eq(weftCommDestroy(comm), weftSuccess);
  EXPECT_ERROR(weftCommGetAlgorithm(comm, 4, weftFloat32, &name), weftInvalidUsage, NULL,
               "not a live communicator");

  setenv("WEFT_ALGO", "ring", 1);
  comm = oneRankComm();
  unsetenv("WEFT_ALGO");
  for (size_t count = 1; count <= ((size_t)64 << 20); count *= 64) {
    cr_assert_eq(weftCommGetAlgorithm(comm, count, weftInt8, &name), weftSuccess);
    cr_assert_str_eq(name, "ring", "WEFT_ALGO=ring forces ring at %zu bytes", count);
  }
  cr_assert_eq(weftCommDestroy(comm), weftSuccess);
}

/* weftCommGetPeerTransport on a communicator of one: itself, and bad arguments. */
Test(api, peer_transport_arguments) {
  weftComm_t comm = oneRankComm();
  const char *t = NULL;
  char dev[64] = "x";
  cr_assert_eq(weftCommGetPeerTransport(comm, 0, &t, dev, sizeof dev), weftSuccess);
  cr_assert_str_eq(t, "self");
  cr_assert_str_eq(dev, "");
  EXPECT_ERROR(weftCommGetPeerTransport(comm, 1, &t, dev, sizeof dev), weftInvalidArgument, comm,
               "peer 1 is not a rank of this communicator (0..0)");
  EXPECT_ERROR(weftCommGetPeerTransport(comm, -1, &t, NULL, 0), weftInvalidArgument, comm,
               "peer -1");
  EXPECT_ERROR(weftCommGetPeerTransport(comm, 0, NULL, dev, sizeof dev), weftInvalidArgument,
               comm, "transport is NULL");
  EXPECT_ERROR(weftCommGetPeerTransport(comm, 0, &t, dev, 0), weftInvalidArgument, comm,
               "device has 0 bytes");
  EXPECT_ERROR(weftCommGetPeerTransport(NULL, 0, &t, dev, sizeof dev), weftInvalidArgument, NULL,
               "comm is NULL");
  cr_assert_eq(weftCommDestroy(comm), weftSuccess);
}

/* What weftCommGetPeerTransport answers must be what the links use: arg is the transport
 * every peer must be reached over (the ranks' WEFT_TRANSPORTS, or two emulated hosts), and a
 * network transport must name an interface or device. */
static long peerTransportBody(weftComm_t comm, int rank, int n, void *arg) {
  const char *want = arg;
  long bad = 0;
  for (int p = 0; p < n; p++) {
    const char *t = NULL;
    char dev[256];
    if (weftCommGetPeerTransport(comm, p, &t, dev, sizeof dev) != weftSuccess) return 1;
    const char *expect = p == rank ? "self" : want;
    if (strcmp(t, expect) != 0 || (strcmp(expect, "tcp") == 0 && strchr(dev, ' ') == NULL)) {
      fprintf(stderr, "rank %d: peer %d over %s (%s), expected %s\n", rank, p, t, dev, expect);
      bad++;
    }
  }
  return bad;
}

Test(api, peer_transport_answers) {
  cr_expect_eq(runRanks(1, 3, peerTransportBody, "shm", 30), 0, "3 threads: shm");
  setenv("WEFT_TRANSPORTS", "tcp", 1);
  cr_expect_eq(runRanks(2, 1, peerTransportBody, "tcp", 30), 0, "WEFT_TRANSPORTS=tcp");
  unsetenv("WEFT_TRANSPORTS");
}

/* More bad settings in tests/unit/test_settings.c. */
Test(api, unknown_algorithm) {
  weftUniqueId id;
  cr_assert_eq(weftGetUniqueId(&id), weftSuccess);
  setenv("WEFT_ALGO", "bogus", 1);
  weftComm_t comm;
  EXPECT_ERROR(weftCommInitRank(&comm, 1, id, 0), weftInvalidArgument, NULL, "WEFT_ALGO=\"bogus\"");
  unsetenv("WEFT_ALGO");
}

Test(api, bad_timeout) {
  weftUniqueId id;
  cr_assert_eq(weftGetUniqueId(&id), weftSuccess);
  setenv("WEFT_TIMEOUT_MS", "-5", 1);
  weftComm_t comm;
  EXPECT_ERROR(weftCommInitRank(&comm, 1, id, 0), weftInvalidArgument, NULL, "WEFT_TIMEOUT_MS");
}

Test(params, parse_int) {
  int64_t v;
  cr_assert_eq(weftParseInt("42", &v), 0);
  cr_assert_eq(v, 42);
  cr_assert_eq(weftParseInt(" 4K", &v), 0);
  cr_assert_eq(v, 4096);
  cr_assert_eq(weftParseInt("3m", &v), 0);
  cr_assert_eq(v, 3 << 20);
  cr_assert_eq(weftParseInt("2G", &v), 0);
  cr_assert_eq(v, 2LL << 30);
  cr_assert_eq(weftParseInt("-7", &v), 0);
  cr_assert_eq(v, -7);
  cr_assert_eq(weftParseInt("0x10", &v), 0);
  cr_assert_eq(v, 16);
  cr_assert_neq(weftParseInt("", &v), 0);
  cr_assert_neq(weftParseInt("12abc", &v), 0);
  cr_assert_neq(weftParseInt("K", &v), 0);
  cr_assert_neq(weftParseInt("99999999999999999999", &v), 0);
  cr_assert_neq(weftParseInt("9000000000G", &v), 0);
  cr_assert_neq(weftParseInt(NULL, &v), 0);
}

