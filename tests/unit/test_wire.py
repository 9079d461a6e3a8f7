"""Tests of the MRC wire format (testbed/nic/wire.py) and its scapy layers."""

from __future__ import annotations

import struct
import zlib
from ipaddress import IPv6Address

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.nic import wire
from testbed.nic.wire import (
    DataPacket,
    EvProbe,
    EvProbeReply,
    Nack,
    NackReason,
    Opcode,
    ReliabilityProbe,
    Sack,
    Trim,
    Verdict,
    WireError,
)

FUZZ = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROUND_TRIP = settings(max_examples=200, deadline=None)

SRC = "fd00:1::1"
DST = "fd00:2::1"


def reseal(buf: bytes) -> bytes:
    """Give tampered bytes a valid ICRC so the decoder reaches the check under test."""
    return buf[:-4] + struct.pack(">I", zlib.crc32(buf[:-4]))


# --------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u24 = st.integers(0, 0xFFFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, (1 << 64) - 1)
qpn = u24.filter(lambda q: q != wire.EP_OP_QP)
optional_u32 = st.none() | u32


@st.composite
def data_packets(draw: st.DrawFn) -> DataPacket:
    opcode = draw(st.sampled_from(sorted(wire.DATA_OPCODES)))
    trim = draw(st.sampled_from(list(Trim)))
    if trim is not Trim.NONE:
        payload, total_length = b"", draw(u32)
    elif opcode in wire.ONLY_OPCODES:
        payload = draw(st.binary(max_size=96))
        total_length = len(payload)
    else:
        payload = draw(st.binary(min_size=1, max_size=96))
        total_length = draw(st.integers(len(payload) + 1, 0xFFFFFFFF))
    return DataPacket(
        opcode=opcode,
        dest_qp=draw(qpn),
        psn=draw(u24),
        msn=draw(u16),
        rqmsn=draw(u16),
        remote_offset=draw(u64),
        rkey=draw(u32),
        total_length=total_length,
        payload=payload,
        imm=draw(u32) if opcode in wire.IMM_OPCODES else None,
        tx_timestamp=draw(optional_u32),
        retransmit=draw(st.booleans()),
        ack_request=draw(st.booleans()),
        trim=trim,
    )


sacks = st.builds(
    Sack,
    dest_qp=qpn,
    cack_psn=u24,
    ev=u32,
    sack_offset=u16,
    bitmap=u64,
    verdict=st.sampled_from(list(Verdict)),
    mpr=u8,
    trigger_psn=u24,
    probe_reply=st.booleans(),
    ts_echo=optional_u32,
    service_time_ns=u32,
    ooo_count=u16,
    rcv_cwnd_pen=st.integers(0, 127),
    received_bytes=u64,
)
nacks = st.builds(
    Nack,
    dest_qp=qpn,
    psn=u24,
    reason=st.sampled_from(list(NackReason)),
    ev=u32,
    cack_psn=u24,
    ts_echo=optional_u32,
)
reliability_probes = st.builds(
    ReliabilityProbe, dest_qp=qpn, probe_id=u24, tx_timestamp=optional_u32
)
ev_probes = st.builds(EvProbe, req_id=u16, ev=u32, port=u8, tx_timestamp=u32)
ev_probe_replies = st.builds(
    EvProbeReply, req_id=u16, ev=u32, port=u8, rx_port=u8, ts_echo=u32, service_time_ns=u32
)
packets = st.one_of(
    data_packets(), sacks, nacks, reliability_probes, ev_probes, ev_probe_replies
)

