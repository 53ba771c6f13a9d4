/* Bootstrap: ranks meet at a root, learn each other's listen addresses, then form a ring of
 * TCP connections used for the out-of-band allgather and barrier.
 *
 * Every connection opens the same way: the listening side sends a fresh random nonce, and
 * the connecting side answers with a fixed-size hello proving it holds the secret:
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
 * address[16] | IPv6 scope u32. The unique id is magic u32 | version u16 | 0 u16 |
 * root address[24] | secret[16] | zeros.
 */
#include "bootstrap.h"

#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "bytes.h"
#include "check.h"
#include "log.h"
#include "param.h"
#include "socket.h"

enum {
  NONCE_BYTES = 16,
  SECRET_BYTES = 16,
  ADDR_BYTES = 24,
  HELLO_PAYLOAD_BYTES = 12 + NONCE_BYTES + ADDR_BYTES,
  HELLO_BYTES = 12 + HELLO_PAYLOAD_BYTES,
  REPLY_HEADER_BYTES = 24,
  REPLY_MACED_HEADER_BYTES = 16,
  ACK_BYTES = 8,
  ID_VERSION = 1,
};
_Static_assert(HELLO_BYTES == WEFT_BOOT_HELLO_BYTES && ADDR_BYTES == WEFT_BOOT_ADDR_BYTES &&
               ADDR_BYTES == WEFT_SOCK_WIRE_BYTES &&
                   REPLY_HEADER_BYTES == WEFT_BOOT_REPLY_HEADER_BYTES,
               "bootstrap.h sizes");
#define ID_MAGIC 0x57465449u    /* "WFTI" */
#define HELLO_MAGIC 0x57465448u /* "WFTH" */
#define REPLY_MAGIC 0x57465452u /* "WFTR" */
enum helloKind { HELLO_REGISTER = WEFT_BOOT_HELLO_REGISTER, HELLO_RING = WEFT_BOOT_HELLO_RING };
enum replyType { REPLY_STATUS = 1, REPLY_TABLE = 2, REPLY_ABORT = 3, REPLY_LOST = 4 };

/* How long an accepted connection may take to prove the secret before it is dropped (a
 * variable only so that tests can tell a listener that waits on a silent stranger from one
 * that does not without racing the 2 s: bootstrap.h). */
int weftBootstrapHandshakeMs = 2000;
/* Unauthenticated connections one listener holds at once; beyond that the oldest goes, so a
 * flood of strangers cannot exhaust the descriptors the real ranks need. */
#define MAX_PENDING 256
/* Accepts per wakeup, so a flood of connections cannot starve the handshakes in progress. */
#define MAX_ACCEPTS_PER_WAKE 64
/* Least time between two progress reports from the root to one rank: they only feed timeout
 * messages, and one per registration would be quadratic in the rank count. */
#define STATUS_INTERVAL_MS 100
/* Ranks not yet registered that a STATUS or ABORT names (the lowest ones): enough to find
 * the culprits, and a body that stays small however many ranks there are. */
#define MISSING_LISTED 16
#define MAX_RANKS (1 << 20)
#define CONNECT_BACKOFF_MIN_MS 10
#define CONNECT_BACKOFF_MAX_MS 500
/* What a registered rank sends the root when it leaves at its own timeout. */
#define GIVE_UP_BYTE 0x54 /* 'T' */
/* While a rank waits for rank-1 to connect, how often it checks that rank-1 is alive. */
#define RING_PROBE_INTERVAL_MS 250
#define RING_PROBE_TIMEOUT_MS 200
/* A killed process's descriptors do not all close at once: its peers can see one connection
 * end while its listener still accepts. Probes wait this long after a failure. */
#define GONE_SETTLE_MS 30

struct weftBootstrap {
  int rank, nranks;
  int nextFd;                /* connection to rank+1: this rank sends on it */
  int prevFd;                /* connection from rank-1: this rank receives on it */
  union weftSockAddr *peers; /* each rank's listen address */
  uint8_t secret[SECRET_BYTES]; /* kept for transports that authenticate their own sockets */
  /* Open for the communicator's life: weftBootstrapSplit forms the rings of shrunk
   * communicators through it, and its refusing connections is how survivors tell a dead
   * rank from a live one (weftBootstrapProbe). */
  int listenFd;
  union weftSockAddr listenAddr;
  /* Notes to and from each ring neighbour once init is over (weftBootstrapNoteSend/Recv). */
  struct weftBootstrapNotes {
    uint8_t in[WEFT_BOOT_NOTE_BYTES], out[WEFT_BOOT_NOTE_BYTES];
    size_t inLen, outLen, outSent;
  } notes[2];
};

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

static uint64_t bodyDigest(const uint8_t *secret, const uint8_t *body, size_t len) {
  struct sipHash s;
  sipInit(&s, secret);
  sipUpdateByte(&s, 'B');
  sipUpdate(&s, body, len);
  return sipFinal(&s);
}

static uint64_t replyMac(const uint8_t *secret, const uint8_t *clientNonce,
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

static uint64_t ackMac(const uint8_t *secret, const uint8_t *clientNonce,
                       const uint8_t *serverNonce) {
  struct sipHash s;
  sipInit(&s, secret);
  sipUpdateByte(&s, 'A');
  sipUpdate(&s, clientNonce, NONCE_BYTES);
  sipUpdate(&s, serverNonce, NONCE_BYTES);
  return sipFinal(&s);
}

/* ---- Randomness, addresses, the unique id ---- */

static weftResult_t fillRandom(void *buf, size_t len) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = getrandom((char *)buf + done, len - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return weftSetSysError(errno, "bootstrap: getrandom(%zu bytes)", len);
    done += (size_t)n;
  }
  return weftSuccess;
}

/* 1: an address, 0: none (family 0), -1: malformed. */
int weftBootstrapParseAddr(const uint8_t *in, union weftSockAddr *addr) {
  return weftSockAddrDecode(in, addr);
}

static void encodeId(weftUniqueId *id, const union weftSockAddr *root, const uint8_t *secret) {
  uint8_t *p = (uint8_t *)id->internal;
  memset(p, 0, WEFT_UNIQUE_ID_BYTES);
  weftPutBe32(p, ID_MAGIC);
  p[4] = 0;
  p[5] = ID_VERSION;
  weftSockAddrEncode(p + 8, root);
  memcpy(p + 32, secret, SECRET_BYTES);
}

weftResult_t weftBootstrapParseId(const weftUniqueId *id, union weftSockAddr *root,
                                  uint8_t *secret) {
  const uint8_t *p = (const uint8_t *)id->internal;
  if (weftGetBe32(p) != ID_MAGIC || p[4] != 0 || p[5] != ID_VERSION)
    return weftSetError(weftInvalidArgument,
                        "bootstrap: the unique id is not one from weftGetUniqueId (bad magic or "
                        "version %u, expected %u)",
                        (unsigned)(p[4] << 8 | p[5]), (unsigned)ID_VERSION);
  if (weftBootstrapParseAddr(p + 8, root) != 1)
    return weftSetError(weftInvalidArgument,
                        "bootstrap: the unique id holds no valid root address");
  memcpy(secret, p + 32, SECRET_BYTES);
  return weftSuccess;
}

/* ---- Where the ranks meet: the unique id, or WEFT_COMM_ID + WEFT_COMM_SECRET ---- */

struct rendezvous {
  union weftSockAddr root;
  char rootName[WEFT_SOCK_NAME_MAX];
  uint8_t secret[SECRET_BYTES];
  int fromCommId; /* WEFT_COMM_ID mode: rank 0 starts the root */
};

/* 128 bits from WEFT_COMM_SECRET: two SipHashes of the text under fixed, distinct keys. */
static void commSecret(const char *commId, uint8_t *secret) {
  const char *text = weftParamCommSecret();
  if (*text == '\0') {
    WARN(
        "bootstrap: the WEFT_COMM_ID=%s rendezvous is not authenticated by a secret: anyone who "
        "can reach it can join; set WEFT_COMM_SECRET (the same on every rank)",
        commId);
    memset(secret, 0, SECRET_BYTES);
    return;
  }
  static const uint8_t keyLow[16] = {0x77, 0x65, 0x66, 0x74, 0x2d, 0x73, 0x65, 0x63,
                                     0x72, 0x65, 0x74, 0x2d, 0x6c, 0x6f, 0x77, 0x00};
  static const uint8_t keyHigh[16] = {0x77, 0x65, 0x66, 0x74, 0x2d, 0x73, 0x65, 0x63,
                                      0x72, 0x65, 0x74, 0x2d, 0x68, 0x69, 0x67, 0x68};
  size_t len = strlen(text);
  putLe64(secret, weftSipHash(keyLow, text, len));
  putLe64(secret + 8, weftSipHash(keyHigh, text, len));
}

static weftResult_t rendezvousFromCommId(const char *commId, struct rendezvous *rv) {
  WEFTCHECK(weftSockAddrParse("WEFT_COMM_ID", commId, weftSocketFamily(), &rv->root));
  commSecret(commId, rv->secret);
  rv->fromCommId = 1;
  weftSockAddrName(&rv->root, rv->rootName);
  return weftSuccess;
}

static weftResult_t resolveRendezvous(const weftUniqueId *id, struct rendezvous *rv) {
  memset(rv, 0, sizeof *rv);
  const char *commId = weftParamCommId();
  if (*commId != '\0') return rendezvousFromCommId(commId, rv);
  if (id == NULL)
    return weftSetError(weftInvalidArgument,
                        "bootstrap: no unique id given and WEFT_COMM_ID unset");
  WEFTCHECK(weftBootstrapParseId(id, &rv->root, rv->secret));
  weftSockAddrName(&rv->root, rv->rootName);
  return weftSuccess;
}

/* ---- poll() lists ---- */

struct pollList {
  struct pollfd *fds;
  size_t count, cap;
};

static int pollAdd(struct pollList *list, int fd, short events) {
  if (list->count == list->cap) {
    size_t cap = list->cap ? 2 * list->cap : 16;
    struct pollfd *fds = realloc(list->fds, cap * sizeof *fds);
    if (fds == NULL) return -1;
    list->fds = fds;
    list->cap = cap;
  }
  list->fds[list->count++] = (struct pollfd){.fd = fd, .events = events};
  return 0;
}

