/* weftBootstrapExchange: the message's wire format (MACs against answers computed
 * independently), bad arguments, pairwise and all-to-all exchanges in shuffled orders (threads
 * and processes), order per tag, messages to itself, messages stored before they are asked
 * for and the bound on them. Failures, splits and teardown: test_boot_exchange_faults.c. Each
 * Test runs in its own process. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "boot_exchange.h"
#include "forked.h"

TestSuite(wire, .timeout = 60);
TestSuite(exchange, .timeout = 120);
TestSuite(stash, .timeout = 60);

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