# One hand-written example of every kind, for the example-based tests.
EXAMPLES = {
    "write_first": DataPacket(Opcode.WRITE_FIRST, 0x10, 0, 0, 0, 0x1000, 0xAB, 3000, b"x" * 1368,
                              tx_timestamp=77),
    "write_middle": DataPacket(Opcode.WRITE_MIDDLE, 0x10, 1, 0, 0, 0x1558, 0xAB, 3000, b"y" * 1368),
    "write_last": DataPacket(Opcode.WRITE_LAST, 0x10, 2, 0, 0, 0x1AB0, 0xAB, 3000, b"z" * 264,
                             retransmit=True),
    "write_last_imm": DataPacket(Opcode.WRITE_LAST_WITH_IMM, 0x10, 3, 1, 0, 0x1AB0, 0xAB, 3000,
                                 b"z" * 264, imm=0xCAFE, ack_request=True),
    "write_only": DataPacket(Opcode.WRITE_ONLY, 0x10, 0xFFFFFF, 2, 1, 0, 0xAB, 5, b"hello"),
    "write_only_imm": DataPacket(Opcode.WRITE_ONLY_WITH_IMM, 0x10, 5, 3, 1, 0, 0xAB, 0, b"",
                                 imm=1, tx_timestamp=0xFFFFFFFF),
    "write_trimmed": DataPacket(Opcode.WRITE_MIDDLE, 0x10, 6, 0, 0, 0x1558, 0xAB, 3000,
                                trim=Trim.TRIMMED_LASTHOP),
    "sack": Sack(0x20, 4, 0xDEADBEEF, 1, 0b1110110, Verdict.SKIP_ONCE, 8, 11, False, 1234,
                 5000, 5, 64, 10 * 1368),
    "sack_probe_reply": Sack(0x20, 4, 7, probe_reply=True, trigger_psn=99,
                             verdict=Verdict.ALWAYS_SKIP),
    "nack": Nack(0x20, 5, NackReason.TRIMMED, 0x12345678, 4, ts_echo=42),
    "nack_no_ts": Nack(0x20, 5, NackReason.UNEXP_EVENT, 1, 4),
    "reliability_probe": ReliabilityProbe(0x20, 17, tx_timestamp=900),
    "reliability_probe_no_ts": ReliabilityProbe(0x20, 18),
    "ev_probe": EvProbe(0xBEEF, 0x00030201, 3, 1000),
    "ev_probe_reply": EvProbeReply(0xBEEF, 0x00030201, 3, 4, 1000, 2500),
}


# --------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_round_trip(name: str) -> None:
    packet = EXAMPLES[name]
    encoded = packet.encode()
    assert wire.decode(encoded) == packet
    assert wire.decode(bytearray(encoded)) == packet
    assert wire.decode(memoryview(encoded)) == packet


@ROUND_TRIP
@given(packets)
def test_round_trip(packet: wire.Packet) -> None:
    encoded = packet.encode()
    decoded = wire.decode(encoded)
    assert decoded == packet
    assert type(decoded) is type(packet)
    assert decoded.encode() == encoded


def test_plain_ints_encode_like_enum_members() -> None:
    as_ints = DataPacket(0x0A, 1, 2, 3, 4, 5, 6, 1, b"x", trim=0).encode()
    assert as_ints == DataPacket(Opcode.WRITE_ONLY, 1, 2, 3, 4, 5, 6, 1, b"x").encode()
    assert Sack(1, 2, 3, verdict=1).encode() == Sack(1, 2, 3, verdict=Verdict.SKIP_ONCE).encode()
    assert Nack(1, 2, 6, 3, 4).encode() == Nack(1, 2, NackReason.PSN_OOR_WINDOW, 3, 4).encode()


def test_decoded_enums_are_enum_members() -> None:
    data = wire.decode(EXAMPLES["write_last_imm"].encode())
    sack = wire.decode(EXAMPLES["sack"].encode())
    nack = wire.decode(EXAMPLES["nack"].encode())
    assert data.opcode is Opcode.WRITE_LAST_WITH_IMM and data.trim is Trim.NONE
    assert sack.verdict is Verdict.SKIP_ONCE
    assert nack.reason is NackReason.TRIMMED


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


# --------------------------------------------------------------------------
# Rejection of malformed input, one test per cause
# --------------------------------------------------------------------------

ONLY = EXAMPLES["write_only"].encode()
SACK = EXAMPLES["sack"].encode()
NACK = EXAMPLES["nack"].encode()
EVP = EXAMPLES["ev_probe"].encode()


def patched(buf: bytes, offset: int, value: bytes) -> bytes:
    return reseal(buf[:offset] + value + buf[offset + len(value):])


@pytest.mark.parametrize("length", [0, 1, 11, 15])
def test_rejects_packets_shorter_than_bth_and_icrc(length: int) -> None:
    with pytest.raises(WireError, match="truncated"):
        wire.decode(ONLY[:length])


@pytest.mark.parametrize("name", ["write_first", "write_only_imm", "sack", "nack", "ev_probe",
                                  "ev_probe_reply", "reliability_probe"])
def test_rejects_truncated_headers(name: str) -> None:
    encoded = EXAMPLES[name].encode()
    header_only = encoded[:16] if name.startswith("write") else encoded
    with pytest.raises(WireError, match="truncated"):
        wire.decode(reseal(header_only[:-5] + b"\0\0\0\0"))


