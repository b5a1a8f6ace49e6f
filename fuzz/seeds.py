#!/usr/bin/env python3
"""Writes the seed corpus of every fuzz target into fuzz/corpus/<target>/ (run from anywhere;
the files are committed). Each seed is a well-formed input, so that the fuzzer starts from the
formats' real structure; malformed variants are its job."""
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# bootstrap_wire: first byte = how the stream is cut into reads, then frames
# (u32 type, u32 body length, body; big-endian), as src/bootstrap/wire.h writes them.
def frame(msg, body):
    return struct.pack(">II", msg, len(body)) + body


MAGIC, VERSION = 0x46464253, 2  # src/bootstrap/wire.h kVersion
nonce, mac = bytes(range(32)), bytes(range(32, 64))
challenge = frame(1, struct.pack(">II", MAGIC, VERSION) + nonce)
hello = frame(2, struct.pack(">IIII", MAGIC, VERSION, 3, 8) + nonce + mac)
welcome = frame(3, mac)
reject = frame(4, b"wrong secret")
ready = frame(5, b"")
gather = frame(6, struct.pack(">I", 1) + b"blob-of-rank")
blobs = [b"a", b"bb", b"", b"dddd"]
result = frame(7, struct.pack(">I", len(blobs)) + b"".join(struct.pack(">I", len(b)) for b in blobs) + b"".join(blobs))
abort = frame(8, struct.pack(">I", 2) + b"rank 2 failed")
bye = frame(9, b"")
write("bootstrap_wire", "coordinator_side", b"\x00" + hello + gather + frame(6, struct.pack(">I", 2)) + bye)
write("bootstrap_wire", "client_side", b"\x05" + challenge + welcome + ready + result + abort)
write("bootstrap_wire", "reject", b"\x01" + challenge + reject)

# transport_keys: byte 0 = decoder (0 local, 1 libfabric, 2 libfabric raw), byte 1 = peer.
local_key = struct.pack("<IHHiIQQ", 0x4B4C4646, 1, 0, 3, 0, 7, 1 << 20)
write("transport_keys", "local", b"\x00\x03" + local_key)
fabric_key = struct.pack("<IHHQQQ", 0x4B4D4646, 1, 0, 0x7F0000001000, 1 << 20, 0x1234)
write("transport_keys", "fabric", b"\x01\x03" + fabric_key)
raw = bytes(range(24))
write("transport_keys", "fabric_raw", b"\x02\x03" + struct.pack("<IHHQQQ", 0x4B4D4646, 1, len(raw), 0, 4096, 0) + raw)

# flow_slot, mode 0 (byte 0 < 128; bit 0 = separate notify): the hello a producer sends
# (src/flow/layout.h Hello, version 6: ... format, sum, word_first, then after the lengths the
# sender's rank 3 and its peer 0), expected by a push1-watermark-pull consumer of 64 x 64 B.
HELLO = "<IHBBBBBBBBBxQQQIIii"
key = b"K" * 32
hello_blob = struct.pack(HELLO, 0x48514646, 6, 0, 0, 0, 0, 0, 0, 0, 0, 0, 64, 64, 8192, len(key), 0, 3, 0)
write("flow_slot", "hello", b"\x00" + hello_blob + key)
nkey = b"N" * 16
hello_sep = struct.pack(HELLO, 0x48514646, 6, 0, 0, 0, 0, 0, 1, 0, 0, 0, 64, 64, 8192, len(key), len(nkey), 3, 0)
write("flow_slot", "hello_separate", b"\x01" + hello_sep + key + nkey)
write("flow_slot", "refused", b"\x00" + struct.pack(HELLO, 0x48514646, 6, 0, 0, 0, 0, 1, 0, 0, 0, 0, 64, 64, 0, 0, 0, 3, 0) + b"no writedata here")
# mode 1 (byte 0 >= 128): u16 item_bytes, u8 sum, u64 index, then the slot
# [seq u64 | len u32 | flags u32 | payload rounded to 8 | seq u64 | len u32, flags u32].
payload = bytes(range(40))
seq = 6
slot = struct.pack("<QII", seq, len(payload), 0) + payload + struct.pack("<QII", seq, len(payload), 0)
write("flow_slot", "slot", b"\x80" + struct.pack("<HBQ", 64, 0, seq - 1) + slot)
write("flow_slot", "close", b"\x80" + struct.pack("<HBQ", 64, 0, 9) + struct.pack("<QIIQII", 10, 0, 1, 10, 0, 1))

