"""The readers: the MRC bytes of one packet (BTH through ICRC) in, a packet value out.

Everything that turns received bytes into a packet lives here, including the endpoint's
fast receive paths; encode.py is its mirror. Decoding is strict: every reserved bit must
be zero and every length must add up, so a packet that decodes re-encodes to the very
same bytes. Any malformed input raises ``WireError`` and nothing else.

Enum members are looked up in tables built at import and decoding builds no per-packet
dictionaries. The receive path calls ``decode_received``, which makes every check
``decode`` makes but returns data packets and SACKs as the named tuples ``RxData`` /
``RxSack``; tests/unit/test_wire_decode.py holds the two paths to identical fields and
errors.
"""

from __future__ import annotations

from typing import Any, Callable

from testbed.nic.wire.checks import (
    Buffer,
    WireError,
    check_data_lengths,
    check_dest_qp,
    check_port_masks,
)
from testbed.nic.wire.icrc import crc32
from testbed.nic.wire.layout import (
    BTH,
    BTH_FLAGS_OFFSET,
    BTH_LEN,
    BTH_PKEY,
    CNP_BODY_LEN,
    CNP_PACKET_LEN,
    DATA_FLAGS,
    DATA_LAYOUTS,
    DATA_OPCODES,
    EP_OP_PORT_STATUS,
    EP_OP_QP,
    EV_PROBE_BODY,
    EV_PROBE_PACKET_LEN,
    EV_PROBE_REPLY_BODY,
    EV_PROBE_REPLY_PACKET_LEN,
    FLAG_ACK_REQUEST,
    FLAG_RETRANSMIT,
    FLAG_TIMESTAMP,
    ICRC_LEN,
    IMM_PLACEMENT,
    MAX_RCV_CWND_PEN,
    MIN_DATA_PACKET_LEN,
    NACK_BODY,
    NACK_LEN,
    ONLY_OPCODES,
    PORT_STATUS_BODY,
    PORT_STATUS_PACKET_LEN,
    PROTOCOL_VERSION,
    PSN_FIELD_MASK,
    REQ_ID_MASK,
    SACK_BODY,
    SACK_LEN,
    SACK_OPCODE_VALUE,
    SACK_PACKET,
    SACK_PROBE_REPLY,
    SACK_RESERVED_FLAGS,
    SACK_VERDICT_MASK,
    TSETH_LEN,
    U32,
    NackReason,
    Opcode,
    Trim,
    Verdict,
)
from testbed.nic.wire.packets import (
    Cnp,
    DataPacket,
    EvProbe,
    EvProbeReply,
    Nack,
    Packet,
    PortStatusUpdate,
    ReliabilityProbe,
    RxData,
    RxSack,
    Sack,
)

# Lookup tables, built once so decoding never calls an Enum constructor.
_REASON_BY_VALUE = {reason.value: reason for reason in NackReason}
_VERDICT_BY_BITS = (Verdict.NONE, Verdict.SKIP_ONCE, Verdict.ALWAYS_SKIP, None)
# Indexed by (flags >> 3) & 3, i.e. (TRIMMED, TRIMMED_LASTHOP) bits.
_TRIM_BY_BITS = (Trim.NONE, None, Trim.TRIMMED, Trim.TRIMMED_LASTHOP)


def _check_crc(buf: Buffer, end: int) -> None:
    (crc,) = U32.unpack_from(buf, end)
    if crc32(memoryview(buf)[:end]) != crc:
        raise WireError("bad ICRC")


def _echo_value(flags: int, wire_value: int) -> int | None:
    if flags & FLAG_TIMESTAMP:
        return wire_value
    if wire_value:
        raise WireError("echoed timestamp set without the timestamp flag")
    return None


# The NamedTuple constructors go through a Python-level __new__; the fast decoders build
# the tuple directly, which gives the same object for a third of the cost.
_new_tuple = tuple.__new__
_ABSENT = (None,)  # appended to a data header's values: what its absent headers read as


_Decoder = Callable[[Buffer, int, Opcode, int, int, int], Any]