def test_rejects_bad_crc() -> None:
    for packet in EXAMPLES.values():
        encoded = bytearray(packet.encode())
        encoded[-1] ^= 0x01
        with pytest.raises(WireError, match="ICRC"):
            wire.decode(bytes(encoded))
    corrupted = bytearray(ONLY)
    corrupted[20] ^= 0x40  # a RETH bit: header sane, CRC must catch it
    with pytest.raises(WireError, match="ICRC"):
        wire.decode(bytes(corrupted))


@pytest.mark.parametrize("opcode", [0x00, 0x04, 0x05, 0x0C, 0x11, 0x17, 0x1D, 0xFF])
def test_rejects_unknown_opcode(opcode: int) -> None:
    with pytest.raises(WireError, match="unknown opcode"):
        wire.decode(patched(ONLY, 0, bytes([opcode])))


@pytest.mark.parametrize("version", [0, 2, 0xFF])
def test_rejects_bad_version(version: int) -> None:
    with pytest.raises(WireError, match="version"):
        wire.decode(patched(ONLY, 2, bytes([version])))


@pytest.mark.parametrize("offset, value", [(3, b"\x01"), (4, b"\x80"), (8, b"\x01")])
def test_rejects_reserved_bth_bits(offset: int, value: bytes) -> None:
    with pytest.raises(WireError, match="reserved"):
        wire.decode(patched(ONLY, offset, value))


@pytest.mark.parametrize(
    "buf, flags",
    [(ONLY, 0x04), (ONLY, 0x01), (SACK, 0x80), (SACK, 0x20), (NACK, 0x10), (EVP, 0x40)],
)
def test_rejects_flags_not_valid_for_opcode(buf: bytes, flags: int) -> None:
    with pytest.raises(WireError, match="flags"):
        wire.decode(patched(buf, 1, bytes([buf[1] | flags])))


def test_rejects_lasthop_flag_without_trimmed() -> None:
    trimmed = EXAMPLES["write_trimmed"].encode()
    with pytest.raises(WireError, match="TRIMMED_LASTHOP"):
        wire.decode(patched(trimmed, 1, bytes([wire.FLAG_TRIMMED_LASTHOP])))


def test_rejects_extra_bytes_on_fixed_size_packets() -> None:
    for name in ("sack", "nack", "ev_probe", "ev_probe_reply", "reliability_probe"):
        encoded = EXAMPLES[name].encode()
        with pytest.raises(WireError, match="inconsistent length"):
            wire.decode(reseal(encoded[:-4] + b"\0" + encoded[-4:]))


def test_rejects_only_packet_whose_payload_differs_from_total_length() -> None:
    with pytest.raises(WireError, match="ONLY packet carries 5 of 6"):
        wire.decode(patched(ONLY, 28, (6).to_bytes(4, "big")))


@pytest.mark.parametrize("total_length", [0, 1368])
def test_rejects_multi_packet_piece_not_smaller_than_write(total_length: int) -> None:
    first = EXAMPLES["write_first"].encode()
    with pytest.raises(WireError, match="multi-packet WRITE piece"):
        wire.decode(patched(first, 32, total_length.to_bytes(4, "big")))


def test_rejects_trimmed_packet_with_payload() -> None:
    with pytest.raises(WireError, match="trimmed packet still carries payload"):
        wire.decode(patched(ONLY, 1, bytes([wire.FLAG_TRIMMED])))


def test_rejects_unknown_sack_verdict_and_reserved_bits() -> None:
    with pytest.raises(WireError, match="verdict"):
        wire.decode(patched(SACK, 14, b"\x03"))
    for offset, value in [(14, b"\x08"), (28, b"\x01"), (43, b"\x01")]:
        with pytest.raises(WireError, match="reserved"):
            wire.decode(patched(SACK, offset, value))


def test_rejects_sack_penalty_above_127() -> None:
    with pytest.raises(WireError, match="rcv_cwnd_pen"):
        wire.decode(patched(SACK, 42, b"\x80"))


def test_rejects_echoed_timestamp_without_flag() -> None:
    with pytest.raises(WireError, match="echoed timestamp"):
        wire.decode(patched(SACK, 1, b"\x00"))
    with pytest.raises(WireError, match="echoed timestamp"):
        wire.decode(patched(NACK, 1, b"\x00"))


@pytest.mark.parametrize("reason", [0, 8, 0xFF])
def test_rejects_unknown_nack_reason(reason: int) -> None:
    with pytest.raises(WireError, match="NACK reason"):
        wire.decode(patched(NACK, 12, bytes([reason])))


