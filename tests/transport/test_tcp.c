/* TCP transport specifics: slot striping and wire encodings, parameter checks, the error a
 * closed peer gives, and the listener's defence: strangers, garbage, forged or misdirected
 * hellos and silent connections are dropped without disturbing a real peer or leaking
 * descriptors, and the listener closes once every rank is connected. */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../../transports/tcp/tcp.h"
#include "bootstrap.h"
#include "core.h"
#include "harness.h"
#include "log.h"
#include "socket.h"

/* A hang fails the test (tests/run-all.sh requires a timeout on every test). */
TestSuite(tcp_wire, .timeout = 60);
TestSuite(tcp_params, .timeout = 60);
TestSuite(tcp_errors, .timeout = 60);
TestSuite(tcp_close_record, .timeout = 60);

static void sleepMs(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

static int settledFds(int expected) {
  int64_t until = weftNowMs() + 3000;
  int now = countOpenFds();
  while (now != expected && weftNowMs() < until) {
    sleepMs(10);
    now = countOpenFds();
  }
  return now;
}

static int tcpIndex(void) {
  for (int t = 0; weftTransports[t] != NULL; t++)
    if (strcmp(weftTransports[t]->name, "tcp") == 0) return t;
  return -1;
}

/* ---- Wire encodings ---- */

Test(tcp_wire, parts_cover_each_slot_once) {
  static const size_t sizes[] = {0,     1,      8,      4095,   4096,   65535,  65536,
                                 65537, 131072, 131073, 200000, 393216, 524287, 524288};
  for (uint32_t nsocks = 1; nsocks <= 5; nsocks++)
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
      struct tcpShape shape = {
          .slotBytes = 524288, .nslots = 8, .nsocks = nsocks, .minStripe = 65536};
      size_t next = 0, used = 0;
      for (uint32_t i = 0; i < nsocks; i++) {
        size_t off, len;
        weftTcpPart(&shape, sizes[k], i, &off, &len);
        if (len == 0) continue;
        cr_assert_eq(off, next, "%zu bytes, %u sockets: part %u starts at %zu, not %zu", sizes[k],
                     nsocks, i, off, next);
        cr_assert_eq(off % 4096, 0);
        next = off + len;
        used++;
      }
      cr_assert_eq(next, sizes[k], "%zu bytes, %u sockets: parts end at %zu", sizes[k], nsocks,
                   next);
      if (sizes[k] <= shape.minStripe) cr_assert_leq(used, 1, "a small slot uses one stream");
      if (sizes[k] >= nsocks * shape.minStripe) cr_assert_eq(used, nsocks, "a big slot uses all");
    }
}

Test(tcp_wire, blob_and_hello_round_trip) {
  struct tcpBlob b = {
      .dir = WEFT_DIR_RECV,
      .rank = 7,
      .connId = 0x0123456789abcdefULL,
      .shape = {.slotBytes = 1 << 19, .nslots = 8, .nsocks = 3, .minStripe = 1 << 16}};
  cr_assert_eq(weftSockAddrParse("test", "[fd00::2]:4242", AF_UNSPEC, &b.listen), weftSuccess);
  uint8_t blob[WEFT_CONN_BLOB_BYTES];
  weftTcpEncodeBlob(&b, blob);
  struct tcpBlob d;
  cr_assert_eq(weftTcpDecodeBlob(blob, &d), 0);
  cr_assert(d.dir == b.dir && d.rank == 7 && d.connId == b.connId &&
            weftTcpSameShape(&d.shape, &b.shape));
  char n1[WEFT_SOCK_NAME_MAX], n2[WEFT_SOCK_NAME_MAX];
  cr_assert_str_eq(weftSockAddrName(&d.listen, n1), weftSockAddrName(&b.listen, n2));
  blob[0] ^= 1;
  cr_assert_neq(weftTcpDecodeBlob(blob, &d), 0, "a wrong magic is refused");

  uint8_t secret[16] = {1, 2, 3}, other[16] = {4, 5, 6}, nonce[16] = {9}, nonce2[16] = {8};
  struct tcpHello h = {.connId = 42, .fromRank = 1, .toRank = 2, .stream = 1, .shape = b.shape};
  uint8_t hello[TCP_HELLO_BYTES];
  weftTcpBuildHello(hello, secret, nonce, &h);
  struct tcpHello got;
  cr_assert_null(weftTcpOpenHello(hello, secret, nonce, &got));
  cr_assert(got.connId == 42 && got.fromRank == 1 && got.toRank == 2 && got.stream == 1);
  cr_assert_not_null(weftTcpOpenHello(hello, other, nonce, &got), "another secret is refused");
  cr_assert_not_null(weftTcpOpenHello(hello, secret, nonce2, &got), "a replay is refused");
  hello[20] ^= 1;
  cr_assert_not_null(weftTcpOpenHello(hello, secret, nonce, &got), "a changed byte is refused");
  hello[20] ^= 1;
  hello[TCP_HELLO_MAC_OFFSET + 15] ^= 1;
  cr_assert_not_null(weftTcpOpenHello(hello, secret, nonce, &got), "a changed MAC is refused");
}

