"""The inner IPv6 + UDP headers in front of every MRC packet, and the EV they carry.

Everything that affects the inner headers lives here: their layout, their checks, and
the mapping of a 32-bit EV id onto them (low 16 bits in the UDP source port, high 16 in
the flow label's low 16), used by the sender to write it and by a receiver to read it
back. The outer IPv6 header (and any SRH) is the sending kernel's.
"""

from __future__ import annotations

import socket
import struct
from ipaddress import IPv6Address
from typing import Union

from testbed.nic.wire.checks import Buffer, WireError
from testbed.nic.wire.layout import INNER_HEADERS_LEN, IPV6_HEADER_LEN, UDP_HEADER_LEN, UDP_PORT

EV_MASK = 0xFFFFFFFF

# version:4 | traffic class:8 | flow label:20, payload length, next header, hop limit, src, dst
_IPV6 = struct.Struct(">IHBB16s16s")
_UDP = struct.Struct(">HHHH")  # sport, dport, length, checksum
_INNER = struct.Struct(">IHBB16s16sHHHH")
assert _INNER.size == INNER_HEADERS_LEN

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


def parse_inner(buf: Buffer, *, dport: int = UDP_PORT) -> tuple[bytes, bytes, int, bytes]:
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