# rr_frames: u16 max payload, u64 awaited sequence, u32 received length, then one slot:
# [stamp u64 = seq << 25 | bye << 24 | len][source u32][slot u32][payload, rounded to 8][stamp].
def rr_frame(seq, length, source, slot, bye=False):
    word = seq << 25 | (1 << 24 if bye else 0) | length
    padded = (length + 7) // 8 * 8
    return struct.pack("<QII", word, source, slot) + bytes(range(length)) + bytes(padded - length) + struct.pack("<Q", word)


f = rr_frame(5, 40, 2, 1)
write("rr_frames", "request", struct.pack("<HQI", 64, 5, len(f)) + f)
f = rr_frame(9, 0, 0, 3, bye=True)
write("rr_frames", "close", struct.pack("<HQI", 64, 8, len(f)) + f)
f = rr_frame(7, 64, 1, 0)
write("rr_frames", "full", struct.pack("<HQI", 64, 7, len(f)) + f)

# local_ring: u64 our head, u64 a notice-ring tail, u64 a head seen (producer view), then slot
# headers (u32 total, u32 chunks, u64 sequence = ring index + 1) from our head on.
def local_slot(index, total):
    chunks = 1 if total == 0 else (total + 4095) // 4096
    return struct.pack("<IIQ", total, chunks, index + 1)


write("local_ring", "three_messages", struct.pack("<QQQ", 10, 14, 2) + local_slot(10, 64) + local_slot(11, 5000) + bytes(16) + local_slot(13, 0))
write("local_ring", "wrapped", struct.pack("<QQQ", 511, 515, 500) + local_slot(511, 100) + local_slot(512, 4096))