/* ---- Connections accepted by a listener that have not yet proven the secret ---- */

struct pendingPeer {
  int fd;
  int64_t deadlineMs; /* dropped as silent after this */
  uint8_t nonce[NONCE_BYTES];
  uint8_t hello[HELLO_BYTES];
  size_t helloLen;
  char name[WEFT_SOCK_NAME_MAX];
};

struct pendingSet {
  struct pendingPeer *peers;
  size_t count, cap;
  char owner[WEFT_SOCK_NAME_MAX + 32]; /* the listener, for log lines */
};

static void pendingDrop(struct pendingSet *set, size_t i, int level, const char *why) {
  WEFT_LOG(level, WEFT_BOOT, "bootstrap: %s dropped the connection from %s: %s", set->owner,
           set->peers[i].name, why);
  close(set->peers[i].fd);
  set->peers[i] = set->peers[--set->count];
}

/* Removes peer i from the set without closing its connection, which the caller now owns. */
static int pendingTake(struct pendingSet *set, size_t i) {
  int fd = set->peers[i].fd;
  set->peers[i] = set->peers[--set->count];
  return fd;
}

static void pendingClear(struct pendingSet *set, const char *why) {
  while (set->count > 0) pendingDrop(set, set->count - 1, WEFT_LOG_INFO, why);
}

static void pendingFree(struct pendingSet *set) {
  pendingClear(set, "the listener is closing");
  free(set->peers);
  set->peers = NULL;
  set->cap = 0;
}

static size_t pendingOldest(const struct pendingSet *set) {
  size_t oldest = 0;
  for (size_t i = 1; i < set->count; i++)
    if (set->peers[i].deadlineMs < set->peers[oldest].deadlineMs) oldest = i;
  return oldest;
}

static void pendingExpire(struct pendingSet *set, int64_t now) {
  char why[64];
  snprintf(why, sizeof why, "no complete hello within %d ms", weftBootstrapHandshakeMs);
  for (size_t i = set->count; i-- > 0;)
    if (now >= set->peers[i].deadlineMs) pendingDrop(set, i, WEFT_LOG_INFO, why);
}

static int64_t pendingEarliest(const struct pendingSet *set, int64_t deadlineMs) {
  for (size_t i = 0; i < set->count; i++)
    if (set->peers[i].deadlineMs < deadlineMs) deadlineMs = set->peers[i].deadlineMs;
  return deadlineMs;
}

/* Greets a fresh connection with its nonce and starts its handshake clock. */
static void pendingAdd(struct pendingSet *set, int fd, const union weftSockAddr *from) {
  struct pendingPeer peer = {.fd = fd, .deadlineMs = weftNowMs() + weftBootstrapHandshakeMs};
  weftSockAddrName(from, peer.name);
  size_t sent = 0;
  /* A fresh socket's send buffer always has room for the nonce; failing here means the
   * peer is already gone, and waiting for it to drain would only help a stalling stranger. */
  if (fillRandom(peer.nonce, NONCE_BYTES) != weftSuccess ||
      weftSocketSendSome(fd, peer.nonce, NONCE_BYTES, &sent) != 0 || sent != NONCE_BYTES) {
    INFO(WEFT_BOOT, "bootstrap: %s could not greet %s; closed", set->owner, peer.name);
    close(fd);
    return;
  }
  if (set->count == MAX_PENDING)
    pendingDrop(set, pendingOldest(set), WEFT_LOG_WARN,
                "too many connections that have not proven the secret; dropping the oldest");
  if (set->count == set->cap) {
    size_t cap = set->cap ? 2 * set->cap : 8;
    struct pendingPeer *peers = realloc(set->peers, cap * sizeof *peers);
    if (peers == NULL) {
      WARN("bootstrap: %s is out of memory; closed the connection from %s", set->owner, peer.name);
      close(fd);
      return;
    }
    set->peers = peers;
    set->cap = cap;
  }
  set->peers[set->count++] = peer;
}

static void pendingAcceptAll(struct pendingSet *set, int listenFd) {
  for (int n = 0; n < MAX_ACCEPTS_PER_WAKE; n++) {
    int fd;
    union weftSockAddr from;
    int rc = weftSocketAccept(listenFd, &fd, &from);
    if (rc == EAGAIN) return;
    if (rc == ECONNABORTED || rc == EPROTO) continue; /* the client left before the accept */
    if (rc != 0) {
      WARN("bootstrap: %s cannot accept: %s", set->owner, strerror(rc));
      /* Out of descriptors: make room at a stranger's expense, and never spin hot. */
      if (set->count > 0)
        pendingDrop(set, pendingOldest(set), WEFT_LOG_WARN, "freeing a descriptor");
      struct timespec pause = {0, 10 * 1000 * 1000};
      nanosleep(&pause, NULL);
      return;
    }
    pendingAdd(set, fd, &from);
  }
}

/* Reads what peer i sent: 1 once a whole hello is in, 0 while incomplete, -1 when dropped. */
static int pendingReceive(struct pendingSet *set, size_t i) {
  struct pendingPeer *peer = &set->peers[i];
  int rc = weftSocketRecvSome(peer->fd, peer->hello, HELLO_BYTES, &peer->helloLen);
  if (rc != 0) {
    char text[128];
    pendingDrop(set, i, WEFT_LOG_INFO,
                rc == WEFT_SOCK_CLOSED ? "closed before completing its hello"
                                       : weftSockStatusText(rc, text, sizeof text));
    return -1;
  }
  if (peer->helloLen >= 4 && weftGetBe32(peer->hello) != HELLO_MAGIC) {
    pendingDrop(set, i, WEFT_LOG_WARN, "sent bytes that are not a weft hello (wrong magic)");
    return -1;
  }
  return peer->helloLen == HELLO_BYTES;
}

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

