#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target (tests/fuzz/corpus/<target>/): a few valid
inputs each, in the layouts the targets' comments describe. Run again after a layout change."""
import os, struct

HERE = os.path.dirname(os.path.abspath(__file__))

def be32(v): return struct.pack(">I", v)
def be64(v): return struct.pack(">Q", v)

def addr4(ip, port):
    return bytes([4, 0]) + struct.pack(">H", port) + bytes(ip) + bytes(12) + be32(0)

def addr6(ip16, port, scope=0):
    return bytes([6, 0]) + struct.pack(">H", port) + bytes(ip16) + be32(scope)

LOOP = [127, 0, 0, 1]
V6 = [0] * 15 + [1]
NONCE = bytes(range(16))
MAC = 16  # the MAC's tag (the targets sign with the right one when opts bit 0 is set)

def boot_hello(opts, nranks, kind, rank, hn, addr):
    payload = be32(kind) + be32(rank) + be32(hn) + NONCE + addr
    return bytes([opts]) + be32(nranks) + be32(0x57465448) + bytes(MAC) + payload

def boot_reply(opts, nranks, type_, arg, body):
    return (bytes([opts]) + struct.pack(">H", nranks) + be32(0x57465452) + be32(type_) + be32(arg)
            + be32(len(body)) + bytes(MAC) + body)

def boot_msg(opts, frm, nranks, copies, tag, reqs):
    data = bytes((i * 7 + tag) & 0xFF for i in range(320))
    wire = be32(0x57465450) + be32(tag) + data + bytes(MAC)
    return (bytes([opts]) + struct.pack(">HHB", frm, nranks, copies) + wire + bytes(MAC)
            + b"".join(struct.pack(">HI", p, t) for p, t in reqs))

def unique_id(addr):
    return (be32(0x57465449) + bytes([0, 2, 0, 0]) + addr + bytes(range(16))).ljust(128, b"\0")

def shape():
    return be64(524288) + be32(8) + be32(4) + be32(65536)

def tcp(opts, dir_, rank, addr, stream):
    blob = (be32(0x57544342) + bytes([0, 2, 0, dir_]) + be32(rank) + shape() + be64(0x1234)
            + addr).ljust(256, b"\0")
    hello = be32(0x57544348) + bytes(MAC) + be64(0x1234) + be32(1) + be32(0) + be32(stream) \
        + shape() + NONCE
    return bytes([opts]) + blob + hello

def shm(name, slot, nslots):
    return (name.encode().ljust(48, b"\0") + struct.pack("<QI", slot, nslots)).ljust(256, b"\0")

def note(kind, seq, rank_a, rank_b, sig_a, sig_b, what_a=1):
    return (be32(0x5746544E) + be32(kind) + be64(seq) + be32(rank_a) + be32(rank_b) + be64(sig_a)
            + be64(sig_b) + be64(what_a))

def sig(count, type_, op):
    return count << 16 | type_ << 8 | op

def peer(rank, host_id, hostname):
    return (struct.pack("<iiQ", rank, 4242, 0x0123456789abcdef) + host_id.encode().ljust(64, b"\0")
            + hostname.encode().ljust(64, b"\0"))