/* The hello's and the ack's MACs are libsodium's keyed BLAKE2b over the documented inputs
 * (docs/transports/tcp.md). The tags were computed independently with Python's hashlib:
 *   hashlib.blake2b(b"wefttcpH" + serverNonce + payload, key=secret, digest_size=16)
 *   hashlib.blake2b(b"wefttcpA" + clientNonce + serverNonce + be64(connId) + be32(stream),
 *                   key=secret, digest_size=16)
 * with secret 10..1f, serverNonce 30..3f, clientNonce 40..4f, connId 42, rank 1 to rank 2,
 * stream 1, shape 512 KiB x 8 slots, 3 streams, 64 KiB stripes. */
Test(tcp_wire, hello_and_ack_known_answers) {
  static const uint8_t helloTag[16] = {0xa1, 0xb2, 0xc3, 0x1c, 0x84, 0x22, 0xd4, 0xd2,
                                       0x19, 0xd4, 0xb5, 0xe6, 0xb0, 0x43, 0xc2, 0x17};
  static const uint8_t ackTag[16] = {0xed, 0xcb, 0xe7, 0xc6, 0x61, 0x52, 0x93, 0xcb,
                                     0x90, 0x14, 0x34, 0xbb, 0x6d, 0x08, 0x4d, 0x9a};
  uint8_t secret[16], sn[16], cn[16];
  for (int i = 0; i < 16; i++) {
    secret[i] = (uint8_t)(0x10 + i);
    sn[i] = (uint8_t)(0x30 + i);
    cn[i] = (uint8_t)(0x40 + i);
  }
  struct tcpHello h = {
      .connId = 42,
      .fromRank = 1,
      .toRank = 2,
      .stream = 1,
      .shape = {.slotBytes = 1 << 19, .nslots = 8, .nsocks = 3, .minStripe = 1 << 16}};
  memcpy(h.clientNonce, cn, 16);
  uint8_t hello[TCP_HELLO_BYTES], ack[TCP_ACK_BYTES];
  cr_assert_eq(TCP_HELLO_BYTES, 4 + 16 + 56);
  weftTcpBuildHello(hello, secret, sn, &h);
  cr_expect_eq(weftGetBe32(hello), TCP_HELLO_MAGIC);
  cr_expect_arr_eq(hello + TCP_HELLO_MAC_OFFSET, helloTag, 16);
  weftTcpAckMac(ack, secret, cn, sn, 42, 1);
  cr_expect_arr_eq(ack, ackTag, 16);
  weftTcpAckMac(ack, secret, cn, sn, 42, 2);
  cr_expect_arr_neq(ack, ackTag, 16, "another stream, same ack");
  weftTcpAckMac(ack, secret, cn, sn, 43, 1);
  cr_expect_arr_neq(ack, ackTag, 16, "another connection, same ack");
}

