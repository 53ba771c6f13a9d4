/* weftBootstrapExchange: the message's wire format (MACs against answers computed
 * independently), pairwise and all-to-all exchanges in shuffled orders (threads and
 * processes), messages stored before they are asked for, order per tag, messages to itself,
 * the bound on stored messages, a killed peer, a silent peer, wrong secrets and MACs,
 * interleaving with weftBootstrapSplit, descriptors and TIME_WAIT. White-box where a test
 * must forge what a rank sends (boot_internal.h). Each Test runs in its own process. */
#include <criterion/criterion.h>
#include <errno.h>
#include <net/if.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "boot_internal.h"
#include "caps.h"
#include "forked.h"
#include "harness.h"
#include "log.h"

TestSuite(wire, .timeout = 60);
TestSuite(exchange, .timeout = 120);
TestSuite(stash, .timeout = 60);
TestSuite(failure, .timeout = 60);
TestSuite(split, .timeout = 60);
TestSuite(teardown, .timeout = 120);

#define MAX_TEAM 8
#define LONG_MS 20000

/* ---- Helpers ---- */

static void sleepMs(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* The descriptor count once it is back to `expected` (the root thread closes its sockets
 * just after the ranks return), or what it is after waitMs. */
static int fdsSettled(int expected, int waitMs) {
  int n = countOpenFds();
  for (int waited = 0; n != expected && waited < waitMs; waited += 10) {
    sleepMs(10);
    n = countOpenFds();
  }
  return n;
}

/* The data of message number seq from rank `from` to rank `to` with tag. */
static uint8_t patternByte(int from, int to, uint32_t tag, int seq, size_t i) {
  return (uint8_t)(from * 37 + to * 101 + (int)tag * 13 + seq * 7 + (int)(i % 251) * 3 + 1);
}

static void fillMsg(struct weftBootMsg *m, int peer, uint32_t tag, int from, int to, int seq) {
  m->peer = peer;
  m->tag = tag;
  for (size_t i = 0; i < WEFT_BOOT_MSG_BYTES; i++) m->data[i] = patternByte(from, to, tag, seq, i);
}

/* Bytes of m that differ from message seq of in.peer to rank `to`. */
static int wrongBytes(const struct weftBootMsg *m, int to, int seq) {
  int wrong = 0;
  for (size_t i = 0; i < WEFT_BOOT_MSG_BYTES; i++)
    wrong += m->data[i] != patternByte(m->peer, to, m->tag, seq, i);
  return wrong;
}

static void shuffle(struct weftBootMsg *m, int n, unsigned *seed) {
  for (int i = n - 1; i > 0; i--) {
    int j = (int)((unsigned)rand_r(seed) % (unsigned)(i + 1));
    struct weftBootMsg t = m[i];
    m[i] = m[j];
    m[j] = t;
  }
}

/* ---- Ranks as threads: a team of bootstraps ---- */

struct team {
  weftUniqueId id;
  int n;
  struct weftBootstrap *b[MAX_TEAM];
};

struct member {
  struct team *team;
  int rank;
  void *arg;
  long (*body)(struct team *t, int rank, void *arg, char *error);
  weftResult_t initRes;
  long failures;
  char error[1024];
};

static void *initMain(void *arg) {
  struct member *m = arg;
  m->initRes = weftBootstrapInit(&m->team->id, m->rank, m->team->n, weftNowMs() + LONG_MS,
                                 &m->team->b[m->rank]);
  if (m->initRes != weftSuccess) snprintf(m->error, sizeof m->error, "%s", weftThreadLastError());
  return NULL;
}

static void *bodyMain(void *arg) {
  struct member *m = arg;
  m->error[0] = '\0';
  m->failures = m->body(m->team, m->rank, m->arg, m->error);
  return NULL;
}

static int runMembers(struct member *m, int n, void *(*fn)(void *)) {
  pthread_t threads[MAX_TEAM];
  int started = 0;
  while (started < n && pthread_create(&threads[started], NULL, fn, &m[started]) == 0) started++;
  for (int r = 0; r < started; r++) pthread_join(threads[r], NULL);
  return started == n ? 0 : -1;
}

/* Without Criterion (a forked child uses them too): 0, or -1 with why in error. */
static int teamStart(struct team *t, int n, char *error) {
  memset(t, 0, sizeof *t);
  t->n = n;
  if (weftBootstrapGetUniqueId(&t->id) != weftSuccess)
    return snprintf(error, 1024, "unique id: %s", weftThreadLastError()), -1;
  struct member m[MAX_TEAM];
  for (int r = 0; r < n; r++) m[r] = (struct member){.team = t, .rank = r};
  if (runMembers(m, n, initMain) != 0) return snprintf(error, 1024, "pthread_create"), -1;
  for (int r = 0; r < n; r++)
    if (m[r].initRes != weftSuccess) return snprintf(error, 1024, "rank %d: %s", r, m[r].error), -1;
  return 0;
}

/* Runs body on every rank at once: the total of their failures, the first one's why in error. */
static long teamRunQuiet(struct team *t, long (*body)(struct team *, int, void *, char *),
                         void *arg, char *error) {
  struct member m[MAX_TEAM];
  for (int r = 0; r < t->n; r++) m[r] = (struct member){.team = t, .rank = r, .body = body, .arg = arg};
  if (runMembers(m, t->n, bodyMain) != 0) return snprintf(error, 1024, "pthread_create"), 1;
  long failures = 0;
  for (int r = 0; r < t->n; r++) {
    if (m[r].failures != 0 && failures == 0) snprintf(error, 1024, "rank %d: %s", r, m[r].error);
    failures += m[r].failures;
  }
  return failures;
}

static void teamInit(struct team *t, int n) {
  char error[1024];
  cr_assert_eq(teamStart(t, n, error), 0, "%s", error);
}

static void teamRun(struct team *t, long (*body)(struct team *, int, void *, char *), void *arg) {
  char error[1024] = "";
  long failures = teamRunQuiet(t, body, arg, error);
  cr_expect_eq(failures, 0, "%ld failures; %s", failures, error);
}

/* As a communicator that worked to the end closes it (the ring without TIME_WAIT). */
static void closeOne(struct weftBootstrap **b) {
  if (*b == NULL) return;
  weftBootstrapCloseRingQuietly(*b);
  weftBootstrapClose(*b);
  *b = NULL;
}

static void teamClose(struct team *t) {
  for (int r = 0; r < t->n; r++) closeOne(&t->b[r]);
}

static long fail(char *error, const char *what, weftResult_t res) {
  snprintf(error, 1024, "%s: result %d: %s", what, (int)res, weftThreadLastError());
  return 1;
}

/* ---- The wire format ---- */

/* The fixed inputs: secret 10..1f, the listener's nonce 30..3f, the dialer's 40..4f, tag
 * 0x01020304, data[i] = 7 i + 3. The tags were computed with Python's hashlib:
 *   blake2b(kind + clientNonce + serverNonce + be32(tag) [+ data], key=secret, digest_size=16)
 * with kind b'P' (the message, with data), b'K' (stored), b'N' (refused). */
static const uint8_t msgTag[16] = {0x44, 0xa6, 0x9e, 0xad, 0xf5, 0x8d, 0xae, 0xe8,
                                   0x3f, 0x25, 0x0d, 0xeb, 0x68, 0x91, 0xf1, 0x09};
static const uint8_t ackTag[16] = {0xda, 0x35, 0xf5, 0x2a, 0x83, 0xe9, 0x15, 0x63,
                                   0x71, 0xfd, 0x74, 0x2f, 0x6d, 0x09, 0x0f, 0xd9};
static const uint8_t nackTag[16] = {0xc0, 0x46, 0x0d, 0x8c, 0x71, 0x67, 0x05, 0xf2,
                                    0xba, 0x88, 0x12, 0xb7, 0x06, 0x63, 0x09, 0xbf};

static void wireInputs(uint8_t secret[16], uint8_t sn[16], uint8_t cn[16], uint8_t *data) {
  for (int i = 0; i < 16; i++) {
    secret[i] = (uint8_t)(0x10 + i);
    sn[i] = (uint8_t)(0x30 + i);
    cn[i] = (uint8_t)(0x40 + i);
  }
  for (int i = 0; i < WEFT_BOOT_MSG_BYTES; i++) data[i] = (uint8_t)(i * 7 + 3);
}

/* message = "WFTP" | be32(tag) | data | tag, as lib/boot_auth.c documents it. */
Test(wire, message_known_answer_and_refusals) {
  uint8_t secret[16], sn[16], cn[16], data[WEFT_BOOT_MSG_BYTES], wire[WEFT_BOOT_P2P_WIRE_BYTES];
  wireInputs(secret, sn, cn, data);
  cr_assert_eq(WEFT_BOOT_P2P_WIRE_BYTES, 4 + 4 + WEFT_BOOT_MSG_BYTES + 16);
  memcpy(wire, "WFTP", 4);
  const uint8_t tagBytes[4] = {1, 2, 3, 4};
  memcpy(wire + 4, tagBytes, 4);
  memcpy(wire + 8, data, sizeof data);
  memcpy(wire + 8 + sizeof data, msgTag, 16);
  uint32_t tag = 0;
  uint8_t got[WEFT_BOOT_MSG_BYTES];
  const char *why = weftBootstrapParseMsg(secret, cn, sn, wire, &tag, got);
  cr_assert_null(why, "the message with the independently computed tag is refused: %s", why);
  cr_expect_eq(tag, 0x01020304u);
  cr_expect_arr_eq(got, data, sizeof data);
  uint8_t built[WEFT_BOOT_P2P_WIRE_BYTES];
  weftBootMsgBuild(built, secret, cn, sn, 0x01020304u, data);
  cr_expect_arr_eq(built, wire, sizeof wire, "the library builds the documented layout");

  for (size_t i = 0; i < sizeof wire; i++) {
    wire[i] ^= 0x20;
    cr_expect_not_null(weftBootstrapParseMsg(secret, cn, sn, wire, &tag, got), "byte %zu changed", i);
    wire[i] ^= 0x20;
  }
  cr_expect_not_null(weftBootstrapParseMsg(secret, sn, cn, wire, &tag, got), "the nonces swapped");
  cn[0] ^= 1; /* replayed on another connection: another dialer's nonce */
  cr_expect_not_null(weftBootstrapParseMsg(secret, cn, sn, wire, &tag, got), "another connection");
  cn[0] ^= 1;
  secret[9] ^= 1;
  cr_expect_not_null(weftBootstrapParseMsg(secret, cn, sn, wire, &tag, got), "another secret");
  secret[9] ^= 1;
  cr_expect_null(weftBootstrapParseMsg(secret, cn, sn, wire, &tag, got), "restored");
}

Test(wire, answers_known_answer_and_refusals) {
  uint8_t secret[16], sn[16], cn[16], data[WEFT_BOOT_MSG_BYTES], reply[16];
  wireInputs(secret, sn, cn, data);
  const uint32_t tag = 0x01020304u;
  cr_expect_eq(weftBootstrapCheckMsgReply(secret, cn, sn, tag, ackTag), 1, "stored");
  cr_expect_eq(weftBootstrapCheckMsgReply(secret, cn, sn, tag, nackTag), 0, "refused");
  weftBootMsgReplyBuild(reply, secret, cn, sn, tag, 1);
  cr_expect_arr_eq(reply, ackTag, 16);
  weftBootMsgReplyBuild(reply, secret, cn, sn, tag, 0);
  cr_expect_arr_eq(reply, nackTag, 16);
  cr_expect_eq(weftBootstrapCheckMsgReply(secret, cn, sn, tag + 1, ackTag), -1, "another tag");
  cr_expect_eq(weftBootstrapCheckMsgReply(secret, sn, cn, tag, ackTag), -1, "nonces swapped");
  for (int i = 0; i < 16; i++) {
    memcpy(reply, ackTag, 16);
    reply[i] ^= 0x04;
    cr_expect_eq(weftBootstrapCheckMsgReply(secret, cn, sn, tag, reply), -1, "byte %d changed", i);
  }
  uint8_t ringAck[16];
  weftBootAckBuild(ringAck, secret, cn, sn);
  cr_expect_eq(weftBootstrapCheckMsgReply(secret, cn, sn, tag, ringAck), -1,
               "a ring's acknowledgement is no message's answer");
}

Test(wire, bad_arguments_are_refused) {
  struct team t;
  teamInit(&t, 2);
  struct weftBootMsg m[2];
  fillMsg(&m[0], 2, 1, 0, 2, 0);
  cr_expect_eq(weftBootstrapExchange(t.b[0], m, 1, NULL, 0, weftNowMs() + 1000), weftInvalidArgument);
  cr_expect_not_null(strstr(weftThreadLastError(), "out[0].peer = 2"), "%s", weftThreadLastError());
  m[0].peer = -1;
  cr_expect_eq(weftBootstrapExchange(t.b[0], NULL, 0, m, 1, weftNowMs() + 1000), weftInvalidArgument);
  cr_expect_eq(weftBootstrapExchange(t.b[0], NULL, 1, NULL, 0, weftNowMs() + 1000), weftInvalidArgument);
  cr_expect_eq(weftBootstrapExchange(t.b[0], m, -1, NULL, 0, weftNowMs() + 1000), weftInvalidArgument);
  cr_expect_eq(weftBootstrapExchange(NULL, NULL, 0, NULL, 0, weftNowMs() + 1000), weftInvalidArgument);
  cr_expect_eq(weftBootstrapExchange(t.b[0], NULL, 0, NULL, 0, weftNowMs() + 1000), weftSuccess,
               "nothing to exchange");
  teamClose(&t);
}

/* ---- Exchanges ---- */

static long pairBody(struct team *t, int rank, void *arg, char *error) {
  (void)arg;
  struct weftBootMsg out, in = {.peer = 1 - rank, .tag = 42};
  fillMsg(&out, 1 - rank, 42, rank, 1 - rank, 0);
  weftResult_t res = weftBootstrapExchange(t->b[rank], &out, 1, &in, 1, weftNowMs() + LONG_MS);
  if (res != weftSuccess) return fail(error, "exchange", res);
  return wrongBytes(&in, rank, 0);
}

Test(exchange, pairwise) {
  int fdsBefore = countOpenFds();
  struct team t;
  teamInit(&t, 2);
  teamRun(&t, pairBody, NULL);
  teamRun(&t, pairBody, NULL); /* again: nothing of the first is left in the way */
  teamClose(&t);
  cr_expect_eq(fdsSettled(fdsBefore, 3000), fdsBefore, "descriptors leaked");
}

enum { TAGS_PER_PAIR = 2 };

/* Every rank sends TAGS_PER_PAIR messages to every rank (itself included), listing what it
 * sends and what it expects in orders of its own; rounds use different tags. */
static long allToAllRound(struct weftBootstrap *b, int rank, int n, int round, char *error) {
  int count = n * TAGS_PER_PAIR;
  struct weftBootMsg *out = calloc((size_t)count, sizeof *out);
  struct weftBootMsg *in = calloc((size_t)count, sizeof *in);
  for (int p = 0, k = 0; p < n; p++)
    for (int tg = 0; tg < TAGS_PER_PAIR; tg++, k++) {
      uint32_t tag = (uint32_t)(round * 16 + tg);
      fillMsg(&out[k], p, tag, rank, p, 0);
      in[k] = (struct weftBootMsg){.peer = p, .tag = tag};
    }
  unsigned seed = (unsigned)(1000 * round + 17 * rank + 5);
  shuffle(out, count, &seed);
  shuffle(in, count, &seed);
  weftResult_t res = weftBootstrapExchange(b, out, count, in, count, weftNowMs() + LONG_MS);
  long failures = 0;
  if (res != weftSuccess)
    failures = fail(error, "exchange", res);
  else
    for (int k = 0; k < count; k++) failures += wrongBytes(&in[k], rank, 0) != 0;
  if (failures > 0 && res == weftSuccess)
    snprintf(error, 1024, "round %d: %ld messages with wrong data", round, failures);
  free(out);
  free(in);
  return failures;
}

static long allToAllBody(struct team *t, int rank, void *arg, char *error) {
  int rounds = *(const int *)arg;
  long failures = 0;
  for (int round = 0; round < rounds && failures == 0; round++) {
    if (rank == round % t->n) sleepMs(300); /* late: the others probe it and stash its messages */
    failures += allToAllRound(t->b[rank], rank, t->n, round, error);
  }
  return failures;
}

static void allToAllThreads(int n) {
  int fdsBefore = countOpenFds();
  struct team t;
  teamInit(&t, n);
  int rounds = 3;
  teamRun(&t, allToAllBody, &rounds);
  teamClose(&t);
  cr_expect_eq(fdsSettled(fdsBefore, 3000), fdsBefore, "descriptors leaked");
}

Test(exchange, all_to_all_4_threads) { allToAllThreads(4); }
Test(exchange, all_to_all_8_threads) { allToAllThreads(8); }

struct procReport {
  weftResult_t res;
  long failures;
  int64_t ms;
  char error[1024];
};

static void allToAllChild(void *shared, weftUniqueId id, int rank, int nranks) {
  struct procReport *rep = (struct procReport *)shared + rank;
  struct weftBootstrap *b = NULL;
  rep->res = weftBootstrapInit(&id, rank, nranks, weftNowMs() + LONG_MS, &b);
  if (rep->res != weftSuccess) {
    snprintf(rep->error, sizeof rep->error, "init: %s", weftThreadLastError());
    _exit(1);
  }
  for (int round = 0; round < 3 && rep->failures == 0; round++)
    rep->failures += allToAllRound(b, rank, nranks, round, rep->error);
  weftBootstrapCloseRingQuietly(b);
  weftBootstrapClose(b);
  _exit(0);
}

static void allToAllProcesses(int n) {
  struct procReport *rep = forkedShared((size_t)n * sizeof *rep);
  pid_t pids[MAX_TEAM];
  forkedLaunch(n, allToAllChild, rep, pids);
  forkedReap(pids, n, 60000);
  for (int r = 0; r < n; r++) {
    cr_expect_eq(rep[r].res, weftSuccess, "rank %d: %s", r, rep[r].error);
    cr_expect_eq(rep[r].failures, 0, "rank %d: %s", r, rep[r].error);
  }
  munmap(rep, (size_t)n * sizeof *rep);
}

Test(exchange, all_to_all_4_processes) { allToAllProcesses(4); }
Test(exchange, all_to_all_8_processes) { allToAllProcesses(8); }

/* Messages of one sender with one tag arrive in the order it sent them, within a call (to
 * the requests in index order) and across calls; different tags do not disturb it. */
static long fifoBody(struct team *t, int rank, void *arg, char *error) {
  (void)arg;
  enum { SEVENS = 5, EIGHTS = 3 };
  struct weftBootMsg msgs[SEVENS + EIGHTS];
  for (int call = 0; call < 2; call++) {
    weftResult_t res;
    if (rank == 0) {
      for (int k = 0; k < SEVENS; k++) fillMsg(&msgs[k], 1, 7, 0, 1, call * 10 + k);
      for (int k = 0; k < EIGHTS; k++) fillMsg(&msgs[SEVENS + k], 1, 8, 0, 1, call * 10 + k);
      res = weftBootstrapExchange(t->b[0], msgs, SEVENS + EIGHTS, NULL, 0, weftNowMs() + LONG_MS);
    } else {
      if (call == 1) sleepMs(200); /* the second batch is stashed before it is asked for */
      for (int k = 0; k < EIGHTS; k++) msgs[k] = (struct weftBootMsg){.peer = 0, .tag = 8};
      for (int k = 0; k < SEVENS; k++) msgs[EIGHTS + k] = (struct weftBootMsg){.peer = 0, .tag = 7};
      res = weftBootstrapExchange(t->b[1], NULL, 0, msgs, SEVENS + EIGHTS, weftNowMs() + LONG_MS);
    }
    if (res != weftSuccess) return fail(error, "exchange", res);
    if (rank == 0) continue;
    for (int k = 0; k < EIGHTS; k++)
      if (wrongBytes(&msgs[k], 1, call * 10 + k) != 0)
        return snprintf(error, 1024, "call %d: tag 8 message %d out of order", call, k), 1;
    for (int k = 0; k < SEVENS; k++)
      if (wrongBytes(&msgs[EIGHTS + k], 1, call * 10 + k) != 0)
        return snprintf(error, 1024, "call %d: tag 7 message %d out of order", call, k), 1;
  }
  return 0;
}

Test(exchange, same_pair_several_tags_in_order) {
  struct team t;
  teamInit(&t, 2);
  teamRun(&t, fifoBody, NULL);
  teamClose(&t);
}

Test(exchange, self_messages_on_one_rank) {
  int fdsBefore = countOpenFds();
  struct team t;
  teamInit(&t, 1);
  struct weftBootMsg out[3], in[3];
  fillMsg(&out[0], 0, 5, 0, 0, 0);
  fillMsg(&out[1], 0, 6, 0, 0, 0);
  fillMsg(&out[2], 0, 5, 0, 0, 1);
  in[0] = (struct weftBootMsg){.peer = 0, .tag = 6};
  in[1] = (struct weftBootMsg){.peer = 0, .tag = 5};
  cr_assert_eq(weftBootstrapExchange(t.b[0], out, 3, in, 2, weftNowMs() + 1000), weftSuccess, "%s",
               weftThreadLastError());
  cr_expect_eq(wrongBytes(&in[0], 0, 0), 0);
  cr_expect_eq(wrongBytes(&in[1], 0, 0), 0, "the first message with tag 5 first");
  /* The second tag-5 message was not asked for: a later call gets it. */
  in[2] = (struct weftBootMsg){.peer = 0, .tag = 5};
  cr_assert_eq(weftBootstrapExchange(t.b[0], NULL, 0, &in[2], 1, weftNowMs() + 1000), weftSuccess,
               "%s", weftThreadLastError());
  cr_expect_eq(wrongBytes(&in[2], 0, 1), 0);
  /* Asking itself for what it never sent can never complete: refused at once. */
  int64_t start = weftNowMs();
  cr_expect_eq(weftBootstrapExchange(t.b[0], NULL, 0, &in[2], 1, weftNowMs() + 5000),
               weftInvalidUsage);
  cr_expect_lt(weftNowMs() - start, 1000);
  cr_expect_not_null(strstr(weftThreadLastError(), "asks itself"), "%s", weftThreadLastError());
  teamClose(&t);
  cr_expect_eq(fdsSettled(fdsBefore, 3000), fdsBefore, "descriptors leaked");
}

static long mixedSelfBody(struct team *t, int rank, void *arg, char *error) {
  (void)arg;
  struct weftBootMsg out[2], in[2];
  fillMsg(&out[0], rank, 3, rank, rank, 0);
  fillMsg(&out[1], 1 - rank, 3, rank, 1 - rank, 0);
  in[0] = (struct weftBootMsg){.peer = 1 - rank, .tag = 3};
  in[1] = (struct weftBootMsg){.peer = rank, .tag = 3};
  weftResult_t res = weftBootstrapExchange(t->b[rank], out, 2, in, 2, weftNowMs() + LONG_MS);
  if (res != weftSuccess) return fail(error, "exchange", res);
  return wrongBytes(&in[0], rank, 0) + wrongBytes(&in[1], rank, 0);
}

Test(exchange, self_message_among_others) {
  struct team t;
  teamInit(&t, 2);
  teamRun(&t, mixedSelfBody, NULL);
  teamClose(&t);
}


/* ---- Messages stored before they are asked for ---- */

static atomic_int senderLeft;

/* Rank 0 sends tags 1, 2, 3 (one after another) and leaves; rank 1 first asks for tag 3 only,
 * so 1 and 2 are stored meanwhile, then, once rank 0 is gone, for 2 and 1. */
static long earlyBody(struct team *t, int rank, void *arg, char *error) {
  (void)arg;
  weftResult_t res;
  if (rank == 0) {
    struct weftBootMsg out[3];
    for (int k = 0; k < 3; k++) fillMsg(&out[k], 1, (uint32_t)(k + 1), 0, 1, 0);
    res = weftBootstrapExchange(t->b[0], out, 3, NULL, 0, weftNowMs() + LONG_MS);
    closeOne(&t->b[0]);
    atomic_store(&senderLeft, 1);
    return res == weftSuccess ? 0 : fail(error, "send", res);
  }
  struct weftBootMsg in[2] = {{.peer = 0, .tag = 3}};
  res = weftBootstrapExchange(t->b[1], NULL, 0, in, 1, weftNowMs() + LONG_MS);
  if (res != weftSuccess) return fail(error, "first call", res);
  long wrong = wrongBytes(&in[0], 1, 0);
  while (!atomic_load(&senderLeft)) sleepMs(5);
  in[0] = (struct weftBootMsg){.peer = 0, .tag = 2};
  in[1] = (struct weftBootMsg){.peer = 0, .tag = 1};
  int64_t start = weftNowMs();
  res = weftBootstrapExchange(t->b[1], NULL, 0, in, 2, weftNowMs() + LONG_MS);
  if (res != weftSuccess) return fail(error, "second call, the sender gone", res);
  if (weftNowMs() - start > 1000) return snprintf(error, 1024, "the stashed messages waited"), 1;
  return wrong + wrongBytes(&in[0], 1, 0) + wrongBytes(&in[1], 1, 0);
}

Test(stash, delivered_by_a_later_call_after_the_sender_left) {
  int fdsBefore = countOpenFds();
  struct team t;
  teamInit(&t, 2);
  teamRun(&t, earlyBody, NULL);
  cr_expect_eq(t.b[1]->serve.nstash, 0, "all stashed messages were delivered");
  teamClose(&t);
  cr_expect_eq(fdsSettled(fdsBefore, 3000), fdsBefore, "descriptors leaked");
}

/* Rank 0 sends 65 messages rank 1 does not ask for, then the one it asks for: the first 64
 * are stored, the 65th is refused (rank 0 fails naming rank 1), and rank 1 times out; the 64
 * stay for a later call. */
static long boundBody(struct team *t, int rank, void *arg, char *error) {
  (void)arg;
  enum { UNASKED = WEFT_BOOT_STASH_PER_SENDER + 1 };
  if (rank == 0) {
    struct weftBootMsg *out = calloc(UNASKED + 1, sizeof *out);
    for (int k = 0; k < UNASKED; k++) fillMsg(&out[k], 1, (uint32_t)k, 0, 1, 0);
    fillMsg(&out[UNASKED], 1, 999, 0, 1, 0);
    weftResult_t res = weftBootstrapExchange(t->b[0], out, UNASKED + 1, NULL, 0, weftNowMs() + LONG_MS);
    free(out);
    if (res != weftRemoteError) return fail(error, "65th message not refused", res);
    if (strstr(weftThreadLastError(), "rank 1 (") == NULL ||
        strstr(weftThreadLastError(), "holds 64 messages of rank 0") == NULL)
      return fail(error, "refusal message", res);
    return 0;
  }
  struct weftBootMsg in = {.peer = 0, .tag = 999};
  weftResult_t res = weftBootstrapExchange(t->b[1], NULL, 0, &in, 1, weftNowMs() + 3000);
  if (res != weftTimeout) return fail(error, "the message after the refused one", res);
  if (strstr(weftThreadLastError(), "not yet heard from rank 0 (tag 999)") == NULL)
    return fail(error, "timeout message", res);
  struct weftBootMsg kept[WEFT_BOOT_STASH_PER_SENDER];
  for (int k = 0; k < WEFT_BOOT_STASH_PER_SENDER; k++)
    kept[k] = (struct weftBootMsg){.peer = 0, .tag = (uint32_t)(WEFT_BOOT_STASH_PER_SENDER - 1 - k)};
  res = weftBootstrapExchange(t->b[1], NULL, 0, kept, WEFT_BOOT_STASH_PER_SENDER, weftNowMs() + 1000);
  if (res != weftSuccess) return fail(error, "the stored ones", res);
  long wrong = 0;
  for (int k = 0; k < WEFT_BOOT_STASH_PER_SENDER; k++) wrong += wrongBytes(&kept[k], 1, 0) != 0;
  return wrong;
}

Test(stash, bounded_per_sender) {
  struct team t;
  teamInit(&t, 2);
  teamRun(&t, boundBody, NULL);
  teamClose(&t);
}

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

/* Sockets in TIME_WAIT (state 06) in this network namespace. */
static int countTimeWait(void) {
  static const char *const files[] = {"/proc/net/tcp", "/proc/net/tcp6"};
  int n = 0;
  for (int i = 0; i < 2; i++) {
    FILE *f = fopen(files[i], "r");
    if (f == NULL) continue;
    char line[512], state[8];
    while (fgets(line, sizeof line, f) != NULL)
      n += sscanf(line, "%*s %*s %*s %7s", state) == 1 && strcmp(state, "06") == 0;
    fclose(f);
  }
  return n;
}

static int loopbackUp(char *why, size_t len) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  struct ifreq ifr = {0};
  snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
  int rc = fd >= 0 && ioctl(fd, SIOCGIFFLAGS, &ifr) == 0 ? 0 : -1;
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (rc == 0) rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
  if (rc != 0) snprintf(why, len, "lo up: %s", strerror(errno));
  if (fd >= 0) close(fd);
  return rc;
}

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
  if (loopbackUp(res->why, sizeof res->why) != 0) return;
  res->fdsBefore = countOpenFds();
  struct team t;
  if (teamStart(&t, 4, res->why) != 0) return;
  int rounds = 4;
  long failures = teamRunQuiet(&t, allToAllBody, &rounds, res->why);
  teamClose(&t);
  res->fdsAfter = fdsSettled(res->fdsBefore, 3000);
  sleepMs(100); /* resets in flight have arrived */
  res->timeWait = countTimeWait();
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
