"""The writers: plain field values in, the MRC bytes of one packet (BTH through ICRC) out.

Everything that turns field values into MRC bytes lives here; decode.py is its mirror.
Every writer validates what it is given and raises WireError rather than put a value on
the wire that the reader would refuse.

The requester and responder call encode_data / encode_sack with plain values rather than
building a DataPacket or Sack first: constructing a frozen dataclass costs about as much
as encoding it. The packet classes' encode() methods call these writers too, so both
paths validate and lay out bytes identically.
"""

from __future__ import annotations

import struct

from testbed.nic.wire.checks import (
    WireError,
    check_24bit,
    check_data_lengths,
    check_dest_qp,
    check_port_masks,
)
from testbed.nic.wire.icrc import crc32
from testbed.nic.wire.layout import (
    BTH,
    BTH_PKEY,
    BTH_VERSION_WORD,
    DATA_LAYOUTS,
    DATA_OPCODES,
    EP_OP_QP,
    EV_PROBE_BODY,
    CNP_BODY_LEN,
    EP_OP_PORT_STATUS,
    EV_PROBE_REPLY_BODY,
    FLAG_ACK_REQUEST,
    FLAG_RETRANSMIT,
    FLAG_TIMESTAMP,
    FLAG_TRIMMED,
    FLAG_TRIMMED_LASTHOP,
    IMM_OPCODES,
    IMM_PLACEMENT,
    MAX_RCV_CWND_PEN,
    NACK_BODY,
    ONLY_OPCODES,
    PORT_STATUS_BODY,
    REQ_ID_MASK,
    SACK_OPCODE_VALUE,
    SACK_PACKET,
    SACK_PROBE_REPLY,
    U32,
    NackReason,
    Opcode,
    Trim,
    Verdict,
)

_NACK_REASONS = frozenset(NackReason)
_VERDICTS = frozenset(Verdict)
_TRIM_FLAGS: dict[int, int] = {
    Trim.NONE: 0,
    Trim.TRIMMED: FLAG_TRIMMED,
    Trim.TRIMMED_LASTHOP: FLAG_TRIMMED | FLAG_TRIMMED_LASTHOP,
}


def _seal(header: bytes, payload: bytes | memoryview = b"") -> bytes:
    """Append the ICRC: the CRC-32 (icrc.crc32) of every MRC byte before it, big-endian."""
    crc = crc32(payload, crc32(header))
    return b"".join((header, payload, U32.pack(crc)))


def _pack(fmt: struct.Struct, *values: int) -> bytes:
    try:
        return fmt.pack(*values)
    except struct.error as exc:
        raise WireError(f"field out of range: {exc}") from exc


def _bth(opcode: Opcode, flags: int, dest_qp: int, psn: int) -> bytes:
    # Callers have checked dest_qp and psn to fit 24 bits, so neither spills into its word's
    # top byte (version, flags).
    return _pack(BTH, opcode, 0, BTH_PKEY, BTH_VERSION_WORD | dest_qp, flags << 24 | psn)


def _echo_field(ts_echo: int | None) -> tuple[int, int]:
    """(flag, wire value) for an optional echoed timestamp: absent is flag clear and zero."""
    return (0, 0) if ts_echo is None else (FLAG_TIMESTAMP, ts_echo)


def _check_req_id(req_id: int) -> None:
    # Endpoint operations carry their u16 request id in BTH PSN[15:0].
    if req_id & ~REQ_ID_MASK:
        raise WireError(f"req_id {req_id} does not fit 16 bits")


def encode_data(
    opcode: int,
    dest_qp: int,
    psn: int,
    msn: int,
    rqmsn: int,
    remote_offset: int,
    rkey: int,
    total_length: int,
    payload: bytes | memoryview = b"",
    imm: int | None = None,
    tx_timestamp: int | None = None,
    retransmit: bool = False,
    ack_request: bool = False,
    trim: int = Trim.NONE,
) -> bytes:
    """The bytes of DataPacket(same arguments).encode(); raises WireError likewise."""
    if opcode not in DATA_OPCODES:
        raise WireError(f"{opcode!r} is not a data opcode")
    has_imm = imm is not None
    if has_imm != (opcode in IMM_OPCODES):
        raise WireError("ImmDt must be present exactly on *_WITH_IMM opcodes")
    if (dest_qp | psn) >> 24:  # one test for both; check_24bit names the culprit
        check_24bit("dest_qp/psn", dest_qp, psn)
    if dest_qp == EP_OP_QP:
        check_dest_qp(dest_qp)
    # The checks of check_data_lengths, which is called only to refuse (or for a trim).
    payload_len = len(payload)
    if trim or ((payload_len != total_length) if opcode in ONLY_OPCODES
                else not 0 < payload_len < total_length):
        check_data_lengths(opcode, trim, payload_len, total_length)
    flags = _TRIM_FLAGS.get(trim)
    if flags is None:
        raise WireError(f"unknown trim state {trim!r}")
    if retransmit:
        flags |= FLAG_RETRANSMIT
    if ack_request:
        flags |= FLAG_ACK_REQUEST
    if tx_timestamp is not None:
        flags |= FLAG_TIMESTAMP
    layout = DATA_LAYOUTS[(3 if tx_timestamp is not None else 0) + IMM_PLACEMENT[opcode]]
    try:
        header = layout.packet.pack(
            opcode, 0, BTH_PKEY, BTH_VERSION_WORD | dest_qp, flags << 24 | psn,
            *layout.wire_values_of(
                (remote_offset, rkey, total_length, imm, msn, rqmsn, tx_timestamp)),
        )
    except struct.error as exc:
        raise WireError(f"field out of range: {exc}") from exc
    crc = crc32(payload, crc32(header))          # _seal(), inlined
    return b"".join((header, payload, U32.pack(crc)))