@pytest.mark.parametrize("offset, value", [(13, b"\x01"), (15, b"\x01"), (20, b"\x01")])
def test_rejects_reserved_nack_bits(offset: int, value: bytes) -> None:
    with pytest.raises(WireError, match="reserved"):
        wire.decode(patched(NACK, offset, value))


def test_rejects_endpoint_operation_misaddressed() -> None:
    with pytest.raises(WireError, match="not 0x2"):
        wire.decode(patched(EVP, 5, bytes.fromhex("000003")))
    with pytest.raises(WireError, match="request id"):
        wire.decode(patched(EVP, 9, bytes.fromhex("01beef")))
    with pytest.raises(WireError, match="reserved"):
        wire.decode(patched(EVP, 17, b"\x01"))


def test_rejects_qp_scoped_packet_to_endpoint_qp() -> None:
    for buf in (ONLY, SACK, NACK):
        with pytest.raises(WireError, match="reserved for endpoint"):
            wire.decode(patched(buf, 5, bytes.fromhex("000002")))


@pytest.mark.parametrize(
    "packet",
    [
        DataPacket(Opcode.WRITE_ONLY, 1 << 24, 0, 0, 0, 0, 0, 0),
        DataPacket(Opcode.WRITE_ONLY, 1, -1, 0, 0, 0, 0, 0),
        DataPacket(Opcode.WRITE_ONLY, 1, 0, 1 << 16, 0, 0, 0, 0),
        DataPacket(Opcode.WRITE_ONLY, 1, 0, 0, 0, 1 << 64, 0, 0),
        DataPacket(Opcode.WRITE_ONLY, 2, 0, 0, 0, 0, 0, 0),
        DataPacket(Opcode.WRITE_ONLY, 1, 0, 0, 0, 0, 0, 0, imm=5),
        DataPacket(Opcode.WRITE_ONLY_WITH_IMM, 1, 0, 0, 0, 0, 0, 0),
        DataPacket(Opcode.WRITE_ONLY, 1, 0, 0, 0, 0, 0, 4, b"abc"),
        DataPacket(Opcode.WRITE_MIDDLE, 1, 0, 0, 0, 0, 0, 3, b"abc"),
        DataPacket(Opcode.SACK, 1, 0, 0, 0, 0, 0, 0),
        DataPacket(Opcode.WRITE_ONLY, 1, 0, 0, 0, 0, 0, 0, tx_timestamp=1 << 32),
        Sack(1, 0, 0, rcv_cwnd_pen=128),
        Sack(1, 0, 0, verdict=3),
        Sack(1, 0, 1 << 32),
        Sack(1, 0, 0, trigger_psn=1 << 24),
        Nack(1, 0, 0, 0, 0),
        Nack(1, 0, NackReason.TRIMMED, 0, 1 << 24),
        ReliabilityProbe(1, 1 << 24),
        EvProbe(1 << 16, 0, 1, 0),
        EvProbe(1, 0, 256, 0),
        EvProbeReply(-1, 0, 1, 1, 0),
        DataPacket(Opcode.WRITE_ONLY, 1, 0, 0, 0, 0, 0, 0, trim=5),
    ],
)
def test_encode_rejects_out_of_range_fields(packet: wire.Packet) -> None:
    with pytest.raises(WireError):
        packet.encode()


# --------------------------------------------------------------------------
# Fuzzing the decoder
# --------------------------------------------------------------------------


def assert_decodes_or_rejects(buf: bytes) -> None:
    """The decoder's contract: a packet that re-encodes to the same bytes, or WireError."""
    try:
        packet = wire.decode(buf)
    except WireError:
        return
    assert packet.encode() == bytes(buf)


@FUZZ
@given(st.binary(max_size=200))
def test_fuzz_arbitrary_bytes(buf: bytes) -> None:
    assert_decodes_or_rejects(buf)


@FUZZ
@given(st.binary(max_size=80))
def test_fuzz_arbitrary_bytes_behind_valid_looking_bth(body: bytes) -> None:
    # Random bytes almost never pass the version and CRC checks; this gets past them.
    opcode = body[0] % 0x20 if body else 0x0A
    assert_decodes_or_rejects(reseal(bytes([opcode, 0, 1]) + body + b"\0\0\0\0"))


mutations = st.lists(
    st.tuples(
        st.sampled_from(["flip", "set", "truncate", "insert", "delete"]),
        st.integers(0, 2000),
        u8,
    ),
    min_size=1,
    max_size=4,
)


