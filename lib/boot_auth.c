/* Bootstrap: the messages that prove the secret, and the MACs behind them. Every bootstrap
 * connection opens the same way: the listening side sends a fresh random nonce, and the
 * connecting side answers with a fixed-size hello proving it holds the secret:
 *
 *   hello   = magic u32 | mac[16] | payload                                    (72 bytes)
 *   payload = kind u32 | rank u32 | nranks u32 | clientNonce[16] | listenAddress[24]
 *   mac     = MAC(secret, 'H' || serverNonce || payload)
 *
 * The server's nonce makes each hello single-use, so a recorded one cannot be replayed. The
 * listening side answers with MACs over both nonces, which proves the secret back:
 *
 *   root -> rank:  reply = magic u32 | type u32 | arg u32 | bodyLen u32 | mac[16] | body
 *                  mac   = MAC(secret, 'R' || clientNonce || serverNonce || seq u32 ||
 *                              the 16 header bytes before mac || MAC(secret, 'B' || body))
 *                  STATUS: arg = ranks registered so far, body = the lowest ranks not yet
 *                          registered (up to 16 u32, ascending; for timeout messages)
 *                  TABLE:  arg = nranks, body = every rank's listen address, by rank
 *                  ABORT:  the root timed out; arg and body as STATUS
 *                  LOST:   rank arg left before every rank had registered (died, aborted or
 *                          gave up); body = its listen address. The root stops after it.
 *                  seq counts the replies on the connection, so none can be replayed or dropped.
 *   ring listener -> rank-1:  ack = MAC(secret, 'A' || clientNonce || serverNonce)   (16 bytes)
 *
 * A point-to-point message (weftBootstrapExchange, boot_p2p.c) has a connection of its own:
 * after the nonce, the dialer sends a hello of kind 3 (its rank) and, at once, the message;
 * the listener checks both, stores the message and answers:
 *
 *   message = magic u32 | tag u32 | data[320] | mac[16]                           (344 bytes)
 *   mac     = MAC(secret, 'P' || clientNonce || serverNonce || tag u32 || data)
 *   answer  = MAC(secret, 'K' || clientNonce || serverNonce || tag u32)    stored   (16 bytes)
 *           | MAC(secret, 'N' || clientNonce || serverNonce || tag u32)    refused: the
 *             listener holds too many messages of this sender that it was not asked for
 *   A message with a wrong MAC gets no answer: the listener closes the connection. Once the
 *   answer is in, the dialer closes with a reset; the listener closes when it sees the reset.
 *
 * MAC(key, m) is keyed BLAKE2b with a 16-byte output (libsodium's crypto_generichash; RFC
 * 7693), keyed with the communicator's 16-byte secret. The first byte of every MAC'd message
 * names its kind, so no MAC of one kind passes as another (the TCP transport's start with
 * "wefttcp"). Tags are compared in constant time (sodium_memcmp).
 *
 * Why keyed BLAKE2b and not crypto_auth (HMAC-SHA-512-256): BLAKE2b is a MAC by design when
 * keyed (no HMAC construction needed), takes the 16-byte secret the unique id already carries
 * as its key (crypto_auth wants 32 bytes, which we would have to derive), hashes a message in
 * pieces without copying, and gives a 16-byte tag directly; it is also the faster of the two.
 *
 * Integers are big-endian. An address is family u8 (0 none, 4, 6) | 0 u8 | port u16 |
 * address[16] | IPv6 scope u32.
 */
#include "boot_internal.h"

#include <errno.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "bytes.h"
#include "check.h"
#include "log.h"

_Static_assert(SECRET_BYTES >= crypto_generichash_KEYBYTES_MIN &&
                   SECRET_BYTES <= crypto_generichash_KEYBYTES_MAX,
               "the secret is a valid BLAKE2b key");
_Static_assert(MAC_BYTES >= crypto_generichash_BYTES_MIN &&
                   MAC_BYTES <= crypto_generichash_BYTES_MAX,
               "the tag is a valid BLAKE2b output length");

/* ---- libsodium, and the MAC ---- */

static pthread_once_t sodiumOnce = PTHREAD_ONCE_INIT;
static int sodiumStatus; /* sodium_init's: 0 first time, 1 already done elsewhere, -1 failed */

static void sodiumStart(void) { sodiumStatus = sodium_init(); }

weftResult_t weftBootstrapCryptoInit(void) {
  pthread_once(&sodiumOnce, sodiumStart);
  if (sodiumStatus < 0)
    return weftSetError(weftSystemError, "bootstrap: libsodium failed to initialise (sodium_init)");
  return weftSuccess;
}