/* ---- Parameters ---- */

/* Refused before any communicator is made (every setting: tests/unit/test_settings.c). */
Test(tcp_params, bad_values_are_refused, .timeout = 30) {
  static const char *const bad[][2] = {{"WEFT_TCP_SLOTS", "1"}, {"WEFT_TCP_NSOCKS", "99"},
                                       {"WEFT_TCP_SLOT_BYTES", "100"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    setenv(bad[i][0], bad[i][1], 1);
    weftUniqueId id;
    cr_expect_eq(weftGetUniqueId(&id), weftInvalidArgument, "%s=%s", bad[i][0], bad[i][1]);
    char named[64];
    snprintf(named, sizeof named, "%s=\"%s\" is not allowed", bad[i][0], bad[i][1]);
    cr_expect(strstr(weftGetLastError(NULL), named) != NULL, "%s", weftGetLastError(NULL));
    unsetenv(bad[i][0]);
  }
}

static long checkCaps(weftComm_t comm, int rank, int nranks, void *arg) {
  (void)rank, (void)nranks, (void)arg;
  const struct weftLinkCaps *caps = &comm->ring.send.caps;
  return strcmp(comm->ring.send.ops->name, "tcp") != 0 || caps->bandwidthGBs != 3.25 ||
         caps->latencyUs != 7.5;
}

Test(tcp_params, caps_for_the_tuner) {
  setenv("WEFT_TRANSPORTS", "tcp", 1);
  setenv("WEFT_TCP_BW_GBPS", "3.25", 1);
  setenv("WEFT_TCP_LAT_US", "7.5", 1);
  cr_assert_eq(runRanks(1, 2, checkCaps, NULL, 60), 0);
}

/* ---- The listener under attack ---- */

struct attack {
  pthread_barrier_t barrier;
  uint8_t blobs[2][WEFT_CONN_BLOB_BYTES]; /* rank 0's send blob, rank 1's receive blob */
  int silentFd;
  long failures;
};

static int dial(const union weftSockAddr *to) {
  int fd = -1;
  int rc = weftSocketConnect(to, weftNowMs() + 2000, &fd);
  return rc == 0 ? fd : -1;
}

/* Connects and reads the listener's greeting; the socket, or -1. */
static int dialGreeted(const union weftSockAddr *to, uint8_t nonce[TCP_NONCE_BYTES]) {
  int fd = dial(to);
  uint8_t greeting[TCP_GREETING_BYTES];
  if (fd < 0 || weftSocketRecvAll(fd, greeting, sizeof greeting, weftNowMs() + 2000) != 0 ||
      weftGetBe32(greeting) != TCP_GREETING_MAGIC) {
    weftSocketClose(&fd);
    return -1;
  }
  memcpy(nonce, greeting + 4, TCP_NONCE_BYTES);
  return fd;
}

/* Whether the listener closes fd (EOF or reset) within ms, without acknowledging it. */
static int droppedWithin(int fd, int ms) {
  uint8_t buf[64];
  int64_t until = weftNowMs() + ms;
  for (;;) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (weftPollUntil(&p, 1, until) <= 0) return 0;
    ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) return 1;
    if (n > 0) return 0; /* it answered: an acknowledgement it should not have sent */
  }
}

static void forgedHello(const union weftSockAddr *to, const uint8_t *secret, struct tcpHello h,
                        long *failures, const char *what) {
  uint8_t nonce[TCP_NONCE_BYTES], hello[TCP_HELLO_BYTES];
  int fd = dialGreeted(to, nonce);
  if (fd < 0) {
    fprintf(stderr, "%s: could not reach the listener\n", what);
    (*failures)++;
    return;
  }
  weftTcpBuildHello(hello, secret, nonce, &h);
  if (weftSocketSendAll(fd, hello, sizeof hello, weftNowMs() + 1000) != 0 ||
      !droppedWithin(fd, 1500)) {
    fprintf(stderr, "%s: not dropped\n", what);
    (*failures)++;
  }
  close(fd);
}

