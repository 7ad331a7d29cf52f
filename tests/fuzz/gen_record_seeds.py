#!/usr/bin/env python3
"""Writes the seeds of fuzz_record into tests/fuzz/corpus/record/ (input
format: the comment at the top of fuzz_record.c; value layouts:
include/store_codec.h).  Deterministic; run again after a layout change."""
import os
import random
import struct

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "record")
os.makedirs(out, exist_ok=True)

LAYOUT_V1, OP, OUTBOX, ATTEMPT = 1, 1, 2, 5
H1 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
H2 = "d5f2c9b8922559659be1d83a639c2adf8e49517b47c02eee35a4099edae2d3ec"


def hdr(kind, expires_at, version=LAYOUT_V1):
    return bytes([version, kind, 0, 0, 0, 0, 0, 0]) + struct.pack("<q", expires_at)


def s(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack("<H", len(b)) + b


def op(state=1, ostate=0, gen=1, lease=1_700_000_060_000, created=1_700_000_000_000,
       updated=1_700_000_000_000, attempts=0, seq=0, rh=H1, ek=H2,
       owner="host-a#run-1", source="scrape.jobs/0/42", category="",
       expires=1_700_259_200_000, kind=OP):
    return (hdr(kind, expires) + bytes([state, ostate]) +
            struct.pack("<QqqqIQ", gen, lease, created, updated, attempts, seq) +
            s(rh) + s(ek) + s(owner) + s(source) + s(category))


def attempt(number=1, gen=1, started=1_700_000_000_000, ended=1_700_000_000_350,
            status=200, nbytes=5120, session="prov-a-17", exit_addr="127.0.0.2:18888",
            category="", error="", expires=1_700_259_200_000):
    return (hdr(ATTEMPT, expires) +
            struct.pack("<IQqqIQ", number, gen, started, ended, status & 0xffffffff, nbytes) +
            s(session) + s(exit_addr) + s(category) + s(error))


def outbox(op_id="default:order-1001", ek=H2, gen=1, value=b'{"status":200}', expires=0):
    return (hdr(OUTBOX, expires) + s(op_id) + s(ek) + struct.pack("<QI", gen, len(value)) +
            value)


def garbage(mode, value, idsel=0, number=0, seq=0):
    return bytes([mode, idsel]) + struct.pack(">IQ", number, seq) + value


seeds = {
    "op_running": garbage(0, op()),
    "op_complete_pending": garbage(0, op(state=3, ostate=1, seq=4097, attempts=2), idsel=1),
    "op_failed_sent": garbage(0, op(state=4, ostate=2, category="proxy_auth", owner=""), idsel=3),
    "op_retryable_long_source": garbage(0, op(state=2, source="t" * 255, owner="o" * 127,
                                              category="c" * 31), idsel=2),
    "op_bad_state": garbage(0, op(state=9)),
    "op_bad_outbox_state": garbage(0, op(ostate=3)),
    "op_wrong_type": garbage(0, op(kind=OUTBOX)),
    "op_truncated": garbage(0, op()[:-5]),
    "op_trailing_byte": garbage(0, op() + b"\0"),
    "op_hash_too_long": garbage(0, op(rh=H1 + "0")),
    "op_newer_layout": garbage(0, hdr(OP, 0, version=2) + op()[16:]),
    "attempt_ok": garbage(1, attempt(number=3), number=3),
    "attempt_failed": garbage(1, attempt(number=1, status=0, category="proxy",
                                         error="CONNECT tunnel failed, response 407"),
                              number=1, idsel=3),
    "attempt_number_mismatch": garbage(1, attempt(number=2), number=3),
    "attempt_truncated": garbage(1, attempt()[:30], number=1),
    "outbox_ok": garbage(2, outbox(), seq=4097),
    "outbox_empty_value": garbage(2, outbox(value=b""), seq=1),
    "outbox_no_op_id": garbage(2, outbox(op_id=""), seq=2),
    "outbox_value_len_too_big": garbage(2, outbox()[:-1], seq=3),
    "outbox_short": garbage(2, b"\x01\x02" + b"\0" * 10),
    "empty": b"",
}
rng = random.Random(7)
for mode, name in ((3, "roundtrip_op"), (4, "roundtrip_attempt"), (5, "roundtrip_outbox")):
    for i in range(3):
        n = [24, 120, 700][i]
        seeds["%s_%d" % (name, i)] = bytes([mode]) + bytes(rng.randrange(256) for _ in range(n))
seeds["roundtrip_op_in_range"] = bytes([3, 3, 1]) + bytes(rng.randrange(256) for _ in range(300))

for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
print("%d seeds in %s" % (len(seeds), out))
