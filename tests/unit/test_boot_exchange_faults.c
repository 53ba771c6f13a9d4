/* weftBootstrapExchange when things go wrong, and around it: a killed peer, a silent peer, the
 * abort flag, a wrong secret, a wrong message MAC, a sender holding too many connections
 * (white-box: boot_internal.h's builders forge what a rank sends), interleaving with
 * weftBootstrapSplit, and teardown without TIME_WAIT or leaks. Each Test runs in its own
 * process. */
#include <errno.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "boot_exchange.h"
#include "caps.h"
#include "forked.h"
#include "netns.h"

TestSuite(failure, .timeout = 60);
TestSuite(split, .timeout = 60);
TestSuite(teardown, .timeout = 120);

/* ---- Failures ---- */

/* Rank 2 dies after a barrier; rank 0 waits for its message, rank 1 sends it one. */
static void killedChild(void *shared, weftUniqueId id, int rank, int nranks) {
  struct procReport *rep = (struct procReport *)shared + rank;
  struct weftBootstrap *b = NULL;
  rep->res = weftBootstrapInit(&id, rank, nranks, weftNowMs() + LONG_MS, &b);
  if (rep->res == weftSuccess) rep->res = weftBootstrapBarrier(b, weftNowMs() + LONG_MS);
  if (rep->res != weftSuccess) {
    snprintf(rep->error, sizeof rep->error, "setup: %s", weftThreadLastError());
    rep->failures = 1;
    _exit(1);
  }
  if (rank == 2) raise(SIGKILL);
  struct weftBootMsg m;
  fillMsg(&m, 2, 1, rank, 2, 0);
  int64_t start = weftNowMs();
  rep->res = rank == 0 ? weftBootstrapExchange(b, NULL, 0, &m, 1, weftNowMs() + LONG_MS)
                       : weftBootstrapExchange(b, &m, 1, NULL, 0, weftNowMs() + LONG_MS);
  rep->ms = weftNowMs() - start;
  snprintf(rep->error, sizeof rep->error, "%s", weftThreadLastError());
  weftBootstrapClose(b);
  _exit(0);
}

Test(failure, killed_peer_is_named_soon) {
  struct procReport *rep = forkedShared(3 * sizeof *rep);
  pid_t pids[3];
  forkedLaunch(3, killedChild, rep, pids);
  forkedReap(pids, 3, 40000);
  for (int r = 0; r < 2; r++) {
    cr_expect_eq(rep[r].failures, 0, "rank %d: %s", r, rep[r].error);
    cr_expect_eq(rep[r].res, weftRemoteError, "rank %d: %s", r, rep[r].error);
    cr_expect_not_null(strstr(rep[r].error, "rank 2 ("), "rank %d names rank 2: %s", r, rep[r].error);
    /* Probes every 250 ms, a timeout of 20 s: detection takes well under 5 s. */
    cr_expect_lt(rep[r].ms, 5000, "rank %d took %lld ms", r, (long long)rep[r].ms);
  }
  cr_expect_not_null(strstr(rep[0].error, "is gone"), "the receiver probed it: %s", rep[0].error);
  munmap(rep, 3 * sizeof *rep);
}

static atomic_int silentRelease;

static long silentBody(struct team *t, int rank, void *arg, char *error) {
  (void)arg;
  if (rank == 1) { /* alive, its listener open, but it never calls */
    while (!atomic_load(&silentRelease)) sleepMs(5);
    return 0;
  }
  struct weftBootMsg out, in = {.peer = 1, .tag = 6};
  fillMsg(&out, 1, 5, 0, 1, 0);
  int64_t start = weftNowMs();
  weftResult_t res = weftBootstrapExchange(t->b[0], &out, 1, &in, 1, start + 1500);
  int64_t ms = weftNowMs() - start;
  atomic_store(&silentRelease, 1);
  const char *msg = weftThreadLastError();
  if (res != weftTimeout) return fail(error, "not a timeout", res);
  if (strstr(msg, "not yet heard from rank 1 (tag 6)") == NULL ||
      strstr(msg, "not yet reached rank 1 (tag 5: waiting for the nonce of it)") == NULL)
    return fail(error, "the timeout does not name both", res);
  if (ms < 1450 || ms > 6000) return snprintf(error, 1024, "timed out after %lld ms", (long long)ms), 1;
  return 0;
}