def _data_decoder(make: Callable[..., Any]) -> _Decoder:
    """Data-packet decoder building its result with ``make`` (DataPacket or RxData)."""

    def decode_data(buf: Buffer, n: int, opcode: Opcode, flags: int, dqp: int, psn: int) -> Any:
        trim = _TRIM_BY_BITS[flags >> 3 & 3]
        if trim is None:
            raise WireError("TRIMMED_LASTHOP flag without TRIMMED")
        layout = DATA_LAYOUTS[(3 if flags & FLAG_TIMESTAMP else 0) + IMM_PLACEMENT[opcode]]
        header_len = layout.packet.size
        end = n - ICRC_LEN
        if end < header_len:
            raise WireError(
                f"truncated data packet: {n} bytes, headers need {header_len + ICRC_LEN}"
            )
        _check_crc(buf, end)
        remote_offset, rkey, total_length, imm, msn, rqmsn, tx_timestamp = layout.fields_of(
            layout.body.unpack_from(buf, BTH_LEN) + _ABSENT)
        payload = buf[header_len:end]
        if type(payload) is not bytes:
            payload = bytes(payload)
        check_data_lengths(opcode, trim, len(payload), total_length)
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

    def decode_sack(buf: Buffer, n: int, opcode: Opcode, flags: int, dqp: int, psn: int) -> Any:
        if n != SACK_LEN:
            _check_exact_length("SACK", n, SACK_LEN)
        _check_crc(buf, n - ICRC_LEN)
        (sack_offset, sack_flags, mpr, bitmap, ev, trigger_psn, ts_echo, service_time_ns,
         ooo_count, pen, reserved, received_bytes) = SACK_BODY.unpack_from(buf, BTH_LEN)
        verdict = _VERDICT_BY_BITS[sack_flags & SACK_VERDICT_MASK]
        if verdict is None:
            raise WireError("unknown SACK verdict 3")
        if sack_flags & SACK_RESERVED_FLAGS or reserved or trigger_psn >> 24:
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
    buf: Buffer, n: int, opcode: Opcode, flags: int, dqp: int, psn: int
) -> Nack:
    _check_exact_length("NACK", n, NACK_LEN)
    _check_crc(buf, n - ICRC_LEN)
    reason_value, reserved8, reserved16, ev, cack_psn, ts_echo = NACK_BODY.unpack_from(
        buf, BTH_LEN
    )
    reason = _REASON_BY_VALUE.get(reason_value)
    if reason is None:
        raise WireError(f"unknown NACK reason {reason_value}")
    if reserved8 or reserved16 or cack_psn >> 24:
        raise WireError("reserved bits set in NACK")
    return Nack(dqp, psn, reason, ev, cack_psn, _echo_value(flags, ts_echo))


def _decode_reliability_probe(
    buf: Buffer, n: int, opcode: Opcode, flags: int, dqp: int, psn: int
) -> ReliabilityProbe:
    has_ts = flags & FLAG_TIMESTAMP
    _check_exact_length("reliability probe", n, BTH_LEN + ICRC_LEN + (TSETH_LEN if has_ts else 0))
    _check_crc(buf, n - ICRC_LEN)
    tx_timestamp = U32.unpack_from(buf, BTH_LEN)[0] if has_ts else None
    return ReliabilityProbe(dqp, psn, tx_timestamp)


def _decode_cnp(buf: Buffer, n: int, opcode: Opcode, flags: int, dqp: int, psn: int) -> Cnp:
    _check_exact_length("CNP", n, CNP_PACKET_LEN)
    _check_crc(buf, n - ICRC_LEN)
    if psn or any(buf[BTH_LEN:BTH_LEN + CNP_BODY_LEN]):
        raise WireError("reserved bits set in CNP")
    return Cnp(dqp)


def _decode_ev_probe(
    buf: Buffer, n: int, opcode: Opcode, flags: int, dqp: int, psn: int
) -> EvProbe:
    _check_exact_length("EV probe", n, EV_PROBE_PACKET_LEN)
    _check_crc(buf, n - ICRC_LEN)
    ev, port, reserved8, reserved16, tx_timestamp = EV_PROBE_BODY.unpack_from(buf, BTH_LEN)
    if reserved8 or reserved16:
        raise WireError("reserved bits set in EV probe")
    return EvProbe(psn, ev, port, tx_timestamp)


def _decode_ev_probe_reply(
    buf: Buffer, n: int, opcode: Opcode, flags: int, dqp: int, psn: int
) -> EvProbeReply:
    _check_exact_length("EV probe reply", n, EV_PROBE_REPLY_PACKET_LEN)
    _check_crc(buf, n - ICRC_LEN)
    ev, port, rx_port, reserved, ts_echo, service_time_ns = EV_PROBE_REPLY_BODY.unpack_from(
        buf, BTH_LEN
    )
    if reserved:
        raise WireError("reserved bits set in EV probe reply")
    return EvProbeReply(psn, ev, port, rx_port, ts_echo, service_time_ns)


