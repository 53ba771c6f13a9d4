/* Verbs transport: a peer's connection blob (through the bootstrap) and a control message (a
 * SEND from the peer, any length its receive buffer holds). Input: blob[VERBS_BLOB_BYTES], then
 * the control message. A blob that decodes re-encodes to one that decodes to the same fields;
 * a control message that decodes has a printable, terminated note. */
#include "fuzz_common.h"
#include "verbs/verbs.h"

static void checkBlob(const uint8_t *bytes) {
  struct verbsBlob b, again;
  if (weftVerbsDecodeBlob(bytes, &b) != 0) return;
  if (b.shape.nqps < 1 || b.shape.nqps > VERBS_MAX_QPS || b.shape.nslots < 1 ||
      b.shape.nslots > VERBS_MAX_SLOTS)
    abort(); /* decode's bounds are what connect() indexes with */
  uint8_t out[WEFT_CONN_BLOB_BYTES] = {0};
  weftVerbsEncodeBlob(&b, out);
  if (weftVerbsDecodeBlob(out, &again) != 0) abort();
  if (again.dir != b.dir || again.rank != b.rank || again.shape.slotBytes != b.shape.slotBytes ||
      again.ringAddr != b.ringAddr || again.creditRkey != b.creditRkey ||
      memcmp(again.qpn, b.qpn, sizeof b.qpn) != 0 || memcmp(again.gid, b.gid, sizeof b.gid) != 0)
    abort();
  (void)weftVerbsGidIpv4(b.gid);
}

static void checkCtrl(const uint8_t *bytes, size_t len) {
  uint32_t type, reason;
  uint64_t value;
  char note[VERBS_NOTE_BYTES + 1];
  if (weftVerbsCtrlDecode(bytes, len, &type, &reason, &value, note) != 0) return;
  size_t n = strnlen(note, sizeof note);
  if (n == sizeof note) abort();
  for (size_t i = 0; i < n; i++)
    if (note[i] < 0x20 || note[i] >= 0x7f) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  uint8_t *blob = fuzzTake(&data, &size, VERBS_BLOB_BYTES);
  if (blob == NULL) return 0;
  checkBlob(blob);
  free(blob);
  size_t len = size < VERBS_CTRL_BYTES ? size : VERBS_CTRL_BYTES;
  uint8_t *ctrl = fuzzTake(&data, &size, len);
  if (ctrl != NULL) checkCtrl(ctrl, len);
  free(ctrl);
  return 0;
}
