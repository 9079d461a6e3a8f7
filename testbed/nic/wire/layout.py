"""Where every MRC byte sits: lengths, opcodes, flag bits, enums and the header structs.

Everything that fixes the layout of an MRC packet (BTH through ICRC) lives here, so that
the writers (encode.py) and the readers (decode.py) cannot disagree about a byte. The
inner IPv6 + UDP headers' structs live with their code in inner.py; their lengths are
here because max_payload() counts them. docs/wire-format.md is the human form.

Headers are packed with precompiled ``struct.Struct`` objects (network byte order
throughout): the per-packet path does one pack or unpack call per header.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from operator import itemgetter

# --------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------

UDP_PORT = 4791
PROTOCOL_VERSION = 1
EP_OP_QP = 0x2  # destination QP reserved for endpoint operations (EV probes, port status)

IPV6_HEADER_LEN = 40
UDP_HEADER_LEN = 8
INNER_HEADERS_LEN = IPV6_HEADER_LEN + UDP_HEADER_LEN
SRH_FIXED_LEN = 8
SRH_SEGMENT_LEN = 16

BTH_LEN = 12
METH_LEN = 4
TSETH_LEN = 4
RETH_LEN = 16
IMMDT_LEN = 4
ICRC_LEN = 4
SETH_LEN = 20
CC_STATE_LEN = 20
NETH_LEN = 16
EV_PROBE_LEN = 12
EV_PROBE_REPLY_LEN = 16
CNP_BODY_LEN = 16   # RoCEv2 CNP: 16 reserved bytes between BTH and ICRC
# Endpoint operations carry a 16-byte ERTH and a 36-byte EETH [3P:ns3]; what is in them is
# not public, the Port Status Update's layout is ours (docs/wire-format.md §6.4, [CONV]).
ERTH_LEN = 16
EETH_LEN = 36
EP_OP_PORT_STATUS = 0x01   # ERTH's endpoint-operation code of a Port Status Update [CONV]
MAX_PORTS = 32             # the port_status mask is 32 bits, bit p-1 = port p [R:ctl.h]

REQ_ID_MASK = 0xFFFF  # endpoint operations carry a u16 request id in BTH PSN[15:0]
MPR_UNIT_PSNS = 128
SACK_BITMAP_BITS = 64
MAX_RCV_CWND_PEN = 127

# The BTH is laid out as IBA's, so that a RoCE dissector reads the IBA fields right: byte 1
# (SE, MigReq, PadCnt, TVer) is zero, bytes 2-3 are the default P_Key, byte 4 (IBA: FECN,
# BECN, reserved) carries the MRC version, byte 8 (IBA: AckReq, 7 reserved bits) the flags.
BTH_PKEY = 0xFFFF  # the IBA default partition: MRC has no partitions
BTH_VERSION_OFFSET = 4
BTH_FLAGS_OFFSET = 8
PSN_FIELD_MASK = 0xFFFFFF  # dest QP and PSN: the low 24 bits of their BTH words
BTH_VERSION_WORD = PROTOCOL_VERSION << 24  # BTH bytes 4-7 are [version:8 | dest_qp:24]
# BTH flag bits (byte 8). Bit 7 is IBA's AckReq; bits 2..0 are reserved and must be zero.
FLAG_ACK_REQUEST = 0x80
FLAG_RETRANSMIT = 0x40
FLAG_TIMESTAMP = 0x20  # data/probe: TSETH follows; SACK/NACK: ts_echo is meaningful
FLAG_TRIMMED = 0x10
FLAG_TRIMMED_LASTHOP = 0x08  # only together with FLAG_TRIMMED
DATA_FLAGS = (
    FLAG_RETRANSMIT | FLAG_TIMESTAMP | FLAG_ACK_REQUEST | FLAG_TRIMMED | FLAG_TRIMMED_LASTHOP
)

# SETH flag byte: bits 1..0 carry the verdict M; bits 7..3 are reserved.
SACK_VERDICT_MASK = 0x03
SACK_PROBE_REPLY = 0x04
SACK_RESERVED_FLAGS = 0xF8


class Opcode(IntEnum):
    # Data opcodes reuse the IBA RC RDMA WRITE numbers.
    WRITE_FIRST = 0x06
    WRITE_MIDDLE = 0x07
    WRITE_LAST = 0x08
    WRITE_LAST_WITH_IMM = 0x09
    WRITE_ONLY = 0x0A
    WRITE_ONLY_WITH_IMM = 0x0B
    # MRC-only opcodes sit in IBA's manufacturer-specific range (OpCode[7:5] = 110): the RC
    # range's free numbers are IBA's to assign (1.5 took 0x1C FLUSH and 0x1D ATOMIC WRITE).
    SACK = 0xC0
    NACK = 0xC1
    RELIABILITY_PROBE = 0xC2
    EV_PROBE = 0xC3
    EV_PROBE_REPLY = 0xC4
    PORT_STATUS_UPDATE = 0xC5
    # RoCEv2's congestion notification packet (IBA Annex A17: BTH opcode 0x81), which a
    # DCQCN notification point sends its reaction point on a CE mark.
    CNP = 0x81


class Verdict(IntEnum):
    """Multipath verdict M a SACK passes on the reflected EV."""

    NONE = 0
    SKIP_ONCE = 1
    ALWAYS_SKIP = 2


class NackReason(IntEnum):
    TRIMMED = 1
    TRIMMED_LASTHOP = 2
    NO_BITMAP = 3
    NO_PKT_BUFFER = 4
    NO_RESOURCE = 5
    PSN_OOR_WINDOW = 6
    UNEXP_EVENT = 7


class Trim(IntEnum):
    """Whether a switch cut this data packet's payload, and where."""

    NONE = 0
    TRIMMED = 1
    TRIMMED_LASTHOP = 2