Test(failure, silent_peer_times_out_named) {
  int fdsBefore = countOpenFds();
  struct team t;
  teamInit(&t, 2);
  teamRun(&t, silentBody, NULL);
  teamClose(&t);
  cr_expect_eq(fdsSettled(fdsBefore, 3000), fdsBefore, "descriptors leaked");
}

/* A non-blocking init's thread carries an abort flag (weftThreadAbortFlag): an exchange that
 * waits on a silent peer stops soon after the flag is set, long before its deadline. */
static _Atomic int abortFlag;

static long abortBody(struct team *t, int rank, void *arg, char *error) {
  (void)arg;
  if (rank == 1) { /* silent until rank 0 has given up */
    while (!atomic_load(&silentRelease)) sleepMs(5);
    return 0;
  }
  weftThreadAbortFlag = &abortFlag;
  struct weftBootMsg out, in = {.peer = 1, .tag = 2};
  fillMsg(&out, 1, 1, 0, 1, 0);
  int64_t start = weftNowMs();
  weftResult_t res = weftBootstrapExchange(t->b[0], &out, 1, &in, 1, start + LONG_MS);
  int64_t ms = weftNowMs() - start;
  weftThreadAbortFlag = NULL;
  atomic_store(&silentRelease, 1);
  if (res == weftSuccess || res == weftTimeout) return fail(error, "not stopped by the flag", res);
  if (ms > 3000) return snprintf(error, 1024, "stopped after %lld ms", (long long)ms), 1;
  return 0;
}

static void *raiseAbortLater(void *arg) {
  (void)arg;
  sleepMs(200);
  atomic_store(&abortFlag, 1);
  return NULL;
}

Test(failure, abort_flag_stops_the_wait) {
  int fdsBefore = countOpenFds();
  struct team t;
  teamInit(&t, 2);
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, raiseAbortLater, NULL), 0);
  teamRun(&t, abortBody, NULL);
  pthread_join(th, NULL);
  teamClose(&t);
  cr_expect_eq(fdsSettled(fdsBefore, 3000), fdsBefore, "descriptors leaked");
}

/* Rank 2 dials rank 0 with another secret while rank 0 waits for rank 1: rank 2 is refused,
 * rank 0 is not disturbed. */
static long wrongSecretBody(struct team *t, int rank, void *arg, char *error) {
  (void)arg;
  struct weftBootMsg m;
  weftResult_t res;
  if (rank == 0) {
    m = (struct weftBootMsg){.peer = 1, .tag = 1};
    res = weftBootstrapExchange(t->b[0], NULL, 0, &m, 1, weftNowMs() + LONG_MS);
    if (res != weftSuccess) return fail(error, "the honest exchange", res);
    return wrongBytes(&m, 0, 0);
  }
  if (rank == 1) {
    sleepMs(500);
    fillMsg(&m, 0, 1, 1, 0, 0);
    res = weftBootstrapExchange(t->b[1], &m, 1, NULL, 0, weftNowMs() + LONG_MS);
    return res == weftSuccess ? 0 : fail(error, "the honest sender", res);
  }
  t->b[2]->secret[0] ^= 0x01;
  fillMsg(&m, 0, 9, 2, 0, 0);
  int64_t start = weftNowMs();
  res = weftBootstrapExchange(t->b[2], &m, 1, NULL, 0, weftNowMs() + 5000);
  t->b[2]->secret[0] ^= 0x01;
  if (res != weftRemoteError) return fail(error, "the wrong secret was not refused", res);
  if (strstr(weftThreadLastError(), "rank 0 (") == NULL ||
      strstr(weftThreadLastError(), "refused rank 2's message with tag 9") == NULL)
    return fail(error, "refusal message", res);
  if (weftNowMs() - start > 2000) return snprintf(error, 1024, "the refusal took long"), 1;
  return 0;
}