/* A MAC over several pieces: macStart, macAdd..., macEnd. */
static void macStart(crypto_generichash_state *st, const uint8_t *key, uint8_t kind) {
  pthread_once(&sodiumOnce, sodiumStart); /* the entry points report a failure */
  /* Cannot fail: the key and output lengths are valid (asserted above). */
  (void)crypto_generichash_init(st, key, SECRET_BYTES, MAC_BYTES);
  (void)crypto_generichash_update(st, &kind, 1);
}

static void macAdd(crypto_generichash_state *st, const void *data, size_t len) {
  (void)crypto_generichash_update(st, data, len);
}

static void macEnd(crypto_generichash_state *st, uint8_t tag[MAC_BYTES]) {
  (void)crypto_generichash_final(st, tag, MAC_BYTES);
  sodium_memzero(st, sizeof *st);
}

void weftBootstrapMac(const uint8_t key[16], const void *msg, size_t len,
                      uint8_t tag[WEFT_BOOT_MAC_BYTES]) {
  pthread_once(&sodiumOnce, sodiumStart);
  (void)crypto_generichash(tag, MAC_BYTES, msg, len, key, SECRET_BYTES);
}

int weftBootstrapMacEqual(const uint8_t *a, const uint8_t *b) {
  return sodium_memcmp(a, b, MAC_BYTES) == 0;
}

/* ---- MACs of the handshake (see the top of the file) ---- */

static void helloMac(const uint8_t *secret, const uint8_t *serverNonce, const uint8_t *payload,
                     uint8_t tag[MAC_BYTES]) {
  crypto_generichash_state st;
  macStart(&st, secret, 'H');
  macAdd(&st, serverNonce, NONCE_BYTES);
  macAdd(&st, payload, HELLO_PAYLOAD_BYTES);
  macEnd(&st, tag);
}

void weftBootBodyDigest(const uint8_t *secret, const uint8_t *body, size_t len,
                        uint8_t digest[MAC_BYTES]) {
  crypto_generichash_state st;
  macStart(&st, secret, 'B');
  macAdd(&st, body, len);
  macEnd(&st, digest);
}

static void replyMac(const uint8_t *secret, const uint8_t *clientNonce,
                     const uint8_t *serverNonce, uint32_t seq, const uint8_t *head,
                     const uint8_t *digest, uint8_t tag[MAC_BYTES]) {
  uint8_t seqBytes[4];
  weftPutBe32(seqBytes, seq);
  crypto_generichash_state st;
  macStart(&st, secret, 'R');
  macAdd(&st, clientNonce, NONCE_BYTES);
  macAdd(&st, serverNonce, NONCE_BYTES);
  macAdd(&st, seqBytes, 4);
  macAdd(&st, head, REPLY_MACED_HEADER_BYTES);
  macAdd(&st, digest, MAC_BYTES);
  macEnd(&st, tag);
}

static void ackMac(const uint8_t *secret, const uint8_t *clientNonce, const uint8_t *serverNonce,
                   uint8_t tag[MAC_BYTES]) {
  crypto_generichash_state st;
  macStart(&st, secret, 'A');
  macAdd(&st, clientNonce, NONCE_BYTES);
  macAdd(&st, serverNonce, NONCE_BYTES);
  macEnd(&st, tag);
}

void weftBootAckBuild(uint8_t ack[ACK_BYTES], const uint8_t *secret, const uint8_t *clientNonce,
                      const uint8_t *serverNonce) {
  ackMac(secret, clientNonce, serverNonce, ack);
}

int weftBootstrapCheckAck(const uint8_t *secret, const uint8_t *clientNonce,
                          const uint8_t *serverNonce, const uint8_t *ack) {
  uint8_t want[MAC_BYTES];
  ackMac(secret, clientNonce, serverNonce, want);
  return weftBootstrapMacEqual(ack, want) ? 0 : -1;
}

/* ---- Point-to-point messages ---- */

static void msgMac(const uint8_t *secret, uint8_t kind, const uint8_t *clientNonce,
                   const uint8_t *serverNonce, uint32_t tag, const uint8_t *data,
                   uint8_t out[MAC_BYTES]) {
  uint8_t tagBytes[4];
  weftPutBe32(tagBytes, tag);
  crypto_generichash_state st;
  macStart(&st, secret, kind);
  macAdd(&st, clientNonce, NONCE_BYTES);
  macAdd(&st, serverNonce, NONCE_BYTES);
  macAdd(&st, tagBytes, 4);
  if (data != NULL) macAdd(&st, data, MSG_BYTES);
  macEnd(&st, out);
}

void weftBootMsgBuild(uint8_t wire[MSG_WIRE_BYTES], const uint8_t *secret,
                      const uint8_t *clientNonce, const uint8_t *serverNonce, uint32_t tag,
                      const uint8_t *data) {
  weftPutBe32(wire, MSG_MAGIC);
  weftPutBe32(wire + 4, tag);
  memcpy(wire + MSG_DATA_OFFSET, data, MSG_BYTES);
  msgMac(secret, 'P', clientNonce, serverNonce, tag, data, wire + MSG_MAC_OFFSET);
}