def mutate(buf: bytes, steps: list[tuple[str, int, int]]) -> bytes:
    out = bytearray(buf)
    for kind, position, value in steps:
        i = position % (len(out) + 1)
        if kind == "flip" and i < len(out):
            out[i] ^= 1 << (value % 8)
        elif kind == "set" and i < len(out):
            out[i] = value
        elif kind == "truncate":
            del out[i:]
        elif kind == "insert":
            out[i:i] = bytes([value])
        elif kind == "delete" and i < len(out):
            del out[i]
    return bytes(out)


@FUZZ
@given(packets, mutations, st.booleans())
def test_fuzz_mutated_valid_packets(
    packet: wire.Packet, steps: list[tuple[str, int, int]], fix_crc: bool
) -> None:
    mutated = mutate(packet.encode(), steps)
    if fix_crc and len(mutated) >= 4:
        mutated = reseal(mutated)
    assert_decodes_or_rejects(mutated)


@FUZZ
@given(st.binary(max_size=120))
def test_fuzz_parse_inner(buf: bytes) -> None:
    try:
        wire.parse_inner(buf)
    except WireError:
        pass


# --------------------------------------------------------------------------
# PSN arithmetic
# --------------------------------------------------------------------------


def test_psn_add_wraps_at_24_bits() -> None:
    assert wire.psn_add(0xFFFFFF, 1) == 0
    assert wire.psn_add(0xFFFFFE, 5) == 3
    assert wire.psn_add(0, -1) == 0xFFFFFF


def test_psn_diff_is_signed_across_the_wrap() -> None:
    assert wire.psn_diff(0, 0xFFFFFF) == 1
    assert wire.psn_diff(0xFFFFFF, 0) == -1
    assert wire.psn_diff(3, 0xFFFFFE) == 5
    assert wire.psn_diff(0x7FFFFF, 0) == 0x7FFFFF
    assert wire.psn_diff(0x800000, 0) == -0x800000


def test_psn_lt_across_the_wrap() -> None:
    assert wire.psn_lt(0xFFFFFF, 0)
    assert not wire.psn_lt(0, 0xFFFFFF)
    assert not wire.psn_lt(5, 5) and wire.psn_le(5, 5)
    assert wire.psn_lt(0xFFFFF0, 0x10)


@given(u24, st.integers(-(1 << 23), (1 << 23) - 1))
def test_psn_diff_inverts_psn_add(psn: int, delta: int) -> None:
    assert wire.psn_diff(wire.psn_add(psn, delta), psn) == delta


def test_timestamp_helpers_wrap_at_32_bits() -> None:
    assert wire.timestamp_us(5_000_123) == 5000
    assert wire.timestamp_us((1 << 32) * 1000 + 7000) == 7
    assert wire.timestamp_elapsed_us(3, 0xFFFFFFFE) == 5


# --------------------------------------------------------------------------
# SACK bitmap helpers
# --------------------------------------------------------------------------


def test_sack_worked_example_from_reference() -> None:
    # PSNs 0-11 sent, 5 and 8 lost: cack 4, bitmap base 5, bits 0,1,1,0,1,1,1.
    received = set(range(12)) - {5, 8}
    bitmap = wire.sack_bitmap(4, received)
    assert [bitmap >> i & 1 for i in range(7)] == [0, 1, 1, 0, 1, 1, 1]
    assert bitmap == 0b1110110
    assert wire.sack_holes(4, 1, bitmap) == [5, 8]
    assert wire.sack_received_psns(4, 1, bitmap) == [6, 7, 9, 10, 11]


def test_sack_helpers_across_the_psn_wrap() -> None:
    cack = 0xFFFFFC
    received = {0xFFFFFE, 0xFFFFFF, 1, 3}
    bitmap = wire.sack_bitmap(cack, received)
    assert bitmap == 1 << 1 | 1 << 2 | 1 << 4 | 1 << 6
    assert wire.sack_holes(cack, 1, bitmap) == [0xFFFFFD, 0, 2]
    assert wire.sack_received_psns(cack, 1, bitmap) == [0xFFFFFE, 0xFFFFFF, 1, 3]


def test_sack_bitmap_ignores_psns_outside_the_window() -> None:
    assert wire.sack_bitmap(100, {50, 100, 101 + 64, 0xFFFFFF}) == 0
    assert wire.sack_bitmap(100, {101 + 63}) == 1 << 63


def test_sack_holes_with_offset_beyond_one_reports_only_known_holes() -> None:
    # Bitmap slid forward: PSNs 12..19 are unreported, only 11 is known missing.
    bitmap = wire.sack_bitmap(10, {21, 23}, sack_offset=10)
    assert bitmap == 0b1010
    assert wire.sack_holes(10, 10, bitmap) == [11, 20, 22]
    assert wire.sack_holes(10, 1, 0) == []