def _decode_port_status_update(
    buf: Buffer, n: int, opcode: Opcode, flags: int, dqp: int, psn: int
) -> PortStatusUpdate:
    _check_exact_length("port status update", n, PORT_STATUS_PACKET_LEN)
    _check_crc(buf, n - ICRC_LEN)
    (ep_op, r8, r16, r32, r64, port_status, changed, port_count, r8b, r16b, r64a, r64b,
     r64c) = PORT_STATUS_BODY.unpack_from(buf, BTH_LEN)
    if ep_op != EP_OP_PORT_STATUS:
        raise WireError(f"unknown endpoint operation {ep_op:#04x} in port status update")
    if r8 or r16 or r32 or r64 or r8b or r16b or r64a or r64b or r64c:
        raise WireError("reserved bits set in port status update")
    check_port_masks(port_status, changed, port_count)
    return PortStatusUpdate(psn, port_status, changed, port_count)


def _dispatch_table(
    data: Callable[..., Any], sack: Callable[..., Any]
) -> dict[int, tuple[Opcode, _Decoder, int, bool]]:
    """opcode value -> (opcode, decoder, BTH flag bits it may carry, is an endpoint operation)."""
    decode_data = _data_decoder(data)
    return {
        **{op.value: (op, decode_data, DATA_FLAGS, False) for op in DATA_OPCODES},
        Opcode.SACK.value: (Opcode.SACK, _sack_decoder(sack), FLAG_TIMESTAMP, False),
        Opcode.NACK.value: (Opcode.NACK, _decode_nack, FLAG_TIMESTAMP, False),
        Opcode.RELIABILITY_PROBE.value: (
            Opcode.RELIABILITY_PROBE, _decode_reliability_probe, FLAG_TIMESTAMP, False
        ),
        Opcode.CNP.value: (Opcode.CNP, _decode_cnp, 0, False),
        Opcode.EV_PROBE.value: (Opcode.EV_PROBE, _decode_ev_probe, 0, True),
        Opcode.EV_PROBE_REPLY.value: (Opcode.EV_PROBE_REPLY, _decode_ev_probe_reply, 0, True),
        Opcode.PORT_STATUS_UPDATE.value: (
            Opcode.PORT_STATUS_UPDATE, _decode_port_status_update, 0, True
        ),
    }


_DISPATCH = _dispatch_table(DataPacket, Sack)
_RX_DISPATCH = _dispatch_table(RxData, RxSack)


def _check_destination(endpoint_op: bool, dqp: int, psn: int) -> None:
    if not endpoint_op:
        check_dest_qp(dqp)
    elif dqp != EP_OP_QP:
        raise WireError(f"endpoint operation addressed to QP {dqp:#x}, not 0x2")
    elif psn & ~REQ_ID_MASK:
        raise WireError("reserved bits set in endpoint-operation request id")


def decode(buf: Buffer) -> Packet:
    """Decode the MRC bytes that follow the inner UDP header (BTH through ICRC).

    For any bytes-like input this returns a packet or raises WireError.
    """
    return _decode(buf, _DISPATCH)


def decode_received(buf: Buffer) -> Packet | RxData | RxSack:
    """decode() for the endpoint's receive path: same checks, same WireError, but data
    packets and SACKs come back as RxData / RxSack (same fields, cheaper to build).

    Untrimmed data packets and SACKs, nearly all the traffic, take a fast path that checks
    everything decode() checks in one function with one unpack of the whole header; anything
    it does not accept (trims, other opcodes, any malformation) goes through the general
    decoder, which is the one place that explains what is wrong.
    """
    n = len(buf)
    packet: RxData | RxSack | None
    if n >= MIN_DATA_PACKET_LEN and _plain_bytes(buf):
        opcode = _FAST_DATA_OPCODES.get(buf[0])
        if opcode is not None:
            packet = _fast_data(buf, n, opcode)
        elif buf[0] == SACK_OPCODE_VALUE and n == SACK_LEN:
            packet = _fast_sack(buf)
        else:
            packet = None
        if packet is not None:
            return packet
    return _decode(buf, _RX_DISPATCH)


_FAST_DATA_OPCODES = {op.value: op for op in DATA_OPCODES}
# Data flags the fast path leaves to the general decoder: trims and reserved bits.
_SLOW_DATA_FLAGS = 0xFF & ~(FLAG_RETRANSMIT | FLAG_TIMESTAMP | FLAG_ACK_REQUEST)
_TRIM_NONE = Trim.NONE


