"""Tests that the scapy layers (testbed/nic/scapy_mrc.py) agree with the wire package."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from testbed.nic import wire
from testbed.nic.wire import (
    Cnp,
    DataPacket,
    EvProbe,
    EvProbeReply,
    Nack,
    Opcode,
    PortStatusUpdate,
    ReliabilityProbe,
    Sack,
    Trim,
    Verdict,
)

from tests.unit.wire_examples import DST, EXAMPLES, SRC, packets, u32

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
        return (0x80 * packet.ack_request | 0x40 * packet.retransmit
                | 0x20 * (packet.tx_timestamp is not None) | trim)
    if isinstance(packet, ReliabilityProbe):
        return 0x20 * (packet.tx_timestamp is not None)
    if isinstance(packet, (Sack, Nack)):
        return 0x20 * (packet.ts_echo is not None)
    return 0


def bth_fields(packet: wire.Packet, encoded: bytes) -> dict[str, object]:
    psn = {DataPacket: "psn", Sack: "cack_psn", Nack: "psn", ReliabilityProbe: "probe_id",
           EvProbe: "req_id", EvProbeReply: "req_id", Cnp: None,
           PortStatusUpdate: "req_id"}[type(packet)]
    opcode = getattr(packet, "opcode", {Sack: Opcode.SACK, Nack: Opcode.NACK,
                                        ReliabilityProbe: Opcode.RELIABILITY_PROBE,
                                        EvProbe: Opcode.EV_PROBE,
                                        EvProbeReply: Opcode.EV_PROBE_REPLY,
                                        PortStatusUpdate: Opcode.PORT_STATUS_UPDATE,
                                        Cnp: Opcode.CNP}.get(type(packet)))
    return {
        "MRC_BTH.opcode": opcode, "MRC_BTH.se": 0, "MRC_BTH.migreq": 0, "MRC_BTH.padcnt": 0,
        "MRC_BTH.tver": 0, "MRC_BTH.pkey": 0xFFFF, "MRC_BTH.version": 1,
        "MRC_BTH.flags": flags_byte(packet),
        "MRC_BTH.dest_qp": getattr(packet, "dest_qp", wire.EP_OP_QP),
        "MRC_BTH.psn": 0 if psn is None else getattr(packet, psn),   # a CNP's PSN is 0
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


def port_status_fields(p: PortStatusUpdate) -> dict[str, object]:
    return {"MRC_PortStatusUpdate.ep_op": 1,
            "MRC_PortStatusUpdate.erth_reserved": b"\0" * 15,
            "MRC_PortStatusUpdate.port_status": p.port_status,
            "MRC_PortStatusUpdate.changed": p.changed,
            "MRC_PortStatusUpdate.port_count": p.port_count,
            "MRC_PortStatusUpdate.eeth_reserved": b"\0" * 27}


BODY_FIELDS = {DataPacket: data_fields, Sack: sack_fields, Nack: nack_fields,
               ReliabilityProbe: probe_fields, EvProbe: ev_probe_fields,
               EvProbeReply: ev_reply_fields, PortStatusUpdate: port_status_fields,
               Cnp: lambda p: {"MRC_CNP.reserved": b"\0" * 16}}


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
    write = sm.MRC_BTH(opcode=Opcode.WRITE_ONLY_WITH_IMM, dest_qp=7, psn=1) \
        / sm.MRC_RETH(remote_offset=64, rkey=5, total_length=3) / sm.MRC_ImmDt(imm=8) \
        / sm.MRC_METH(msn=2) / b"abc"
    assert wire.decode(bytes(write)) == DataPacket(Opcode.WRITE_ONLY_WITH_IMM, 7, 1, 2, 0, 64, 5,
                                                   3, b"abc", imm=8)