const char *weftBootstrapParseMsg(const uint8_t *secret, const uint8_t *clientNonce,
                                  const uint8_t *serverNonce, const uint8_t *wire, uint32_t *tag,
                                  uint8_t *data) {
  uint8_t want[MAC_BYTES];
  if (weftGetBe32(wire) != MSG_MAGIC) return "not a weft message (wrong magic)";
  msgMac(secret, 'P', clientNonce, serverNonce, weftGetBe32(wire + 4), wire + MSG_DATA_OFFSET,
         want);
  if (!weftBootstrapMacEqual(wire + MSG_MAC_OFFSET, want))
    return "wrong MAC on the message: changed, replayed from another connection, or another "
           "secret";
  *tag = weftGetBe32(wire + 4);
  memcpy(data, wire + MSG_DATA_OFFSET, MSG_BYTES);
  return NULL;
}

void weftBootMsgReplyBuild(uint8_t reply[ACK_BYTES], const uint8_t *secret,
                           const uint8_t *clientNonce, const uint8_t *serverNonce, uint32_t tag,
                           int accepted) {
  msgMac(secret, accepted ? 'K' : 'N', clientNonce, serverNonce, tag, NULL, reply);
}

int weftBootstrapCheckMsgReply(const uint8_t *secret, const uint8_t *clientNonce,
                               const uint8_t *serverNonce, uint32_t tag, const uint8_t *reply) {
  uint8_t want[MAC_BYTES];
  for (int accepted = 1; accepted >= 0; accepted--) {
    weftBootMsgReplyBuild(want, secret, clientNonce, serverNonce, tag, accepted);
    if (weftBootstrapMacEqual(reply, want)) return accepted;
  }
  return -1;
}

/* ---- Nonces and derived secrets ---- */

/* The kernel's random bytes (getrandom), as before libsodium: a failure is an error with its
 * errno for the caller, where randombytes_buf would abort the process. */
weftResult_t weftBootRandom(void *buf, size_t len) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = getrandom((char *)buf + done, len - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return weftSetSysError(errno, "bootstrap: getrandom(%zu bytes)", len);
    done += (size_t)n;
  }
  return weftSuccess;
}

/* 128 bits from a text (WEFT_COMM_SECRET): BLAKE2b of the text keyed with the fixed
 * "weft-comm-secret", so this secret is no MAC of anything. As strong as the text: a short
 * one can be guessed offline from one recorded hello (a password hash would slow that, at
 * the cost of every rank's init). */
void weftBootDeriveSecret(const char *text, uint8_t *secret) {
  static const uint8_t key[SECRET_BYTES] = {'w', 'e', 'f', 't', '-', 'c', 'o', 'm',
                                            'm', '-', 's', 'e', 'c', 'r', 'e', 't'};
  pthread_once(&sodiumOnce, sodiumStart);
  (void)crypto_generichash(secret, SECRET_BYTES, (const uint8_t *)text, strlen(text), key,
                           SECRET_BYTES);
}

/* The parent's secret bound to the epoch and the member list: members that disagree on either
 * refuse each other's ring hellos, so a disagreement fails instead of forming a wrong ring.
 * MAC(parent, 'S' || epoch u64 || members u32...); no message on the wire starts with 'S'. */
void weftBootSplitSecret(const uint8_t *parent, uint64_t epoch, const int *members, int n,
                         uint8_t *out) {
  crypto_generichash_state st;
  macStart(&st, parent, 'S');
  uint8_t word[8];
  weftPutBe64(word, epoch);
  macAdd(&st, word, 8);
  for (int i = 0; i < n; i++) {
    weftPutBe32(word, (uint32_t)members[i]);
    macAdd(&st, word, 4);
  }
  macEnd(&st, out);
}

/* ---- Hellos ---- */

/* Checks the magic and MAC of a complete hello and decodes it; NULL, or why it is refused. */
const char *weftBootstrapParseHello(const uint8_t *secret, const uint8_t *serverNonce,
                                    const uint8_t *hello,
                                    struct weftBootstrapHello *h) {
  const uint8_t *payload = hello + HELLO_PAYLOAD_OFFSET;
  uint8_t want[MAC_BYTES];
  memset(h, 0, sizeof *h);
  if (weftGetBe32(hello) != HELLO_MAGIC) return "not a weft hello (wrong magic)";
  helloMac(secret, serverNonce, payload, want);
  if (!weftBootstrapMacEqual(hello + HELLO_MAC_OFFSET, want))
    return "wrong MAC: it does not hold this communicator's secret";
  h->kind = weftGetBe32(payload);
  h->rank = weftGetBe32(payload + 4);
  h->nranks = weftGetBe32(payload + 8);
  memcpy(h->clientNonce, payload + 12, NONCE_BYTES);
  memcpy(h->addr, payload + 12 + NONCE_BYTES, ADDR_BYTES);
  return NULL;
}