def _plain_bytes(buf: Buffer) -> bool:
    """Whether indexing and slicing ``buf`` is indexing and slicing its bytes, as the fast
    paths assume (other memoryview formats and strided views take the general decoder)."""
    if isinstance(buf, memoryview):
        return buf.format == "B" and buf.c_contiguous
    kind = type(buf)
    return kind is bytes or kind is bytearray


def _fast_data(buf: Buffer, n: int, opcode: Opcode) -> RxData | None:
    """An untrimmed, well-formed data packet, or None (the general decoder then decides)."""
    flags = buf[BTH_FLAGS_OFFSET]
    if flags & _SLOW_DATA_FLAGS:
        return None
    layout = DATA_LAYOUTS[(3 if flags & FLAG_TIMESTAMP else 0) + IMM_PLACEMENT[opcode]]
    header = layout.packet
    header_len = header.size
    end = n - ICRC_LEN
    if end < header_len:
        return None
    fields = header.unpack_from(buf) + _ABSENT
    _, zero, pkey, word1, word2 = fields[:5]
    remote_offset, rkey, total, imm, msn, rqmsn, tx_timestamp = layout.fields_of_packet(fields)
    dqp = word1 & PSN_FIELD_MASK
    if word1 >> 24 != PROTOCOL_VERSION or zero or pkey != BTH_PKEY or dqp == EP_OP_QP:
        return None
    psn = word2 & PSN_FIELD_MASK
    payload_len = end - header_len
    if (payload_len != total) if opcode in ONLY_OPCODES else not 0 < payload_len < total:
        return None
    if crc32(memoryview(buf)[:end]) != U32.unpack_from(buf, end)[0]:
        return None
    payload = buf[header_len:end]
    if type(payload) is not bytes:
        payload = bytes(payload)
    return _new_tuple(RxData, (opcode, dqp, psn, msn, rqmsn, remote_offset, rkey, total, payload,
                               imm, tx_timestamp, (flags & FLAG_RETRANSMIT) != 0,
                               (flags & FLAG_ACK_REQUEST) != 0, _TRIM_NONE))


def _fast_sack(buf: Buffer) -> RxSack | None:
    """A well-formed SACK (length already checked), or None (the general decoder decides)."""
    (_, zero, pkey, word1, word2, sack_offset, sack_flags, mpr, bitmap, ev,
     trigger_psn, ts_echo, service_time_ns, ooo_count, pen, reserved2,
     received_bytes) = SACK_PACKET.unpack_from(buf)
    dqp, cack_psn, flags = word1 & PSN_FIELD_MASK, word2 & PSN_FIELD_MASK, word2 >> 24
    if (word1 >> 24 != PROTOCOL_VERSION or zero or pkey != BTH_PKEY or trigger_psn >> 24
            or dqp == EP_OP_QP or flags & ~FLAG_TIMESTAMP or sack_flags & SACK_RESERVED_FLAGS
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
    if crc32(memoryview(buf)[:end]) != U32.unpack_from(buf, end)[0]:
        return None
    return _new_tuple(RxSack, (dqp, cack_psn, ev, sack_offset, bitmap, verdict, mpr, trigger_psn,
                               (sack_flags & SACK_PROBE_REPLY) != 0, ts_echo, service_time_ns,
                               ooo_count, pen, received_bytes))


def _decode(buf: Buffer, table: dict[int, tuple[Opcode, _Decoder, int, bool]]) -> Any:
    n = len(buf)
    if n < BTH_LEN + ICRC_LEN:
        raise WireError(f"truncated packet: {n} bytes")
    opcode_value, zero, pkey, word1, word2 = BTH.unpack_from(buf)
    version = word1 >> 24
    if version != PROTOCOL_VERSION:
        raise WireError(f"bad protocol version {version}, expected {PROTOCOL_VERSION}")
    if zero:
        raise WireError("BTH SE/MigReq/PadCnt/TVer set (must be zero)")
    if pkey != BTH_PKEY:
        raise WireError(f"P_Key {pkey:#06x} is not the default partition {BTH_PKEY:#06x}")
    dqp, flags, psn = word1 & PSN_FIELD_MASK, word2 >> 24, word2 & PSN_FIELD_MASK
    entry = table.get(opcode_value)
    if entry is None:
        raise WireError(f"unknown opcode {opcode_value:#04x}")
    opcode, decoder, allowed_flags, endpoint_op = entry
    if flags & ~allowed_flags:
        raise WireError(f"flags {flags:#04x} not valid for opcode {opcode.name}")
    if endpoint_op or dqp == EP_OP_QP:
        _check_destination(endpoint_op, dqp, psn)
    return decoder(buf, n, opcode, flags, dqp, psn)