DATA_OPCODES = frozenset(
    {
        Opcode.WRITE_FIRST,
        Opcode.WRITE_MIDDLE,
        Opcode.WRITE_LAST,
        Opcode.WRITE_LAST_WITH_IMM,
        Opcode.WRITE_ONLY,
        Opcode.WRITE_ONLY_WITH_IMM,
    }
)
IMM_OPCODES = frozenset({Opcode.WRITE_LAST_WITH_IMM, Opcode.WRITE_ONLY_WITH_IMM})
ONLY_OPCODES = frozenset({Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_WITH_IMM})
IMM_NONE, IMM_AFTER_RETH, IMM_BEFORE_RETH = 0, 1, 2
# Where ImmDt sits relative to RETH, by data opcode value (the DataLayout index's low part).
IMM_PLACEMENT = {op.value: IMM_NONE for op in DATA_OPCODES} | {
    Opcode.WRITE_ONLY_WITH_IMM.value: IMM_AFTER_RETH,
    Opcode.WRITE_LAST_WITH_IMM.value: IMM_BEFORE_RETH,
}
SACK_OPCODE_VALUE = Opcode.SACK.value  # the plain int, for per-packet packing and comparing

# --------------------------------------------------------------------------
# Header structs
# --------------------------------------------------------------------------

U32 = struct.Struct(">I")  # the ICRC, and the reliability probe's TSETH
# opcode, [SE M PadCnt TVer] = 0, P_Key, [version:8 | dest_qp:24], [flags:8 | psn:24]
_BTH_FORMAT = "BBHII"
BTH = struct.Struct(">" + _BTH_FORMAT)
# SETH: sack_offset, sack_flags, mpr, bitmap, reflected ev, [reserved:8 | trigger_psn:24]
# CC_STATE: ts_echo, service_time_ns, ooo_count, rcv_cwnd_pen, reserved, received_bytes
SACK_BODY = struct.Struct(">HBBQII" "IIHBBQ")
# NETH: reason, reserved, reserved, reflected ev, [reserved:8 | cack_psn:24], ts_echo
NACK_BODY = struct.Struct(">BBHIII")
EV_PROBE_BODY = struct.Struct(">IBBHI")  # ev, port, reserved, reserved, tx_timestamp
# ev, port (echoed), rx_port, reserved, ts_echo, service_time_ns
EV_PROBE_REPLY_BODY = struct.Struct(">IBBHII")
# Port Status Update: ERTH = ep_op, 15 reserved bytes (u8, u8, u16, u32, u64);
# EETH = port_status, changed, port_count, 27 reserved bytes (u8, u16, u64 x 3).
PORT_STATUS_BODY = struct.Struct(">BBHIQ" "IIBBHQQQ")
# A whole SACK but its ICRC: BTH | SETH | CC_STATE.
SACK_PACKET = struct.Struct(">" + _BTH_FORMAT + SACK_BODY.format.lstrip(">"))

# Data packets. IBA's own headers come first, where IBA puts them for the opcode, so that a
# RoCE dissector reads them right: RETH right after the BTH, except on WRITE_LAST_WITH_IMM,
# where IBA has ImmDt there and no RETH; on WRITE_ONLY_WITH_IMM ImmDt follows RETH. MRC's
# METH and [TSETH] come after them (a RoCE dissector counts them as payload).
DATA_FIELDS = ("remote_offset", "rkey", "total_length", "imm", "msn", "rqmsn", "tx_timestamp")
_HEADER_FIELDS = {
    "RETH": (("remote_offset", "Q"), ("rkey", "I"), ("total_length", "I")),
    "ImmDt": (("imm", "I"),),
    "METH": (("msn", "H"), ("rqmsn", "H")),
    "TSETH": (("tx_timestamp", "I"),),
}
_HEADERS_BY_IMM = {IMM_NONE: ("RETH",), IMM_AFTER_RETH: ("RETH", "ImmDt"),
                   IMM_BEFORE_RETH: ("ImmDt", "RETH")}