int weftBootstrapCheckHello(const struct weftBootstrapHello *h, uint32_t kind, int nranks,
                            int rank, char *why, size_t len) {
  if (h->kind != kind)
    snprintf(why, len, "hello of kind %u, expected %s", h->kind,
             kind == HELLO_REGISTER ? "a registration"
             : kind == HELLO_RING   ? "a ring hello"
                                    : "a message's hello");
  else if (h->nranks < 1 || h->nranks > MAX_RANKS)
    snprintf(why, len, "nranks %u out of range 1..%d", h->nranks, MAX_RANKS);
  else if (nranks != 0 && h->nranks != (uint32_t)nranks)
    snprintf(why, len, "nranks %u, but the communicator has %d ranks", h->nranks, nranks);
  else if (h->rank >= h->nranks)
    snprintf(why, len, "rank %u out of range 0..%u", h->rank, h->nranks - 1);
  else if (rank >= 0 && h->rank != (uint32_t)rank)
    snprintf(why, len, "hello from rank %u; expected rank %d", h->rank, rank);
  else
    return 0;
  return 1;
}

void weftBootHelloBuild(uint8_t out[HELLO_BYTES], const uint8_t *secret, const uint8_t *serverNonce,
                        uint32_t kind, int rank, int nranks, const uint8_t *clientNonce,
                        const uint8_t *addr) {
  uint8_t *payload = out + HELLO_PAYLOAD_OFFSET;
  weftPutBe32(out, HELLO_MAGIC);
  weftPutBe32(payload, kind);
  weftPutBe32(payload + 4, (uint32_t)rank);
  weftPutBe32(payload + 8, (uint32_t)nranks);
  memcpy(payload + 12, clientNonce, NONCE_BYTES);
  memcpy(payload + 12 + NONCE_BYTES, addr, ADDR_BYTES);
  helloMac(secret, serverNonce, payload, out + HELLO_MAC_OFFSET);
}

/* ---- Replies of the root ---- */

void weftBootReplyBuild(uint8_t head[REPLY_HEADER_BYTES], const uint8_t *secret,
                        const uint8_t *clientNonce, const uint8_t *serverNonce, uint32_t seq,
                        uint32_t type, uint32_t arg, size_t bodyLen, const uint8_t *digest) {
  weftPutBe32(head, REPLY_MAGIC);
  weftPutBe32(head + 4, type);
  weftPutBe32(head + 8, arg);
  weftPutBe32(head + 12, (uint32_t)bodyLen);
  replyMac(secret, clientNonce, serverNonce, seq, head, digest, head + REPLY_MAC_OFFSET);
}

int weftBootstrapParseReplyHeader(const uint8_t *head, int nranks,
                                  uint32_t *type, uint32_t *arg, size_t *bodyLen) {
  *type = weftGetBe32(head + 4);
  *arg = weftGetBe32(head + 8);
  *bodyLen = weftGetBe32(head + 12);
  if (weftGetBe32(head) != REPLY_MAGIC || *type < REPLY_STATUS || *type > REPLY_LOST) return -1;
  if (*type == REPLY_STATUS || *type == REPLY_ABORT) {
    /* a list of missing ranks: whole u32s, at most MISSING_LISTED of them and of nranks */
    if (*bodyLen % 4 != 0 || *bodyLen > 4 * MISSING_LISTED || *bodyLen / 4 > (size_t)nranks)
      return -1;
  } else if (*bodyLen != (*type == REPLY_TABLE ? (size_t)nranks * ADDR_BYTES : ADDR_BYTES)) {
    return -1;
  }
  /* arg counts ranks: the table's is nranks, a progress report's at most nranks; a lost
   * rank is one of them. */
  if (*type == REPLY_TABLE) return *arg != (uint32_t)nranks ? -1 : 0;
  if (*type == REPLY_LOST) return *arg >= (uint32_t)nranks ? -1 : 0;
  return *arg > (uint32_t)nranks ? -1 : 0;
}

int weftBootstrapCheckReplyMac(const uint8_t *secret, const uint8_t *clientNonce,
                               const uint8_t *serverNonce, uint32_t seq,
                               const uint8_t *head, const uint8_t *body,
                               size_t bodyLen) {
  uint8_t digest[MAC_BYTES], want[MAC_BYTES];
  weftBootBodyDigest(secret, body, bodyLen, digest);
  replyMac(secret, clientNonce, serverNonce, seq, head, digest, want);
  return weftBootstrapMacEqual(head + REPLY_MAC_OFFSET, want) ? 0 : -1;
}