@given(u24, st.sets(st.integers(1, 64), max_size=64))
def test_sack_bitmap_round_trips_received_set(cack: int, distances: set[int]) -> None:
    received = {wire.psn_add(cack, d) for d in distances}
    bitmap = wire.sack_bitmap(cack, received)
    listed = wire.sack_received_psns(cack, 1, bitmap)
    assert set(listed) == received
    holes = wire.sack_holes(cack, 1, bitmap)
    top = max(distances, default=0)
    assert set(holes) == {wire.psn_add(cack, d) for d in range(1, top)} - received


# --------------------------------------------------------------------------
# Inner IPv6 + UDP headers
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "ev, sport, flow_label",
    [(0, 0, 0), (0x12345678, 0x5678, 0x1234), (0xFFFFFFFF, 0xFFFF, 0xFFFF), (0x10000, 0, 1)],
)
def test_ev_mapping(ev: int, sport: int, flow_label: int) -> None:
    assert wire.ev_to_sport_flowlabel(ev) == (sport, flow_label)
    assert wire.sport_flowlabel_to_ev(sport, flow_label) == ev
    assert wire.sport_flowlabel_to_ev(sport, flow_label | 0xF0000) == ev  # top 4 bits unused


def test_ev_mapping_rejects_more_than_32_bits() -> None:
    with pytest.raises(WireError):
        wire.ev_to_sport_flowlabel(1 << 32)


@given(u32, st.binary(max_size=64))
def test_build_and_parse_inner_round_trip(ev: int, mrc: bytes) -> None:
    inner = wire.build_inner(SRC, DST, ev, mrc)
    src, dst, got_ev, got_mrc = wire.parse_inner(inner)
    assert (src, dst, got_ev, got_mrc) == (
        IPv6Address(SRC).packed, IPv6Address(DST).packed, ev, mrc
    )


def test_build_inner_header_bytes() -> None:
    mrc = EXAMPLES["nack"].encode()
    inner = wire.build_inner(IPv6Address(SRC), IPv6Address(DST).packed, 0xABCD1234, mrc,
                             hop_limit=7)
    sport, flow_label = 0x1234, 0xABCD
    assert inner[:40] == wire.ipv6_header(SRC, DST, flow_label, 8 + len(mrc), hop_limit=7)
    assert inner[40:48] == wire.udp_header(sport, 8 + len(mrc))
    assert inner[0] >> 4 == 6 and inner[6] == 17 and inner[7] == 7
    assert int.from_bytes(inner[1:4], "big") & 0xFFFFF == flow_label
    assert inner[42:44] == (4791).to_bytes(2, "big") and inner[46:48] == b"\0\0"
    assert inner[48:] == mrc


def test_parse_inner_rejects_malformed_headers() -> None:
    inner = wire.build_inner(SRC, DST, 7, ONLY)
    cases = {
        "truncated": inner[:47],
        "IP version": bytes([0x40]) + inner[1:],
        "not UDP": inner[:6] + b"\x06" + inner[7:],
        "inconsistent lengths": inner + b"\0",
        "destination port": inner[:42] + (4792).to_bytes(2, "big") + inner[44:],
    }
    for message, buf in cases.items():
        with pytest.raises(WireError, match=message):
            wire.parse_inner(buf)
    udp_len_off = inner[:44] + (9).to_bytes(2, "big") + inner[46:]
    with pytest.raises(WireError, match="inconsistent lengths"):
        wire.parse_inner(udp_len_off)


def test_inner_builders_reject_bad_arguments() -> None:
    with pytest.raises(WireError):
        wire.build_inner("not-an-address", DST, 1, b"")
    with pytest.raises(WireError):
        wire.build_inner(b"\0" * 4, DST, 1, b"")
    with pytest.raises(WireError):
        wire.ipv6_header(SRC, DST, 1 << 20, 0)
    with pytest.raises(WireError):
        wire.udp_header(1 << 16, 8)
    with pytest.raises(WireError):
        wire.build_inner(SRC, DST, 1, b"\0" * 65535)


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


# --------------------------------------------------------------------------
# Trimming
# --------------------------------------------------------------------------