static void helloBuild(uint8_t out[HELLO_BYTES], const uint8_t *secret, const uint8_t *serverNonce,
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

/* ---- The root: registers every rank, then sends each the table of listen addresses ---- */

struct rootClient {
  int fd;
  uint8_t serverNonce[NONCE_BYTES], clientNonce[NONCE_BYTES];
  uint32_t seq; /* replies queued so far */
  uint8_t head[REPLY_HEADER_BYTES];
  const uint8_t *body; /* the shared table, never copied per rank, or missing[] */
  uint8_t missing[4 * MISSING_LISTED]; /* this client's copy of a STATUS or ABORT body */
  size_t bodyLen;
  size_t sent; /* of head, then body */
  int reportedCount;
  int64_t lastStatusMs;
  int tableQueued;
  int lostQueued; /* told that a rank was lost */
  char name[WEFT_SOCK_NAME_MAX];
};

struct root {
  int listenFd;
  uint8_t secret[SECRET_BYTES];
  char name[WEFT_SOCK_NAME_MAX];
  int64_t startMs, deadlineMs;
  int nranks; /* 0 until the first authenticated hello sets it */
  int registered;
  int distributing;
  uint8_t *table; /* nranks addresses */
  uint64_t tableDigest;
  struct rootClient **byRank;
  struct pendingSet pending;
  struct pollList polls; /* [listener][registered ranks...][pending...] */
  int *pollRanks;        /* the rank of each registered-rank entry */
  size_t pollClients;
  int lost;                     /* a rank that left before the table, or -1 */
  int toldLost;                 /* ranks told so (their connections then closed) */
  uint8_t lostAddr[ADDR_BYTES]; /* the LOST replies' body */
  uint64_t lostDigest;
  /* The lowest unregistered ranks, kept as ranks come and go (each rank is scanned about
   * once, so no reply pays a scan of all ranks): every unregistered rank below missingScan,
   * ascending, and at most MISSING_LISTED of them. */
  int missingRanks[MISSING_LISTED];
  int nMissing, missingScan;
};

static int clientIdle(const struct rootClient *c) {
  return c->sent == REPLY_HEADER_BYTES + c->bodyLen;
}

static void clientQueue(struct root *r, struct rootClient *c, uint32_t type, uint32_t arg,
                        const uint8_t *body, size_t bodyLen, uint64_t digest) {
  weftPutBe32(c->head, REPLY_MAGIC);
  weftPutBe32(c->head + 4, type);
  weftPutBe32(c->head + 8, arg);
  weftPutBe32(c->head + 12, (uint32_t)bodyLen);
  weftPutBe64(c->head + 16,
          replyMac(r->secret, c->clientNonce, c->serverNonce, c->seq++, c->head, digest));
  c->body = body;
  c->bodyLen = bodyLen;
  c->sent = 0;
}

static int clientFlush(struct rootClient *c) {
  if (c->sent < REPLY_HEADER_BYTES) {
    int rc = weftSocketSendSome(c->fd, c->head, REPLY_HEADER_BYTES, &c->sent);
    if (rc != 0 || c->sent < REPLY_HEADER_BYTES) return rc;
  }
  size_t bodySent = c->sent - REPLY_HEADER_BYTES;
  int rc = weftSocketSendSome(c->fd, c->body, c->bodyLen, &bodySent);
  c->sent = REPLY_HEADER_BYTES + bodySent;
  return rc;
}

static void rootCloseClient(struct root *r, int rank, int level, const char *why) {
  struct rootClient *c = r->byRank[rank];
  WEFT_LOG(level, WEFT_BOOT, "bootstrap root at %s: closed rank %d's connection (%s): %s", r->name,
           rank, c->name, why);
  close(c->fd);
  free(c);
  r->byRank[rank] = NULL;
}

/* A registered rank left before the table went out: it died, was aborted or gave up, and
 * init cannot complete without it. Every other rank, registered or yet to come, learns it
 * (rootQueueReplies) instead of waiting for its timeout. */
static void rootReportLost(struct root *r, int lost) {
  if (r->lost >= 0) return; /* the first loss is the news */
  WARN("bootstrap root at %s: rank %d left before all %d ranks had registered; init cannot "
       "complete, telling the others", r->name, lost, r->nranks);
  r->lost = lost;
  memcpy(r->lostAddr, r->table + (size_t)lost * ADDR_BYTES, ADDR_BYTES);
  r->lostDigest = bodyDigest(r->secret, r->lostAddr, ADDR_BYTES);
}

static void rootFlush(struct root *r, int rank) {
  struct rootClient *c = r->byRank[rank];
  int rc = clientFlush(c);
  char text[128];
  if (rc != 0)
    rootCloseClient(r, rank, r->distributing ? WEFT_LOG_WARN : WEFT_LOG_INFO,
                    weftSockStatusText(rc, text, sizeof text));
  else if (r->distributing && c->tableQueued && clientIdle(c))
    rootCloseClient(r, rank, WEFT_LOG_TRACE, "table delivered");
  else if (c->lostQueued && clientIdle(c)) {
    rootCloseClient(r, rank, WEFT_LOG_TRACE, "told of the lost rank");
    r->toldLost++;
  }
}

/* Lists unregistered ranks from missingScan on, up to MISSING_LISTED. */
static void missingExtend(struct root *r) {
  for (; r->nMissing < MISSING_LISTED && r->missingScan < r->nranks; r->missingScan++)
    if (r->byRank[r->missingScan] == NULL) r->missingRanks[r->nMissing++] = r->missingScan;
}

/* Rank registered: it leaves the list, which takes the next unregistered rank. */
static void missingRegistered(struct root *r, int rank) {
  for (int i = 0; i < r->nMissing; i++)
    if (r->missingRanks[i] == rank) {
      memmove(&r->missingRanks[i], &r->missingRanks[i + 1],
              sizeof(int) * (size_t)(r->nMissing - i - 1));
      r->nMissing--;
      missingExtend(r);
      return;
    }
}

/* Rank is unregistered again (it gave up): back into the list if below the scan. */
static void missingLeft(struct root *r, int rank) {
  if (rank >= r->missingScan) return;
  int i = r->nMissing;
  while (i > 0 && r->missingRanks[i - 1] > rank) i--;
  if (r->nMissing == MISSING_LISTED) { /* the largest goes; the scan resumes there */
    r->missingScan = r->missingRanks[MISSING_LISTED - 1];
    r->nMissing--;
    if (i > r->nMissing) return;
  }
  memmove(&r->missingRanks[i + 1], &r->missingRanks[i], sizeof(int) * (size_t)(r->nMissing - i));
  r->missingRanks[i] = rank;
  r->nMissing++;
}

/* Queues a STATUS or ABORT: the count and the lowest ranks still missing. */
static void rootQueueStatus(struct root *r, struct rootClient *c, uint32_t type) {
  for (int i = 0; i < r->nMissing; i++) weftPutBe32(c->missing + 4 * i, (uint32_t)r->missingRanks[i]);
  size_t bytes = 4 * (size_t)r->nMissing;
  clientQueue(r, c, type, (uint32_t)r->registered, c->missing, bytes,
              bodyDigest(r->secret, c->missing, bytes));
}

/* "1, 3, 7" from a STATUS body of n bytes. */
static void missingText(const uint8_t *body, size_t n, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = '\0';
  for (size_t i = 0; i + 4 <= n && o < len; i += 4)
    o += (size_t)snprintf(buf + o, len - o, "%s%u", i ? ", " : "", weftGetBe32(body + i));
}

/* Queues, on every idle connection, the table when it is ready, else a progress report. */
static void rootQueueReplies(struct root *r, int64_t now) {
  size_t tableBytes = (size_t)r->nranks * ADDR_BYTES;
  for (int rank = 0; rank < r->nranks; rank++) {
    struct rootClient *c = r->byRank[rank];
    if (c == NULL || !clientIdle(c)) continue;
    if (r->lost >= 0) {
      clientQueue(r, c, REPLY_LOST, (uint32_t)r->lost, r->lostAddr, ADDR_BYTES, r->lostDigest);
      c->lostQueued = 1;
    } else if (r->distributing && !c->tableQueued) {
      clientQueue(r, c, REPLY_TABLE, (uint32_t)r->nranks, r->table, tableBytes, r->tableDigest);
      c->tableQueued = 1;
    } else if (!r->distributing && c->reportedCount != r->registered &&
               now - c->lastStatusMs >= STATUS_INTERVAL_MS) {
      rootQueueStatus(r, c, REPLY_STATUS);
      c->reportedCount = r->registered;
      c->lastStatusMs = now;
    } else {
      continue;
    }
    rootFlush(r, rank);
  }
}

/* Why hello h cannot register (into why), or 0 when it can. The first authenticated hello
 * fixes nranks. */
static int rootRefuses(struct root *r, const struct weftBootstrapHello *h, char *why,
                       size_t len) {
  if (weftBootstrapCheckHello(h, HELLO_REGISTER, r->nranks, -1, why, len) != 0)
    return 1;
  if (r->nranks != 0 && r->byRank[h->rank] != NULL)
    snprintf(why, len, "rank %u is already registered (from %s)", h->rank,
             r->byRank[h->rank]->name);
  else
    return 0;
  return 1;
}

static int rootSizeFor(struct root *r, int nranks) {
  if (r->nranks != 0) return 0;
  r->byRank = calloc((size_t)nranks, sizeof *r->byRank);
  r->table = calloc((size_t)nranks, ADDR_BYTES);
  r->pollRanks = calloc((size_t)nranks, sizeof *r->pollRanks);
  if (r->byRank == NULL || r->table == NULL || r->pollRanks == NULL) {
    free(r->byRank);
    free(r->table);
    free(r->pollRanks);
    r->byRank = NULL;
    r->table = NULL;
    r->pollRanks = NULL;
    return -1;
  }
  r->nranks = nranks;
  missingExtend(r);
  return 0;
}

/* Handles the complete hello of pending peer i: registers it or drops it. */
static void rootAdmit(struct root *r, size_t i) {
  struct pendingPeer *peer = &r->pending.peers[i];
  struct weftBootstrapHello h;
  char why[160];
  const char *refusal = weftBootstrapParseHello(r->secret, peer->nonce, peer->hello, &h);
  if (refusal == NULL && rootRefuses(r, &h, why, sizeof why)) refusal = why;
  if (refusal == NULL && rootSizeFor(r, (int)h.nranks) != 0) refusal = "out of memory";
  struct rootClient *c = refusal == NULL ? calloc(1, sizeof *c) : NULL;
  if (refusal == NULL && c == NULL) refusal = "out of memory";
  if (refusal != NULL) {
    pendingDrop(&r->pending, i, WEFT_LOG_WARN, refusal);
    return;
  }
  memcpy(c->serverNonce, peer->nonce, NONCE_BYTES);
  memcpy(c->clientNonce, h.clientNonce, NONCE_BYTES);
  memcpy(c->name, peer->name, sizeof c->name);
  c->sent = REPLY_HEADER_BYTES; /* nothing queued */
  c->lastStatusMs = INT64_MIN / 2;
  c->fd = pendingTake(&r->pending, i);
  memcpy(r->table + (size_t)h.rank * ADDR_BYTES, h.addr, ADDR_BYTES);
  r->byRank[h.rank] = c;
  r->registered++;
  missingRegistered(r, (int)h.rank);
  INFO(WEFT_BOOT, "bootstrap root at %s: rank %u registered from %s (%d of %d)", r->name, h.rank,
       c->name, r->registered, r->nranks);
}

/* A rank that timed out waiting for the others: it may come back (restarted), so its slot is
 * free again, and the others keep waiting until their own deadline. */
static void rootOnGiveUp(struct root *r, int rank) {
  rootCloseClient(r, rank, WEFT_LOG_INFO, "it gave up at its timeout");
  r->registered--;
  missingLeft(r, rank);
  memset(r->table + (size_t)rank * ADDR_BYTES, 0, ADDR_BYTES);
}

/* A registered rank sends nothing more but, at its timeout, GIVE_UP_BYTE: its socket turning
 * readable otherwise means it left. */
static void rootOnClient(struct root *r, int rank, short revents) {
  struct rootClient *c = r->byRank[rank];
  if (c == NULL) return;
  if (revents & (POLLIN | POLLHUP | POLLERR)) {
    uint8_t byte = 0;
    size_t got = 0;
    int rc = weftSocketRecvSome(c->fd, &byte, 1, &got);
    char text[128];
    if (got == 1 && byte == GIVE_UP_BYTE && !r->distributing) {
      rootOnGiveUp(r, rank);
      return;
    }
    if (rc != 0 || got > 0) {
      rootCloseClient(r, rank, WEFT_LOG_INFO,
                      rc == WEFT_SOCK_CLOSED ? "it disconnected"
                      : rc != 0              ? weftSockStatusText(rc, text, sizeof text)
                                             : "it sent unexpected bytes");
      if (!r->distributing) rootReportLost(r, rank);
      return;
    }
  }
  if (revents & POLLOUT) rootFlush(r, rank);
}

static void rootOnPending(struct root *r, size_t i) {
  if (pendingReceive(&r->pending, i) == 1) rootAdmit(r, i);
}

static int rootPoll(struct root *r) {
  struct pollList *polls = &r->polls;
  polls->count = 0;
  r->pollClients = 0;
  if (pollAdd(polls, r->distributing ? -1 : r->listenFd, POLLIN) != 0) return -1;
  for (int rank = 0; rank < r->nranks; rank++) {
    struct rootClient *c = r->byRank[rank];
    if (c == NULL) continue;
    if (pollAdd(polls, c->fd, (short)(POLLIN | (clientIdle(c) ? 0 : POLLOUT))) != 0) return -1;
    r->pollRanks[r->pollClients++] = rank;
  }
  for (size_t i = 0; i < r->pending.count; i++)
    if (pollAdd(polls, r->pending.peers[i].fd, POLLIN) != 0) return -1;
  int64_t wake = pendingEarliest(&r->pending, r->deadlineMs);
  for (int rank = 0; rank < r->nranks && !r->distributing; rank++) {
    struct rootClient *c = r->byRank[rank];
    if (c != NULL && clientIdle(c) && c->reportedCount != r->registered &&
        c->lastStatusMs + STATUS_INTERVAL_MS < wake)
      wake = c->lastStatusMs + STATUS_INTERVAL_MS;
  }
  return weftPollUntil(polls->fds, polls->count, wake) < 0 ? -1 : 0;
}

static void rootHandleEvents(struct root *r) {
  struct pollfd *fds = r->polls.fds;
  size_t firstPending = 1 + r->pollClients;
  /* Pending peers last to first: dropping one moves the last peer into its place. */
  for (size_t k = r->polls.count; k-- > firstPending;)
    if (fds[k].revents != 0) rootOnPending(r, k - firstPending);
  for (size_t k = 1; k < firstPending; k++)
    if (fds[k].revents != 0) rootOnClient(r, r->pollRanks[k - 1], fds[k].revents);
  if (fds[0].revents != 0 && !r->distributing) pendingAcceptAll(&r->pending, r->listenFd);
}

static void rootStartDistribution(struct root *r) {
  r->distributing = 1;
  weftSocketClose(&r->listenFd);
  pendingClear(&r->pending, "every rank has registered");
  r->tableDigest = bodyDigest(r->secret, r->table, (size_t)r->nranks * ADDR_BYTES);
  INFO(WEFT_BOOT, "bootstrap root at %s: all %d ranks registered after %lld ms; sending the table",
       r->name, r->nranks, (long long)(weftNowMs() - r->startMs));
}

static int rootOpenClients(const struct root *r) {
  int open = 0;
  for (int rank = 0; rank < r->nranks; rank++) open += r->byRank[rank] != NULL;
  return open;
}

/* WEFT_TIMEOUT_MS passed: tell the waiting ranks (best effort, never blocking) and stop. */
static void rootGiveUp(struct root *r) {
  long long elapsed = (long long)(weftNowMs() - r->startMs);
  if (r->nranks == 0) {
    WARN("bootstrap root at %s: no rank registered within %lld ms (WEFT_TIMEOUT_MS); giving up",
         r->name, elapsed);
    return;
  }
  if (r->distributing) {
    WARN("bootstrap root at %s: timed out after %lld ms sending the table to %d ranks", r->name,
         elapsed, rootOpenClients(r));
    return;
  }
  char missing[256] = "";
  for (int i = 0, o = 0; i < r->nMissing && o < (int)sizeof missing; i++)
    o += snprintf(missing + o, sizeof missing - (size_t)o, "%s%d", i ? ", " : "", r->missingRanks[i]);
  int unlisted = r->nranks - r->registered - r->nMissing;
  WARN("bootstrap root at %s: %d of %d ranks had not registered after %lld ms (WEFT_TIMEOUT_MS): "
       "rank%s %s%s; giving up", r->name, r->nranks - r->registered, r->nranks, elapsed,
       r->nranks - r->registered > 1 ? "s" : "", missing, unlisted > 0 ? ", ..." : "");
  for (int rank = 0; rank < r->nranks; rank++) {
    struct rootClient *c = r->byRank[rank];
    if (c == NULL || !clientIdle(c)) continue;
    rootQueueStatus(r, c, REPLY_ABORT);
    (void)clientFlush(c);
  }
}

static void rootFree(struct root *r) {
  weftSocketClose(&r->listenFd);
  pendingFree(&r->pending);
  for (int rank = 0; rank < r->nranks; rank++) {
    if (r->byRank[rank] == NULL) continue;
    close(r->byRank[rank]->fd);
    free(r->byRank[rank]);
  }
  free(r->byRank);
  free(r->table);
  free(r->polls.fds);
  free(r->pollRanks);
  explicit_bzero(r->secret, sizeof r->secret);
  free(r);
}

static int rootDelivered(const struct root *r) {
  if (!r->distributing || rootOpenClients(r) != 0) return 0;
  INFO(WEFT_BOOT, "bootstrap root at %s: table delivered to all %d ranks", r->name, r->nranks);
  return 1;
}

static void rootServe(struct root *r) {
  for (;;) {
    int64_t now = weftNowMs();
    if (rootDelivered(r) || (r->lost >= 0 && r->toldLost >= r->nranks - 1)) return;
    if (now >= r->deadlineMs) {
      rootGiveUp(r);
      return;
    }
    pendingExpire(&r->pending, now);
    rootQueueReplies(r, now);
    if (rootDelivered(r)) return; /* the last table may have gone out just now */
    if (rootPoll(r) != 0) {
      WARN("bootstrap root at %s: poll failed: %s; giving up", r->name, strerror(errno));
      return;
    }
    rootHandleEvents(r);
    if (!r->distributing && r->lost < 0 && r->nranks > 0 && r->registered == r->nranks)
      rootStartDistribution(r);
  }
}

static void *rootMain(void *arg) {
  struct root *r = arg;
  pthread_setname_np(pthread_self(), "weft-boot-root");
  INFO(WEFT_BOOT, "bootstrap root listening on %s for %lld ms", r->name,
       (long long)(r->deadlineMs - r->startMs));
  rootServe(r);
  rootFree(r);
  return NULL;
}

/* Binds the root's listener at addr (port 0: ephemeral) and starts its detached thread. */
static weftResult_t startRoot(const union weftSockAddr *addr, const uint8_t *secret,
                              int64_t deadlineMs, union weftSockAddr *bound) {
  struct root *r = calloc(1, sizeof *r);
  if (r == NULL) return weftSetError(weftSystemError, "bootstrap: out of memory for the root");
  union weftSockAddr local;
  weftResult_t res = weftSocketListen(addr, &r->listenFd, &local);
  if (res != weftSuccess) {
    free(r);
    return res;
  }
  memcpy(r->secret, secret, SECRET_BYTES);
  weftSockAddrName(&local, r->name);
  snprintf(r->pending.owner, sizeof r->pending.owner, "root at %s", r->name);
  r->startMs = weftNowMs();
  r->deadlineMs = deadlineMs;
  r->lost = -1;
  pthread_attr_t attr;
  pthread_t thread;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int err = pthread_create(&thread, &attr, rootMain, r);
  pthread_attr_destroy(&attr);
  if (err != 0) {
    char name[WEFT_SOCK_NAME_MAX];
    snprintf(name, sizeof name, "%s", r->name);
    rootFree(r);
    return weftSetSysError(err, "bootstrap: cannot start the root thread for %s", name);
  }
  if (bound != NULL) *bound = local;
  return weftSuccess;
}

weftResult_t weftBootstrapGetUniqueId(weftUniqueId *id) {
  if (id == NULL) return weftSetError(weftInvalidArgument, "bootstrap: unique id pointer is NULL");
  const char *commId = weftParamCommId();
  if (*commId != '\0') {
    /* NCCL's convention: with a fixed rendezvous, rank 0 starts the root in its init. */
    struct rendezvous rv;
    WEFTCHECK(rendezvousFromCommId(commId, &rv));
    encodeId(id, &rv.root, rv.secret);
    explicit_bzero(rv.secret, sizeof rv.secret);
    return weftSuccess;
  }
  uint8_t secret[SECRET_BYTES];
  union weftSockAddr local, bound;
  char ifname[64] = "";
  WEFTCHECK(fillRandom(secret, sizeof secret));
  WEFTCHECK(weftSocketPickInterface(weftSocketFamily(), &local, ifname, sizeof ifname));
  weftResult_t res = startRoot(&local, secret, weftNowMs() + weftParamTimeoutMs(), &bound);
  if (res == weftSuccess) {
    char name[WEFT_SOCK_NAME_MAX];
    encodeId(id, &bound, secret);
    INFO(WEFT_BOOT, "bootstrap: unique id for the root at %s (interface %s)",
         weftSockAddrName(&bound, name), ifname);
  }
  explicit_bzero(secret, sizeof secret);
  return res;
}

/* ---- A rank: register with the root ---- */

static int rootConnectRetryable(int rc) {
  /* The root may not listen yet (WEFT_COMM_ID), or may have shed us under a flood. */
  return rc == WEFT_SOCK_CLOSED || rc == ECONNREFUSED || rc == ECONNRESET || rc == ECONNABORTED ||
         rc == ETIMEDOUT || rc == EHOSTUNREACH || rc == ENETUNREACH || rc == EAGAIN ||
         rc == EADDRNOTAVAIL;
}

static void sleepMs(int64_t ms) {
  struct timespec left = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
  while (nanosleep(&left, &left) != 0 && errno == EINTR) {
  }
}

/* Connects to the root and receives its nonce, retrying with backoff until deadlineMs. */
static weftResult_t dialRoot(const struct rendezvous *rv, int rank, int64_t startMs,
                             int64_t deadlineMs, int *fd, uint8_t *serverNonce) {
  int64_t backoffMs = CONNECT_BACKOFF_MIN_MS;
  for (;;) {
    const char *stage = "connecting to";
    int rc = weftSocketConnect(&rv->root, deadlineMs, fd);
    if (rc == 0) {
      stage = "waiting for the nonce of";
      rc = weftSocketRecvAll(*fd, serverNonce, NONCE_BYTES, deadlineMs);
      if (rc == 0) return weftSuccess;
      weftSocketClose(fd);
    }
    char text[128];
    int64_t now = weftNowMs();
    if (weftThreadAbortFlag != NULL && atomic_load(weftThreadAbortFlag))
      return weftSetError(weftRemoteError, "bootstrap: rank %d: init aborted", rank);
    if (rc == WEFT_SOCK_TIMEOUT || (rootConnectRetryable(rc) && now >= deadlineMs))
      return weftSetError(weftTimeout,
                          "bootstrap: rank %d timed out after %lld ms %s the root at %s (last: %s)",
                          rank, (long long)(now - startMs), stage, rv->rootName,
                          weftSockStatusText(rc, text, sizeof text));
    if (!rootConnectRetryable(rc))
      return weftSetSysError(rc, "bootstrap: rank %d %s the root at %s", rank, stage, rv->rootName);
    TRACE(WEFT_BOOT, "bootstrap: rank %d: root at %s not ready (%s); retrying in %lld ms", rank,
          rv->rootName, weftSockStatusText(rc, text, sizeof text), (long long)backoffMs);
    sleepMs(backoffMs < deadlineMs - now ? backoffMs : deadlineMs - now);
    backoffMs = backoffMs * 2 < CONNECT_BACKOFF_MAX_MS ? backoffMs * 2 : CONNECT_BACKOFF_MAX_MS;
  }
}

/* What a rank knows of its registration, for the messages of its failures. */
struct registration {
  const struct rendezvous *rv;
  struct weftBootstrap *b;
  int fd;
  uint8_t serverNonce[NONCE_BYTES], clientNonce[NONCE_BYTES];
  uint32_t seq;   /* replies received */
  int registered; /* the root's highest count; -1 before any */
  char missing[192]; /* the ranks the root listed as missing at that count ("1, 3") */
  int64_t startMs, deadlineMs;
};

/* "N of M ranks had not registered ...: ranks 1, 3". */
static weftResult_t missingError(const struct registration *reg, const char *rootGaveUp,
                                 long long elapsed) {
  int missing = reg->b->nranks - reg->registered, listed = 1;
  for (const char *p = reg->missing; *p; p++) listed += *p == ',';
  return weftSetError(
      weftTimeout, "bootstrap: %s%d of %d ranks had not registered with the root at %s after %lld "
      "ms: rank%s %s%s", rootGaveUp, missing, reg->b->nranks, reg->rv->rootName, elapsed,
      missing > 1 ? "s" : "", reg->missing[0] ? reg->missing : "(not yet listed by the root)",
      reg->missing[0] && missing > listed ? ", ..." : "");
}

static weftResult_t registrationWaitError(const struct registration *reg, int rc,
                                          const char *what) {
  const struct weftBootstrap *b = reg->b;
  long long elapsed = (long long)(weftNowMs() - reg->startMs);
  char text[128];
  if (rc == WEFT_SOCK_CLOSED)
    return weftSetError(weftRemoteError,
                        "bootstrap: the root at %s closed the connection while rank %d was %s: it "
                        "refused the registration (different secret or nranks, or rank %d already "
                        "registered) or it shut down",
                        reg->rv->rootName, b->rank, what, b->rank);
  if (rc != WEFT_SOCK_TIMEOUT)
    return weftSetSysError(rc, "bootstrap: rank %d lost the connection to the root at %s while %s",
                           b->rank, reg->rv->rootName, what);
  if (reg->registered < 0)
    return weftSetError(
        weftTimeout, "bootstrap: rank %d had no answer from the root at %s after %lld ms (%s)",
        b->rank, reg->rv->rootName, elapsed, weftSockStatusText(rc, text, sizeof text));
  if (reg->registered < b->nranks)
    return missingError(reg, "", elapsed);
  return weftSetError(
      weftTimeout,
      "bootstrap: rank %d timed out after %lld ms receiving the rank table from the root at %s",
      b->rank, elapsed, reg->rv->rootName);
}

int weftBootstrapParseTable(const uint8_t *table, int nranks, union weftSockAddr *peers) {
  for (int rank = 0; rank < nranks; rank++) {
    int found = weftBootstrapParseAddr(table + (size_t)rank * ADDR_BYTES, &peers[rank]);
    if (found < 0 || (found == 0 && nranks > 1)) return rank;
  }
  return -1;
}

static weftResult_t decodeTable(const struct registration *reg, const uint8_t *table) {
  struct weftBootstrap *b = reg->b;
  b->peers = calloc((size_t)b->nranks, sizeof *b->peers);
  if (b->peers == NULL)
    return weftSetError(weftSystemError, "bootstrap: out of memory for %d peers", b->nranks);
  int bad = weftBootstrapParseTable(table, b->nranks, b->peers);
  if (bad >= 0)
    return weftSetError(weftRemoteError,
                        "bootstrap: the table from the root at %s has no valid address for rank %d",
                        reg->rv->rootName, bad);
  return weftSuccess;
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
  uint64_t digest = bodyDigest(secret, body, bodyLen);
  return weftGetBe64(head + 16) == replyMac(secret, clientNonce, serverNonce, seq, head, digest) ? 0
                                                                                             : -1;
}

/* Receives one reply; on success *body holds its body (the caller frees it). */
static weftResult_t receiveReply(struct registration *reg, uint32_t *type, uint32_t *arg,
                                 uint8_t **body, size_t *bodyLenOut) {
  uint8_t head[REPLY_HEADER_BYTES];
  *body = NULL;
  *bodyLenOut = 0;
  int rc = weftSocketRecvAll(reg->fd, head, sizeof head, reg->deadlineMs);
  if (rc != 0) return registrationWaitError(reg, rc, "waiting for the rank table");
  size_t bodyLen = 0;
  if (weftBootstrapParseReplyHeader(head, reg->b->nranks, type, arg, &bodyLen) != 0)
    return weftSetError(weftRemoteError,
                        "bootstrap: malformed reply from the root at %s (type %u, arg %u, %zu body "
                        "bytes)",
                        reg->rv->rootName, *type, *arg, bodyLen);
  if (bodyLen > 0) {
    *body = malloc(bodyLen);
    if (*body == NULL)
      return weftSetError(weftSystemError, "bootstrap: out of memory for the rank table");
    rc = weftSocketRecvAll(reg->fd, *body, bodyLen, reg->deadlineMs);
    if (rc != 0) return registrationWaitError(reg, rc, "receiving the rank table");
  }
  *bodyLenOut = bodyLen;
  if (weftBootstrapCheckReplyMac(reg->rv->secret, reg->clientNonce, reg->serverNonce, reg->seq++,
                                 head, *body, bodyLen) != 0)
    return weftSetError(
        weftRemoteError,
        "bootstrap: reply from %s has a wrong MAC: it is not the root of this communicator",
        reg->rv->rootName);
  return weftSuccess;
}

static weftResult_t lostError(const struct registration *reg, uint32_t lost, const uint8_t *addr) {
  union weftSockAddr where;
  char name[WEFT_SOCK_NAME_MAX] = "unknown address";
  if (weftBootstrapParseAddr(addr, &where) == 1) weftSockAddrName(&where, name);
  return weftSetError(weftRemoteError,
                      "bootstrap: rank %u (listening at %s) left before all %d ranks had "
                      "registered with the root at %s (it died, was aborted or gave up); rank %d "
                      "cannot complete init",
                      lost, name, reg->b->nranks, reg->rv->rootName, reg->b->rank);
}

int weftBootstrapParseMissing(const uint8_t *body, size_t bodyLen, int nranks, char *text,
                              size_t textLen) {
  if (bodyLen % 4 != 0 || bodyLen > 4 * MISSING_LISTED) return -1;
  for (size_t i = 0; i < bodyLen; i += 4) {
    uint32_t rank = weftGetBe32(body + i);
    if (rank >= (uint32_t)nranks || (i > 0 && rank <= weftGetBe32(body + i - 4))) return -1;
  }
  missingText(body, bodyLen, text, textLen);
  return 0;
}

/* Keeps the list of a STATUS or ABORT body (a malformed one is ignored: it only feeds a
 * message). */
static void noteMissing(struct registration *reg, const uint8_t *body, size_t bodyLen) {
  char text[sizeof reg->missing];
  if (weftBootstrapParseMissing(body, bodyLen, reg->b->nranks, text, sizeof text) == 0)
    memcpy(reg->missing, text, sizeof text);
}

static weftResult_t awaitTable(struct registration *reg) {
  for (;;) {
    uint32_t type = 0, arg = 0;
    uint8_t *body = NULL;
    size_t bodyLen = 0;
    weftResult_t res = receiveReply(reg, &type, &arg, &body, &bodyLen);
    if (res == weftSuccess && type == REPLY_TABLE) res = decodeTable(reg, body);
    if (res == weftSuccess && type == REPLY_LOST) res = lostError(reg, arg, body);
    if (res != weftSuccess || type == REPLY_TABLE || type == REPLY_LOST) {
      free(body);
      return res;
    }
    /* The peak, not the latest: ranks that give up at their own deadline leave the root just
     * before this one does, and the message should name who never came. */
    if ((int)arg >= reg->registered) {
      reg->registered = (int)arg;
      noteMissing(reg, body, bodyLen);
    }
    free(body);
    if (type == REPLY_ABORT)
      return missingError(reg, "the root gave up (WEFT_TIMEOUT_MS): ",
                          (long long)(weftNowMs() - reg->startMs));
  }
}

/* Registers with the root and fills b->peers with the table it sends. */
static weftResult_t registerWithRoot(const struct rendezvous *rv, struct weftBootstrap *b,
                                     const union weftSockAddr *listenAddr, int64_t startMs,
                                     int64_t deadlineMs) {
  struct registration reg = {
      .rv = rv, .b = b, .fd = -1, .registered = -1, .startMs = startMs, .deadlineMs = deadlineMs};
  WEFTCHECK(dialRoot(rv, b->rank, startMs, deadlineMs, &reg.fd, reg.serverNonce));
  uint8_t addr[ADDR_BYTES], hello[HELLO_BYTES];
  weftSockAddrEncode(addr, listenAddr);
  weftResult_t res = fillRandom(reg.clientNonce, NONCE_BYTES);
  if (res == weftSuccess) {
    helloBuild(hello, rv->secret, reg.serverNonce, HELLO_REGISTER, b->rank, b->nranks,
               reg.clientNonce, addr);
    int rc = weftSocketSendAll(reg.fd, hello, sizeof hello, deadlineMs);
    res = rc != 0 ? registrationWaitError(&reg, rc, "sending its hello") : awaitTable(&reg);
  }
  if (res == weftTimeout) {
    /* Leaving at its own deadline is not dying: the root keeps waiting, and the others time
     * out with their own account of who never came. Best effort, never waits. */
    uint8_t notice = GIVE_UP_BYTE;
    size_t sent = 0;
    (void)weftSocketSendSome(reg.fd, &notice, 1, &sent);
  }
  /* With the table, the root has said all it will and needs nothing more from this rank. */
  if (res == weftSuccess) weftSocketCloseAbortive(&reg.fd, 1);
  else weftSocketClose(&reg.fd);
  return res;
}

/* ---- A rank: form the ring ---- */

enum dialState { DIAL_CONNECTING, DIAL_AWAIT_NONCE, DIAL_SEND_HELLO, DIAL_AWAIT_ACK, DIAL_DONE };

/* Forming the ring: this rank dials rank+1 (b->nextFd) while its listener waits for rank-1. */
struct ringSetup {
  struct weftBootstrap *b;
  const uint8_t *secret;
  uint8_t myAddr[ADDR_BYTES];
  int listenFd;
  char listenName[WEFT_SOCK_NAME_MAX];
  enum dialState dialState;
  uint8_t dialBuf[HELLO_BYTES]; /* the nonce or ack coming in, or the hello going out */
  size_t dialDone;
  uint8_t serverNonce[NONCE_BYTES], clientNonce[NONCE_BYTES];
  struct pendingSet pending;
  struct pollList polls; /* [dial][listener][pending...] */
  int64_t startMs, deadlineMs;
  int64_t nextProbeMs; /* of rank-1's listener, while it has not connected */
};

static int nextRank(const struct weftBootstrap *b) { return (b->rank + 1) % b->nranks; }
static int prevRank(const struct weftBootstrap *b) { return (b->rank + b->nranks - 1) % b->nranks; }

static const char *peerName(const struct weftBootstrap *b, int rank,
                            char name[WEFT_SOCK_NAME_MAX]) {
  return weftSockAddrName(&b->peers[rank], name);
}

static const char *dialWaitingFor(enum dialState state) {
  switch (state) {
    case DIAL_CONNECTING: return "connecting to";
    case DIAL_AWAIT_NONCE: return "waiting for the nonce of";
    case DIAL_SEND_HELLO: return "sending its hello to";
    case DIAL_AWAIT_ACK: return "waiting for the acknowledgement of";
    default: return "done with";
  }
}

static weftResult_t dialFailed(struct ringSetup *rs, int rc) {
  char name[WEFT_SOCK_NAME_MAX], text[128];
  const struct weftBootstrap *b = rs->b;
  if (rc == WEFT_SOCK_CLOSED && rs->dialState == DIAL_AWAIT_ACK)
    return weftSetError(
        weftRemoteError,
        "bootstrap: rank %d (%s) refused rank %d's ring hello (closed the connection): "
        "different secret or nranks?",
        nextRank(b), peerName(b, nextRank(b), name), b->rank);
  return weftSetError(weftRemoteError, "bootstrap: rank %d failed %s rank %d (%s): %s", b->rank,
                      dialWaitingFor(rs->dialState), nextRank(b), peerName(b, nextRank(b), name),
                      weftSockStatusText(rc, text, sizeof text));
}

static weftResult_t dialStart(struct ringSetup *rs) {
  struct weftBootstrap *b = rs->b;
  rs->dialState = DIAL_CONNECTING;
  int rc = weftSocketConnectStart(&b->peers[nextRank(b)], &b->nextFd);
  return rc == 0 ? weftSuccess : dialFailed(rs, rc);
}

static short dialEvents(const struct ringSetup *rs) {
  return rs->dialState == DIAL_CONNECTING || rs->dialState == DIAL_SEND_HELLO ? POLLOUT : POLLIN;
}

/* Advances the handshake with rank+1 as far as the socket allows. */
static weftResult_t dialProgress(struct ringSetup *rs) {
  struct weftBootstrap *b = rs->b;
  int rc = 0;
  if (rs->dialState == DIAL_CONNECTING) {
    if ((rc = weftSocketConnectResult(b->nextFd)) != 0) return dialFailed(rs, rc);
    rs->dialState = DIAL_AWAIT_NONCE;
    rs->dialDone = 0;
  }
  if (rs->dialState == DIAL_AWAIT_NONCE) {
    if ((rc = weftSocketRecvSome(b->nextFd, rs->dialBuf, NONCE_BYTES, &rs->dialDone)) != 0)
      return dialFailed(rs, rc);
    if (rs->dialDone < NONCE_BYTES) return weftSuccess;
    memcpy(rs->serverNonce, rs->dialBuf, NONCE_BYTES);
    WEFTCHECK(fillRandom(rs->clientNonce, NONCE_BYTES));
    helloBuild(rs->dialBuf, rs->secret, rs->serverNonce, HELLO_RING, b->rank, b->nranks,
               rs->clientNonce, rs->myAddr);
    rs->dialState = DIAL_SEND_HELLO;
    rs->dialDone = 0;
  }
  if (rs->dialState == DIAL_SEND_HELLO) {
    if ((rc = weftSocketSendSome(b->nextFd, rs->dialBuf, HELLO_BYTES, &rs->dialDone)) != 0)
      return dialFailed(rs, rc);
    if (rs->dialDone < HELLO_BYTES) return weftSuccess;
    rs->dialState = DIAL_AWAIT_ACK;
    rs->dialDone = 0;
  }
  if (rs->dialState == DIAL_AWAIT_ACK) {
    if ((rc = weftSocketRecvSome(b->nextFd, rs->dialBuf, ACK_BYTES, &rs->dialDone)) != 0)
      return dialFailed(rs, rc);
    if (rs->dialDone < ACK_BYTES) return weftSuccess;
    char name[WEFT_SOCK_NAME_MAX];
    if (weftGetBe64(rs->dialBuf) != ackMac(rs->secret, rs->clientNonce, rs->serverNonce))
      return weftSetError(
          weftRemoteError,
          "bootstrap: the listener at %s (rank %d in the table) sent a wrong acknowledgement MAC",
          peerName(b, nextRank(b), name), nextRank(b));
    rs->dialState = DIAL_DONE;
  }
  return weftSuccess;
}

/* Handles pending peer i of the listener; 1 once it is rank-1, authenticated and acknowledged. */
static int ringOnPending(struct ringSetup *rs, size_t i) {
  struct weftBootstrap *b = rs->b;
  if (pendingReceive(&rs->pending, i) != 1) return 0;
  struct pendingPeer *peer = &rs->pending.peers[i];
  struct weftBootstrapHello h;
  char why[160];
  const char *refusal = weftBootstrapParseHello(rs->secret, peer->nonce, peer->hello, &h);
  if (refusal == NULL &&
      weftBootstrapCheckHello(&h, HELLO_RING, b->nranks, prevRank(b), why, sizeof why) != 0)
    refusal = why;
  if (refusal != NULL) {
    pendingDrop(&rs->pending, i, WEFT_LOG_WARN, refusal);
    return 0;
  }
  uint8_t ack[ACK_BYTES];
  weftPutBe64(ack, ackMac(rs->secret, h.clientNonce, peer->nonce));
  char name[WEFT_SOCK_NAME_MAX];
  snprintf(name, sizeof name, "%s", peer->name);
  int fd = pendingTake(&rs->pending, i);
  /* 8 bytes after the 16-byte nonce always fit a fresh socket's buffer: this never waits. */
  int rc = weftSocketSendAll(fd, ack, sizeof ack, rs->deadlineMs);
  if (rc != 0) {
    char text[128];
    WARN("bootstrap: rank %d could not acknowledge rank %d (%s): %s", b->rank, prevRank(b), name,
         weftSockStatusText(rc, text, sizeof text));
    close(fd);
    return 0;
  }
  b->prevFd = fd;
  return 1;
}

static weftResult_t ringTimeout(const struct ringSetup *rs) {
  const struct weftBootstrap *b = rs->b;
  char name[WEFT_SOCK_NAME_MAX];
  long long elapsed = (long long)(weftNowMs() - rs->startMs);
  if (rs->dialState != DIAL_DONE && b->prevFd < 0)
    return weftSetError(weftTimeout,
                        "bootstrap: rank %d timed out after %lld ms %s rank %d (%s); rank %d had "
                        "not connected to it either",
                        b->rank, elapsed, dialWaitingFor(rs->dialState), nextRank(b),
                        peerName(b, nextRank(b), name), prevRank(b));
  if (rs->dialState != DIAL_DONE)
    return weftSetError(weftTimeout, "bootstrap: rank %d timed out after %lld ms %s rank %d (%s)",
                        b->rank, elapsed, dialWaitingFor(rs->dialState), nextRank(b),
                        peerName(b, nextRank(b), name));
  return weftSetError(weftTimeout,
                      "bootstrap: rank %d timed out after %lld ms waiting for rank %d (%s) to "
                      "connect to its listener at %s",
                      b->rank, elapsed, prevRank(b), peerName(b, prevRank(b), name),
                      rs->listenName);
}

static weftResult_t ringPoll(struct ringSetup *rs) {
  struct pollList *polls = &rs->polls;
  polls->count = 0;
  int ok = pollAdd(polls, rs->dialState == DIAL_DONE ? -1 : rs->b->nextFd, dialEvents(rs)) == 0 &&
           pollAdd(polls, rs->b->prevFd < 0 ? rs->listenFd : -1, POLLIN) == 0;
  for (size_t i = 0; ok && i < rs->pending.count; i++)
    ok = pollAdd(polls, rs->pending.peers[i].fd, POLLIN) == 0;
  if (!ok) return weftSetError(weftSystemError, "bootstrap: out of memory forming the ring");
  int64_t wake = pendingEarliest(&rs->pending, rs->deadlineMs);
  if (rs->b->prevFd < 0 && rs->nextProbeMs < wake) wake = rs->nextProbeMs;
  if (weftPollUntil(polls->fds, polls->count, wake) < 0)
    return weftSetSysError(errno, "bootstrap: poll while rank %d formed the ring", rs->b->rank);
  return weftSuccess;
}

/* rank-1 has not connected yet: if its listener refuses connections, it died (every rank
 * opens its listener before anyone learns its address), and waiting for the timeout would
 * only delay the error; the probe's connection is one the listener drops as silent. */
static weftResult_t ringCheckPrev(struct ringSetup *rs, int64_t now) {
  if (rs->b->prevFd >= 0 || now < rs->nextProbeMs) return weftSuccess;
  rs->nextProbeMs = now + RING_PROBE_INTERVAL_MS;
  const struct weftBootstrap *b = rs->b;
  if (weftBootstrapProbe(b, prevRank(b), RING_PROBE_TIMEOUT_MS)) return weftSuccess;
  char name[WEFT_SOCK_NAME_MAX];
  return weftSetError(weftRemoteError,
                      "bootstrap: rank %d (%s) is gone: its listener refuses connections, so it "
                      "will never connect to rank %d (it died during init)",
                      prevRank(b), peerName(b, prevRank(b), name), b->rank);
}

static weftResult_t ringLoop(struct ringSetup *rs) {
  WEFTCHECK(dialStart(rs));
  rs->nextProbeMs = weftNowMs() + RING_PROBE_INTERVAL_MS;
  while (rs->dialState != DIAL_DONE || rs->b->prevFd < 0) {
    int64_t now = weftNowMs();
    if (now >= rs->deadlineMs) return ringTimeout(rs);
    WEFTCHECK(ringCheckPrev(rs, now));
    pendingExpire(&rs->pending, now);
    WEFTCHECK(ringPoll(rs));
    struct pollfd *fds = rs->polls.fds;
    if (fds[0].revents != 0) WEFTCHECK(dialProgress(rs));
    /* Pending peers last to first: dropping one moves the last peer into its place. */
    for (size_t k = rs->polls.count; k-- > 2;)
      if (fds[k].revents != 0 && ringOnPending(rs, k - 2)) break;
    if (fds[1].revents != 0 && rs->b->prevFd < 0) pendingAcceptAll(&rs->pending, rs->listenFd);
  }
  return weftSuccess;
}

static void nameGoneRanks(struct weftBootstrap *b);

static weftResult_t formRing(struct weftBootstrap *b, const uint8_t *secret, int listenFd,
                             const union weftSockAddr *listenAddr, int64_t startMs,
                             int64_t deadlineMs) {
  struct ringSetup rs = {.b = b,
                         .secret = secret,
                         .listenFd = listenFd,
                         .startMs = startMs,
                         .deadlineMs = deadlineMs};
  weftSockAddrEncode(rs.myAddr, listenAddr);
  weftSockAddrName(listenAddr, rs.listenName);
  snprintf(rs.pending.owner, sizeof rs.pending.owner, "rank %d's listener at %s", b->rank,
           rs.listenName);
  weftResult_t res = ringLoop(&rs);
  pendingFree(&rs.pending);
  free(rs.polls.fds);
  return res;
}

static weftResult_t openRingListener(const struct rendezvous *rv, int rank, int *fd,
                                     union weftSockAddr *bound) {
  union weftSockAddr local;
  char ifname[64] = "", name[WEFT_SOCK_NAME_MAX];
  WEFTCHECK(weftSocketPickInterfaceToward(&rv->root, &local, ifname, sizeof ifname));
  WEFTCHECK(weftSocketListen(&local, fd, bound));
  INFO(WEFT_BOOT, "bootstrap: rank %d listening on %s (interface %s)", rank,
       weftSockAddrName(bound, name), ifname);
  return weftSuccess;
}

weftResult_t weftBootstrapInit(const weftUniqueId *id, int rank, int nranks, int64_t deadlineMs,
                               struct weftBootstrap **out) {
  if (out == NULL) return weftSetError(weftInvalidArgument, "bootstrap: output pointer is NULL");
  *out = NULL;
  if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks)
    return weftSetError(weftInvalidArgument,
                        "bootstrap: rank %d of %d ranks is out of range (1..%d ranks)", rank,
                        nranks, MAX_RANKS);
  int64_t startMs = weftNowMs();
  struct rendezvous rv;
  WEFTCHECK(resolveRendezvous(id, &rv));
  weftResult_t res = weftSuccess;
  int listenFd = -1;
  union weftSockAddr listenAddr;
  memset(&listenAddr, 0, sizeof listenAddr);
  struct weftBootstrap *b = calloc(1, sizeof *b);
  if (b == NULL) {
    res = weftSetError(weftSystemError, "bootstrap: out of memory");
    goto done;
  }
  *b = (struct weftBootstrap){
      .rank = rank, .nranks = nranks, .nextFd = -1, .prevFd = -1, .listenFd = -1};
  if (rv.fromCommId && rank == 0)
    WEFTCHECKGOTO(startRoot(&rv.root, rv.secret, deadlineMs, NULL), res, done);
  if (nranks > 1) WEFTCHECKGOTO(openRingListener(&rv, rank, &listenFd, &listenAddr), res, done);
  WEFTCHECKGOTO(registerWithRoot(&rv, b, &listenAddr, startMs, deadlineMs), res, done);
  if (nranks > 1)
    WEFTCHECKGOTO(formRing(b, rv.secret, listenFd, &listenAddr, startMs, deadlineMs), res, done);
  memcpy(b->secret, rv.secret, SECRET_BYTES);
  b->listenFd = listenFd;
  b->listenAddr = listenAddr;
  listenFd = -1;
  INFO(WEFT_BOOT, "bootstrap: rank %d of %d connected through %s in %lld ms", rank, nranks,
       rv.rootName, (long long)(weftNowMs() - startMs));
done:
  weftSocketClose(&listenFd);
  explicit_bzero(rv.secret, sizeof rv.secret);
  if (res == weftRemoteError && b != NULL) nameGoneRanks(b);
  if (res != weftSuccess) {
    weftBootstrapClose(b);
    return res;
  }
  *out = b;
  return weftSuccess;
}

