"""Scapy layers for the MRC headers of docs/wire-format.md, bound to UDP dport 4791.

For dissecting pcaps of the fabric and for crafting odd packets in tests; the
endpoint itself uses ``testbed.nic.wire``, which is the normative encoder. Opcode,
verdict and reason numbers are taken from the wire package so the two cannot drift apart;
the byte layout is written out again here on purpose, and the unit tests check
that both read the same bytes the same way.

    >>> from scapy.layers.inet6 import IPv6
    >>> import testbed.nic.scapy_mrc  # registers the layers
    >>> IPv6(inner_bytes).show()

Importing this module also makes scapy dissect UDP port 4791 as MRC rather than
RoCEv2 if ``scapy.contrib.roce`` was loaded first (the last binding wins).
"""

from __future__ import annotations

import struct
import zlib

from scapy.fields import (
    BitEnumField,
    BitField,
    ByteEnumField,
    ByteField,
    FCSField,
    FlagsField,
    IntField,
    LongField,
    ShortField,
    StrFixedLenField,
    ThreeBytesField,
    X3BytesField,
    XByteField,
    XIntField,
    XLongField,
    XShortField,
)
from scapy.layers.inet import UDP
from scapy.packet import Packet, Raw, bind_layers

from testbed.nic.wire import (
    DATA_OPCODES,
    FLAG_TIMESTAMP,
    PROTOCOL_VERSION,
    UDP_PORT,
    NackReason,
    Opcode,
    Verdict,
)

_OPCODE_NAMES = {op.value: op.name for op in Opcode}
_VERDICT_NAMES = {v.value: v.name for v in Verdict}
_REASON_NAMES = {r.value: r.name for r in NackReason}
# FlagsField names are listed from the least significant bit up; ack_req is IBA's AckReq.
_BTH_FLAG_NAMES = ["res0", "res1", "res2", "trimmed_lasthop", "trimmed", "ts", "retx", "ack_req"]


def _bth_of(layer: Packet) -> "MRC_BTH | None":
    """The BTH this header hangs off; later headers depend on its opcode and flags."""
    under = layer.underlayer
    while under is not None and not isinstance(under, MRC_BTH):
        under = under.underlayer
    return under


class MRC_BTH(Packet):
    """Base transport header (12 B, IBA's layout) plus the ICRC trailer at the packet's end."""

    name = "MRC BTH"
    fields_desc = [
        ByteEnumField("opcode", Opcode.WRITE_ONLY, _OPCODE_NAMES),
        BitField("se", 0, 1),
        BitField("migreq", 0, 1),
        BitField("padcnt", 0, 2),
        BitField("tver", 0, 4),
        XShortField("pkey", 0xFFFF),
        ByteField("version", PROTOCOL_VERSION),
        X3BytesField("dest_qp", 0),
        FlagsField("flags", 0, 8, _BTH_FLAG_NAMES),
        ThreeBytesField("psn", 0),
        FCSField("icrc", None, fmt="!I"),
    ]

    def post_build(self, pkt: bytes, pay: bytes) -> bytes:
        # The trailer placeholder is already at the end of pay; fill it in if unset.
        data = pkt + pay
        if self.icrc is None:
            data = data[:-4] + struct.pack("!I", zlib.crc32(data[:-4]))
        return data

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        opcode = self.opcode
        if opcode in DATA_OPCODES:
            return _data_headers(self)[0]
        if opcode == Opcode.RELIABILITY_PROBE and self.flags.value & FLAG_TIMESTAMP:
            return MRC_TSETH
        return _BODY_BY_OPCODE.get(opcode, Raw)


class _DataHeader(Packet):
    """A header of a data packet: which one follows depends on the BTH's opcode and flags."""

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        bth = _bth_of(self)
        if bth is None or bth.opcode not in DATA_OPCODES:
            return Raw
        headers = _data_headers(bth)
        position = headers.index(type(self)) if type(self) in headers else len(headers)
        return headers[position + 1] if position + 1 < len(headers) else Raw


class MRC_RETH(_DataHeader):
    name = "MRC RETH"
    fields_desc = [
        XLongField("remote_offset", 0),
        XIntField("rkey", 0),
        IntField("total_length", 0),
    ]


class MRC_ImmDt(_DataHeader):
    name = "MRC ImmDt"
    fields_desc = [XIntField("imm", 0)]


class MRC_METH(_DataHeader):
    name = "MRC METH"
    fields_desc = [ShortField("msn", 0), ShortField("rqmsn", 0)]


class MRC_TSETH(_DataHeader):
    """TX timestamp, u32 microseconds."""

    name = "MRC TSETH"
    fields_desc = [IntField("tx_timestamp", 0)]