static void attackListener(weftComm_t comm, const struct tcpBlob *rb, struct attack *a) {
  const union weftSockAddr *to = &rb->listen;
  long *failures = &a->failures;
  int quitter = dial(to); /* leaves at once */
  weftSocketClose(&quitter);
  uint8_t nonce[TCP_NONCE_BYTES], junk[200];
  a->silentFd = dialGreeted(to, nonce); /* says nothing: dropped after the handshake timeout */
  memset(junk, 'G', sizeof junk);
  int fd = dialGreeted(to, nonce);
  if (fd < 0 || weftSocketSendAll(fd, junk, sizeof junk, weftNowMs() + 1000) != 0 ||
      !droppedWithin(fd, 1500)) {
    fprintf(stderr, "garbage: not dropped\n");
    (*failures)++;
  }
  weftSocketClose(&fd);
  uint8_t wrongSecret[16] = {0xde, 0xad};
  const uint8_t *secret = weftBootstrapSecret(comm->boot);
  struct tcpHello h = {
      .connId = rb->connId, .fromRank = 0, .toRank = 1, .stream = 0, .shape = rb->shape};
  forgedHello(to, wrongSecret, h, failures, "hello with another secret");
  struct tcpHello stranger = h;
  stranger.connId ^= 0x55;
  forgedHello(to, secret, stranger, failures, "hello for an unknown connection");
  struct tcpHello impostor = h;
  impostor.fromRank = 5;
  forgedHello(to, secret, impostor, failures, "hello from a rank the connection is not with");
  struct tcpHello outOfRange = h;
  outOfRange.stream = 99;
  forgedHello(to, secret, outOfRange, failures, "hello for a stream out of range");
}

static weftResult_t connectLoop(struct weftConn *c, const void *blob) {
  int64_t until = weftNowMs() + 10000;
  for (;;) {
    int done = 0;
    weftResult_t rc = c->ops->connect(c, blob, &done);
    if (rc != weftSuccess || done) return rc;
    if (weftNowMs() > until) return weftTimeout;
    sched_yield();
  }
}

static long moveData(struct weftConn *c, int sending, int count) {
  for (int i = 0; i < count;) {
    int64_t until = weftNowMs() + 10000;
    if (sending) {
      void *slot = NULL;
      if (c->ops->sendSlot(c, &slot) != weftSuccess) return 1;
      if (slot == NULL) {
        if (weftNowMs() > until) return 1;
        sched_yield();
        continue;
      }
      memset(slot, i & 0xff, 1000);
      if (c->ops->sendPost(c, 1000) != weftSuccess) return 1;
    } else {
      const void *slot = NULL;
      size_t bytes = 0;
      if (c->ops->recvSlot(c, &slot, &bytes) != weftSuccess) return 1;
      if (slot == NULL) {
        if (weftNowMs() > until) return 1;
        sched_yield();
        continue;
      }
      if (bytes != 1000 || ((const uint8_t *)slot)[999] != (i & 0xff)) return 1;
      if (c->ops->recvDone(c) != weftSuccess) return 1;
    }
    i++;
  }
  return 0;
}

/* Both ranks open one more connection (rank 0 -> rank 1) by hand. Rank 1 attacks its own
 * listener before rank 0 connects; rank 0's connection must still work. */
