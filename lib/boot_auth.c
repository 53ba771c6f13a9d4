/* Bootstrap: the messages that prove the secret, and the MACs behind them. Every bootstrap
 * connection opens the same way: the listening side sends a fresh random nonce, and the
 * connecting side answers with a fixed-size hello proving it holds the secret:
 *
 *   hello   = magic u32 | mac u64 | payload                                    (64 bytes)
 *   payload = kind u32 | rank u32 | nranks u32 | clientNonce[16] | listenAddress[24]
 *   mac     = SipHash(secret, serverNonce || payload)
 *
 * The server's nonce makes each hello single-use, so a recorded one cannot be replayed. The
 * listening side answers with MACs over both nonces, which proves the secret back:
 *
 *   root -> rank:  reply = magic u32 | type u32 | arg u32 | bodyLen u32 | mac u64 | body
 *                  mac   = SipHash(secret, 'R' || clientNonce || serverNonce || seq u32 ||
 *                                  the 16 header bytes before mac || SipHash(secret, 'B' || body))
 *                  STATUS: arg = ranks registered so far, body = the lowest ranks not yet
 *                          registered (up to 16 u32, ascending; for timeout messages)
 *                  TABLE:  arg = nranks, body = every rank's listen address, by rank
 *                  ABORT:  the root timed out; arg and body as STATUS
 *                  LOST:   rank arg left before every rank had registered (died, aborted or
 *                          gave up); body = its listen address. The root stops after it.
 *                  seq counts the replies on the connection, so none can be replayed or dropped.
 *   ring listener -> rank-1:  ack = SipHash(secret, 'A' || clientNonce || serverNonce)
 *
 * Integers are big-endian. An address is family u8 (0 none, 4, 6) | 0 u8 | port u16 |
 * address[16] | IPv6 scope u32.
 */
#include "boot_internal.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "bytes.h"
#include "check.h"
#include "log.h"

/* ---- Bytes ---- */

static uint64_t getLe64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}
static void putLe64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* ---- SipHash-2-4, incremental so a MAC can cover several pieces without copying ---- */

struct sipHash {
  uint64_t v0, v1, v2, v3;
  uint64_t tail;  /* bytes not yet compressed, little-endian */
  size_t tailLen; /* 0..7 */
  uint64_t total;
};

