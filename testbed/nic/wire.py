"""MRC wire format: the inner IPv6 + UDP headers and the MRC packets behind them.

docs/wire-format.md is the human form of this module: byte layouts, opcode
numbers, flag bits and every project convention where the public MRC record is
silent. Keep the two in step.

This is the per-packet path of the endpoint, so headers are packed with
precompiled ``struct.Struct`` objects, enum members are looked up in tables built
at import, and decoding builds no per-packet dictionaries. Decoding is strict:
every reserved bit must be zero and every length must add up, so a packet that
decodes re-encodes to the very same bytes. Any malformed input raises
``WireError`` and nothing else.

The endpoint's own per-packet calls skip the frozen packet dataclasses, whose
construction costs as much as the encoding: the requester and responder call
``encode_data`` / ``encode_sack`` with plain values (the classes' ``encode()``
methods delegate to them), and the receive path calls ``decode_received``, which
makes every check ``decode`` makes but returns data packets and SACKs as the named
tuples ``RxData`` / ``RxSack``. tests/unit/test_wire_fast_paths.py holds the two
paths to identical bytes, fields and errors.
"""

from __future__ import annotations

import socket
import struct
import zlib
from dataclasses import dataclass, replace
from enum import IntEnum
from ipaddress import IPv6Address
from typing import Any, Callable, Iterable, NamedTuple, Union

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

PSN_BITS = 24
PSN_SPACE = 1 << PSN_BITS
PSN_MASK = PSN_SPACE - 1
_PSN_HALF = PSN_SPACE >> 1
REQ_ID_MASK = 0xFFFF
EV_MASK = 0xFFFFFFFF
TIMESTAMP_MASK = 0xFFFFFFFF  # TX timestamps are u32 microseconds; they wrap every ~71.6 min
MPR_UNIT_PSNS = 128
SACK_BITMAP_BITS = 64
MAX_RCV_CWND_PEN = 127

# BTH flag bits (byte 1). Bits 2..0 are reserved and must be zero.
FLAG_RETRANSMIT = 0x80
FLAG_TIMESTAMP = 0x40  # data/probe: TSETH follows; SACK/NACK: ts_echo is meaningful
FLAG_ACK_REQUEST = 0x20
FLAG_TRIMMED = 0x10
FLAG_TRIMMED_LASTHOP = 0x08  # only together with FLAG_TRIMMED

# SETH flag byte: bits 1..0 carry the verdict M; bits 7..3 are reserved.
SACK_VERDICT_MASK = 0x03
SACK_PROBE_REPLY = 0x04
_SACK_RESERVED = 0xF8


class WireError(ValueError):
    """Malformed MRC or inner-header bytes, or a packet that cannot be encoded."""


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

# Decode-side lookup tables, built once so decoding never calls an Enum constructor.
_REASON_BY_VALUE = {reason.value: reason for reason in NackReason}
_VERDICT_BY_BITS = (Verdict.NONE, Verdict.SKIP_ONCE, Verdict.ALWAYS_SKIP, None)
_VERDICTS = frozenset(Verdict)
_SACK_OPCODE = Opcode.SACK.value
# Indexed by (flags >> 3) & 3, i.e. (TRIMMED, TRIMMED_LASTHOP) bits.
_TRIM_BY_BITS = (Trim.NONE, None, Trim.TRIMMED, Trim.TRIMMED_LASTHOP)
_TRIM_FLAGS = {
    Trim.NONE: 0,
    Trim.TRIMMED: FLAG_TRIMMED,
    Trim.TRIMMED_LASTHOP: FLAG_TRIMMED | FLAG_TRIMMED_LASTHOP,
}

_DATA_FLAGS = (
    FLAG_RETRANSMIT | FLAG_TIMESTAMP | FLAG_ACK_REQUEST | FLAG_TRIMMED | FLAG_TRIMMED_LASTHOP
)

# --------------------------------------------------------------------------
# Precompiled structs (network byte order throughout)
# --------------------------------------------------------------------------

_U32 = struct.Struct(">I")
# opcode, flags, version, reserved, [reserved:8 | dest_qp:24], [reserved:8 | psn:24]
_BTH = struct.Struct(">BBBBII")
# SETH: sack_offset, sack_flags, mpr, bitmap, reflected ev, [reserved:8 | trigger_psn:24]
# CC_STATE: ts_echo, service_time_ns, ooo_count, rcv_cwnd_pen, reserved, received_bytes
_SACK_BODY = struct.Struct(">HBBQII" "IIHBBQ")
# NETH: reason, reserved, reserved, reflected ev, [reserved:8 | cack_psn:24], ts_echo
_NACK_BODY = struct.Struct(">BBHIII")
_EV_PROBE_BODY = struct.Struct(">IBBHI")  # ev, port, reserved, reserved, tx_timestamp
# ev, port (echoed), rx_port, reserved, ts_echo, service_time_ns
_EV_PROBE_REPLY_BODY = struct.Struct(">IBBHII")
# version:4 | traffic class:8 | flow label:20, payload length, next header, hop limit, src, dst
_IPV6 = struct.Struct(">IHBB16s16s")
_UDP = struct.Struct(">HHHH")  # sport, dport, length, checksum
_INNER = struct.Struct(">IHBB16s16sHHHH")