static long attackBody(weftComm_t comm, int rank, int nranks, void *arg) {
  (void)nranks;
  struct attack *a = arg;
  int t = tcpIndex();
  const struct weftTransportOps *ops = weftTransports[t];
  struct weftConn c = {0};
  c.ops = ops;
  c.state = comm->transportState[t];
  int dir = rank == 0 ? WEFT_DIR_SEND : WEFT_DIR_RECV;
  if (ops->setup(c.state, 1 - rank, dir, &c, a->blobs[rank]) != weftSuccess) return 1;
  pthread_barrier_wait(&a->barrier);
  struct tcpBlob rb;
  if (weftTcpDecodeBlob(a->blobs[1], &rb) != 0) return 1;
  if (rank == 1) attackListener(comm, &rb, a);
  pthread_barrier_wait(&a->barrier);
  long failures = connectLoop(&c, a->blobs[1 - rank]) != weftSuccess;
  failures += failures == 0 && moveData(&c, rank == 0, 300);
  if (rank == 1) {
    if (a->silentFd < 0 || !droppedWithin(a->silentFd, 4000)) {
      fprintf(stderr, "silent connection: not dropped\n");
      failures++;
    }
    weftSocketClose(&a->silentFd);
    /* Everyone is connected: the listener goes, and nobody can knock any more. */
    ops->connected(&c);
    int late = dial(&rb.listen);
    if (late >= 0) {
      fprintf(stderr, "the listener still accepts after connected()\n");
      failures++;
      close(late);
    }
  }
  pthread_barrier_wait(&a->barrier);
  ops->close(&c);
  return failures;
}

Test(tcp_listener, strangers_are_dropped, .timeout = 60) {
  setenv("WEFT_TRANSPORTS", "tcp", 1);
  int fds = countOpenFds();
  struct attack a = {.silentFd = -1};
  pthread_barrier_init(&a.barrier, NULL, 2);
  long failures = runRanks(1, 2, attackBody, &a, 60);
  pthread_barrier_destroy(&a.barrier);
  cr_assert_eq(failures + a.failures, 0, "%ld failures (see stderr)", failures + a.failures);
  cr_assert_eq(settledFds(fds), fds, "descriptors leaked");
}

/* ---- The error a closed peer gives ---- */

struct closer {
  pthread_barrier_t barrier;
  char message[1024];
  weftResult_t rc;
};

static long closerBody(weftComm_t comm, int rank, int nranks, void *arg) {
  (void)nranks;
  struct closer *cl = arg;
  if (rank == 1) {
    pthread_barrier_wait(&cl->barrier);
    comm->ring.recv.ops->close(&comm->ring.recv); /* rank 0's data now goes nowhere */
    return 0;
  }
  struct weftConn *c = &comm->ring.send;
  pthread_barrier_wait(&cl->barrier);
  int64_t until = weftNowMs() + 10000;
  for (;;) {
    void *slot = NULL;
    weftResult_t rc = c->ops->sendSlot(c, &slot);
    if (rc == weftSuccess && slot != NULL) rc = c->ops->sendPost(c, c->slotBytes);
    if (rc != weftSuccess) {
      cl->rc = rc;
      snprintf(cl->message, sizeof cl->message, "%s", weftGetLastError(NULL));
      return 0;
    }
    if (weftNowMs() > until) return 1;
    sched_yield();
  }
}

Test(tcp_errors, closed_peer_is_named) {
  setenv("WEFT_TRANSPORTS", "tcp", 1);
  struct closer cl = {.rc = weftSuccess};
  pthread_barrier_init(&cl.barrier, NULL, 2);
  cr_assert_eq(runRanks(1, 2, closerBody, &cl, 60), 0);
  pthread_barrier_destroy(&cl.barrier);
  cr_assert_eq(cl.rc, weftRemoteError, "%s", cl.message);
  cr_assert(strstr(cl.message, "tcp: connection to rank 1 (") != NULL &&
                strstr(cl.message, ") closed by peer") != NULL,
            "message: %s", cl.message);
}

/* ---- Close records: why a peer closed ---- */

/* What rank `from` closes its link with, and what the other rank must then see. */
struct causeCase {
  pthread_barrier_t barrier;
  int fromReceiver;     /* rank 1 closes its receiving link (else rank 0 its sending one) */
  weftResult_t failure; /* the communicator's error when it closes */
  int closeReason;
  const char *why;      /* its message */
  int slotsFirst;       /* slots the sender posts before it closes */
  weftResult_t rc;      /* what the other rank got */
  int slotsSeen;
  char message[1024];
};