def encode_sack(
    dest_qp: int,
    cack_psn: int,
    ev: int,
    sack_offset: int = 1,
    bitmap: int = 0,
    verdict: int = Verdict.NONE,
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
        check_24bit("dest_qp/cack_psn/trigger_psn", dest_qp, cack_psn, trigger_psn)
    if dest_qp == EP_OP_QP:
        check_dest_qp(dest_qp)
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
        header = SACK_PACKET.pack(
            SACK_OPCODE_VALUE, 0, BTH_PKEY, BTH_VERSION_WORD | dest_qp, ts_flag << 24 | cack_psn,
            sack_offset,
            sack_flags, mpr, bitmap, ev, trigger_psn, ts_echo, service_time_ns, ooo_count,
            rcv_cwnd_pen, 0, received_bytes,
        )
    except struct.error as exc:
        raise WireError(f"field out of range: {exc}") from exc
    return header + U32.pack(crc32(header))


def encode_cnp(dest_qp: int) -> bytes:
    """The bytes of Cnp(dest_qp).encode(): BTH with PSN 0, 16 zero bytes, ICRC."""
    check_24bit("dest_qp", dest_qp)
    check_dest_qp(dest_qp)
    return _seal(_bth(Opcode.CNP, 0, dest_qp, 0) + bytes(CNP_BODY_LEN))


def encode_nack(
    dest_qp: int, psn: int, reason: int, ev: int, cack_psn: int,
    ts_echo: int | None = None,
) -> bytes:
    """The bytes of Nack(same arguments).encode(); raises WireError likewise."""
    check_24bit("dest_qp/psn/cack_psn", dest_qp, psn, cack_psn)
    check_dest_qp(dest_qp)
    if reason not in _NACK_REASONS:
        raise WireError(f"unknown NACK reason {reason!r}")
    ts_flag, ts_echo_value = _echo_field(ts_echo)
    body = _pack(NACK_BODY, reason, 0, 0, ev, cack_psn, ts_echo_value)
    return _seal(_bth(Opcode.NACK, ts_flag, dest_qp, psn) + body)


def encode_reliability_probe(dest_qp: int, probe_id: int, tx_timestamp: int | None = None) -> bytes:
    """The bytes of ReliabilityProbe(same arguments).encode(); raises WireError likewise."""
    check_24bit("dest_qp/probe_id", dest_qp, probe_id)
    check_dest_qp(dest_qp)
    if tx_timestamp is None:
        return _seal(_bth(Opcode.RELIABILITY_PROBE, 0, dest_qp, probe_id))
    header = _bth(Opcode.RELIABILITY_PROBE, FLAG_TIMESTAMP, dest_qp, probe_id)
    return _seal(header + _pack(U32, tx_timestamp))


def encode_ev_probe(req_id: int, ev: int, port: int, tx_timestamp: int) -> bytes:
    """The bytes of EvProbe(same arguments).encode(); raises WireError likewise."""
    _check_req_id(req_id)
    header = _bth(Opcode.EV_PROBE, 0, EP_OP_QP, req_id)
    body = _pack(EV_PROBE_BODY, ev, port, 0, 0, tx_timestamp)
    return _seal(header + body)


def encode_ev_probe_reply(
    req_id: int, ev: int, port: int, rx_port: int, ts_echo: int, service_time_ns: int = 0
) -> bytes:
    """The bytes of EvProbeReply(same arguments).encode(); raises WireError likewise."""
    _check_req_id(req_id)
    header = _bth(Opcode.EV_PROBE_REPLY, 0, EP_OP_QP, req_id)
    body = _pack(EV_PROBE_REPLY_BODY, ev, port, rx_port, 0, ts_echo, service_time_ns)
    return _seal(header + body)


def encode_port_status_update(req_id: int, port_status: int, changed: int,
                              port_count: int) -> bytes:
    """The bytes of PortStatusUpdate(same arguments).encode(); raises WireError likewise."""
    _check_req_id(req_id)
    check_port_masks(port_status, changed, port_count)
    header = _bth(Opcode.PORT_STATUS_UPDATE, 0, EP_OP_QP, req_id)
    body = _pack(PORT_STATUS_BODY, EP_OP_PORT_STATUS, 0, 0, 0, 0,
                 port_status, changed, port_count, 0, 0, 0, 0, 0)
    return _seal(header + body)
