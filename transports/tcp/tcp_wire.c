/* TCP transport: what goes on the wire (blobs, the handshake and its MACs, slot striping)
 * and socket options. See docs/transports/tcp.md for the layouts. */
#include <errno.h>
#include <stdio.h>
#include <netinet/tcp.h>
#include <string.h>
#include <sys/random.h>

#include "bootstrap.h"
#include "check.h"
#include "tcp.h"

/* Distinct prefixes keep a MAC of one message kind from ever passing as another, or as a
 * bootstrap MAC made with the same secret. */
static const uint8_t tcpHelloTag[8] = {'w', 'e', 'f', 't', 't', 'c', 'p', 'H'};
static const uint8_t tcpAckTag[8] = {'w', 'e', 'f', 't', 't', 'c', 'p', 'A'};

/* family u8 (0, 4, 6) | 0 u8 | port u16 | address[16] | IPv6 scope u32, as the bootstrap. */

static void tcpPutShape(uint8_t *p, const struct tcpShape *shape) {
  weftPutBe64(p, shape->slotBytes);
  weftPutBe32(p + 8, shape->nslots);
  weftPutBe32(p + 12, shape->nsocks);
  weftPutBe32(p + 16, shape->minStripe);
}

static void tcpGetShape(const uint8_t *p, struct tcpShape *shape) {
  shape->slotBytes = weftGetBe64(p);
  shape->nslots = weftGetBe32(p + 8);
  shape->nsocks = weftGetBe32(p + 12);
  shape->minStripe = weftGetBe32(p + 16);
}

int weftTcpSameShape(const struct tcpShape *a, const struct tcpShape *b) {
  return a->slotBytes == b->slotBytes && a->nslots == b->nslots && a->nsocks == b->nsocks &&
         a->minStripe == b->minStripe;
}

/* magic u32 | version u16 | dir u16 | rank u32 | shape[20] | connId u64 | listen[24] */
void weftTcpEncodeBlob(const struct tcpBlob *b, void *out) {
  uint8_t *p = out;
  memset(p, 0, WEFT_CONN_BLOB_BYTES);
  weftPutBe32(p, TCP_BLOB_MAGIC);
  p[4] = 0;
  p[5] = TCP_BLOB_VERSION;
  p[6] = 0;
  p[7] = (uint8_t)b->dir;
  weftPutBe32(p + 8, b->rank);
  tcpPutShape(p + 12, &b->shape);
  weftPutBe64(p + 32, b->connId);
  weftSockAddrEncode(p + 40, &b->listen);
}

int weftTcpDecodeBlob(const void *in, struct tcpBlob *b) {
  const uint8_t *p = in;
  memset(b, 0, sizeof *b);
  if (weftGetBe32(p) != TCP_BLOB_MAGIC || p[4] != 0 || p[5] != TCP_BLOB_VERSION) return -1;
  b->dir = p[7];
  b->rank = weftGetBe32(p + 8);
  tcpGetShape(p + 12, &b->shape);
  b->connId = weftGetBe64(p + 32);
  return weftSockAddrDecode(p + 40, &b->listen) < 0 ? -1 : 0;
}

/* payload = connId u64 | fromRank u32 | toRank u32 | stream u32 | shape[20] | clientNonce[16] */
static void tcpPutHelloPayload(uint8_t *p, const struct tcpHello *h) {
  weftPutBe64(p, h->connId);
  weftPutBe32(p + 8, h->fromRank);
  weftPutBe32(p + 12, h->toRank);
  weftPutBe32(p + 16, h->stream);
  tcpPutShape(p + 20, &h->shape);
  memcpy(p + 40, h->clientNonce, TCP_NONCE_BYTES);
}

_Static_assert(TCP_MAC_BYTES == WEFT_BOOT_MAC_BYTES && TCP_SECRET_BYTES == 16,
               "the bootstrap's MAC and secret");

static void tcpHelloMac(const uint8_t *secret, const uint8_t *serverNonce, const uint8_t *payload,
                        uint8_t tag[TCP_MAC_BYTES]) {
  uint8_t msg[sizeof tcpHelloTag + TCP_NONCE_BYTES + TCP_HELLO_PAYLOAD_BYTES];
  memcpy(msg, tcpHelloTag, sizeof tcpHelloTag);
  memcpy(msg + sizeof tcpHelloTag, serverNonce, TCP_NONCE_BYTES);
  memcpy(msg + sizeof tcpHelloTag + TCP_NONCE_BYTES, payload, TCP_HELLO_PAYLOAD_BYTES);
  weftBootstrapMac(secret, msg, sizeof msg, tag);
}

/* hello = magic u32 | mac[16] | payload */
void weftTcpBuildHello(uint8_t out[TCP_HELLO_BYTES], const uint8_t *secret,
                       const uint8_t *serverNonce, const struct tcpHello *h) {
  weftPutBe32(out, TCP_HELLO_MAGIC);
  tcpPutHelloPayload(out + TCP_HELLO_PAYLOAD_OFFSET, h);
  tcpHelloMac(secret, serverNonce, out + TCP_HELLO_PAYLOAD_OFFSET, out + TCP_HELLO_MAC_OFFSET);
}