@pytest.mark.parametrize("last_hop, trim", [(False, Trim.TRIMMED), (True, Trim.TRIMMED_LASTHOP)])
def test_trim_keeps_headers_and_drops_payload(last_hop: bool, trim: Trim) -> None:
    original = EXAMPLES["write_last_imm"]
    trimmed = wire.decode(wire.trim_data_packet(original.encode(), last_hop=last_hop))
    assert trimmed.trim is trim and trimmed.payload == b""
    assert (trimmed.psn, trimmed.imm, trimmed.remote_offset) == (
        original.psn, original.imm, original.remote_offset
    )


def test_trim_refuses_non_data_packets() -> None:
    with pytest.raises(WireError, match="only data packets"):
        wire.trim_data_packet(SACK)


# --------------------------------------------------------------------------
# Scapy layers agree with wire.py
# --------------------------------------------------------------------------

scapy = pytest.importorskip("scapy")
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.packet import Raw  # noqa: E402

from testbed.nic import scapy_mrc as sm  # noqa: E402


def scapy_fields(pkt) -> dict[str, object]:
    """Every field of every layer from MRC_BTH down, keyed "Layer.field"."""
    fields: dict[str, object] = {}
    layer = pkt[sm.MRC_BTH]
    while layer:
        for f in layer.fields_desc:
            value = layer.getfieldval(f.name)
            fields[f"{type(layer).__name__}.{f.name}"] = int(value) if f.name == "flags" else value
        layer = layer.payload
    return fields


def flags_byte(packet: wire.Packet) -> int:
    if isinstance(packet, DataPacket):
        trim = {Trim.NONE: 0, Trim.TRIMMED: 0x10, Trim.TRIMMED_LASTHOP: 0x18}[packet.trim]
        return (0x80 * packet.retransmit | 0x40 * (packet.tx_timestamp is not None)
                | 0x20 * packet.ack_request | trim)
    if isinstance(packet, ReliabilityProbe):
        return 0x40 * (packet.tx_timestamp is not None)
    if isinstance(packet, (Sack, Nack)):
        return 0x40 * (packet.ts_echo is not None)
    return 0


def bth_fields(packet: wire.Packet, encoded: bytes) -> dict[str, object]:
    psn = {DataPacket: "psn", Sack: "cack_psn", Nack: "psn", ReliabilityProbe: "probe_id",
           EvProbe: "req_id", EvProbeReply: "req_id"}[type(packet)]
    opcode = getattr(packet, "opcode", {Sack: Opcode.SACK, Nack: Opcode.NACK,
                                        ReliabilityProbe: Opcode.RELIABILITY_PROBE,
                                        EvProbe: Opcode.EV_PROBE,
                                        EvProbeReply: Opcode.EV_PROBE_REPLY}.get(type(packet)))
    return {
        "MRC_BTH.opcode": opcode, "MRC_BTH.flags": flags_byte(packet), "MRC_BTH.version": 1,
        "MRC_BTH.reserved1": 0, "MRC_BTH.reserved2": 0, "MRC_BTH.reserved3": 0,
        "MRC_BTH.dest_qp": getattr(packet, "dest_qp", wire.EP_OP_QP),
        "MRC_BTH.psn": getattr(packet, psn),
        "MRC_BTH.icrc": int.from_bytes(encoded[-4:], "big"),
    }


def data_fields(p: DataPacket) -> dict[str, object]:
    fields: dict[str, object] = {"MRC_METH.msn": p.msn, "MRC_METH.rqmsn": p.rqmsn}
    if p.tx_timestamp is not None:
        fields["MRC_TSETH.tx_timestamp"] = p.tx_timestamp
    fields |= {"MRC_RETH.remote_offset": p.remote_offset, "MRC_RETH.rkey": p.rkey,
               "MRC_RETH.total_length": p.total_length}
    if p.imm is not None:
        fields["MRC_ImmDt.imm"] = p.imm
    if p.payload:
        fields["Raw.load"] = p.payload
    return fields


def sack_fields(p: Sack) -> dict[str, object]:
    return {
        "MRC_SETH.sack_offset": p.sack_offset, "MRC_SETH.reserved1": 0,
        "MRC_SETH.probe_reply": int(p.probe_reply), "MRC_SETH.verdict": p.verdict,
        "MRC_SETH.mpr": p.mpr, "MRC_SETH.bitmap": p.bitmap, "MRC_SETH.ev": p.ev,
        "MRC_SETH.reserved2": 0, "MRC_SETH.trigger_psn": p.trigger_psn,
        "MRC_CCState.ts_echo": p.ts_echo or 0, "MRC_CCState.service_time_ns": p.service_time_ns,
        "MRC_CCState.ooo_count": p.ooo_count, "MRC_CCState.rcv_cwnd_pen": p.rcv_cwnd_pen,
        "MRC_CCState.reserved": 0, "MRC_CCState.received_bytes": p.received_bytes,
    }