seeds = {
    "fuzz_boot_hello": [
        boot_hello(1, 0, 1, 0, 4, addr4(LOOP, 40000)),
        boot_hello(3, 4, 1, 3, 4, addr6(V6, 40001)),
        boot_hello(5, 4, 2, 3, 4, addr4(LOOP, 40002)),
        boot_hello(0, 2, 1, 1, 2, addr4(LOOP, 40003)),
    ],
    "fuzz_boot_reply": [
        boot_reply(1, 2, 1, 1, b""),
        boot_reply(1, 2, 2, 2, addr4(LOOP, 40000) + addr6(V6, 40001, 2)),
        boot_reply(1, 3, 3, 2, b""),
        boot_reply(0, 1, 2, 1, addr4(LOOP, 1)),
        boot_reply(1, 7, 1, 3, be32(1) + be32(3) + be32(5) + be32(6)),
        boot_reply(1, 7, 3, 3, be32(1) + be32(3) + be32(5) + be32(6)),
        boot_reply(1, 40, 1, 2, b"".join(be32(r) for r in range(2, 18))),
    ],
    "fuzz_boot_msg": [
        boot_msg(3, 0, 2, 1, 7, [(0, 7)]),
        boot_msg(5, 2, 8, 70, 1, [(2, 1)] * 3 + [(2, 2), (1, 1)]),
        boot_msg(1, 0, 3, 2, 0xFFFFFFFF, []),
        boot_msg(0, 1, 4, 1, 9, [(1, 9)]),
    ],
    "fuzz_unique_id": [unique_id(addr4(LOOP, 29500)), unique_id(addr6(V6, 29501, 3))],
    "fuzz_tcp_blob": [tcp(1, 1, 1, addr4(LOOP, 40000), 0), tcp(1, 0, 2, bytes(24), 3),
                      tcp(0, 1, 0, addr6(V6, 1), 1)],
    "fuzz_sig_note": [note(1, 6, 3, 0, sig(100, 7, 0), 0),
                      note(2, 6, 1, 2, sig(100, 7, 0), sig(101, 8, 2)),
                      note(1, 7, 2, 1, sig(5, 7, 0), 3, 1 << 32 | 2),   # Broadcast root 1
                      note(1, 8, 0, 1, sig(9, 2, 1), 4, 2 << 32 | 1)],  # Reduce root 0
    "fuzz_shm_blob": [shm("/weft-4026531836-1234-0123456789abcdef01234567", 131072, 8),
                      shm("/weft-1-00", 4096, 2)],
    "fuzz_param_int": [b"123", b"4K", b" 0x10M ", b"-5G", b"9223372036854775807"],
    "fuzz_ifname": [b"eth,ib\0eth0", b"^lo,docker\0lo", b"=eth0\0eth0", b"\0anything"],
    "fuzz_comm_id": [b"\xff127.0.0.1:29500", b"\xff[::1]:8080", b"\x10host.example:1",
                     b"\xff[fe80::1%eth0]:65535"],
    "fuzz_debug_env": [b"\x80\x04hostINIT,COLL", b"\x80\x04host^BOOT,tcp",
                       b"\x02\x3f" + b"h" * 63 + b"/tmp/weft-%h-%p.log", b"\x80\x00%p%h%%"],
    "fuzz_topo": [peer(0, "myhost/0f3c2a1b-1111-2222-3333-444455556666/f0000098", "myhost"),
                  b"0f3c2a1b-1111-2222-3333-444455556666\n", peer(7, "forced-id", "h" * 63)],
}

def verbs_blob(dir_, rank, nslots, nqps, gid):
    b = be32(0x57494256) + be32(2) + be32(dir_) + be32(rank) + be64(131072) + be32(nslots) + be32(nqps)
    b += bytes(gid) + bytes([0, 1, 2, 3]) + be64(0x7f0000001000) + be32(0x1234) + be64(0x7f0000002000) + be32(0x5678)
    b += b"".join(be32(0x100 + q) for q in range(8)) + b"".join(be32(0x200 + q) for q in range(8))
    return b + bytes(140 - len(b))

def verbs_close(reason, value, note):
    return be32(2) + be32(reason) + be64(value) + be32(len(note)) + note  # VERBS_CTRL_CLOSE

ROCE_GID = [0] * 10 + [0xff, 0xff, 192, 168, 77, 1]
seeds["fuzz_verbs_wire"] = [verbs_blob(0, 1, 8, 1, ROCE_GID) + verbs_close(6, 12, b"rank 3 died"),
                            verbs_blob(1, 0, 64, 8, [0xfe, 0x80] + [0] * 14) + verbs_close(0, 0, b"")]

# weft-sim's fabric files: the ones it ships.
FABRICS = os.path.join(HERE, "..", "..", "tools", "sim", "fabrics")
seeds["fuzz_fabric"] = [open(os.path.join(FABRICS, n), "rb").read()
                        for n in sorted(os.listdir(FABRICS)) if n.endswith(".fabric")]

for target, inputs in seeds.items():
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for i, data in enumerate(inputs):
        with open(os.path.join(d, "seed-%d" % i), "wb") as f:
            f.write(data)