/* ---- Ring allgather ---- */

/* Progress of one allgather: the bytes this rank sends to rank+1 and receives from rank-1,
 * each a stream of nranks-1 blocks. Step s sends block rank-s and receives block rank-s-1. */
struct ringTransfer {
  struct weftBootstrap *b;
  uint8_t *data;
  size_t blockBytes, total, sent, received;
  int64_t startMs;
};

static size_t ringBlock(const struct weftBootstrap *b, size_t step, int behind) {
  size_t n = (size_t)b->nranks;
  return ((size_t)b->rank + 2 * n - step - (size_t)behind) % n;
}

/* Bytes that may be sent now: step s forwards the block received in step s-1. */
static size_t ringSendable(const struct ringTransfer *t) {
  size_t limit = t->blockBytes + t->received;
  return limit < t->total ? limit : t->total;
}

static weftResult_t ringFailed(const struct ringTransfer *t, int rc, int peer, const char *doing) {
  const struct weftBootstrap *b = t->b;
  char name[WEFT_SOCK_NAME_MAX];
  if (rc == WEFT_SOCK_CLOSED)
    return weftSetError(weftRemoteError,
                        "bootstrap: rank %d (%s) closed its ring connection with rank %d during "
                        "allgather (%zu of %zu bytes received, %zu of %zu sent)",
                        peer, peerName(b, peer, name), b->rank, t->received, t->total, t->sent,
                        t->total);
  return weftSetSysError(rc, "bootstrap: rank %d %s rank %d (%s) during allgather", b->rank, doing,
                         peer, peerName(b, peer, name));
}

