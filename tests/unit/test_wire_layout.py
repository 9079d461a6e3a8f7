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
        ("port_status_update", 68),   # BTH, ERTH 16, EETH 36, ICRC
    ],
)
def test_encoded_lengths(name: str, length: int) -> None:
    assert len(EXAMPLES[name].encode()) == length


IBA_BTH = bytes.fromhex("00" "ffff")  # SE/MigReq/PadCnt/TVer zero, default P_Key


def data_packet(opcode: Opcode, **kw) -> bytes:
    total = 3 if opcode in wire.ONLY_OPCODES else 0x10000
    return DataPacket(opcode, 0x123456, 0xABCDEF, 0x0102, 0x0304, 0x1122334455667788,
                      0x99AABBCC, total, b"PAY", **kw).encode()


RETH = bytes.fromhex("1122334455667788" "99aabbcc")


def test_bth_reads_as_iba_bth() -> None:
    # What a RoCE dissector reads: byte 1 zero, P_Key 0xFFFF, AckReq the A bit (byte 8 bit 7);
    # MRC's version sits in IBA's reserved byte 4, its flags in the 7 reserved bits of byte 8.
    b = data_packet(Opcode.WRITE_LAST_WITH_IMM, imm=0xDDEEFF00, tx_timestamp=0x0A0B0C0D,
                    retransmit=True, ack_request=True)
    assert b[0] == 0x09 and b[1:4] == IBA_BTH
    assert b[4] == 1 and b[5:8] == bytes.fromhex("123456")
    assert b[8] == 0x80 | 0x40 | 0x20 and b[9:12] == bytes.fromhex("abcdef")
    assert data_packet(Opcode.WRITE_FIRST)[8] == 0
    assert data_packet(Opcode.WRITE_FIRST, ack_request=True)[8] == 0x80   # IBA's A bit alone


def test_data_headers_sit_where_iba_puts_them() -> None:
    # WRITE_FIRST/ONLY: RETH right after BTH, METH and TSETH after it.
    b = data_packet(Opcode.WRITE_ONLY, tx_timestamp=0x0A0B0C0D)
    assert b[12:28] == RETH + (3).to_bytes(4, "big")
    assert b[28:32] == bytes.fromhex("01020304") and b[32:36] == bytes.fromhex("0a0b0c0d")
    assert b[36:39] == b"PAY" and b[39:] == struct.pack(">I", zlib.crc32(b[:39]))
    # WRITE_ONLY_WITH_IMM: RETH, then ImmDt, as IBA has them.
    b = data_packet(Opcode.WRITE_ONLY_WITH_IMM, imm=0xDDEEFF00)
    assert b[12:28] == RETH + (3).to_bytes(4, "big") and b[28:32] == bytes.fromhex("ddeeff00")
    assert b[32:36] == bytes.fromhex("01020304") and b[36:39] == b"PAY"
    # WRITE_LAST_WITH_IMM: IBA carries ImmDt right after BTH (and no RETH): ImmDt first.
    b = data_packet(Opcode.WRITE_LAST_WITH_IMM, imm=0xDDEEFF00, tx_timestamp=0x0A0B0C0D)
    assert b[12:16] == bytes.fromhex("ddeeff00")
    assert b[16:32] == RETH + bytes.fromhex("00010000")
    assert b[32:36] == bytes.fromhex("01020304") and b[36:40] == bytes.fromhex("0a0b0c0d")
    assert b[40:43] == b"PAY" and b[43:] == struct.pack(">I", zlib.crc32(b[:43]))
    # WRITE_MIDDLE/LAST (no IBA header beyond BTH): RETH first all the same.
    for opcode in (Opcode.WRITE_MIDDLE, Opcode.WRITE_LAST):
        assert data_packet(opcode)[12:28] == RETH + bytes.fromhex("00010000")


def test_mrc_opcodes_sit_in_the_manufacturer_specific_range() -> None:
    # CNP keeps RoCEv2's own opcode (0x81): DCQCN's peers know it by that.
    control = set(Opcode) - set(wire.DATA_OPCODES) - {Opcode.CNP}
    assert all(op >> 5 == 0b110 for op in control)
    assert Opcode.CNP == 0x81


def test_sack_and_nack_layout_matches_docs() -> None:
    b = Sack(0x20, 0x000004, 0xDEADBEEF, 1, 0x76, Verdict.ALWAYS_SKIP, 8, 0x0B, True, 0x01020304,
             0x05060708, 0x090A, 127, 0x1122334455667788).encode()
    assert b[0] == 0xC0 and b[1:4] == IBA_BTH and b[4] == 1 and b[5:8] == bytes.fromhex("000020")
    assert b[8] == 0x20 and b[9:12] == bytes.fromhex("000004")
    assert b[12:14] == bytes.fromhex("0001") and b[14] == 0x04 | 0x02 and b[15] == 8
    assert b[16:24] == (0x76).to_bytes(8, "big") and b[24:28] == bytes.fromhex("deadbeef")
    assert b[28:32] == bytes.fromhex("0000000b")
    assert b[32:52] == bytes.fromhex("01020304" "05060708" "090a" "7f" "00" "1122334455667788")
    n = Nack(0x20, 5, NackReason.PSN_OOR_WINDOW, 0x12345678, 4).encode()
    assert n[0] == 0xC1 and n[8] == 0 and n[12] == 6
    assert n[16:20] == bytes.fromhex("12345678") and n[20:24] == bytes.fromhex("00000004")


def test_ev_probe_layout_matches_docs() -> None:
    b = EvProbe(0xBEEF, 0x01020304, 3, 0x0A0B0C0D).encode()
    assert b[0] == 0xC3 and b[5:8] == bytes.fromhex("000002") and b[9:12] == bytes.fromhex("00beef")
    assert b[12:24] == bytes.fromhex("01020304" "03" "00" "0000" "0a0b0c0d")
    r = EvProbeReply(0xBEEF, 0x01020304, 3, 4, 0x0A0B0C0D, 2500).encode()
    assert r[0] == 0xC4 and r[12:28] == bytes.fromhex("01020304" "03" "04" "0000" "0a0b0c0d"
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
