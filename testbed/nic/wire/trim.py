"""Packet trimming: what a trimming switch makes of a data packet.

Everything the emulated fabric needs to trim a packet lives here. Trimming is neither a
plain write nor a plain read: the switch reads the packet, keeps its headers, cuts the
payload and writes it again with the trim flags set.
"""

from __future__ import annotations

from dataclasses import replace

from testbed.nic.wire.checks import Buffer, WireError
from testbed.nic.wire.decode import decode
from testbed.nic.wire.layout import Trim
from testbed.nic.wire.packets import DataPacket


def trim_data_packet(buf: Buffer, *, last_hop: bool = False) -> bytes:
    """What a trimming switch makes of an encoded data packet: headers kept, payload cut.

    The trim flags are set and the ICRC recomputed over what is left (an
    emulation shortcut: see docs/wire-format.md, "Trimmed packets").
    """
    packet = decode(buf)
    if not isinstance(packet, DataPacket):
        raise WireError(f"only data packets are trimmed, not {type(packet).__name__}")
    trim = Trim.TRIMMED_LASTHOP if last_hop else Trim.TRIMMED
    return replace(packet, payload=b"", trim=trim).encode()