static weftResult_t ringSend(struct ringTransfer *t) {
  size_t step = t->sent / t->blockBytes, offset = t->sent % t->blockBytes;
  size_t len = t->blockBytes - offset;
  if (len > ringSendable(t) - t->sent) len = ringSendable(t) - t->sent;
  uint8_t *from = t->data + ringBlock(t->b, step, 0) * t->blockBytes + offset;
  size_t done = 0;
  int rc = weftSocketSendSome(t->b->nextFd, from, len, &done);
  t->sent += done;
  return rc == 0 ? weftSuccess : ringFailed(t, rc, nextRank(t->b), "sending to");
}

static weftResult_t ringReceive(struct ringTransfer *t) {
  size_t step = t->received / t->blockBytes, offset = t->received % t->blockBytes;
  uint8_t *into = t->data + ringBlock(t->b, step, 1) * t->blockBytes + offset;
  size_t done = 0;
  int rc = weftSocketRecvSome(t->b->prevFd, into, t->blockBytes - offset, &done);
  t->received += done;
  return rc == 0 ? weftSuccess : ringFailed(t, rc, prevRank(t->b), "receiving from");
}

/* Nothing ever arrives on the connection to rank+1: readable means rank+1 left. */
static weftResult_t ringCheckNext(struct ringTransfer *t) {
  uint8_t byte;
  size_t got = 0;
  int rc = weftSocketRecvSome(t->b->nextFd, &byte, 1, &got);
  if (rc == 0 && got == 0) return weftSuccess;
  char name[WEFT_SOCK_NAME_MAX];
  if (rc == 0)
    return weftSetError(
        weftRemoteError,
        "bootstrap: rank %d (%s) sent unexpected bytes on the ring during allgather",
        nextRank(t->b), peerName(t->b, nextRank(t->b), name));
  return ringFailed(t, rc, nextRank(t->b), "sending to");
}