# Whole data-packet headers (BTH | METH | [TSETH] | RETH | [ImmDt]) in one struct each, indexed
# by has_timestamp * 2 + has_imm: one pack or unpack call per packet whatever it carries.
# METH: msn, rqmsn. TSETH: tx_timestamp. RETH: remote_offset, rkey, total_length. ImmDt: imm.
_DATA_BODY_FORMATS = ("HHQII", "HHQIII", "HHIQII", "HHIQIII")
_DATA_HEADERS = tuple(struct.Struct(">BBBBII" + body) for body in _DATA_BODY_FORMATS)
_DATA_BODIES = tuple(struct.Struct(">" + body) for body in _DATA_BODY_FORMATS)
_DATA_PLAIN, _DATA_IMM, _DATA_TS, _DATA_TS_IMM = _DATA_HEADERS
# A whole SACK but its ICRC: BTH | SETH | CC_STATE.
_SACK_PACKET = struct.Struct(">BBBBII" + _SACK_BODY.format.lstrip(">"))

assert _SACK_BODY.size == SETH_LEN + CC_STATE_LEN
assert _DATA_TS_IMM.size == BTH_LEN + METH_LEN + TSETH_LEN + RETH_LEN + IMMDT_LEN
assert _SACK_PACKET.size == BTH_LEN + SETH_LEN + CC_STATE_LEN
assert _NACK_BODY.size == NETH_LEN
assert _EV_PROBE_BODY.size == EV_PROBE_LEN
assert _EV_PROBE_REPLY_BODY.size == EV_PROBE_REPLY_LEN
assert _INNER.size == INNER_HEADERS_LEN

SACK_LEN = BTH_LEN + SETH_LEN + CC_STATE_LEN + ICRC_LEN
NACK_LEN = BTH_LEN + NETH_LEN + ICRC_LEN
EV_PROBE_PACKET_LEN = BTH_LEN + EV_PROBE_LEN + ICRC_LEN
EV_PROBE_REPLY_PACKET_LEN = BTH_LEN + EV_PROBE_REPLY_LEN + ICRC_LEN

# --------------------------------------------------------------------------
# 24-bit PSN arithmetic and u32 timestamps
# --------------------------------------------------------------------------


def psn_add(psn: int, delta: int) -> int:
    return (psn + delta) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """a - b as a signed distance in [-2**23, 2**23): the shortest way round the PSN ring."""
    d = (a - b) & PSN_MASK
    return d - PSN_SPACE if d >= _PSN_HALF else d


def psn_lt(a: int, b: int) -> bool:
    return psn_diff(a, b) < 0


def psn_le(a: int, b: int) -> bool:
    return psn_diff(a, b) <= 0


