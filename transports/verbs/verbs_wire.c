/* The verbs transport's bytes: connection blobs (exchanged through the authenticated
 * bootstrap, so a stranger cannot hand a rank its QP numbers or keys) and control messages. */
#include <string.h>

#include "bytes.h"
#include "verbs.h"

_Static_assert(VERBS_BLOB_BYTES <= WEFT_CONN_BLOB_BYTES, "the blob fits the bootstrap's");

/* magic u32 | version u32 | dir u32 | rank u32 | slotBytes u64 | nslots u32 | nqps u32 |
 * gid[16] | lid u16 | linkLayer u8 | mtu u8 | ringAddr u64 | ringRkey u32 | creditAddr u64 |
 * creditRkey u32 | qpn u32 x 8 | psn u32 x 8 */
void weftVerbsEncodeBlob(const struct verbsBlob *b, void *out) {
  uint8_t *p = out;
  memset(p, 0, WEFT_CONN_BLOB_BYTES);
  weftPutBe32(p, VERBS_BLOB_MAGIC);
  weftPutBe32(p + 4, VERBS_BLOB_VERSION);
  weftPutBe32(p + 8, b->dir);
  weftPutBe32(p + 12, b->rank);
  weftPutBe64(p + 16, b->shape.slotBytes);
  weftPutBe32(p + 24, b->shape.nslots);
  weftPutBe32(p + 28, b->shape.nqps);
  memcpy(p + 32, b->gid, 16);
  p[48] = (uint8_t)(b->lid >> 8);
  p[49] = (uint8_t)b->lid;
  p[50] = b->linkLayer;
  p[51] = b->mtu;
  weftPutBe64(p + 52, b->ringAddr);
  weftPutBe32(p + 60, b->ringRkey);
  weftPutBe64(p + 64, b->creditAddr);
  weftPutBe32(p + 72, b->creditRkey);
  for (int q = 0; q < VERBS_MAX_QPS; q++) {
    weftPutBe32(p + 76 + 4 * q, b->qpn[q]);
    weftPutBe32(p + 108 + 4 * q, b->psn[q]);
  }
}

int weftVerbsDecodeBlob(const void *in, struct verbsBlob *b) {
  const uint8_t *p = in;
  if (weftGetBe32(p) != VERBS_BLOB_MAGIC || weftGetBe32(p + 4) != VERBS_BLOB_VERSION) return -1;
  b->dir = weftGetBe32(p + 8);
  b->rank = weftGetBe32(p + 12);
  b->shape.slotBytes = weftGetBe64(p + 16);
  b->shape.nslots = weftGetBe32(p + 24);
  b->shape.nqps = weftGetBe32(p + 28);
  if (b->shape.nqps < 1 || b->shape.nqps > VERBS_MAX_QPS || b->shape.nslots < 1 ||
      b->shape.nslots > VERBS_MAX_SLOTS)
    return -1;
  memcpy(b->gid, p + 32, 16);
  b->lid = (uint16_t)(p[48] << 8 | p[49]);
  b->linkLayer = p[50];
  b->mtu = p[51];
  b->ringAddr = weftGetBe64(p + 52);
  b->ringRkey = weftGetBe32(p + 60);
  b->creditAddr = weftGetBe64(p + 64);
  b->creditRkey = weftGetBe32(p + 72);
  for (int q = 0; q < VERBS_MAX_QPS; q++) {
    b->qpn[q] = weftGetBe32(p + 76 + 4 * q);
    b->psn[q] = weftGetBe32(p + 108 + 4 * q);
  }
  return 0;
}

size_t weftVerbsCtrlEncode(uint8_t *out, uint32_t type, uint32_t reason, uint64_t value,
                           const char *note) {
  size_t len = note != NULL ? strnlen(note, VERBS_NOTE_BYTES) : 0;
  weftPutBe32(out, type);
  weftPutBe32(out + 4, reason);
  weftPutBe64(out + 8, value);
  weftPutBe32(out + 16, (uint32_t)len);
  if (len > 0) memcpy(out + VERBS_CTRL_HEAD_BYTES, note, len);
  return VERBS_CTRL_HEAD_BYTES + len;
}

int weftVerbsCtrlDecode(const uint8_t *in, size_t len, uint32_t *type, uint32_t *reason,
                        uint64_t *value, char note[VERBS_NOTE_BYTES + 1]) {
  if (len < VERBS_CTRL_HEAD_BYTES) return -1;
  uint32_t noteLen = weftGetBe32(in + 16);
  if (noteLen > VERBS_NOTE_BYTES || VERBS_CTRL_HEAD_BYTES + noteLen != len) return -1;
  *type = weftGetBe32(in);
  *reason = weftGetBe32(in + 4);
  *value = weftGetBe64(in + 8);
  if (*type != VERBS_CTRL_CLOSE) return -1;
  for (uint32_t i = 0; i < noteLen; i++) {
    uint8_t ch = in[VERBS_CTRL_HEAD_BYTES + i];
    note[i] = ch >= 0x20 && ch < 0x7f ? (char)ch : '?';
  }
  note[noteLen] = '\0';
  return 0;
}

uint32_t weftVerbsGidIpv4(const uint8_t gid[16]) {
  static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (memcmp(gid, prefix, sizeof prefix) != 0) return 0;
  uint32_t ip;
  memcpy(&ip, gid + 12, 4);
  return ip;
}
