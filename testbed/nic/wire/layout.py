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

# --------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------

UDP_PORT = 4791
PROTOCOL_VERSION = 1
EP_OP_QP = 0x2  # destination QP reserved for endpoint operations (EV probes)

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

REQ_ID_MASK = 0xFFFF  # endpoint operations carry a u16 request id in BTH PSN[15:0]
MPR_UNIT_PSNS = 128
SACK_BITMAP_BITS = 64
MAX_RCV_CWND_PEN = 127

# BTH flag bits (byte 1). Bits 2..0 are reserved and must be zero.
FLAG_RETRANSMIT = 0x80
FLAG_TIMESTAMP = 0x40  # data/probe: TSETH follows; SACK/NACK: ts_echo is meaningful
FLAG_ACK_REQUEST = 0x20
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
    # MRC-only opcodes sit in the range IBA RC leaves reserved (0x18-0x1F).
    SACK = 0x18
    NACK = 0x19
    RELIABILITY_PROBE = 0x1A
    EV_PROBE = 0x1B
    EV_PROBE_REPLY = 0x1C
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
SACK_OPCODE_VALUE = Opcode.SACK.value  # the plain int, for per-packet packing and comparing

# --------------------------------------------------------------------------
# Header structs
# --------------------------------------------------------------------------

U32 = struct.Struct(">I")  # the ICRC, and the reliability probe's TSETH
# opcode, flags, version, reserved, [reserved:8 | dest_qp:24], [reserved:8 | psn:24]
BTH = struct.Struct(">BBBBII")
# SETH: sack_offset, sack_flags, mpr, bitmap, reflected ev, [reserved:8 | trigger_psn:24]
# CC_STATE: ts_echo, service_time_ns, ooo_count, rcv_cwnd_pen, reserved, received_bytes
SACK_BODY = struct.Struct(">HBBQII" "IIHBBQ")
# NETH: reason, reserved, reserved, reflected ev, [reserved:8 | cack_psn:24], ts_echo
NACK_BODY = struct.Struct(">BBHIII")
EV_PROBE_BODY = struct.Struct(">IBBHI")  # ev, port, reserved, reserved, tx_timestamp
# ev, port (echoed), rx_port, reserved, ts_echo, service_time_ns
EV_PROBE_REPLY_BODY = struct.Struct(">IBBHII")

# Whole data-packet headers (BTH | METH | [TSETH] | RETH | [ImmDt]) in one struct each, indexed
# by has_timestamp * 2 + has_imm: one pack or unpack call per packet whatever it carries.
# METH: msn, rqmsn. TSETH: tx_timestamp. RETH: remote_offset, rkey, total_length. ImmDt: imm.
_DATA_BODY_FORMATS = ("HHQII", "HHQIII", "HHIQII", "HHIQIII")
DATA_HEADERS = tuple(struct.Struct(">BBBBII" + body) for body in _DATA_BODY_FORMATS)
DATA_BODIES = tuple(struct.Struct(">" + body) for body in _DATA_BODY_FORMATS)
DATA_PLAIN, DATA_IMM, DATA_TS, DATA_TS_IMM = DATA_HEADERS
# A whole SACK but its ICRC: BTH | SETH | CC_STATE.
SACK_PACKET = struct.Struct(">BBBBII" + SACK_BODY.format.lstrip(">"))

assert SACK_BODY.size == SETH_LEN + CC_STATE_LEN
assert DATA_TS_IMM.size == BTH_LEN + METH_LEN + TSETH_LEN + RETH_LEN + IMMDT_LEN
assert SACK_PACKET.size == BTH_LEN + SETH_LEN + CC_STATE_LEN
assert NACK_BODY.size == NETH_LEN
assert EV_PROBE_BODY.size == EV_PROBE_LEN
assert EV_PROBE_REPLY_BODY.size == EV_PROBE_REPLY_LEN

SACK_LEN = BTH_LEN + SETH_LEN + CC_STATE_LEN + ICRC_LEN
NACK_LEN = BTH_LEN + NETH_LEN + ICRC_LEN
EV_PROBE_PACKET_LEN = BTH_LEN + EV_PROBE_LEN + ICRC_LEN
EV_PROBE_REPLY_PACKET_LEN = BTH_LEN + EV_PROBE_REPLY_LEN + ICRC_LEN
CNP_PACKET_LEN = BTH_LEN + CNP_BODY_LEN + ICRC_LEN
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