def nack_fields(p: Nack) -> dict[str, object]:
    return {
        "MRC_NETH.reason": p.reason, "MRC_NETH.reserved1": 0, "MRC_NETH.reserved2": 0,
        "MRC_NETH.ev": p.ev, "MRC_NETH.reserved3": 0, "MRC_NETH.cack_psn": p.cack_psn,
        "MRC_NETH.ts_echo": p.ts_echo or 0,
    }


def probe_fields(p: ReliabilityProbe) -> dict[str, object]:
    return {} if p.tx_timestamp is None else {"MRC_TSETH.tx_timestamp": p.tx_timestamp}


def ev_probe_fields(p: EvProbe) -> dict[str, object]:
    return {"MRC_EVProbe.ev": p.ev, "MRC_EVProbe.port": p.port, "MRC_EVProbe.reserved1": 0,
            "MRC_EVProbe.reserved2": 0, "MRC_EVProbe.tx_timestamp": p.tx_timestamp}


def ev_reply_fields(p: EvProbeReply) -> dict[str, object]:
    return {"MRC_EVProbeReply.ev": p.ev, "MRC_EVProbeReply.port": p.port,
            "MRC_EVProbeReply.rx_port": p.rx_port, "MRC_EVProbeReply.reserved": 0,
            "MRC_EVProbeReply.ts_echo": p.ts_echo,
            "MRC_EVProbeReply.service_time_ns": p.service_time_ns}


BODY_FIELDS = {DataPacket: data_fields, Sack: sack_fields, Nack: nack_fields,
               ReliabilityProbe: probe_fields, EvProbe: ev_probe_fields,
               EvProbeReply: ev_reply_fields}


def expected_fields(packet: wire.Packet, encoded: bytes) -> dict[str, object]:
    return bth_fields(packet, encoded) | BODY_FIELDS[type(packet)](packet)


def assert_scapy_agrees(packet: wire.Packet, ev: int = 0x0102ABCD) -> None:
    encoded = packet.encode()
    dissected = IPv6(wire.build_inner(SRC, DST, ev, encoded))
    assert dissected.fl == ev >> 16 and dissected.sport == ev & 0xFFFF
    assert dissected.dport == wire.UDP_PORT
    assert scapy_fields(dissected) == expected_fields(packet, encoded)


@pytest.mark.parametrize("name", EXAMPLES)
def test_scapy_dissects_every_example(name: str) -> None:
    assert_scapy_agrees(EXAMPLES[name])


@settings(max_examples=150, deadline=None)
@given(packets, u32)
def test_scapy_agrees_with_wire_field_by_field(packet: wire.Packet, ev: int) -> None:
    assert_scapy_agrees(packet, ev)


def test_scapy_dissects_srv6_outer_encapsulation() -> None:
    # What a fabric pcap holds: outer IPv6 to the uSID carrier, next header 41, then inner.
    inner = wire.build_inner(SRC, DST, 0x00070009, EXAMPLES["sack"].encode())
    outer = IPv6(src=SRC, dst="fc00:0:100:200:300::", nh=41) / Raw(inner)
    dissected = IPv6(bytes(outer))
    assert dissected[sm.MRC_SETH].bitmap == 0b1110110
    assert dissected[sm.MRC_CCState].rcv_cwnd_pen == 64


def test_scapy_built_packets_decode_with_wire() -> None:
    sack = sm.MRC_BTH(dest_qp=7, psn=4, flags="ts") / sm.MRC_SETH(bitmap=0x76, ev=9, verdict=1) \
        / sm.MRC_CCState(ts_echo=5, rcv_cwnd_pen=3)
    assert wire.decode(bytes(sack)) == Sack(7, 4, 9, bitmap=0x76, verdict=Verdict.SKIP_ONCE,
                                            ts_echo=5, rcv_cwnd_pen=3)
    write = sm.MRC_BTH(opcode=Opcode.WRITE_ONLY_WITH_IMM, dest_qp=7, psn=1) / sm.MRC_METH(msn=2) \
        / sm.MRC_RETH(remote_offset=64, rkey=5, total_length=3) / sm.MRC_ImmDt(imm=8) / b"abc"
    assert wire.decode(bytes(write)) == DataPacket(Opcode.WRITE_ONLY_WITH_IMM, 7, 1, 2, 0, 64, 5,
                                                   3, b"abc", imm=8)
