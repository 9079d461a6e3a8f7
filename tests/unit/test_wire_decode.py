"""Tests of the readers (testbed/nic/wire/decode.py): round trips, one rejection test per
cause, decoder fuzzing, and the fast receive path held to decode()'s fields and errors."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from testbed.nic import wire
from testbed.nic.wire import NackReason, Opcode, RxData, RxSack, Trim, Verdict, WireError

from tests.unit.wire_examples import (
    EVP,
    EXAMPLES,
    FUZZ,
    NACK,
    ONLY,
    ROUND_TRIP,
    SACK,
    mutate,
    mutations,
    packets,
    patched,
    reseal,
)


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


def test_decoded_enums_are_enum_members() -> None:
    data = wire.decode(EXAMPLES["write_last_imm"].encode())
    sack = wire.decode(EXAMPLES["sack"].encode())
    nack = wire.decode(EXAMPLES["nack"].encode())
    assert data.opcode is Opcode.WRITE_LAST_WITH_IMM and data.trim is Trim.NONE
    assert sack.verdict is Verdict.SKIP_ONCE
    assert nack.reason is NackReason.TRIMMED


# --------------------------------------------------------------------------
# Rejection of malformed input, one test per cause
# --------------------------------------------------------------------------


@pytest.mark.parametrize("length", [0, 1, 11, 15])
def test_rejects_packets_shorter_than_bth_and_icrc(length: int) -> None:
    with pytest.raises(WireError, match="truncated"):
        wire.decode(ONLY[:length])


@pytest.mark.parametrize("name", ["write_first", "write_only_imm", "sack", "nack", "ev_probe",
                                  "ev_probe_reply", "reliability_probe", "cnp"])
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
        wire.decode(patched(ONLY, wire.BTH_VERSION_OFFSET, bytes([version])))


@pytest.mark.parametrize("value", [0x80, 0x40, 0x10, 0x01])  # SE, MigReq, PadCnt, TVer
def test_rejects_iba_bth_bits_mrc_does_not_use(value: int) -> None:
    with pytest.raises(WireError, match="must be zero"):
        wire.decode(patched(ONLY, 1, bytes([value])))


@pytest.mark.parametrize("pkey", [0x0000, 0x7FFF, 0x0100])
def test_rejects_p_key_other_than_the_default_partition(pkey: int) -> None:
    with pytest.raises(WireError, match="P_Key"):
        wire.decode(patched(ONLY, 2, pkey.to_bytes(2, "big")))


@pytest.mark.parametrize(
    "buf, flags",
    [(ONLY, 0x04), (ONLY, 0x01), (SACK, 0x80), (SACK, 0x40), (NACK, 0x10), (EVP, 0x20)],
)
def test_rejects_flags_not_valid_for_opcode(buf: bytes, flags: int) -> None:
    at = wire.BTH_FLAGS_OFFSET
    with pytest.raises(WireError, match="flags"):
        wire.decode(patched(buf, at, bytes([buf[at] | flags])))


def test_rejects_lasthop_flag_without_trimmed() -> None:
    trimmed = EXAMPLES["write_trimmed"].encode()
    with pytest.raises(WireError, match="TRIMMED_LASTHOP"):
        wire.decode(patched(trimmed, wire.BTH_FLAGS_OFFSET, bytes([wire.FLAG_TRIMMED_LASTHOP])))


def test_rejects_extra_bytes_on_fixed_size_packets() -> None:
    for name in ("sack", "nack", "ev_probe", "ev_probe_reply", "reliability_probe", "cnp"):
        encoded = EXAMPLES[name].encode()
        with pytest.raises(WireError, match="inconsistent length"):
            wire.decode(reseal(encoded[:-4] + b"\0" + encoded[-4:]))


def test_rejects_only_packet_whose_payload_differs_from_total_length() -> None:
    with pytest.raises(WireError, match="ONLY packet carries 5 of 6"):
        wire.decode(patched(ONLY, 24, (6).to_bytes(4, "big")))  # RETH total length


@pytest.mark.parametrize("total_length", [0, 1368])
def test_rejects_multi_packet_piece_not_smaller_than_write(total_length: int) -> None:
    first = EXAMPLES["write_first"].encode()
    with pytest.raises(WireError, match="multi-packet WRITE piece"):
        wire.decode(patched(first, 24, total_length.to_bytes(4, "big")))  # RETH total length


def test_rejects_trimmed_packet_with_payload() -> None:
    with pytest.raises(WireError, match="trimmed packet still carries payload"):
        wire.decode(patched(ONLY, wire.BTH_FLAGS_OFFSET, bytes([wire.FLAG_TRIMMED])))


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
        wire.decode(patched(SACK, wire.BTH_FLAGS_OFFSET, b"\x00"))
    with pytest.raises(WireError, match="echoed timestamp"):
        wire.decode(patched(NACK, wire.BTH_FLAGS_OFFSET, b"\x00"))


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


@FUZZ
@given(packets, mutations, st.booleans())
def test_fuzz_mutated_valid_packets(
    packet: wire.Packet, steps: list[tuple[str, int, int]], fix_crc: bool
) -> None:
    mutated = mutate(packet.encode(), steps)
    if fix_crc and len(mutated) >= 4:
        mutated = reseal(mutated)
    assert_decodes_or_rejects(mutated)


# --------------------------------------------------------------------------
# The fast receive path (decode_received) decodes exactly like decode()
# --------------------------------------------------------------------------


def outcome(decoder, buf: bytes) -> tuple[str, object]:
    """("ok", packet in its public form) or ("error", message)."""
    try:
        packet = decoder(buf)
    except WireError as exc:
        return "error", str(exc)
    if isinstance(packet, (RxData, RxSack)):
        packet = packet.packet()
    return "ok", packet


def assert_same_outcome(buf: bytes) -> None:
    expected = outcome(wire.decode, buf)
    assert outcome(wire.decode_received, buf) == expected


@pytest.mark.parametrize("name", EXAMPLES)
def test_received_examples_decode_like_decode(name: str) -> None:
    encoded = EXAMPLES[name].encode()
    for buf in (encoded, bytearray(encoded), memoryview(encoded)):
        assert_same_outcome(buf)


@pytest.mark.parametrize("name", ["write_first", "write_only_imm", "sack"])
def test_received_unusual_buffers_decode_like_decode(name: str) -> None:
    encoded = EXAMPLES[name].encode()
    doubled = bytes(b for byte in encoded for b in (byte, 0))
    for buf in (memoryview(encoded).cast("c"), memoryview(encoded).cast("b"),
                memoryview(doubled)[::2]):
        try:
            expected = outcome(wire.decode, buf)
        except Exception as exc:              # not bytes-like enough for decode() either
            with pytest.raises(type(exc)):
                wire.decode_received(buf)
        else:
            assert outcome(wire.decode_received, buf) == expected


def test_received_types() -> None:
    data = wire.decode_received(EXAMPLES["write_first"].encode())
    sack = wire.decode_received(EXAMPLES["sack"].encode())
    trimmed = wire.decode_received(EXAMPLES["write_trimmed"].encode())
    nack = wire.decode_received(EXAMPLES["nack"].encode())
    assert type(data) is RxData and type(data.payload) is bytes
    assert type(sack) is RxSack
    assert type(trimmed) is RxData and trimmed.trim is wire.Trim.TRIMMED_LASTHOP
    assert type(nack) is wire.Nack
    assert data.opcode is wire.Opcode.WRITE_FIRST and sack.verdict is wire.Verdict.SKIP_ONCE


@ROUND_TRIP
@given(packets)
def test_received_round_trip(packet: wire.Packet) -> None:
    assert outcome(wire.decode_received, packet.encode()) == ("ok", packet)


@FUZZ
@given(packets, mutations, st.booleans())
def test_received_mutated_packets_match_decode(packet: wire.Packet, steps, fix_crc: bool) -> None:
    mutated = mutate(packet.encode(), steps)
    if fix_crc and len(mutated) >= 4:
        mutated = reseal(mutated)
    assert_same_outcome(mutated)


@FUZZ
@given(st.sampled_from([0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x18]), st.binary(max_size=80))
def test_received_arbitrary_bodies_match_decode(opcode: int, body: bytes) -> None:
    # Valid-looking BTH starts and a good ICRC, so the body checks are what gets exercised.
    assert_same_outcome(reseal(bytes([opcode, body[0] if body else 0, 1]) + body + b"\0" * 4))
