"""What makes a field value legal, for both directions.

Everything that decides whether a value may be written or accepted, where the writers
(encode.py) and the readers (decode.py) must decide alike, lives here, with the one
error both raise: a packet that decodes re-encodes to the very same bytes only because
both sides refuse the same things.
"""

from __future__ import annotations

from testbed.nic.wire.layout import EP_OP_QP, MAX_PORTS, ONLY_OPCODES

# What a decoder reads: any byte buffer (a received datagram, a slice of a capture).
Buffer = bytes | bytearray | memoryview


class WireError(ValueError):
    """Malformed MRC or inner-header bytes, or a packet that cannot be encoded."""


def check_24bit(what: str, *values: int) -> None:
    for value in values:
        if value >> 24:  # also true for negative values
            raise WireError(f"{what}: {value:#x} does not fit 24 bits")


def check_dest_qp(dest_qp: int) -> None:
    # QP 0x2 addresses the endpoint itself; no QP-scoped packet may use it.
    if dest_qp == EP_OP_QP:
        raise WireError("destination QP 0x2 is reserved for endpoint operations")


def check_data_lengths(opcode: int, trim: int, payload_len: int, total_length: int) -> None:
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


def check_port_masks(port_status: int, changed: int, port_count: int) -> None:
    """A Port Status Update names 1..32 ports; both masks have bits for those ports only."""
    if not 1 <= port_count <= MAX_PORTS:
        raise WireError(f"port_count {port_count} outside 1..{MAX_PORTS}")
    if (port_status | changed) >> port_count or port_status < 0 or changed < 0:
        raise WireError(f"port mask bits set beyond port {port_count}")
