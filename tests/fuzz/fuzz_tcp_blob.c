/* TCP transport: a peer's connection blob (WEFT_CONN_BLOB_BYTES, all-gathered through the
 * bootstrap), the hello a dialer sends a listener, and the close record a peer sends when it
 * leaves after a failure. Input: options u8 (bit 0: sign the hello with the right MAC),
 * blob[WEFT_CONN_BLOB_BYTES], hello[TCP_HELLO_BYTES], then any bytes as a close record. */
#include "fuzz_common.h"
#include "bootstrap.h"
#include "socket.h"
#include "tcp/tcp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  uint8_t opts = data[0];
  data++;
  size--;
  uint8_t *blob = fuzzTake(&data, &size, WEFT_CONN_BLOB_BYTES);
  if (blob == NULL) return 0;
  struct tcpBlob b;
  if (weftTcpDecodeBlob(blob, &b) == 0) {
    char name[WEFT_SOCK_NAME_MAX];
    weftSockAddrName(&b.listen, name);
    struct tcpShape local = {.slotBytes = 524288, .nslots = 8, .nsocks = 4, .minStripe = 65536};
    if (weftTcpSameShape(&b.shape, &local)) {
      size_t off, len;
      for (uint32_t s = 0; s < b.shape.nsocks; s++)
        weftTcpPart(&b.shape, b.shape.slotBytes, s, &off, &len);
    }
  }
  uint8_t *hello = fuzzTake(&data, &size, TCP_HELLO_BYTES);
  if (hello != NULL) {
    if (opts & 1) {
      static const uint8_t tag[8] = {'w', 'e', 'f', 't', 't', 'c', 'p', 'H'};
      uint8_t msg[8 + TCP_NONCE_BYTES + TCP_HELLO_PAYLOAD_BYTES];
      memcpy(msg, tag, 8);
      memcpy(msg + 8, fuzzNonceA, TCP_NONCE_BYTES);
      memcpy(msg + 8 + TCP_NONCE_BYTES, hello + TCP_HELLO_PAYLOAD_OFFSET, TCP_HELLO_PAYLOAD_BYTES);
      fuzzPutBe32(hello, TCP_HELLO_MAGIC);
      weftBootstrapMac(fuzzSecret, msg, sizeof msg, hello + TCP_HELLO_MAC_OFFSET);
    }
    struct tcpHello h;
    uint8_t ack[TCP_ACK_BYTES];
    if (weftTcpOpenHello(hello, fuzzSecret, fuzzNonceA, &h) == NULL)
      weftTcpAckMac(ack, fuzzSecret, h.clientNonce, fuzzNonceA, h.connId, h.stream);
    free(hello);
  }
  /* A close record as the receiving side takes it: head, length check, then the note. */
  struct tcpRecord r = {.len = 0};
  size_t n = size < sizeof r.buf ? size : sizeof r.buf;
  uint32_t reason;
  size_t noteLen;
  if (n >= TCP_RECORD_HEAD_BYTES && weftTcpParseRecordHead(data, &reason, &noteLen) == 0 &&
      n >= TCP_RECORD_HEAD_BYTES + noteLen) {
    memcpy(r.buf, data, TCP_RECORD_HEAD_BYTES + noteLen);
    r.len = r.done = TCP_RECORD_HEAD_BYTES + noteLen;
    r.complete = 1;
    char note[TCP_NOTE_BYTES + 1];
    (void)weftTcpRecordNote(&r, note, sizeof note);
  }
  free(blob);
  return 0;
}