Test(failure, wrong_secret_dialer_is_refused) {
  struct team t;
  teamInit(&t, 3);
  teamRun(&t, wrongSecretBody, NULL);
  cr_expect_eq(t.b[0]->serve.nstash, 0, "nothing of the impostor was stored");
  teamClose(&t);
}

/* Connects to rank to's listener as rank from and sends a hello that proves the secret, made
 * with the library's own builders: the connection, or -1; the nonces in cn and sn. */
static int forgedHello(const struct weftBootstrap *from, int to, uint8_t *cn, uint8_t *sn) {
  int fd = -1;
  int64_t until = weftNowMs() + 3000;
  if (weftSocketConnect(weftBootstrapPeerAddr(from, to), until, &fd) != 0) return -1;
  uint8_t addr[ADDR_BYTES], hello[HELLO_BYTES];
  memset(cn, 0x5c, NONCE_BYTES);
  int rc = weftSocketRecvAll(fd, sn, NONCE_BYTES, until);
  weftSockAddrEncode(addr, &from->listenAddr);
  weftBootHelloBuild(hello, from->secret, sn, HELLO_P2P, from->rank, from->nranks, cn, addr);
  if (rc == 0) rc = weftSocketSendAll(fd, hello, sizeof hello, until);
  if (rc != 0) weftSocketClose(&fd);
  return fd;
}

/* A forged message after a forged hello, with a byte changed or not: 1 answered (stored),
 * 0 closed unanswered, -1 anything else. */
static int forgedSend(const struct weftBootstrap *from, int to, uint32_t tag, int corrupt) {
  uint8_t sn[NONCE_BYTES], cn[NONCE_BYTES], wire[MSG_WIRE_BYTES], data[MSG_BYTES], reply[ACK_BYTES];
  int fd = forgedHello(from, to, cn, sn);
  if (fd < 0) return -1;
  int64_t until = weftNowMs() + 3000;
  for (size_t i = 0; i < sizeof data; i++) data[i] = patternByte(from->rank, to, tag, 0, i);
  weftBootMsgBuild(wire, from->secret, cn, sn, tag, data);
  if (corrupt) wire[8 + 100] ^= 0x01;
  int rc = weftSocketSendAll(fd, wire, sizeof wire, until);
  if (rc == 0) rc = weftSocketRecvAll(fd, reply, sizeof reply, until);
  int verdict = rc == WEFT_SOCK_CLOSED ? 0
                : rc == 0 && weftBootstrapCheckMsgReply(from->secret, cn, sn, tag, reply) == 1 ? 1
                                                                                             : -1;
  weftSocketCloseAbortive(&fd, 1);
  return verdict;
}

/* Whether the listener closed fd within ms. */
static int closedWithin(int fd, int ms) {
  uint8_t byte;
  return weftSocketRecvAll(fd, &byte, 1, weftNowMs() + ms) == WEFT_SOCK_CLOSED;
}

struct waiter {
  struct weftBootstrap *b;
  struct weftBootMsg in;
  weftResult_t res;
  int64_t ms;
  char error[1024];
};

static void *waiterMain(void *arg) {
  struct waiter *w = arg;
  int64_t start = weftNowMs();
  w->res = weftBootstrapExchange(w->b, NULL, 0, &w->in, 1, start + 10000);
  w->ms = weftNowMs() - start;
  snprintf(w->error, sizeof w->error, "%s", weftThreadLastError());
  return NULL;
}