static weftResult_t ringTimedOut(const struct ringTransfer *t) {
  const struct weftBootstrap *b = t->b;
  char prevName[WEFT_SOCK_NAME_MAX], nextName[WEFT_SOCK_NAME_MAX];
  return weftSetError(
      weftTimeout,
      "bootstrap: allgather on rank %d timed out after %lld ms: received %zu of %zu "
      "bytes from rank %d (%s), sent %zu of %zu bytes to rank %d (%s)",
      b->rank, (long long)(weftNowMs() - t->startMs), t->received, t->total, prevRank(b),
      peerName(b, prevRank(b), prevName), t->sent, t->total, nextRank(b),
      peerName(b, nextRank(b), nextName));
}

weftResult_t weftBootstrapAllGather(struct weftBootstrap *b, void *data, size_t bytesPerRank,
                                    int64_t deadlineMs) {
  if (b == NULL || (data == NULL && bytesPerRank > 0))
    return weftSetError(weftInvalidArgument, "bootstrap: allgather with a NULL %s",
                        b ? "buffer" : "bootstrap");
  if (b->nranks == 1 || bytesPerRank == 0) return weftSuccess;
  if (bytesPerRank > SIZE_MAX / (size_t)b->nranks)
    return weftSetError(weftInvalidArgument, "bootstrap: allgather of %zu bytes per rank overflows",
                        bytesPerRank);
  struct ringTransfer t = {.b = b,
                           .data = data,
                           .blockBytes = bytesPerRank,
                           .total = (size_t)(b->nranks - 1) * bytesPerRank,
                           .startMs = weftNowMs()};
  while (t.sent < t.total || t.received < t.total) {
    /* Both directions in one poll: a big block can fill the socket buffers only if the
     * receiving side drains them at the same time. */
    int sending = t.sent < t.total;
    struct pollfd fds[2] = {
        {.fd = sending ? b->nextFd : -1,
         .events = (short)(POLLIN | (t.sent < ringSendable(&t) ? POLLOUT : 0))},
        {.fd = t.received < t.total ? b->prevFd : -1, .events = POLLIN},
    };
    int ready = weftPollUntil(fds, 2, deadlineMs);
    if (ready == 0) return ringTimedOut(&t);
    if (ready < 0)
      return weftSetSysError(errno, "bootstrap: poll during allgather on rank %d", b->rank);
    if (fds[1].revents != 0) WEFTCHECK(ringReceive(&t));
    if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) WEFTCHECK(ringCheckNext(&t));
    if (fds[0].revents & POLLOUT) WEFTCHECK(ringSend(&t));
  }
  return weftSuccess;
}

