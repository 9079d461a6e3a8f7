"""What the sans-IO core hands to the runtime: one packet and the path it must take."""

from __future__ import annotations

from typing import Any, NamedTuple


class Outgoing(NamedTuple):
    """One MRC packet to transmit.

    `data` is the MRC bytes (BTH..ICRC); the runtime wraps them in the inner IPv6/UDP headers
    (wire.build_inner with `ev_id` in sport/flow label, src = its own address, dst = `dst_addr`)
    and sends them on NIC port `plane` with `path` as the outer SRv6 carrier. A NamedTuple
    because one is built per packet and tuple construction is the cheapest Python object.
    """

    path: Any
    plane: int
    ev_id: int
    data: bytes
    dst_addr: Any