Test(failure, wrong_message_mac_fails_the_receiver) {
  struct team t;
  teamInit(&t, 3);
  struct waiter w = {.b = t.b[0], .in = {.peer = 2, .tag = 4}};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, waiterMain, &w), 0);
  sleepMs(100);
  cr_expect_eq(forgedSend(t.b[2], 0, 4, 1), 0, "a changed message must get no answer");
  pthread_join(th, NULL);
  cr_expect_eq(w.res, weftRemoteError, "%s", w.error);
  cr_expect_not_null(strstr(w.error, "rank 2 ("), "%s", w.error);
  cr_expect_not_null(strstr(w.error, "wrong MAC"), "%s", w.error);
  cr_expect_lt(w.ms, 5000);
  /* The same message unchanged is stored and acknowledged. */
  w.in = (struct weftBootMsg){.peer = 2, .tag = 4};
  cr_assert_eq(pthread_create(&th, NULL, waiterMain, &w), 0);
  sleepMs(100);
  cr_expect_eq(forgedSend(t.b[2], 0, 4, 0), 1, "the message unchanged is stored");
  pthread_join(th, NULL);
  cr_expect_eq(w.res, weftSuccess, "%s", w.error);
  cr_expect_eq(wrongBytes(&w.in, 0, 0), 0);
  teamClose(&t);
}

/* A sender sends its messages to one peer one after another: one holding more than 4
 * message connections at once is cut off, and the honest exchange goes on. */
Test(failure, sender_with_too_many_connections_is_cut_off) {
  struct team t;
  teamInit(&t, 3);
  struct waiter w = {.b = t.b[0], .in = {.peer = 1, .tag = 3}};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, waiterMain, &w), 0);
  int fds[5];
  uint8_t cn[NONCE_BYTES], sn[NONCE_BYTES];
  for (int k = 0; k < 5; k++) {
    fds[k] = forgedHello(t.b[2], 0, cn, sn);
    cr_assert_geq(fds[k], 0, "forged hello %d", k);
    sleepMs(50); /* one at a time, so the fifth is the one over the bound */
  }
  cr_expect(closedWithin(fds[4], 1000), "the fifth connection must be closed");
  for (int k = 0; k < 4; k++) cr_expect_not(closedWithin(fds[k], 10), "connection %d kept", k);
  struct weftBootMsg m;
  fillMsg(&m, 0, 3, 1, 0, 0);
  cr_expect_eq(weftBootstrapExchange(t.b[1], &m, 1, NULL, 0, weftNowMs() + LONG_MS), weftSuccess,
               "%s", weftThreadLastError());
  pthread_join(th, NULL);
  cr_expect_eq(w.res, weftSuccess, "%s", w.error);
  cr_expect_eq(wrongBytes(&w.in, 0, 0), 0);
  for (int k = 0; k < 5; k++) weftSocketCloseAbortive(&fds[k], 1);
  teamClose(&t);
}

/* ---- Interleaving with weftBootstrapSplit ---- */

/* Rank 2 starts a split at once: its ring hello reaches rank 0 while rank 0 waits (0.8 s,
 * past the 0.2 s handshake time) for rank 1's message, and must be kept for rank 0's split.
 * Rank 1's message to rank 2 reaches rank 2 while it forms the split's ring, and must be
 * stored for rank 2's later exchange. Then the split works, exchanges included. */