weftResult_t weftBootstrapBarrier(struct weftBootstrap *b, int64_t deadlineMs) {
  if (b == NULL)
    return weftSetError(weftInvalidArgument, "bootstrap: barrier with a NULL bootstrap");
  uint8_t *bytes = calloc((size_t)b->nranks, 1);
  if (bytes == NULL) return weftSetError(weftSystemError, "bootstrap: out of memory for a barrier");
  weftResult_t res = weftBootstrapAllGather(b, bytes, 1, deadlineMs);
  free(bytes);
  return res;
}

weftResult_t weftBootstrapClose(struct weftBootstrap *b) {
  if (b == NULL) return weftSuccess;
  explicit_bzero(b->secret, sizeof b->secret);
  weftSocketClose(&b->nextFd);
  weftSocketClose(&b->prevFd);
  weftSocketClose(&b->listenFd);
  free(b->peers);
  free(b);
  return weftSuccess;
}

const uint8_t *weftBootstrapSecret(const struct weftBootstrap *b) { return b->secret; }

const union weftSockAddr *weftBootstrapPeerAddr(const struct weftBootstrap *b, int rank) {
  if (b == NULL || b->peers == NULL || rank < 0 || rank >= b->nranks) return NULL;
  return b->peers[rank].sa.sa_family != 0 ? &b->peers[rank] : NULL;
}