/* The state a failed collective leaves when its links close: weftCommFail closes them at
 * once, while the message is this thread's last error and the communicator holds an older
 * one; after a timeout they close at destroy, when the message is the communicator's and the
 * thread's last error may be anything. */
static void failWith(struct weftComm *comm, struct weftConn *c, const struct causeCase *cc) {
  int late = cc->failure == weftTimeout;
  atomic_store(&comm->asyncError, cc->failure);
  weftSetError(cc->failure, "%s", late ? "stale" : cc->why);
  snprintf(comm->lastError, sizeof comm->lastError, "%s", late ? cc->why : "stale");
  weftConnCloseReason = cc->closeReason; /* as weftCommCloseLinks does */
  weftConnClose(c);
  weftConnCloseReason = 0;
}

static void recordError(struct causeCase *cc, weftResult_t rc) {
  cc->rc = rc;
  snprintf(cc->message, sizeof cc->message, "%s", weftGetLastError(NULL));
}

/* Rank 0 sends until its link fails. */
static long senderUntilFailure(struct weftComm *comm, struct causeCase *cc) {
  struct weftConn *c = &comm->ring.send;
  for (int64_t until = weftNowMs() + 10000; weftNowMs() < until; sched_yield()) {
    void *slot = NULL;
    weftResult_t rc = c->ops->sendSlot(c, &slot);
    if (rc == weftSuccess && slot != NULL) rc = c->ops->sendPost(c, 64);
    if (rc != weftSuccess) {
      recordError(cc, rc);
      return 0;
    }
  }
  return 1;
}

/* Rank 1 takes every slot, then gets the link's error. */
static long receiverUntilFailure(struct weftComm *comm, struct causeCase *cc) {
  struct weftConn *c = &comm->ring.recv;
  for (int64_t until = weftNowMs() + 10000; weftNowMs() < until; sched_yield()) {
    const void *slot = NULL;
    size_t bytes = 0;
    weftResult_t rc = c->ops->recvSlot(c, &slot, &bytes);
    if (rc != weftSuccess) {
      recordError(cc, rc);
      return 0;
    }
    if (slot == NULL) continue;
    cc->slotsSeen += bytes == 64 && ((const char *)slot)[0] == (char)cc->slotsSeen;
    c->ops->recvDone(c);
  }
  return 1;
}

static long senderCloses(struct weftComm *comm, struct causeCase *cc) {
  struct weftConn *c = &comm->ring.send;
  for (int i = 0; i < cc->slotsFirst; i++) {
    void *slot = NULL;
    while (c->ops->sendSlot(c, &slot) == weftSuccess && slot == NULL) sched_yield();
    if (slot == NULL) return 1;
    ((char *)slot)[0] = (char)i;
    c->ops->sendPost(c, 64);
  }
  failWith(comm, c, cc);
  return 0;
}

static long causeBody(weftComm_t comm, int rank, int nranks, void *arg) {
  (void)nranks;
  struct causeCase *cc = arg;
  pthread_barrier_wait(&cc->barrier);
  if (cc->fromReceiver) {
    if (rank == 0) return senderUntilFailure(comm, cc);
    failWith(comm, &comm->ring.recv, cc);
    return 0;
  }
  if (rank == 0) return senderCloses(comm, cc);
  return receiverUntilFailure(comm, cc);
}

static void runCause(struct causeCase *cc) {
  setenv("WEFT_TRANSPORTS", "tcp", 1);
  cc->rc = weftSuccess;
  pthread_barrier_init(&cc->barrier, NULL, 2);
  cr_assert_eq(runRanks(1, 2, causeBody, cc, 60), 0);
  pthread_barrier_destroy(&cc->barrier);
}

/* A receiver that found mismatched collectives says so to its sender: weftInvalidUsage with
 * the signatures, not a bare closed connection. */