def _data_headers(bth: MRC_BTH) -> tuple[type[Packet], ...]:
    """The headers after a data packet's BTH, in order: IBA's first, where IBA has them for
    the opcode (RETH after BTH, but ImmDt first on WRITE_LAST_WITH_IMM), then METH, [TSETH]."""
    if bth.opcode == Opcode.WRITE_LAST_WITH_IMM:
        iba: tuple[type[Packet], ...] = (MRC_ImmDt, MRC_RETH)
    elif bth.opcode == Opcode.WRITE_ONLY_WITH_IMM:
        iba = (MRC_RETH, MRC_ImmDt)
    else:
        iba = (MRC_RETH,)
    timestamp = (MRC_TSETH,) if bth.flags.value & FLAG_TIMESTAMP else ()
    return iba + (MRC_METH,) + timestamp


class MRC_SETH(Packet):
    """SACK extended header (20 B); CC_STATE follows."""

    name = "MRC SETH"
    fields_desc = [
        ShortField("sack_offset", 1),
        BitField("reserved1", 0, 5),
        BitField("probe_reply", 0, 1),
        BitEnumField("verdict", 0, 2, _VERDICT_NAMES),
        ByteField("mpr", 0),
        XLongField("bitmap", 0),
        XIntField("ev", 0),
        XByteField("reserved2", 0),
        ThreeBytesField("trigger_psn", 0),
    ]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        return MRC_CCState


class MRC_CCState(Packet):
    """Congestion-control state carried by every SACK (20 B)."""

    name = "MRC CC_STATE"
    fields_desc = [
        IntField("ts_echo", 0),
        IntField("service_time_ns", 0),
        ShortField("ooo_count", 0),
        ByteField("rcv_cwnd_pen", 0),
        XByteField("reserved", 0),
        LongField("received_bytes", 0),
    ]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        return Raw


class MRC_NETH(Packet):
    name = "MRC NETH"
    fields_desc = [
        ByteEnumField("reason", NackReason.TRIMMED, _REASON_NAMES),
        XByteField("reserved1", 0),
        XShortField("reserved2", 0),
        XIntField("ev", 0),
        XByteField("reserved3", 0),
        ThreeBytesField("cack_psn", 0),
        IntField("ts_echo", 0),
    ]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        return Raw


class MRC_EVProbe(Packet):
    """EV probe endpoint operation (request id rides in BTH PSN[15:0])."""

    name = "MRC EV probe"
    fields_desc = [
        XIntField("ev", 0),
        ByteField("port", 1),
        XByteField("reserved1", 0),
        XShortField("reserved2", 0),
        IntField("tx_timestamp", 0),
    ]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        return Raw


class MRC_EVProbeReply(Packet):
    name = "MRC EV probe reply"
    fields_desc = [
        XIntField("ev", 0),
        ByteField("port", 1),
        ByteField("rx_port", 1),
        XShortField("reserved", 0),
        IntField("ts_echo", 0),
        IntField("service_time_ns", 0),
    ]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        return Raw


class MRC_PortStatusUpdate(Packet):
    """Port Status Update endpoint operation (request id in BTH PSN[15:0]): ERTH | EETH,
    docs/wire-format.md §6.4 ([CONV] layout)."""

    name = "MRC port status update"
    fields_desc = [
        XByteField("ep_op", 1),
        StrFixedLenField("erth_reserved", b"\0" * 15, 15),
        XIntField("port_status", 0),
        XIntField("changed", 0),
        ByteField("port_count", 1),
        StrFixedLenField("eeth_reserved", b"\0" * 27, 27),
    ]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        return Raw


class MRC_CNP(Packet):
    """RoCEv2 congestion notification (opcode 0x81): 16 reserved bytes after the BTH."""

    name = "MRC CNP"
    fields_desc = [StrFixedLenField("reserved", b"\0" * 16, 16)]

    def guess_payload_class(self, payload: bytes) -> type[Packet]:
        return Raw


_BODY_BY_OPCODE: dict[int, type[Packet]] = {
    Opcode.SACK: MRC_SETH,
    Opcode.NACK: MRC_NETH,
    Opcode.EV_PROBE: MRC_EVProbe,
    Opcode.EV_PROBE_REPLY: MRC_EVProbeReply,
    Opcode.PORT_STATUS_UPDATE: MRC_PortStatusUpdate,
    Opcode.CNP: MRC_CNP,
}

bind_layers(UDP, MRC_BTH, dport=UDP_PORT)
# Building direction only: let MRC_BTH()/MRC_SETH() pick the right opcode by itself.
for _opcode, _layer in _BODY_BY_OPCODE.items():
    bind_layers(MRC_BTH, _layer, opcode=int(_opcode))
bind_layers(MRC_SETH, MRC_CCState)
bind_layers(MRC_RETH, MRC_METH)