/* ---- Splits: the bootstrap of a communicator of some of the ranks (weftCommShrink) ---- */

/* The parent's secret bound to the epoch and the member list: members that disagree on either
 * refuse each other's ring hellos, so a disagreement fails instead of forming a wrong ring. */
static void splitSecret(const uint8_t *parent, uint64_t epoch, const int *members, int n,
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

/* A listener of its own, so the new communicator can be split in turn after its parent is
 * gone; its address travels over the new ring. */
static weftResult_t splitListener(struct weftBootstrap *b, const union weftSockAddr *like,
                                  int64_t deadlineMs) {
  union weftSockAddr local = *like;
  if (local.sa.sa_family == AF_INET6)
    local.sin6.sin6_port = 0;
  else
    local.sin.sin_port = 0;
  WEFTCHECK(weftSocketListen(&local, &b->listenFd, &b->listenAddr));
  uint8_t *table = calloc((size_t)b->nranks, ADDR_BYTES);
  if (table == NULL) return weftSetError(weftSystemError, "bootstrap: out of memory");
  weftSockAddrEncode(table + (size_t)b->rank * ADDR_BYTES, &b->listenAddr);
  weftResult_t res = weftBootstrapAllGather(b, table, ADDR_BYTES, deadlineMs);
  int bad = res == weftSuccess ? weftBootstrapParseTable(table, b->nranks, b->peers) : -1;
  if (bad >= 0)
    res = weftSetError(weftRemoteError, "bootstrap: rank %d sent an invalid listen address", bad);
  free(table);
  return res;
}

static weftResult_t checkMembers(const struct weftBootstrap *parent, const int *members, int n,
                                 int *me) {
  *me = -1;
  for (int i = 0; i < n; i++) {
    if (members[i] < 0 || members[i] >= parent->nranks || (i > 0 && members[i] <= members[i - 1]))
      return weftSetError(weftInternalError, "bootstrap: split members not ascending in range");
    if (members[i] == parent->rank) *me = i;
  }
  if (*me < 0) return weftSetError(weftInternalError, "bootstrap: rank %d splits without itself", parent->rank);
  if (n > 1 && parent->listenFd < 0)
    return weftSetError(weftInternalError, "bootstrap: rank %d has no listener to split", parent->rank);
  return weftSuccess;
}

weftResult_t weftBootstrapSplit(struct weftBootstrap *parent, const int *members, int n,
                                uint64_t epoch, int64_t deadlineMs, struct weftBootstrap **out) {
  *out = NULL;
  int me;
  WEFTCHECK(checkMembers(parent, members, n, &me));
  int64_t startMs = weftNowMs();
  struct weftBootstrap *b = calloc(1, sizeof *b);
  union weftSockAddr *peers = calloc((size_t)n, sizeof *peers);
  if (b == NULL || peers == NULL) {
    free(b);
    free(peers);
    return weftSetError(weftSystemError, "bootstrap: out of memory");
  }
  *b = (struct weftBootstrap){
      .rank = me, .nranks = n, .nextFd = -1, .prevFd = -1, .listenFd = -1, .peers = peers};
  for (int i = 0; i < n && parent->peers != NULL; i++) peers[i] = parent->peers[members[i]];
  splitSecret(parent->secret, epoch, members, n, b->secret);
  weftResult_t res = weftSuccess;
  if (n > 1) res = formRing(b, b->secret, parent->listenFd, &parent->listenAddr, startMs, deadlineMs);
  if (res == weftSuccess && n > 1) res = splitListener(b, &parent->listenAddr, deadlineMs);
  if (res != weftSuccess) {
    weftBootstrapClose(b);
    return res;
  }
  INFO(WEFT_BOOT, "bootstrap: rank %d is rank %d of %d after a split (epoch %llu) in %lld ms",
       parent->rank, me, n, (unsigned long long)epoch, (long long)(weftNowMs() - startMs));
  *out = b;
  return weftSuccess;
}

int weftBootstrapProbe(const struct weftBootstrap *b, int rank, int64_t timeoutMs) {
  const union weftSockAddr *addr = weftBootstrapPeerAddr(b, rank);
  if (addr == NULL || rank == b->rank) return 1;
  int fd = -1;
  int rc = weftSocketConnect(addr, weftNowMs() + timeoutMs, &fd);
  weftSocketClose(&fd);
  return !(rc == ECONNREFUSED || rc == EHOSTUNREACH || rc == ENETUNREACH || rc == WEFT_SOCK_TIMEOUT);
}

/* "rank 3 (addr), ..." for the other ranks whose listener refuses connections; their number. */
static int describeGone(const struct weftBootstrap *b, char *buf, size_t len) {
  size_t o = 0;
  int found = 0;
  buf[0] = '\0';
  for (int r = 0; r < b->nranks && b->peers != NULL; r++) {
    if (r == b->rank || weftBootstrapProbe(b, r, RING_PROBE_TIMEOUT_MS))
      continue;
    char name[WEFT_SOCK_NAME_MAX];
    if (o < len)
      o += (size_t)snprintf(buf + o, len - o, "%srank %d (%s)", found ? ", " : "", r,
                            peerName(b, r, name));
    found++;
  }
  return found;
}

void weftBootstrapCloseRing(struct weftBootstrap *b) {
  weftSocketClose(&b->nextFd);
  weftSocketClose(&b->prevFd);
}

void weftBootstrapCloseRingQuietly(struct weftBootstrap *b) {
  weftSocketCloseAbortive(&b->nextFd, 0);
  weftSocketCloseAbortive(&b->prevFd, 0);
}

void weftBootstrapSettle(void) {
  struct timespec pause = {0, GONE_SETTLE_MS * 1000000L};
  nanosleep(&pause, NULL);
}

/* A peer failing during init is often a neighbour of the rank that died, not that rank: the
 * ranks whose listeners refuse connections are the dead one and those that failed since. The
 * ring goes first, so the failure spreads while this rank looks. */
static void nameGoneRanks(struct weftBootstrap *b) {
  char gone[512];
  weftBootstrapCloseRing(b);
  weftBootstrapSettle();
  if (describeGone(b, gone, sizeof gone) == 0) return;
  char was[1024];
  snprintf(was, sizeof was, "%s", weftThreadLastError());
  weftSetError(weftRemoteError, "%s; ranks whose bootstrap listener is closed (dead, or failed "
               "since): %s", was, gone);
}

/* ---- Notes: fixed-size records between ring neighbours after init ---- */

static int noteFd(const struct weftBootstrap *b, int dir) {
  return dir == WEFT_NOTE_NEXT ? b->nextFd : b->prevFd;
}

/* Pushes what is left of the note being sent; 1 when none is left, 0 when it would block. */
static int noteFlush(struct weftBootstrap *b, int dir) {
  struct weftBootstrapNotes *q = &b->notes[dir];
  if (q->outSent == q->outLen) return 1;
  size_t done = q->outSent;
  int rc = weftSocketSendSome(noteFd(b, dir), q->out, q->outLen, &done);
  q->outSent = done;
  if (rc != 0) return -1;
  return q->outSent == q->outLen;
}

int weftBootstrapNoteSend(struct weftBootstrap *b, int dir, const uint8_t note[WEFT_BOOT_NOTE_BYTES]) {
  if (b == NULL || noteFd(b, dir) < 0) return -1;
  int rc = noteFlush(b, dir);
  if (rc != 1) return rc;
  struct weftBootstrapNotes *q = &b->notes[dir];
  memcpy(q->out, note, WEFT_BOOT_NOTE_BYTES);
  q->outLen = WEFT_BOOT_NOTE_BYTES;
  q->outSent = 0;
  return noteFlush(b, dir) < 0 ? -1 : 1;
}

int weftBootstrapNoteRecv(struct weftBootstrap *b, int dir, uint8_t note[WEFT_BOOT_NOTE_BYTES]) {
  if (b == NULL || noteFd(b, dir) < 0) return -1;
  (void)noteFlush(b, dir);
  struct weftBootstrapNotes *q = &b->notes[dir];
  size_t done = q->inLen;
  int rc = weftSocketRecvSome(noteFd(b, dir), q->in, WEFT_BOOT_NOTE_BYTES, &done);
  q->inLen = done;
  if (rc != 0) return -1;
  if (q->inLen < WEFT_BOOT_NOTE_BYTES) return 0;
  memcpy(note, q->in, WEFT_BOOT_NOTE_BYTES);
  q->inLen = 0;
  return 1;
}

int weftBootstrapNoteWait(struct weftBootstrap *b, int64_t deadlineMs) {
  if (b == NULL || (b->prevFd < 0 && b->nextFd < 0)) return -1;
  struct pollfd pfd[2] = {{.fd = b->nextFd, .events = POLLIN}, {.fd = b->prevFd, .events = POLLIN}};
  return weftPollUntil(pfd, 2, deadlineMs) > 0;
}
