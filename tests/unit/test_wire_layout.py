"""Tests of the byte layout (testbed/nic/wire/layout.py): lengths, field offsets as
docs/wire-format.md gives them, and the payload that fits an MTU."""

from __future__ import annotations

import struct
import zlib

import pytest

from testbed.nic import wire
from testbed.nic.wire import (
    DataPacket,
    EvProbe,
    EvProbeReply,
    Nack,
    NackReason,
    Opcode,
    Sack,
    Verdict,
)

from tests.unit.wire_examples import DST, EXAMPLES, SRC


@pytest.mark.parametrize(
    "name, length",
    [
        ("write_only", 12 + 4 + 16 + 5 + 4),
        ("write_first", 12 + 4 + 4 + 16 + 1368 + 4),
        ("write_only_imm", 12 + 4 + 4 + 16 + 4 + 4),
        ("sack", 56),
        ("nack", 32),
        ("reliability_probe", 20),
        ("reliability_probe_no_ts", 16),
        ("ev_probe", 28),
        ("ev_probe_reply", 32),
        ("cnp", 32),          # RoCEv2 CNP: BTH, 16 reserved bytes, ICRC
    ],
)
def test_encoded_lengths(name: str, length: int) -> None:
    assert len(EXAMPLES[name].encode()) == length


def test_data_packet_layout_matches_docs() -> None:
    packet = DataPacket(Opcode.WRITE_LAST_WITH_IMM, 0x123456, 0xABCDEF, 0x0102, 0x0304,
                        0x1122334455667788, 0x99AABBCC, 0x10000, b"PAY", imm=0xDDEEFF00,
                        tx_timestamp=0x0A0B0C0D, retransmit=True, ack_request=True)
    b = packet.encode()
    assert b[0] == 0x09
    assert b[1] == 0x80 | 0x40 | 0x20
    assert b[2:5] == bytes([1, 0, 0])
    assert b[5:8] == bytes.fromhex("123456")
    assert b[8] == 0 and b[9:12] == bytes.fromhex("abcdef")
    assert b[12:16] == bytes.fromhex("01020304")  # METH
    assert b[16:20] == bytes.fromhex("0a0b0c0d")  # TSETH
    assert b[20:36] == bytes.fromhex("1122334455667788" "99aabbcc" "00010000")  # RETH
    assert b[36:40] == bytes.fromhex("ddeeff00")  # ImmDt
    assert b[40:43] == b"PAY"
    assert b[43:] == struct.pack(">I", zlib.crc32(b[:43]))


def test_sack_and_nack_layout_matches_docs() -> None:
    b = Sack(0x20, 0x000004, 0xDEADBEEF, 1, 0x76, Verdict.ALWAYS_SKIP, 8, 0x0B, True, 0x01020304,
             0x05060708, 0x090A, 127, 0x1122334455667788).encode()
    assert b[0] == 0x18 and b[1] == 0x40 and b[9:12] == bytes.fromhex("000004")
    assert b[12:14] == bytes.fromhex("0001") and b[14] == 0x04 | 0x02 and b[15] == 8
    assert b[16:24] == (0x76).to_bytes(8, "big") and b[24:28] == bytes.fromhex("deadbeef")
    assert b[28:32] == bytes.fromhex("0000000b")
    assert b[32:52] == bytes.fromhex("01020304" "05060708" "090a" "7f" "00" "1122334455667788")
    n = Nack(0x20, 5, NackReason.PSN_OOR_WINDOW, 0x12345678, 4).encode()
    assert n[0] == 0x19 and n[1] == 0 and n[12] == 6
    assert n[16:20] == bytes.fromhex("12345678") and n[20:24] == bytes.fromhex("00000004")


def test_ev_probe_layout_matches_docs() -> None:
    b = EvProbe(0xBEEF, 0x01020304, 3, 0x0A0B0C0D).encode()
    assert b[0] == 0x1B and b[5:8] == bytes.fromhex("000002") and b[9:12] == bytes.fromhex("00beef")
    assert b[12:24] == bytes.fromhex("01020304" "03" "00" "0000" "0a0b0c0d")
    r = EvProbeReply(0xBEEF, 0x01020304, 3, 4, 0x0A0B0C0D, 2500).encode()
    assert r[0] == 0x1C and r[12:28] == bytes.fromhex("01020304" "03" "04" "0000" "0a0b0c0d"
                                                      "000009c4")


def test_max_payload_for_path_mtu_1500() -> None:
    # outer IPv6 40 + inner IPv6 40 + UDP 8 + BTH 12 + METH 4 + TSETH 4 + RETH 16 + ImmDt 4 + ICRC 4
    assert wire.max_payload(1500) == 1368
    assert wire.max_payload(1500, timestamp=False, imm=False) == 1376
    assert wire.max_payload(1500, srh_segments=1) == 1368 - 24
    with pytest.raises(ValueError):
        wire.max_payload(132)


def test_full_size_data_packet_fits_the_mtu() -> None:
    payload = b"\xAA" * wire.max_payload(1500)
    packet = DataPacket(Opcode.WRITE_LAST_WITH_IMM, 9, 1, 0, 0, 0, 0, 2 * len(payload), payload,
                        imm=1, tx_timestamp=1)
    inner = wire.build_inner(SRC, DST, 0xFFFFFFFF, packet.encode())
    assert len(inner) + wire.IPV6_HEADER_LEN == 1500