Test(tcp_close_record, receiver_tells_sender) {
  struct causeCase cc = {.fromReceiver = 1, .failure = weftInvalidUsage,
                         .closeReason = weftInvalidUsage,
                         .why = "mismatched collectives at operation 7: rank 1 called A, rank 0 called B"};
  runCause(&cc);
  cr_assert_eq(cc.rc, weftInvalidUsage, "%d: %s", cc.rc, cc.message);
  cr_assert(strstr(cc.message, "tcp: rank 1 (host ") != NULL &&
                strstr(cc.message, TCP_CAUSE_MARK "mismatched collectives at operation 7: rank 1 "
                                   "called A, rank 0 called B") != NULL &&
                strstr(cc.message, "stale") == NULL,
            "message: %s", cc.message);
}

/* A sender's record comes after its slots, which all arrive first; a cause passed on from an
 * earlier close is sent without the wrapping, so it never nests; a timeout stays one. */
Test(tcp_close_record, follows_the_slots) {
  struct causeCase cc = {.fromReceiver = 0, .failure = weftTimeout, .slotsFirst = 5,
                         .why = "tcp: rank 9 (host far, 192.0.2.9:1)" TCP_CAUSE_MARK
                                "rank 9: timed out after 1500 ms waiting for data from rank 4 "
                                "(operation 12)"};
  runCause(&cc);
  cr_assert_eq(cc.slotsSeen, 5, "%d of 5 slots arrived before the error", cc.slotsSeen);
  cr_assert_eq(cc.rc, weftTimeout, "%d: %s", cc.rc, cc.message);
  cr_assert(strstr(cc.message, "tcp: rank 0 (host ") != NULL &&
                strstr(cc.message, TCP_CAUSE_MARK "rank 9: timed out after 1500 ms waiting for "
                                   "data from rank 4 (operation 12)") != NULL &&
                strstr(cc.message, "192.0.2.9") == NULL && strstr(cc.message, "stale") == NULL,
            "message: %s", cc.message);
}

/* An orderly close (destroy after success) says nothing: the peer sees a plain close. */
Test(tcp_close_record, none_without_failure) {
  struct causeCase cc = {.fromReceiver = 1, .failure = weftSuccess, .why = "stale"};
  runCause(&cc);
  cr_assert_eq(cc.rc, weftRemoteError, "%d: %s", cc.rc, cc.message);
  cr_assert(strstr(cc.message, ") closed by peer") != NULL && strstr(cc.message, "stale") == NULL,
            "message: %s", cc.message);
}

Test(tcp_close_record, encoding) {
  struct tcpRecord r = {.len = 0};
  weftTcpRecordEncode(&r, weftInvalidUsage, "ab\ncd");
  uint32_t reason = 0;
  size_t n = 0;
  cr_assert_eq(weftTcpParseRecordHead(r.buf, &reason, &n), 0);
  cr_assert(reason == weftInvalidUsage && n == 5 && r.len == TCP_RECORD_HEAD_BYTES + 5);
  r.complete = 1;
  char note[16];
  cr_assert_eq(weftTcpRecordNote(&r, note, sizeof note), weftInvalidUsage);
  cr_assert_str_eq(note, "ab?cd", "non-printable bytes are replaced");
  weftPutBe32(r.buf + 4, 12345); /* not a code a close stands for */
  cr_assert_eq(weftTcpRecordNote(&r, note, sizeof note), weftRemoteError);
  weftPutBe32(r.buf + 8, TCP_NOTE_BYTES + 1);
  cr_assert_neq(weftTcpParseRecordHead(r.buf, &reason, &n), 0, "an overlong note is refused");
  weftPutBe32(r.buf, 123);
  cr_assert_neq(weftTcpParseRecordHead(r.buf, &reason, &n), 0, "a slot header is not a record");
  char longNote[TCP_NOTE_BYTES + 50];
  memset(longNote, 'x', sizeof longNote - 1);
  longNote[sizeof longNote - 1] = '\0';
  weftTcpRecordEncode(&r, weftRemoteError, longNote);
  cr_assert_eq(r.len, TCP_RECORD_HEAD_BYTES + TCP_NOTE_BYTES, "notes are cut to TCP_NOTE_BYTES");
}
