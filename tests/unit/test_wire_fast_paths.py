"""The per-packet fast paths of wire.py must behave exactly like the reference ones.

encode_data / encode_sack are what DataPacket.encode / Sack.encode delegate to, and
decode_received is the endpoint's receive-path decoder: same checks and errors as decode(),
but data packets and SACKs come back as RxData / RxSack.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from testbed.nic import wire
from testbed.nic.wire import DataPacket, RxData, RxSack, Sack, WireError

from tests.unit.test_wire import EXAMPLES, FUZZ, ROUND_TRIP, mutate, mutations, packets, reseal


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


def encode_outcome(encode, *args, **kwargs) -> tuple[str, object]:
    try:
        return "ok", encode(*args, **kwargs)
    except WireError as exc:
        return "error", str(exc)


@ROUND_TRIP
@given(packets)
def test_encoders_match_packet_classes(packet: wire.Packet) -> None:
    if isinstance(packet, DataPacket):
        fields = [getattr(packet, name) for name in RxData._fields]
        assert wire.encode_data(*fields) == packet.encode()
    elif isinstance(packet, Sack):
        fields = [getattr(packet, name) for name in RxSack._fields]
        assert wire.encode_sack(*fields) == packet.encode()


@pytest.mark.parametrize(
    "args",
    [
        (wire.Opcode.WRITE_ONLY, 1 << 24, 0, 0, 0, 0, 0, 0),
        (wire.Opcode.WRITE_ONLY, 1, -1, 0, 0, 0, 0, 0),
        (wire.Opcode.WRITE_ONLY, 2, 0, 0, 0, 0, 0, 0),
        (wire.Opcode.WRITE_ONLY, 1, 0, 1 << 16, 0, 0, 0, 0),
        (wire.Opcode.SACK, 1, 0, 0, 0, 0, 0, 0),
    ],
)
def test_encode_data_rejects_like_data_packet(args: tuple) -> None:
    expected = encode_outcome(DataPacket(*args).encode)
    assert expected[0] == "error"
    assert encode_outcome(wire.encode_data, *args) == expected


@pytest.mark.parametrize(
    "kwargs",
    [
        {"dest_qp": 1 << 24, "cack_psn": 0, "ev": 0},
        {"dest_qp": 1, "cack_psn": 0, "ev": 0, "trigger_psn": -1},
        {"dest_qp": 2, "cack_psn": 0, "ev": 0},
        {"dest_qp": 1, "cack_psn": 0, "ev": 0, "rcv_cwnd_pen": 128},
        {"dest_qp": 1, "cack_psn": 0, "ev": 0, "verdict": 3},
        {"dest_qp": 1, "cack_psn": 0, "ev": 1 << 32},
    ],
)
def test_encode_sack_rejects_like_sack(kwargs: dict) -> None:
    expected = encode_outcome(Sack(**kwargs).encode)
    assert expected[0] == "error"
    assert encode_outcome(wire.encode_sack, **kwargs) == expected