static long splitBody(struct team *t, int rank, void *arg, char *error) {
  (void)arg;
  static const int members[3] = {0, 1, 2};
  struct weftBootMsg out[2], in[2];
  weftResult_t res = weftSuccess;
  if (rank == 0) {
    in[0] = (struct weftBootMsg){.peer = 1, .tag = 1};
    res = weftBootstrapExchange(t->b[0], NULL, 0, in, 1, weftNowMs() + LONG_MS);
    if (res != weftSuccess || wrongBytes(&in[0], 0, 0) != 0) return fail(error, "rank 0's exchange", res);
  } else if (rank == 1) {
    sleepMs(800);
    fillMsg(&out[0], 0, 1, 1, 0, 0);
    fillMsg(&out[1], 2, 2, 1, 2, 0);
    res = weftBootstrapExchange(t->b[1], out, 2, NULL, 0, weftNowMs() + LONG_MS);
    if (res != weftSuccess) return fail(error, "rank 1's exchange", res);
  }
  struct weftBootstrap *child = NULL;
  res = weftBootstrapSplit(t->b[rank], members, 3, 7, weftNowMs() + LONG_MS, &child);
  if (res != weftSuccess) return fail(error, "split", res);
  long failures = 0;
  uint8_t ranks[3] = {0};
  ranks[rank] = (uint8_t)(rank + 10);
  res = weftBootstrapAllGather(child, ranks, 1, weftNowMs() + LONG_MS);
  if (res != weftSuccess) failures += fail(error, "the split's allgather", res);
  for (int r = 0; r < 3 && res == weftSuccess; r++) failures += ranks[r] != r + 10;
  if (failures == 0) failures += allToAllRound(child, rank, 3, 0, error);
  closeOne(&child);
  if (rank == 2 && failures == 0) {
    in[0] = (struct weftBootMsg){.peer = 1, .tag = 2};
    int64_t start = weftNowMs();
    res = weftBootstrapExchange(t->b[2], NULL, 0, in, 1, weftNowMs() + LONG_MS);
    if (res != weftSuccess) return fail(error, "rank 2's exchange after the split", res);
    if (weftNowMs() - start > 1000) return snprintf(error, 1024, "it was not stored"), 1;
    failures += wrongBytes(&in[0], 2, 0) != 0;
  }
  return failures;
}

Test(split, exchange_and_split_interleave) {
  weftBootstrapHandshakeMs = 200;
  int fdsBefore = countOpenFds();
  struct team t;
  teamInit(&t, 3);
  teamRun(&t, splitBody, NULL);
  teamClose(&t);
  cr_expect_eq(fdsSettled(fdsBefore, 3000), fdsBefore, "descriptors leaked");
}

/* ---- Teardown: no TIME_WAIT ---- */

struct teardownResult {
  int ok, timeWait, fdsBefore, fdsAfter;
  char why[1024];
};

/* In a network namespace of its own (only this test's sockets): all-to-all rounds among 4
 * ranks, one of them late each round (so the others probe it), then close. */
static void teardownInNamespace(struct teardownResult *res) {
  if (unshare(CLONE_NEWNET) != 0) {
    snprintf(res->why, sizeof res->why, "unshare(CLONE_NEWNET): %s", strerror(errno));
    return;
  }
  if (netnsLoopbackUp(res->why, sizeof res->why) != 0) return;
  res->fdsBefore = countOpenFds();
  struct team t;
  if (teamStart(&t, 4, res->why) != 0) return;
  int rounds = 4;
  long failures = teamRunQuiet(&t, allToAllBody, &rounds, res->why);
  teamClose(&t);
  res->fdsAfter = fdsSettled(res->fdsBefore, 3000);
  sleepMs(100); /* resets in flight have arrived */
  res->timeWait = netnsCountTimeWait();
  res->ok = failures == 0;
}

Test(teardown, no_time_wait_and_no_leak) {
  SKIP_UNLESS("netns");
  struct teardownResult *res = forkedShared(sizeof *res);
  fflush(NULL);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    teardownInNamespace(res);
    _exit(0);
  }
  int status;
  waitpid(pid, &status, 0);
  cr_assert(WIFEXITED(status), "the child died (status 0x%x)", status);
  cr_assert(res->ok, "%s", res->why);
  cr_expect_eq(res->timeWait, 0, "%d sockets in TIME_WAIT", res->timeWait);
  cr_expect_eq(res->fdsAfter, res->fdsBefore, "descriptors leaked");
  munmap(res, sizeof *res);
}
