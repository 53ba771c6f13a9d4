/* The UCX transport's bytes: connection blobs (exchanged through the authenticated
 * bootstrap), control messages, and the tags that name a link's messages. */
#include <sodium.h>
#include <string.h>

#include "bytes.h"
#include "ucx.h"

_Static_assert(UCX_KEY_BYTES == crypto_shorthash_KEYBYTES, "the tag key is SipHash-2-4's");

/* magic u32 | version u32 | dir u32 | rank u32 | slotBytes u64 | nslots u32 | addrLen u32 |
 * key[16] | worker address */
void weftUcxEncodeBlob(const struct ucxBlob *b, void *out) {
  uint8_t *p = out;
  memset(p, 0, WEFT_CONN_BLOB_BYTES);
  weftPutBe32(p, UCX_BLOB_MAGIC);
  weftPutBe32(p + 4, UCX_BLOB_VERSION);
  weftPutBe32(p + 8, b->dir);
  weftPutBe32(p + 12, b->rank);
  weftPutBe64(p + 16, b->shape.slotBytes);
  weftPutBe32(p + 24, b->shape.nslots);
  weftPutBe32(p + 28, b->addrLen);
  memcpy(p + 32, b->key, UCX_KEY_BYTES);
  memcpy(p + UCX_BLOB_HEAD_BYTES, b->addr, b->addrLen);
}

int weftUcxDecodeBlob(const void *in, struct ucxBlob *b) {
  const uint8_t *p = in;
  if (weftGetBe32(p) != UCX_BLOB_MAGIC || weftGetBe32(p + 4) != UCX_BLOB_VERSION) return -1;
  b->dir = weftGetBe32(p + 8);
  b->rank = weftGetBe32(p + 12);
  b->shape.slotBytes = weftGetBe64(p + 16);
  b->shape.nslots = weftGetBe32(p + 24);
  b->addrLen = weftGetBe32(p + 28);
  if (b->addrLen == 0 || b->addrLen > UCX_ADDR_MAX_BYTES) return -1;
  memcpy(b->key, p + 32, UCX_KEY_BYTES);
  memcpy(b->addr, p + UCX_BLOB_HEAD_BYTES, b->addrLen);
  return 0;
}

static uint64_t keyedTag(const uint8_t key[UCX_KEY_BYTES], uint8_t kind, uint64_t seq) {
  uint8_t in[9], out[crypto_shorthash_BYTES];
  in[0] = kind;
  weftPutBe64(in + 1, seq);
  crypto_shorthash(out, in, sizeof in, key);
  return weftGetBe64(out);
}

uint64_t weftUcxSlotTag(const uint8_t key[UCX_KEY_BYTES], uint64_t seq) {
  return keyedTag(key, 'D', seq);
}

uint64_t weftUcxCtrlTag(const uint8_t key[UCX_KEY_BYTES], int fromDir, uint64_t seq) {
  return keyedTag(key, fromDir == WEFT_DIR_SEND ? 'S' : 'R', seq);
}

size_t weftUcxCtrlEncode(uint8_t out[UCX_CTRL_BYTES], uint32_t type, uint32_t reason,
                         uint64_t value, const char *note) {
  size_t len = note != NULL ? strnlen(note, UCX_NOTE_BYTES) : 0;
  weftPutBe32(out, type);
  weftPutBe32(out + 4, reason);
  weftPutBe64(out + 8, value);
  weftPutBe32(out + 16, (uint32_t)len);
  if (len > 0) memcpy(out + UCX_CTRL_HEAD_BYTES, note, len);
  return UCX_CTRL_HEAD_BYTES + len;
}

int weftUcxCtrlDecode(const uint8_t *in, size_t len, uint32_t *type, uint32_t *reason,
                      uint64_t *value, char note[UCX_NOTE_BYTES + 1]) {
  if (len < UCX_CTRL_HEAD_BYTES) return -1;
  uint32_t noteLen = weftGetBe32(in + 16);
  if (noteLen > UCX_NOTE_BYTES || UCX_CTRL_HEAD_BYTES + noteLen != len) return -1;
  *type = weftGetBe32(in);
  *reason = weftGetBe32(in + 4);
  *value = weftGetBe64(in + 8);
  if (*type != UCX_CTRL_CREDIT && *type != UCX_CTRL_CLOSE) return -1;
  for (uint32_t i = 0; i < noteLen; i++) {
    uint8_t ch = in[UCX_CTRL_HEAD_BYTES + i];
    note[i] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
  }
  note[noteLen] = '\0';
  return 0;
}
