/* The verbs transport's bytes (transports/verbs/verbs_wire.c), no device needed: a blob comes
 * back as it went, a blob of another kind, version or shape is refused, CLOSE messages round
 * trip and malformed ones are refused, IPv4-mapped GIDs give their address. */
#include <criterion/criterion.h>
#include <string.h>

#ifdef WEFT_HAVE_VERBS
#include "../../transports/verbs/verbs.h"

Test(verbs_wire, blob_round_trip, .timeout = 10) {
  struct verbsBlob b = {.dir = 1, .rank = 7, .shape = {524288, 8, 3}, .lid = 0x1234,
                        .linkLayer = 2, .mtu = 3, .ringAddr = 0x7f00dead0000ull, .ringRkey = 0xabcdef,
                        .creditAddr = 0, .creditRkey = 0};
  for (int i = 0; i < 16; i++) b.gid[i] = (uint8_t)(i * 17);
  for (int q = 0; q < VERBS_MAX_QPS; q++) {
    b.qpn[q] = 0x100u + (uint32_t)q;
    b.psn[q] = 0xffffffu - (uint32_t)q;
  }
  uint8_t wire[WEFT_CONN_BLOB_BYTES];
  weftVerbsEncodeBlob(&b, wire);
  struct verbsBlob got;
  cr_assert_eq(weftVerbsDecodeBlob(wire, &got), 0);
  cr_expect_eq(memcmp(&got.gid, &b.gid, 16), 0);
  cr_expect(got.dir == 1 && got.rank == 7 && got.shape.slotBytes == 524288 && got.shape.nslots == 8 &&
            got.shape.nqps == 3 && got.lid == 0x1234 && got.linkLayer == 2 && got.mtu == 3 &&
            got.ringAddr == b.ringAddr && got.ringRkey == b.ringRkey);
  for (int q = 0; q < VERBS_MAX_QPS; q++) cr_expect(got.qpn[q] == b.qpn[q] && got.psn[q] == b.psn[q]);
  uint8_t bad[WEFT_CONN_BLOB_BYTES];
  memcpy(bad, wire, sizeof bad);
  bad[0] ^= 1; /* magic */
  cr_expect_eq(weftVerbsDecodeBlob(bad, &got), -1);
  memcpy(bad, wire, sizeof bad);
  bad[7] ^= 1; /* version: another than ours */
  cr_expect_eq(weftVerbsDecodeBlob(bad, &got), -1);
  b.shape.nqps = 9;
  weftVerbsEncodeBlob(&b, bad);
  cr_expect_eq(weftVerbsDecodeBlob(bad, &got), -1);
}

Test(verbs_wire, close_message, .timeout = 10) {
  uint8_t buf[VERBS_CTRL_BYTES];
  size_t len = weftVerbsCtrlEncode(buf, VERBS_CTRL_CLOSE, 5, 42, "rank 3 failed\n");
  uint32_t type, reason;
  uint64_t value;
  char note[VERBS_NOTE_BYTES + 1];
  cr_assert_eq(weftVerbsCtrlDecode(buf, len, &type, &reason, &value, note), 0);
  cr_expect(type == VERBS_CTRL_CLOSE && reason == 5 && value == 42);
  cr_expect_str_eq(note, "rank 3 failed?");
  cr_expect_eq(weftVerbsCtrlDecode(buf, len - 1, &type, &reason, &value, note), -1);
  cr_expect_eq(weftVerbsCtrlDecode(buf, 3, &type, &reason, &value, note), -1);
  buf[3] = 9; /* an unknown type */
  cr_expect_eq(weftVerbsCtrlDecode(buf, len, &type, &reason, &value, note), -1);
}

Test(verbs_wire, ipv4_mapped_gid, .timeout = 10) {
  uint8_t gid[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 168, 77, 2};
  uint32_t ip = weftVerbsGidIpv4(gid);
  cr_expect_eq(memcmp(&ip, gid + 12, 4), 0);
  gid[0] = 0xfe;
  cr_expect_eq(weftVerbsGidIpv4(gid), 0);
}
#else
Test(verbs_wire, not_built, .timeout = 10) {
  cr_skip_test("[needs rdma] weft was built without libibverbs/librdmacm (libibverbs-dev, librdmacm-dev)");
}
#endif