BTH_FIELDS = len(_BTH_FORMAT)


def _picker(names: list[str], skip: int) -> itemgetter:
    """Picks DATA_FIELDS out of unpacked values: ``names`` start after ``skip`` values and
    one None is appended after them, which stands for every field not in ``names``."""
    absent = skip + len(names)
    return itemgetter(*(skip + names.index(f) if f in names else absent for f in DATA_FIELDS))


class DataLayout:
    """One order of the headers after a data packet's BTH, with the struct that packs them.

    ``fields_of(body_values + (None,))`` gives the DATA_FIELDS in their order (None for a
    header the packet does not carry), ``fields_of_packet(packet_values + (None,))`` the
    same from the values of the whole header; ``wire_values_of(data_field_values)`` gives
    the body values to pack.
    """

    def __init__(self, imm_placement: int, timestamp: bool) -> None:
        self.headers = _HEADERS_BY_IMM[imm_placement] + ("METH",) + (
            ("TSETH",) if timestamp else ())
        fields = [field for header in self.headers for field in _HEADER_FIELDS[header]]
        names = [name for name, _ in fields]
        body = "".join(fmt for _, fmt in fields)
        self.body = struct.Struct(">" + body)
        self.packet = struct.Struct(">" + _BTH_FORMAT + body)
        self.fields_of = _picker(names, 0)
        self.fields_of_packet = _picker(names, BTH_FIELDS)  # the same after BTH's values
        self.wire_values_of = itemgetter(*(DATA_FIELDS.index(name) for name in names))


# Indexed by has_timestamp * 3 + imm placement: one pack or unpack call per packet whatever
# it carries.
DATA_LAYOUTS = tuple(DataLayout(imm, ts) for ts in (False, True)
                     for imm in (IMM_NONE, IMM_AFTER_RETH, IMM_BEFORE_RETH))


assert SACK_BODY.size == SETH_LEN + CC_STATE_LEN
assert DATA_LAYOUTS[-1].packet.size == BTH_LEN + METH_LEN + TSETH_LEN + RETH_LEN + IMMDT_LEN
assert SACK_PACKET.size == BTH_LEN + SETH_LEN + CC_STATE_LEN
assert NACK_BODY.size == NETH_LEN
assert EV_PROBE_BODY.size == EV_PROBE_LEN
assert EV_PROBE_REPLY_BODY.size == EV_PROBE_REPLY_LEN
assert PORT_STATUS_BODY.size == ERTH_LEN + EETH_LEN

SACK_LEN = BTH_LEN + SETH_LEN + CC_STATE_LEN + ICRC_LEN
NACK_LEN = BTH_LEN + NETH_LEN + ICRC_LEN
EV_PROBE_PACKET_LEN = BTH_LEN + EV_PROBE_LEN + ICRC_LEN
EV_PROBE_REPLY_PACKET_LEN = BTH_LEN + EV_PROBE_REPLY_LEN + ICRC_LEN
CNP_PACKET_LEN = BTH_LEN + CNP_BODY_LEN + ICRC_LEN
PORT_STATUS_PACKET_LEN = BTH_LEN + ERTH_LEN + EETH_LEN + ICRC_LEN   # 68
MIN_DATA_PACKET_LEN = BTH_LEN + METH_LEN + RETH_LEN + ICRC_LEN


def max_payload(
    mtu: int, *, timestamp: bool = True, imm: bool = True, srh_segments: int = 0
) -> int:
    """Payload bytes that fit one MRC data packet on a path of ``mtu`` bytes.

    Counts the outer IPv6 header the kernel adds (plus an SRH if used), the inner
    IPv6 + UDP headers and every MRC header. Timestamp and ImmDt are counted by
    default so that all packets of one WRITE can carry the same payload size.
    """
    overhead = 2 * IPV6_HEADER_LEN + UDP_HEADER_LEN + BTH_LEN + METH_LEN + RETH_LEN + ICRC_LEN
    overhead += TSETH_LEN if timestamp else 0
    overhead += IMMDT_LEN if imm else 0
    overhead += SRH_FIXED_LEN + SRH_SEGMENT_LEN * srh_segments if srh_segments else 0
    if mtu - overhead <= 0:
        raise ValueError(f"MTU {mtu} leaves no room for payload (overhead {overhead})")
    return mtu - overhead
