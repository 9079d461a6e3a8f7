"""Tests of the packet kinds (testbed/nic/wire/packets.py): the receive-path twins mirror
the dataclasses field for field, and every dataclass encodes through its writer."""

from __future__ import annotations

import dataclasses

import pytest

from testbed.nic.wire import DataPacket, RxData, RxSack, Sack
from testbed.nic.wire import encode as writers

from tests.unit.wire_examples import EXAMPLES


@pytest.mark.parametrize("rx, packet", [(RxData, DataPacket), (RxSack, Sack)])
def test_receive_twins_have_the_dataclass_fields_in_order(rx: type, packet: type) -> None:
    assert rx._fields == tuple(f.name for f in dataclasses.fields(packet))


@pytest.mark.parametrize("name", ["write_first", "write_last_imm", "sack", "sack_probe_reply"])
def test_receive_twin_converts_to_the_equal_dataclass(name: str) -> None:
    packet = EXAMPLES[name]
    twin = (RxData if isinstance(packet, DataPacket) else RxSack)(*dataclasses.astuple(packet))
    assert twin.packet() == packet and type(twin.packet()) is type(packet)


WRITER_OF = {"DataPacket": writers.encode_data, "Sack": writers.encode_sack,
             "Nack": writers.encode_nack, "ReliabilityProbe": writers.encode_reliability_probe,
             "EvProbe": writers.encode_ev_probe, "EvProbeReply": writers.encode_ev_probe_reply,
             "Cnp": writers.encode_cnp, "PortStatusUpdate": writers.encode_port_status_update}


@pytest.mark.parametrize("name", EXAMPLES)
def test_encode_is_the_writer_on_the_fields(name: str) -> None:
    packet = EXAMPLES[name]
    writer = WRITER_OF[type(packet).__name__]
    assert packet.encode() == writer(*dataclasses.astuple(packet))