static uint64_t rotl64(uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

/* clang-format off */
static void sipRound(struct sipHash *s) {
  s->v0 += s->v1; s->v1 = rotl64(s->v1, 13); s->v1 ^= s->v0; s->v0 = rotl64(s->v0, 32);
  s->v2 += s->v3; s->v3 = rotl64(s->v3, 16); s->v3 ^= s->v2;
  s->v0 += s->v3; s->v3 = rotl64(s->v3, 21); s->v3 ^= s->v0;
  s->v2 += s->v1; s->v1 = rotl64(s->v1, 17); s->v1 ^= s->v2; s->v2 = rotl64(s->v2, 32);
}
/* clang-format on */

static void sipCompress(struct sipHash *s, uint64_t m) {
  s->v3 ^= m;
  sipRound(s);
  sipRound(s);
  s->v0 ^= m;
}

static void sipInit(struct sipHash *s, const uint8_t key[16]) {
  uint64_t k0 = getLe64(key), k1 = getLe64(key + 8);
  s->v0 = k0 ^ 0x736f6d6570736575ULL;
  s->v1 = k1 ^ 0x646f72616e646f6dULL;
  s->v2 = k0 ^ 0x6c7967656e657261ULL;
  s->v3 = k1 ^ 0x7465646279746573ULL;
  s->tail = 0;
  s->tailLen = 0;
  s->total = 0;
}

static void sipUpdate(struct sipHash *s, const void *data, size_t len) {
  const uint8_t *p = data;
  s->total += len;
  while (len > 0 && s->tailLen > 0) {
    s->tail |= (uint64_t)*p++ << (8 * s->tailLen);
    len--;
    if (++s->tailLen == 8) {
      sipCompress(s, s->tail);
      s->tail = 0;
      s->tailLen = 0;
    }
  }
  for (; len >= 8; p += 8, len -= 8) sipCompress(s, getLe64(p));
  for (; len > 0; len--) s->tail |= (uint64_t)*p++ << (8 * s->tailLen++);
}

static void sipUpdateByte(struct sipHash *s, uint8_t byte) { sipUpdate(s, &byte, 1); }

static uint64_t sipFinal(struct sipHash *s) {
  sipCompress(s, s->total << 56 | s->tail);
  s->v2 ^= 0xff;
  for (int i = 0; i < 4; i++) sipRound(s);
  return s->v0 ^ s->v1 ^ s->v2 ^ s->v3;
}

uint64_t weftSipHash(const uint8_t key[16], const void *msg, size_t len) {
  struct sipHash s;
  sipInit(&s, key);
  sipUpdate(&s, msg, len);
  return sipFinal(&s);
}

/* ---- MACs of the handshake (see the top of the file) ---- */

static uint64_t helloMac(const uint8_t *secret, const uint8_t *serverNonce,
                         const uint8_t *payload) {
  struct sipHash s;
  sipInit(&s, secret);
  sipUpdate(&s, serverNonce, NONCE_BYTES);
  sipUpdate(&s, payload, HELLO_PAYLOAD_BYTES);
  return sipFinal(&s);
}

uint64_t weftBootBodyDigest(const uint8_t *secret, const uint8_t *body, size_t len) {
  struct sipHash s;
  sipInit(&s, secret);
  sipUpdateByte(&s, 'B');
  sipUpdate(&s, body, len);
  return sipFinal(&s);
}

uint64_t weftBootReplyMac(const uint8_t *secret, const uint8_t *clientNonce,
                          const uint8_t *serverNonce, uint32_t seq, const uint8_t *header,
                          uint64_t digest) {
  uint8_t numbers[12];
  weftPutBe32(numbers, seq);
  weftPutBe64(numbers + 4, digest);
  struct sipHash s;
  sipInit(&s, secret);
  sipUpdateByte(&s, 'R');
  sipUpdate(&s, clientNonce, NONCE_BYTES);
  sipUpdate(&s, serverNonce, NONCE_BYTES);
  sipUpdate(&s, numbers, 4);
  sipUpdate(&s, header, REPLY_MACED_HEADER_BYTES);
  sipUpdate(&s, numbers + 4, 8);
  return sipFinal(&s);
}

uint64_t weftBootAckMac(const uint8_t *secret, const uint8_t *clientNonce,
                        const uint8_t *serverNonce) {
  struct sipHash s;
  sipInit(&s, secret);
  sipUpdateByte(&s, 'A');
  sipUpdate(&s, clientNonce, NONCE_BYTES);
  sipUpdate(&s, serverNonce, NONCE_BYTES);
  return sipFinal(&s);
}

/* ---- Nonces and derived secrets ---- */

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

/* 128 bits from a text (WEFT_COMM_SECRET): two SipHashes of the text under fixed, distinct
 * keys. */
void weftBootDeriveSecret(const char *text, uint8_t *secret) {
  static const uint8_t keyLow[16] = {0x77, 0x65, 0x66, 0x74, 0x2d, 0x73, 0x65, 0x63,
                                     0x72, 0x65, 0x74, 0x2d, 0x6c, 0x6f, 0x77, 0x00};
  static const uint8_t keyHigh[16] = {0x77, 0x65, 0x66, 0x74, 0x2d, 0x73, 0x65, 0x63,
                                      0x72, 0x65, 0x74, 0x2d, 0x68, 0x69, 0x67, 0x68};
  size_t len = strlen(text);
  putLe64(secret, weftSipHash(keyLow, text, len));
  putLe64(secret + 8, weftSipHash(keyHigh, text, len));
}

/* The parent's secret bound to the epoch and the member list: members that disagree on either
 * refuse each other's ring hellos, so a disagreement fails instead of forming a wrong ring. */
void weftBootSplitSecret(const uint8_t *parent, uint64_t epoch, const int *members, int n,
                         uint8_t *out) {
  struct sipHash lo, hi;
  sipInit(&lo, parent);
  sipInit(&hi, parent);
  sipUpdateByte(&lo, 'l');
  sipUpdateByte(&hi, 'h');
  uint8_t word[8];
  weftPutBe64(word, epoch);
  sipUpdate(&lo, word, 8);
  sipUpdate(&hi, word, 8);
  for (int i = 0; i < n; i++) {
    weftPutBe32(word, (uint32_t)members[i]);
    sipUpdate(&lo, word, 4);
    sipUpdate(&hi, word, 4);
  }
  putLe64(out, sipFinal(&lo));
  putLe64(out + 8, sipFinal(&hi));
}

/* ---- Hellos ---- */

/* Checks the magic and MAC of a complete hello and decodes it; NULL, or why it is refused. */
const char *weftBootstrapParseHello(const uint8_t *secret, const uint8_t *serverNonce,
                                    const uint8_t *hello,
                                    struct weftBootstrapHello *h) {
  const uint8_t *payload = hello + 12;
  memset(h, 0, sizeof *h);
  if (weftGetBe32(hello) != HELLO_MAGIC) return "not a weft hello (wrong magic)";
  if (weftGetBe64(hello + 4) != helloMac(secret, serverNonce, payload))
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
             kind == HELLO_REGISTER ? "a registration" : "a ring hello");
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
  uint8_t *payload = out + 12;
  weftPutBe32(out, HELLO_MAGIC);
  weftPutBe32(payload, kind);
  weftPutBe32(payload + 4, (uint32_t)rank);
  weftPutBe32(payload + 8, (uint32_t)nranks);
  memcpy(payload + 12, clientNonce, NONCE_BYTES);
  memcpy(payload + 12 + NONCE_BYTES, addr, ADDR_BYTES);
  weftPutBe64(out + 4, helloMac(secret, serverNonce, payload));
}

/* ---- Replies of the root ---- */

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
  uint64_t digest = weftBootBodyDigest(secret, body, bodyLen);
  uint64_t mac = weftBootReplyMac(secret, clientNonce, serverNonce, seq, head, digest);
  return weftGetBe64(head + 16) == mac ? 0 : -1;
}