# kv_rpc: design byte (bit 0: atomic; value bytes 8 + (byte >> 1) % 57), servers byte (1 + b % 3
# servers, this one (b >> 2) % servers), then requests, each a length byte L (L * 2 % (24 + value
# + 9) bytes) and the request [op u8, pad 7, key 16, value]. herd, 8-byte values, one server:
# a full request is 32 bytes (L = 16), a bare one 24 (L = 12).
def kv_req(op, key, value=b""):
    body = bytes([op]) + bytes(7) + key + value
    return bytes([len(body) // 2]) + body


k1, k2 = b"key-number-one!!", b"key-number-two!!"
write("kv_rpc", "put_get_del", b"\x00\x00" + kv_req(2, k1, b"value-01") + kv_req(1, k1) + kv_req(3, k1) + kv_req(1, k1) + kv_req(2, k2, b"value-02") + kv_req(2, k2, b"value-03") + kv_req(1, k2))
write("kv_rpc", "atomic_insert", b"\x01\x00" + kv_req(4, k1, b"value-01") + kv_req(4, k1, b"value-01") + kv_req(1, k1))

# seq_messages, mode 0 (byte 0 < 128; requests in flight = byte 1 % 8 + 1): the Spec-S0 hello
# [magic u32 "SPEC", outstanding u32, region u64, key_len u32, pad u32] + key; mode 1: a request
# word (u32) and a header-only answer's low 32 bits.
write("seq_messages", "hello", b"\x00\x00" + struct.pack("<IIQII", 0x53504543, 1, 4096, 8, 0) + b"K" * 8)
write("seq_messages", "request", b"\x80" + struct.pack("<II", 3 << 16 | 7, 12345) + b"\0\0")
write("seq_messages", "bye", b"\x80" + struct.pack("<II", 1 << 31 | 3 << 16, 0) + b"\0\0")

# cli_parsers: sizes, sweeps, host:port, names.
for i, text in enumerate(["64", "4K,64K", "8:8K", "1M", "0", "127.0.0.1:4000", "[::1]:4000",
                          "push1-watermark-pull", "write", "rdm", "send_send", "dense", "rpc-batch", "herd",
                          "(vector,(0,2,4),(2,1,3))"]):
    write("cli_parsers", "t%02d" % i, text.encode())

# catalogue: the real catalogues.
for name in sorted(os.listdir(os.path.join(HERE, "..", "experiments"))):
    if name.endswith(".json"):
        shutil.copy(os.path.join(HERE, "..", "experiments", name), os.path.join(HERE, "corpus", "catalogue", name))

# kv_table: u16 value-size selector (value = 1 + v % 4096), u64 region bytes, the Layout
# (7 x u64: value_bytes, buckets, items, item_bytes, index_offset, items_offset, region_bytes),
# then an item copy [word u64 | key 16 | value | check u64].
value = 32
item_bytes = (8 + 16 + value + 8 + 63) // 64 * 64
buckets, items = 4, 16
index_off = 64
items_off = index_off + buckets * 256
region = items_off + items * item_bytes
layout = struct.pack("<QQQQQQQ", value, buckets, items, item_bytes, index_off, items_off, region)
item = struct.pack("<Q", 1 << 16) + b"k" * 16 + b"v" * value + struct.pack("<Q", 0)
write("kv_table", "layout_and_item", struct.pack("<HQ", value - 1, region) + layout + item)

# bulk_wire: byte 0 = the job (low 4 bits: ranks - 2) and the receiving rank (high 4 bits), then
# one control message: the 80-byte header of src/bulk/wire.h (little-endian), inline bytes, key.
def bulk(type_, proto, src, seq=0, size=0, offset=0, length=0, base=0, inline=b"", key=b""):
    h = struct.pack("<IBBHIIQQQQQQQQ", 0x4B4C5542, type_, proto, len(key), src, 7, seq, size,
                    1, 2, offset, length, base, 0)
    return h + inline + key


RTS, ACK, DATA, READY, FIN, NACK = range(1, 7)
COPY, EAGER, RNDV_WRITE, RNDV_READ, PIPELINE = 1, 2, 3, 4, 6
fkey = struct.pack("<IHHQQQ", 0x4B4D4646, 1, 0, 0x7F0000001000, 1 << 20, 0x1234)
write("bulk_wire", "eager_rts", b"\x10" + bulk(RTS, EAGER, 0, size=5, length=5, inline=b"hello"))
write("bulk_wire", "read_rts", b"\x10" + bulk(RTS, RNDV_READ, 0, size=1 << 20, key=fkey))
write("bulk_wire", "pipeline_ack", b"\x01" + bulk(ACK, PIPELINE, 1, offset=5120))
write("bulk_wire", "data", b"\x12" + bulk(DATA, COPY, 2, offset=4096, length=16, inline=bytes(16)))
write("bulk_wire", "ready", b"\x01" + bulk(READY, PIPELINE, 1, seq=3, base=64, key=fkey))
write("bulk_wire", "fin", b"\x10" + bulk(FIN, RNDV_WRITE, 0))
write("bulk_wire", "nack", b"\x01" + bulk(NACK, COPY, 1, length=100))

# transfer_descriptor: byte 0 = exporter (low 4 bits) and importer (high 4 bits), then a
# descriptor of src/bulk/descriptor.h: the 32-byte header (little-endian, version 2) and per
# endpoint a 4-byte key length and the key.
def descriptor(exporter, importer, memory, length, keys):
    body = b"".join(struct.pack("<I", len(k)) + k for k in keys)
    return struct.pack("<IHHiiIIQ", 0x44584646, 2, len(keys), exporter, importer, memory,
                       len(body), length) + body


write("transfer_descriptor", "local_key", b"\x10" + descriptor(0, 1, 1, 1 << 20, [fkey]))
write("transfer_descriptor", "fabric_key", b"\x23" + descriptor(3, 2, 7, 4096, [bytes(24)]))
write("transfer_descriptor", "two_endpoints",
      b"\x23" + descriptor(3, 2, 7, 4096, [bytes(24), b""]))