const char *weftTcpOpenHello(const uint8_t hello[TCP_HELLO_BYTES], const uint8_t *secret,
                             const uint8_t *serverNonce, struct tcpHello *h) {
  if (weftGetBe32(hello) != TCP_HELLO_MAGIC) return "not a weft tcp hello (wrong magic)";
  const uint8_t *p = hello + TCP_HELLO_PAYLOAD_OFFSET;
  uint8_t want[TCP_MAC_BYTES];
  tcpHelloMac(secret, serverNonce, p, want);
  if (!weftBootstrapMacEqual(hello + TCP_HELLO_MAC_OFFSET, want))
    return "wrong MAC: it does not hold this communicator's secret";
  h->connId = weftGetBe64(p);
  h->fromRank = weftGetBe32(p + 8);
  h->toRank = weftGetBe32(p + 12);
  h->stream = weftGetBe32(p + 16);
  tcpGetShape(p + 20, &h->shape);
  memcpy(h->clientNonce, p + 40, TCP_NONCE_BYTES);
  return NULL;
}

void weftTcpAckMac(uint8_t ack[TCP_ACK_BYTES], const uint8_t *secret, const uint8_t *clientNonce,
                   const uint8_t *serverNonce, uint64_t connId, uint32_t stream) {
  uint8_t msg[sizeof tcpAckTag + 2 * TCP_NONCE_BYTES + 12];
  uint8_t *p = msg;
  memcpy(p, tcpAckTag, sizeof tcpAckTag);
  p += sizeof tcpAckTag;
  memcpy(p, clientNonce, TCP_NONCE_BYTES);
  p += TCP_NONCE_BYTES;
  memcpy(p, serverNonce, TCP_NONCE_BYTES);
  p += TCP_NONCE_BYTES;
  weftPutBe64(p, connId);
  weftPutBe32(p + 8, stream);
  weftBootstrapMac(secret, msg, sizeof msg, ack);
}

/* A slot is cut into at most nsocks parts of at least minStripe bytes, so a small message
 * costs one system call on one stream, and a full slot keeps every stream busy. Parts start
 * on 4 KiB boundaries. Both ends compute the same cut from the slot's size. */
void weftTcpPart(const struct tcpShape *shape, size_t bytes, uint32_t stream, size_t *off,
                 size_t *len) {
  size_t nparts = bytes / shape->minStripe;
  if (nparts < 1) nparts = 1;
  if (nparts > shape->nsocks) nparts = shape->nsocks;
  size_t base = (bytes + nparts - 1) / nparts;
  base = (base + 4095) & ~(size_t)4095;
  size_t start = (size_t)stream * base;
  if (stream >= nparts || (start >= bytes && stream > 0)) {
    *off = bytes;
    *len = 0;
    return;
  }
  *off = start;
  *len = bytes - start < base ? bytes - start : base;
}

/* ---- Close records ---- */

/* Notes come from another process and end up in messages and logs: printable ASCII only. */
static void tcpPrintable(char *text) {
  for (; *text != '\0'; text++)
    if (*text < 0x20 || *text > 0x7e) *text = '?';
}

void weftTcpRecordEncode(struct tcpRecord *r, uint32_t reason, const char *note) {
  char text[TCP_NOTE_BYTES + 1];
  snprintf(text, sizeof text, "%s", note);
  tcpPrintable(text);
  size_t n = strlen(text);
  weftPutBe32(r->buf, TCP_CLOSE_MARK);
  weftPutBe32(r->buf + 4, reason);
  weftPutBe32(r->buf + 8, (uint32_t)n);
  memcpy(r->buf + TCP_RECORD_HEAD_BYTES, text, n);
  r->len = TCP_RECORD_HEAD_BYTES + n;
  r->done = 0;
  r->complete = 0;
}

int weftTcpParseRecordHead(const uint8_t *head, uint32_t *reason, size_t *noteLen) {
  uint32_t n = weftGetBe32(head + 8);
  if (weftGetBe32(head) != TCP_CLOSE_MARK || n > TCP_NOTE_BYTES) return -1;
  *reason = weftGetBe32(head + 4);
  *noteLen = n;
  return 0;
}

weftResult_t weftTcpRecordNote(const struct tcpRecord *r, char *out, size_t len) {
  uint32_t reason = 0;
  size_t n = 0;
  if (len == 0) return weftRemoteError;
  out[0] = '\0';
  if (!r->complete || weftTcpParseRecordHead(r->buf, &reason, &n) != 0) return weftRemoteError;
  if (n > len - 1) n = len - 1;
  memcpy(out, r->buf + TCP_RECORD_HEAD_BYTES, n);
  out[n] = '\0';
  tcpPrintable(out);
  /* Only codes a close can stand for; anything else is a plain remote error. */
  if (reason == weftInvalidUsage || reason == weftTimeout) return (weftResult_t)reason;
  return weftRemoteError;
}

weftResult_t weftTcpRandom(void *buf, size_t len) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = getrandom((char *)buf + done, len - done, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return weftSetSysError(errno, "tcp: getrandom(%zu bytes)", len);
    done += (size_t)n;
  }
  return weftSuccess;
}

void weftTcpSetBuffers(int fd, size_t bytes) {
  if (bytes == 0) return;
  int value = bytes > (size_t)INT32_MAX ? INT32_MAX : (int)bytes;
  /* The kernel caps these at net.core.[rw]mem_max; a smaller buffer still works, only slower. */
  if (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &value, sizeof value) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &value, sizeof value) != 0)
    INFO(WEFT_TCP, "tcp: socket buffers of %d bytes not set on fd %d: %s", value, fd,
         strerror(errno));
}
