"""Tests of the writers (testbed/nic/wire/encode.py): they refuse what the reader would, and
the plain-value writers the endpoint calls lay out the packet classes' very bytes."""

from __future__ import annotations

import pytest
from hypothesis import given

from testbed.nic import wire
from testbed.nic.wire import (
    DataPacket,
    EvProbe,
    EvProbeReply,
    Nack,
    NackReason,
    Opcode,
    ReliabilityProbe,
    RxData,
    RxSack,
    Sack,
    Verdict,
    WireError,
)

from tests.unit.wire_examples import ROUND_TRIP, packets


def test_plain_ints_encode_like_enum_members() -> None:
    as_ints = DataPacket(0x0A, 1, 2, 3, 4, 5, 6, 1, b"x", trim=0).encode()
    assert as_ints == DataPacket(Opcode.WRITE_ONLY, 1, 2, 3, 4, 5, 6, 1, b"x").encode()
    assert Sack(1, 2, 3, verdict=1).encode() == Sack(1, 2, 3, verdict=Verdict.SKIP_ONCE).encode()
    assert Nack(1, 2, 6, 3, 4).encode() == Nack(1, 2, NackReason.PSN_OOR_WINDOW, 3, 4).encode()


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
