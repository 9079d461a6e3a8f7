"""The MRC packet kinds as values: what a packet says, apart from its bytes.

Everything that names a packet's fields lives here: one frozen dataclass per kind (what
tests, tools and the slow paths build and compare), and the receive path's twins RxData
and RxSack (the same fields as named tuples, cheap enough to build per packet). Each
dataclass's encode() hands its fields to the writer in encode.py; decode.py builds them
from bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Union

from testbed.nic.wire.encode import (
    encode_cnp,
    encode_data,
    encode_ev_probe,
    encode_ev_probe_reply,
    encode_nack,
    encode_port_status_update,
    encode_reliability_probe,
    encode_sack,
)
from testbed.nic.wire.layout import NackReason, Opcode, Trim, Verdict


@dataclass(frozen=True, slots=True)
class DataPacket:
    """An RDMA WRITE packet: BTH | RETH, [ImmDt] (where IBA puts them) | METH | [TSETH] |
    payload | ICRC (docs/wire-format.md §4).

    ``remote_offset`` is where this packet's payload lands; ``total_length`` is the
    length of the whole WRITE, so any packet alone lets the receiver place data.
    """

    opcode: Opcode
    dest_qp: int
    psn: int
    msn: int
    rqmsn: int
    remote_offset: int
    rkey: int
    total_length: int
    payload: bytes = b""
    imm: int | None = None
    tx_timestamp: int | None = None
    retransmit: bool = False
    ack_request: bool = False
    trim: Trim = Trim.NONE

    def encode(self) -> bytes:
        return encode_data(
            self.opcode, self.dest_qp, self.psn, self.msn, self.rqmsn, self.remote_offset,
            self.rkey, self.total_length, self.payload, self.imm, self.tx_timestamp,
            self.retransmit, self.ack_request, self.trim,
        )


@dataclass(frozen=True, slots=True)
class Sack:
    """Selective ACK: BTH (psn = cack_psn) | SETH | CC_STATE | ICRC.

    Bit i of ``bitmap`` stands for PSN cack_psn + sack_offset + i.
    ``trigger_psn`` is the BTH PSN of the packet that caused this SACK (the probe id
    when ``probe_reply``); ``ev`` is that packet's EV.
    """

    dest_qp: int
    cack_psn: int
    ev: int
    sack_offset: int = 1
    bitmap: int = 0
    verdict: Verdict = Verdict.NONE
    mpr: int = 0
    trigger_psn: int = 0
    probe_reply: bool = False
    ts_echo: int | None = None
    service_time_ns: int = 0
    ooo_count: int = 0
    rcv_cwnd_pen: int = 0
    received_bytes: int = 0

    def encode(self) -> bytes:
        return encode_sack(
            self.dest_qp, self.cack_psn, self.ev, self.sack_offset, self.bitmap, self.verdict,
            self.mpr, self.trigger_psn, self.probe_reply, self.ts_echo, self.service_time_ns,
            self.ooo_count, self.rcv_cwnd_pen, self.received_bytes,
        )


@dataclass(frozen=True, slots=True)
class Nack:
    """Negative ACK for one PSN: BTH (psn = nacked PSN) | NETH | ICRC."""

    dest_qp: int
    psn: int
    reason: NackReason
    ev: int
    cack_psn: int
    ts_echo: int | None = None

    def encode(self) -> bytes:
        return encode_nack(self.dest_qp, self.psn, self.reason, self.ev, self.cack_psn,
                           self.ts_echo)


@dataclass(frozen=True, slots=True)
class ReliabilityProbe:
    """QP-scoped probe: BTH (psn = probe_id) | [TSETH] | ICRC.

    Consumes no PSN: the BTH PSN field carries a sender-chosen probe id that the
    answering SACK returns as ``trigger_psn`` with ``probe_reply`` set.
    """

    dest_qp: int
    probe_id: int
    tx_timestamp: int | None = None

    def encode(self) -> bytes:
        return encode_reliability_probe(self.dest_qp, self.probe_id, self.tx_timestamp)


@dataclass(frozen=True, slots=True)
class Cnp:
    """RoCEv2 congestion notification: BTH (opcode 0x81, psn 0) | 16 reserved bytes | ICRC.

    Consumes no PSN; it names only the QP whose packets arrived CE-marked.
    """

    dest_qp: int

    def encode(self) -> bytes:
        return encode_cnp(self.dest_qp)


@dataclass(frozen=True, slots=True)
class EvProbe:
    """Endpoint-op EV probe: BTH (QP 0x2, psn = req_id) | EV probe header | ICRC.

    ``port`` is the prober's 1-based NIC port the probe leaves on (the EV's plane).
    """

    req_id: int
    ev: int
    port: int
    tx_timestamp: int

    def encode(self) -> bytes:
        return encode_ev_probe(self.req_id, self.ev, self.port, self.tx_timestamp)


@dataclass(frozen=True, slots=True)
class EvProbeReply:
    """Answer to an EvProbe: echoes req_id, ev, port and timestamp; adds rx_port, service time."""

    req_id: int
    ev: int
    port: int
    rx_port: int
    ts_echo: int
    service_time_ns: int = 0

    def encode(self) -> bytes:
        return encode_ev_probe_reply(self.req_id, self.ev, self.port, self.rx_port,
                                     self.ts_echo, self.service_time_ns)


@dataclass(frozen=True, slots=True)
class PortStatusUpdate:
    """Endpoint-op Port Status Update: BTH (QP 0x2, psn = req_id) | ERTH | EETH | ICRC
    (docs/wire-format.md §6.4; layout [CONV]).

    ``port_status`` is the sender's 32-bit 1-based port mask, bit p-1 set = port (plane) p
    up, sent to its peers so they stop using EVs on a failed port at once [R:ctl.h];
    ``changed`` the ports whose state changed since the previous update, ``port_count``
    how many ports the sender has (mask bits from ``port_count`` on are zero). ``req_id``
    counts the sender's updates (u16, wraps), so a receiver can drop a stale copy.
    """

    req_id: int
    port_status: int
    changed: int
    port_count: int

    def encode(self) -> bytes:
        return encode_port_status_update(self.req_id, self.port_status, self.changed,
                                         self.port_count)


Packet = Union[DataPacket, Sack, Nack, ReliabilityProbe, Cnp, EvProbe, EvProbeReply,
               PortStatusUpdate]


class RxData(NamedTuple):
    """A received data packet as the endpoint's receive path sees it (decode_received).

    The fields, order and meaning of DataPacket, as a named tuple built with tuple.__new__:
    a frozen dataclass sets each of its 14 fields through object.__setattr__, which costs
    about a microsecond per packet, more than decoding the headers. Built only from bytes
    that passed every check decode() makes.
    """

    opcode: Opcode
    dest_qp: int
    psn: int
    msn: int
    rqmsn: int
    remote_offset: int
    rkey: int
    total_length: int
    payload: bytes
    imm: int | None
    tx_timestamp: int | None
    retransmit: bool
    ack_request: bool
    trim: Trim

    def packet(self) -> DataPacket:
        return DataPacket(*self)


class RxSack(NamedTuple):
    """A received SACK as the endpoint's receive path sees it: Sack's fields (see RxData)."""

    dest_qp: int
    cack_psn: int
    ev: int
    sack_offset: int
    bitmap: int
    verdict: Verdict
    mpr: int
    trigger_psn: int
    probe_reply: bool
    ts_echo: int | None
    service_time_ns: int
    ooo_count: int
    rcv_cwnd_pen: int
    received_bytes: int

    def packet(self) -> Sack:
        return Sack(*self)


# What the QP's receive code accepts: the public packet class or its receive-path twin.
AnyData = Union[DataPacket, RxData]
AnySack = Union[Sack, RxSack]