def timestamp_us(monotonic_ns: int) -> int:
    """The u32 microsecond TX timestamp for a clock reading in nanoseconds."""
    return (monotonic_ns // 1000) & TIMESTAMP_MASK


def timestamp_elapsed_us(now: int, then: int) -> int:
    """Microseconds from ``then`` to ``now``, across one u32 wrap."""
    return (now - then) & TIMESTAMP_MASK


# --------------------------------------------------------------------------
# SACK bitmap helpers
# --------------------------------------------------------------------------


def sack_bitmap(cack_psn: int, received: Iterable[int], sack_offset: int = 1) -> int:
    """Bitmap of ``received`` PSNs: bit i stands for PSN cack_psn + sack_offset + i.

    PSNs outside the 64-PSN window (including those at or before cack_psn) are
    ignored, so the receiver can pass its whole out-of-order set.
    """
    base = psn_add(cack_psn, sack_offset)
    bitmap = 0
    for psn in received:
        i = (psn - base) & PSN_MASK
        if i < SACK_BITMAP_BITS:
            bitmap |= 1 << i
    return bitmap


def sack_received_psns(cack_psn: int, sack_offset: int, bitmap: int) -> list[int]:
    """PSNs beyond cack_psn that the bitmap reports as received, oldest first."""
    base = psn_add(cack_psn, sack_offset)
    psns = []
    for i in range(bitmap.bit_length()):
        psn = psn_add(base, i)
        if bitmap >> i & 1 and psn_lt(cack_psn, psn):
            psns.append(psn)
    return psns


def sack_holes(cack_psn: int, sack_offset: int, bitmap: int) -> list[int]:
    """PSNs the SACK proves missing, oldest first.

    cack_psn + 1 is missing by definition of the cumulative PSN; beyond it, only
    zero bits below the highest set bit are holes. With sack_offset > 1 the PSNs
    between cack_psn + 2 and the bitmap base are unreported, not missing, so they
    are left to the retransmission timer rather than resent on a guess.
    """
    if not bitmap:
        return []
    base = psn_add(cack_psn, sack_offset)
    holes = [psn_add(cack_psn, 1)] if sack_offset > 1 else []
    for i in range(bitmap.bit_length() - 1):
        psn = psn_add(base, i)
        if not bitmap >> i & 1 and psn_lt(cack_psn, psn):
            holes.append(psn)
    return holes


# --------------------------------------------------------------------------
# Inner IPv6 + UDP headers and the EV carrier
# --------------------------------------------------------------------------

Address = Union[bytes, str, IPv6Address]


def _addr16(addr: Address) -> bytes:
    if isinstance(addr, IPv6Address):
        return addr.packed
    if isinstance(addr, str):
        try:
            return socket.inet_pton(socket.AF_INET6, addr)
        except OSError as exc:
            raise WireError(f"not an IPv6 address: {addr!r}") from exc
    if len(addr) != 16:
        raise WireError(f"IPv6 address must be 16 bytes, got {len(addr)}")
    return bytes(addr)


def ev_to_sport_flowlabel(ev: int) -> tuple[int, int]:
    """Low 16 EV bits ride in the UDP source port, high 16 in the flow label's low 16."""
    if ev & ~EV_MASK:
        raise WireError(f"EV out of 32-bit range: {ev:#x}")
    return ev & 0xFFFF, ev >> 16


def sport_flowlabel_to_ev(sport: int, flow_label: int) -> int:
    # The top 4 flow-label bits are unused by the STEV mapping; ignore them.
    return (flow_label & 0xFFFF) << 16 | (sport & 0xFFFF)


def ipv6_header(
    src: Address,
    dst: Address,
    flow_label: int,
    payload_length: int,
    *,
    hop_limit: int = 64,
    traffic_class: int = 0,
    next_header: int = socket.IPPROTO_UDP,
) -> bytes:
    """A bare IPv6 header; build_inner() is the one-call path for MRC packets."""
    if flow_label >> 20 or traffic_class >> 8:  # shifts are also non-zero for negatives
        raise WireError("flow label must fit 20 bits and traffic class 8 bits")
    word0 = 6 << 28 | traffic_class << 20 | flow_label
    try:
        return _IPV6.pack(word0, payload_length, next_header, hop_limit, _addr16(src), _addr16(dst))
    except struct.error as exc:
        raise WireError(f"IPv6 header field out of range: {exc}") from exc


def udp_header(sport: int, length: int, *, dport: int = UDP_PORT, checksum: int = 0) -> bytes:
    """UDP header; checksum 0 because the receiver sets UDP_NO_CHECK6_RX and MRC has an ICRC."""
    try:
        return _UDP.pack(sport, dport, length, checksum)
    except struct.error as exc:
        raise WireError(f"UDP header field out of range: {exc}") from exc


def build_inner(
    src: Address,
    dst: Address,
    ev: int,
    mrc_bytes: bytes,
    *,
    hop_limit: int = 64,
    traffic_class: int = 0,
    dport: int = UDP_PORT,
) -> bytes:
    """Inner IPv6 + UDP + MRC bytes, ready for the IPv6-in-IPv6 raw socket."""
    sport, flow_label = ev_to_sport_flowlabel(ev)
    udp_length = UDP_HEADER_LEN + len(mrc_bytes)
    if traffic_class >> 8:
        raise WireError("traffic class must fit 8 bits")
    word0 = 6 << 28 | traffic_class << 20 | flow_label
    try:
        header = _INNER.pack(
            word0, udp_length, socket.IPPROTO_UDP, hop_limit, _addr16(src), _addr16(dst),
            sport, dport, udp_length, 0,
        )
    except struct.error as exc:
        raise WireError(f"inner header field out of range: {exc}") from exc
    return header + mrc_bytes


def parse_inner(buf: bytes, *, dport: int = UDP_PORT) -> tuple[bytes, bytes, int, bytes]:
    """(src, dst, ev, mrc_bytes) of an inner IPv6 + UDP packet; addresses as 16 bytes."""
    if len(buf) < INNER_HEADERS_LEN:
        raise WireError(f"truncated inner headers: {len(buf)} bytes")
    fields = _INNER.unpack_from(buf)
    word0, plen, next_header, _hop_limit, src, dst, sport, got_dport, ulen, _checksum = fields
    if word0 >> 28 != 6:
        raise WireError(f"bad IP version {word0 >> 28}, expected 6")
    if next_header != socket.IPPROTO_UDP:
        raise WireError(f"inner next header {next_header} is not UDP")
    if plen != len(buf) - IPV6_HEADER_LEN or ulen != plen:
        raise WireError(
            f"inconsistent lengths: buffer {len(buf)}, IPv6 payload {plen}, UDP {ulen}"
        )
    if got_dport != dport:
        raise WireError(f"UDP destination port {got_dport} is not {dport}")
    ev = sport_flowlabel_to_ev(sport, word0 & 0xFFFFF)
    return src, dst, ev, bytes(buf[INNER_HEADERS_LEN:])


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


# --------------------------------------------------------------------------
# Shared encode/decode pieces
# --------------------------------------------------------------------------


def _seal(header: bytes, payload: bytes = b"") -> bytes:
    """Append the ICRC: zlib.crc32 over every MRC byte before it, big-endian."""
    crc = zlib.crc32(payload, zlib.crc32(header))
    return b"".join((header, payload, _U32.pack(crc)))


def _check_crc(buf: bytes, end: int) -> None:
    (crc,) = _U32.unpack_from(buf, end)
    if zlib.crc32(memoryview(buf)[:end]) != crc:
        raise WireError("bad ICRC")


def _check_24bit(what: str, *values: int) -> None:
    for value in values:
        if value >> 24:  # also true for negative values
            raise WireError(f"{what}: {value:#x} does not fit 24 bits")


def _check_qp(dest_qp: int) -> None:
    # QP 0x2 addresses the endpoint itself; no QP-scoped packet may use it.
    if dest_qp == EP_OP_QP:
        raise WireError("destination QP 0x2 is reserved for endpoint operations")


def _check_req_id(req_id: int) -> None:
    # Endpoint operations carry their u16 request id in BTH PSN[15:0].
    if req_id & ~REQ_ID_MASK:
        raise WireError(f"req_id {req_id} does not fit 16 bits")


def _pack(fmt: struct.Struct, *values: int) -> bytes:
    try:
        return fmt.pack(*values)
    except struct.error as exc:
        raise WireError(f"field out of range: {exc}") from exc


def _bth(opcode: Opcode, flags: int, dest_qp: int, psn: int) -> bytes:
    return _pack(_BTH, opcode, flags, PROTOCOL_VERSION, 0, dest_qp, psn)


def _echo_field(ts_echo: int | None) -> tuple[int, int]:
    """(flag, wire value) for an optional echoed timestamp: absent is flag clear and zero."""
    return (0, 0) if ts_echo is None else (FLAG_TIMESTAMP, ts_echo)


def _echo_value(flags: int, wire_value: int) -> int | None:
    if flags & FLAG_TIMESTAMP:
        return wire_value
    if wire_value:
        raise WireError("echoed timestamp set without the timestamp flag")
    return None


def _check_data_lengths(opcode: int, trim: Trim, payload_len: int, total_length: int) -> None:
    """A packet's payload must be consistent with its opcode and the whole WRITE's length."""
    if trim:  # Trim.NONE is 0
        if payload_len:
            raise WireError("trimmed packet still carries payload")
        return
    if opcode in ONLY_OPCODES:
        if payload_len != total_length:
            raise WireError(f"ONLY packet carries {payload_len} of {total_length} bytes")
    elif not 0 < payload_len < total_length:
        raise WireError(
            f"multi-packet WRITE piece of {payload_len} bytes in a {total_length}-byte WRITE"
        )


# --------------------------------------------------------------------------
# Per-packet encoders
#
# The requester and responder call these with plain values rather than building a
# DataPacket or Sack first: constructing a frozen dataclass costs about as much as
# encoding it. The packet classes' encode() methods call them too, so both paths
# validate and lay out bytes identically.
# --------------------------------------------------------------------------


def encode_data(
    opcode: int,
    dest_qp: int,
    psn: int,
    msn: int,
    rqmsn: int,
    remote_offset: int,
    rkey: int,
    total_length: int,
    payload: bytes = b"",
    imm: int | None = None,
    tx_timestamp: int | None = None,
    retransmit: bool = False,
    ack_request: bool = False,
    trim: Trim = Trim.NONE,
) -> bytes:
    """The bytes of DataPacket(same arguments).encode(); raises WireError likewise."""
    if opcode not in DATA_OPCODES:
        raise WireError(f"{opcode!r} is not a data opcode")
    has_imm = imm is not None
    if has_imm != (opcode in IMM_OPCODES):
        raise WireError("ImmDt must be present exactly on *_WITH_IMM opcodes")
    if (dest_qp | psn) >> 24:  # one test for both; _check_24bit names the culprit
        _check_24bit("dest_qp/psn", dest_qp, psn)
    if dest_qp == EP_OP_QP:
        _check_qp(dest_qp)
    # The checks of _check_data_lengths, which is called only to refuse (or for a trim).
    payload_len = len(payload)
    if trim or ((payload_len != total_length) if opcode in ONLY_OPCODES
                else not 0 < payload_len < total_length):
        _check_data_lengths(opcode, trim, payload_len, total_length)
    flags = _TRIM_FLAGS.get(trim)
    if flags is None:
        raise WireError(f"unknown trim state {trim!r}")
    if retransmit:
        flags |= FLAG_RETRANSMIT
    if ack_request:
        flags |= FLAG_ACK_REQUEST
    try:
        if tx_timestamp is None:
            if has_imm:
                header = _DATA_IMM.pack(opcode, flags, PROTOCOL_VERSION, 0, dest_qp, psn, msn,
                                        rqmsn, remote_offset, rkey, total_length, imm)
            else:
                header = _DATA_PLAIN.pack(opcode, flags, PROTOCOL_VERSION, 0, dest_qp, psn, msn,
                                          rqmsn, remote_offset, rkey, total_length)
        elif has_imm:
            header = _DATA_TS_IMM.pack(opcode, flags | FLAG_TIMESTAMP, PROTOCOL_VERSION, 0,
                                       dest_qp, psn, msn, rqmsn, tx_timestamp, remote_offset,
                                       rkey, total_length, imm)
        else:
            header = _DATA_TS.pack(opcode, flags | FLAG_TIMESTAMP, PROTOCOL_VERSION, 0, dest_qp,
                                   psn, msn, rqmsn, tx_timestamp, remote_offset, rkey,
                                   total_length)
    except struct.error as exc:
        raise WireError(f"field out of range: {exc}") from exc
    crc = zlib.crc32(payload, zlib.crc32(header))          # _seal(), inlined
    return b"".join((header, payload, _U32.pack(crc)))


def encode_sack(
    dest_qp: int,
    cack_psn: int,
    ev: int,
    sack_offset: int = 1,
    bitmap: int = 0,
    verdict: Verdict = Verdict.NONE,
    mpr: int = 0,
    trigger_psn: int = 0,
    probe_reply: bool = False,
    ts_echo: int | None = None,
    service_time_ns: int = 0,
    ooo_count: int = 0,
    rcv_cwnd_pen: int = 0,
    received_bytes: int = 0,
) -> bytes:
    """The bytes of Sack(same arguments).encode(); raises WireError likewise."""
    if (dest_qp | cack_psn | trigger_psn) >> 24:
        _check_24bit("dest_qp/cack_psn/trigger_psn", dest_qp, cack_psn, trigger_psn)
    if dest_qp == EP_OP_QP:
        _check_qp(dest_qp)
    if not 0 <= rcv_cwnd_pen <= MAX_RCV_CWND_PEN:
        raise WireError(f"rcv_cwnd_pen {rcv_cwnd_pen} outside 0..127")
    if verdict not in _VERDICTS:
        raise WireError(f"unknown verdict {verdict!r}")
    if ts_echo is None:                   # _echo_field(), inlined
        ts_flag, ts_echo = 0, 0
    else:
        ts_flag = FLAG_TIMESTAMP
    sack_flags = verdict | (SACK_PROBE_REPLY if probe_reply else 0)
    try:
        header = _SACK_PACKET.pack(
            _SACK_OPCODE, ts_flag, PROTOCOL_VERSION, 0, dest_qp, cack_psn, sack_offset,
            sack_flags, mpr, bitmap, ev, trigger_psn, ts_echo, service_time_ns, ooo_count,
            rcv_cwnd_pen, 0, received_bytes,
        )
    except struct.error as exc:
        raise WireError(f"field out of range: {exc}") from exc
    return header + _U32.pack(zlib.crc32(header))


# --------------------------------------------------------------------------
# Packet kinds
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DataPacket:
    """An RDMA WRITE packet: BTH | METH | [TSETH] | RETH | [ImmDt] | payload | ICRC.

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
        _check_24bit("dest_qp/psn/cack_psn", self.dest_qp, self.psn, self.cack_psn)
        _check_qp(self.dest_qp)
        if self.reason not in _REASON_BY_VALUE:
            raise WireError(f"unknown NACK reason {self.reason!r}")
        ts_flag, ts_echo = _echo_field(self.ts_echo)
        body = _pack(_NACK_BODY, self.reason, 0, 0, self.ev, self.cack_psn, ts_echo)
        return _seal(_bth(Opcode.NACK, ts_flag, self.dest_qp, self.psn) + body)


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
        _check_24bit("dest_qp/probe_id", self.dest_qp, self.probe_id)
        _check_qp(self.dest_qp)
        if self.tx_timestamp is None:
            return _seal(_bth(Opcode.RELIABILITY_PROBE, 0, self.dest_qp, self.probe_id))
        header = _bth(Opcode.RELIABILITY_PROBE, FLAG_TIMESTAMP, self.dest_qp, self.probe_id)
        return _seal(header + _pack(_U32, self.tx_timestamp))


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
        _check_req_id(self.req_id)
        header = _bth(Opcode.EV_PROBE, 0, EP_OP_QP, self.req_id)
        body = _pack(_EV_PROBE_BODY, self.ev, self.port, 0, 0, self.tx_timestamp)
        return _seal(header + body)


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
        _check_req_id(self.req_id)
        header = _bth(Opcode.EV_PROBE_REPLY, 0, EP_OP_QP, self.req_id)
        body = _pack(
            _EV_PROBE_REPLY_BODY, self.ev, self.port, self.rx_port, 0, self.ts_echo,
            self.service_time_ns,
        )
        return _seal(header + body)


Packet = Union[DataPacket, Sack, Nack, ReliabilityProbe, EvProbe, EvProbeReply]

# --------------------------------------------------------------------------
# Decoding
# --------------------------------------------------------------------------


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


# The NamedTuple constructors go through a Python-level __new__; the fast decoders build
# the tuple directly, which gives the same object for a third of the cost.
_new_tuple = tuple.__new__


# What the QP's receive code accepts: the public packet class or its receive-path twin.
AnyData = Union[DataPacket, RxData]
AnySack = Union[Sack, RxSack]

_Decoder = Callable[[bytes, int, Opcode, int, int, int], Any]


def _data_decoder(make: Callable[..., Any]) -> _Decoder:
    """Data-packet decoder building its result with ``make`` (DataPacket or RxData)."""

    def decode_data(buf: bytes, n: int, opcode: Opcode, flags: int, dqp: int, psn: int) -> Any:
        trim = _TRIM_BY_BITS[flags >> 3 & 3]
        if trim is None:
            raise WireError("TRIMMED_LASTHOP flag without TRIMMED")
        has_imm = opcode in IMM_OPCODES
        layout = (2 if flags & FLAG_TIMESTAMP else 0) + has_imm
        body = _DATA_BODIES[layout]
        header_len = BTH_LEN + body.size
        end = n - ICRC_LEN
        if end < header_len:
            raise WireError(
                f"truncated data packet: {n} bytes, headers need {header_len + ICRC_LEN}"
            )
        _check_crc(buf, end)
        fields = body.unpack_from(buf, BTH_LEN)
        tx_timestamp = imm = None
        if layout == 0:
            msn, rqmsn, remote_offset, rkey, total_length = fields
        elif layout == 1:
            msn, rqmsn, remote_offset, rkey, total_length, imm = fields
        elif layout == 2:
            msn, rqmsn, tx_timestamp, remote_offset, rkey, total_length = fields
        else:
            msn, rqmsn, tx_timestamp, remote_offset, rkey, total_length, imm = fields
        payload = buf[header_len:end]
        if type(payload) is not bytes:
            payload = bytes(payload)
        _check_data_lengths(opcode, trim, len(payload), total_length)
        return make(
            opcode, dqp, psn, msn, rqmsn, remote_offset, rkey, total_length, payload, imm,
            tx_timestamp, (flags & FLAG_RETRANSMIT) != 0, (flags & FLAG_ACK_REQUEST) != 0, trim,
        )

    return decode_data


def _check_exact_length(kind: str, n: int, expected: int) -> None:
    if n < expected:
        raise WireError(f"truncated {kind}: {n} bytes, expected {expected}")
    if n > expected:
        raise WireError(f"inconsistent length for {kind}: {n} bytes, expected {expected}")


def _sack_decoder(make: Callable[..., Any]) -> _Decoder:
    """SACK decoder building its result with ``make`` (Sack or RxSack)."""

    def decode_sack(buf: bytes, n: int, opcode: Opcode, flags: int, dqp: int, psn: int) -> Any:
        if n != SACK_LEN:
            _check_exact_length("SACK", n, SACK_LEN)
        _check_crc(buf, n - ICRC_LEN)
        (sack_offset, sack_flags, mpr, bitmap, ev, trigger_psn, ts_echo, service_time_ns,
         ooo_count, pen, reserved, received_bytes) = _SACK_BODY.unpack_from(buf, BTH_LEN)
        verdict = _VERDICT_BY_BITS[sack_flags & SACK_VERDICT_MASK]
        if verdict is None:
            raise WireError("unknown SACK verdict 3")
        if sack_flags & _SACK_RESERVED or reserved or trigger_psn >> 24:
            raise WireError("reserved bits set in SACK")
        if pen > MAX_RCV_CWND_PEN:
            raise WireError(f"rcv_cwnd_pen {pen} outside 0..127")
        return make(
            dqp, psn, ev, sack_offset, bitmap, verdict, mpr, trigger_psn,
            (sack_flags & SACK_PROBE_REPLY) != 0, _echo_value(flags, ts_echo), service_time_ns,
            ooo_count, pen, received_bytes,
        )

    return decode_sack


def _decode_nack(
    buf: bytes, n: int, opcode: Opcode, flags: int, dqp: int, psn: int
) -> Nack:
    _check_exact_length("NACK", n, NACK_LEN)
    _check_crc(buf, n - ICRC_LEN)
    reason_value, reserved8, reserved16, ev, cack_psn, ts_echo = _NACK_BODY.unpack_from(
        buf, BTH_LEN
    )
    reason = _REASON_BY_VALUE.get(reason_value)
    if reason is None:
        raise WireError(f"unknown NACK reason {reason_value}")
    if reserved8 or reserved16 or cack_psn >> 24:
        raise WireError("reserved bits set in NACK")
    return Nack(dqp, psn, reason, ev, cack_psn, _echo_value(flags, ts_echo))


def _decode_reliability_probe(
    buf: bytes, n: int, opcode: Opcode, flags: int, dqp: int, psn: int
) -> ReliabilityProbe:
    has_ts = flags & FLAG_TIMESTAMP
    _check_exact_length("reliability probe", n, BTH_LEN + ICRC_LEN + (TSETH_LEN if has_ts else 0))
    _check_crc(buf, n - ICRC_LEN)
    tx_timestamp = _U32.unpack_from(buf, BTH_LEN)[0] if has_ts else None
    return ReliabilityProbe(dqp, psn, tx_timestamp)


def _decode_ev_probe(
    buf: bytes, n: int, opcode: Opcode, flags: int, dqp: int, psn: int
) -> EvProbe:
    _check_exact_length("EV probe", n, EV_PROBE_PACKET_LEN)
    _check_crc(buf, n - ICRC_LEN)
    ev, port, reserved8, reserved16, tx_timestamp = _EV_PROBE_BODY.unpack_from(buf, BTH_LEN)
    if reserved8 or reserved16:
        raise WireError("reserved bits set in EV probe")
    return EvProbe(psn, ev, port, tx_timestamp)


def _decode_ev_probe_reply(
    buf: bytes, n: int, opcode: Opcode, flags: int, dqp: int, psn: int
) -> EvProbeReply:
    _check_exact_length("EV probe reply", n, EV_PROBE_REPLY_PACKET_LEN)
    _check_crc(buf, n - ICRC_LEN)
    ev, port, rx_port, reserved, ts_echo, service_time_ns = _EV_PROBE_REPLY_BODY.unpack_from(
        buf, BTH_LEN
    )
    if reserved:
        raise WireError("reserved bits set in EV probe reply")
    return EvProbeReply(psn, ev, port, rx_port, ts_echo, service_time_ns)




def _dispatch_table(
    data: Callable[..., Any], sack: Callable[..., Any]
) -> dict[int, tuple[Opcode, _Decoder, int, bool]]:
    """opcode value -> (opcode, decoder, BTH flag bits it may carry, is an endpoint operation)."""
    decode_data = _data_decoder(data)
    return {
        **{op.value: (op, decode_data, _DATA_FLAGS, False) for op in DATA_OPCODES},
        Opcode.SACK.value: (Opcode.SACK, _sack_decoder(sack), FLAG_TIMESTAMP, False),
        Opcode.NACK.value: (Opcode.NACK, _decode_nack, FLAG_TIMESTAMP, False),
        Opcode.RELIABILITY_PROBE.value: (
            Opcode.RELIABILITY_PROBE, _decode_reliability_probe, FLAG_TIMESTAMP, False
        ),
        Opcode.EV_PROBE.value: (Opcode.EV_PROBE, _decode_ev_probe, 0, True),
        Opcode.EV_PROBE_REPLY.value: (Opcode.EV_PROBE_REPLY, _decode_ev_probe_reply, 0, True),
    }


_DISPATCH = _dispatch_table(DataPacket, Sack)
_RX_DISPATCH = _dispatch_table(RxData, RxSack)


def _check_destination(endpoint_op: bool, dqp: int, psn: int) -> None:
    if not endpoint_op:
        _check_qp(dqp)
    elif dqp != EP_OP_QP:
        raise WireError(f"endpoint operation addressed to QP {dqp:#x}, not 0x2")
    elif psn & ~REQ_ID_MASK:
        raise WireError("reserved bits set in endpoint-operation request id")


def decode(buf: bytes) -> Packet:
    """Decode the MRC bytes that follow the inner UDP header (BTH through ICRC).

    For any bytes-like input this returns a packet or raises WireError.
    """
    return _decode(buf, _DISPATCH)


def decode_received(buf: bytes) -> Packet | RxData | RxSack:
    """decode() for the endpoint's receive path: same checks, same WireError, but data
    packets and SACKs come back as RxData / RxSack (same fields, cheaper to build).

    Untrimmed data packets and SACKs, nearly all the traffic, take a fast path that checks
    everything decode() checks in one function with one unpack of the whole header; anything
    it does not accept (trims, other opcodes, any malformation) goes through the general
    decoder, which is the one place that explains what is wrong.
    """
    n = len(buf)
    if n >= _MIN_DATA_PACKET_LEN and _plain_bytes(buf):
        opcode = _FAST_DATA_OPCODES.get(buf[0])
        if opcode is not None:
            packet = _fast_data(buf, n, opcode)
        elif buf[0] == _SACK_OPCODE and n == SACK_LEN:
            packet = _fast_sack(buf)
        else:
            packet = None
        if packet is not None:
            return packet
    return _decode(buf, _RX_DISPATCH)


_MIN_DATA_PACKET_LEN = BTH_LEN + METH_LEN + RETH_LEN + ICRC_LEN
_FAST_DATA_OPCODES = {op.value: op for op in DATA_OPCODES}
# Data flags the fast path leaves to the general decoder: trims and reserved bits.
_SLOW_DATA_FLAGS = 0xFF & ~(FLAG_RETRANSMIT | FLAG_TIMESTAMP | FLAG_ACK_REQUEST)
_TRIM_NONE = Trim.NONE


def _plain_bytes(buf: bytes) -> bool:
    """Whether indexing and slicing ``buf`` is indexing and slicing its bytes, as the fast
    paths assume (other memoryview formats and strided views take the general decoder)."""
    kind = type(buf)
    return (kind is bytes or kind is bytearray
            or (kind is memoryview and buf.format == "B" and buf.c_contiguous))


def _fast_data(buf: bytes, n: int, opcode: Opcode) -> RxData | None:
    """An untrimmed, well-formed data packet, or None (the general decoder then decides)."""
    flags = buf[1]
    if flags & _SLOW_DATA_FLAGS:
        return None
    has_imm = opcode in IMM_OPCODES
    layout = (2 if flags & FLAG_TIMESTAMP else 0) + has_imm
    header = _DATA_HEADERS[layout]
    header_len = header.size
    end = n - ICRC_LEN
    if end < header_len:
        return None
    fields = header.unpack_from(buf)
    tx_timestamp = imm = None
    if layout == 0:
        _, _, version, reserved, dqp, psn, msn, rqmsn, remote_offset, rkey, total = fields
    elif layout == 1:
        _, _, version, reserved, dqp, psn, msn, rqmsn, remote_offset, rkey, total, imm = fields
    elif layout == 2:
        (_, _, version, reserved, dqp, psn, msn, rqmsn, tx_timestamp, remote_offset, rkey,
         total) = fields
    else:
        (_, _, version, reserved, dqp, psn, msn, rqmsn, tx_timestamp, remote_offset, rkey,
         total, imm) = fields
    if version != PROTOCOL_VERSION or reserved or (dqp | psn) >> 24 or dqp == EP_OP_QP:
        return None
    payload_len = end - header_len
    if (payload_len != total) if opcode in ONLY_OPCODES else not 0 < payload_len < total:
        return None
    if zlib.crc32(memoryview(buf)[:end]) != _U32.unpack_from(buf, end)[0]:
        return None
    payload = buf[header_len:end]
    if type(payload) is not bytes:
        payload = bytes(payload)
    return _new_tuple(RxData, (opcode, dqp, psn, msn, rqmsn, remote_offset, rkey, total, payload,
                               imm, tx_timestamp, (flags & FLAG_RETRANSMIT) != 0,
                               (flags & FLAG_ACK_REQUEST) != 0, _TRIM_NONE))


def _fast_sack(buf: bytes) -> RxSack | None:
    """A well-formed SACK (length already checked), or None (the general decoder decides)."""
    (_, flags, version, reserved, dqp, cack_psn, sack_offset, sack_flags, mpr, bitmap, ev,
     trigger_psn, ts_echo, service_time_ns, ooo_count, pen, reserved2,
     received_bytes) = _SACK_PACKET.unpack_from(buf)
    if (version != PROTOCOL_VERSION or reserved or (dqp | cack_psn | trigger_psn) >> 24
            or dqp == EP_OP_QP or flags & ~FLAG_TIMESTAMP or sack_flags & _SACK_RESERVED
            or reserved2 or pen > MAX_RCV_CWND_PEN):
        return None
    verdict = _VERDICT_BY_BITS[sack_flags & SACK_VERDICT_MASK]
    if verdict is None:
        return None
    if not flags:
        if ts_echo:
            return None
        ts_echo = None
    end = SACK_LEN - ICRC_LEN
    if zlib.crc32(memoryview(buf)[:end]) != _U32.unpack_from(buf, end)[0]:
        return None
    return _new_tuple(RxSack, (dqp, cack_psn, ev, sack_offset, bitmap, verdict, mpr, trigger_psn,
                               (sack_flags & SACK_PROBE_REPLY) != 0, ts_echo, service_time_ns,
                               ooo_count, pen, received_bytes))


def _decode(buf: bytes, table: dict[int, tuple[Opcode, _Decoder, int, bool]]) -> Any:
    n = len(buf)
    if n < BTH_LEN + ICRC_LEN:
        raise WireError(f"truncated packet: {n} bytes")
    opcode_value, flags, version, reserved, dqp, psn = _BTH.unpack_from(buf)
    if version != PROTOCOL_VERSION:
        raise WireError(f"bad protocol version {version}, expected {PROTOCOL_VERSION}")
    if reserved or (dqp | psn) >> 24:
        raise WireError("reserved bits set in BTH")
    entry = table.get(opcode_value)
    if entry is None:
        raise WireError(f"unknown opcode {opcode_value:#04x}")
    opcode, decoder, allowed_flags, endpoint_op = entry
    if flags & ~allowed_flags:
        raise WireError(f"flags {flags:#04x} not valid for opcode {opcode.name}")
    if endpoint_op or dqp == EP_OP_QP:
        _check_destination(endpoint_op, dqp, psn)
    return decoder(buf, n, opcode, flags, dqp, psn)


def trim_data_packet(buf: bytes, *, last_hop: bool = False) -> bytes:
    """What a trimming switch makes of an encoded data packet: headers kept, payload cut.

    The trim flags are set and the ICRC recomputed over what is left (an
    emulation shortcut: see docs/wire-format.md, "Trimmed packets").
    """
    packet = decode(buf)
    if not isinstance(packet, DataPacket):
        raise WireError(f"only data packets are trimmed, not {type(packet).__name__}")
    trim = Trim.TRIMMED_LASTHOP if last_hop else Trim.TRIMMED
    return replace(packet, payload=b"", trim=trim).encode()


__all__ = [
    "Address", "AnyData", "AnySack", "CC_STATE_LEN", "DATA_OPCODES", "DataPacket", "EP_OP_QP",
    "EV_PROBE_LEN", "EV_PROBE_REPLY_LEN", "EvProbe", "EvProbeReply", "FLAG_ACK_REQUEST",
    "FLAG_RETRANSMIT", "FLAG_TIMESTAMP", "FLAG_TRIMMED", "FLAG_TRIMMED_LASTHOP", "ICRC_LEN",
    "IMMDT_LEN", "IMM_OPCODES", "INNER_HEADERS_LEN", "IPV6_HEADER_LEN", "MAX_RCV_CWND_PEN",
    "METH_LEN", "MPR_UNIT_PSNS", "NACK_LEN", "NETH_LEN", "Nack", "NackReason", "ONLY_OPCODES",
    "Opcode", "PROTOCOL_VERSION", "PSN_BITS", "PSN_MASK", "PSN_SPACE", "Packet", "RETH_LEN",
    "ReliabilityProbe", "SACK_BITMAP_BITS", "SACK_LEN", "SETH_LEN", "Sack", "TSETH_LEN",
    "TIMESTAMP_MASK", "Trim", "UDP_HEADER_LEN", "UDP_PORT", "Verdict", "WireError", "BTH_LEN",
    "RxData", "RxSack", "build_inner", "decode", "decode_received", "encode_data", "encode_sack",
    "ev_to_sport_flowlabel", "ipv6_header", "max_payload", "parse_inner", "psn_add", "psn_diff",
    "psn_le", "psn_lt", "sack_bitmap", "sack_holes", "sack_received_psns", "sport_flowlabel_to_ev",
    "timestamp_elapsed_us", "timestamp_us", "trim_data_packet", "udp_header",
]
