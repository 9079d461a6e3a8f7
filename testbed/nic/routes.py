"""Which path a QP's packets take: sprayed EVs (MRC), one hashed path (ECMP, RC), reverse EVs.

- MRC sprays: every data packet goes on the EvTable's next EV (one path + plane each).
- ECMP and RC pin the QP to ONE path chosen by hashing its 5-tuple over every plane's paths
  (flattened, plane by plane), like a switch hashing a RoCEv2 flow whose UDP source port the
  NIC derived from the QP numbers. RC may also be given its path by the caller.
- Feedback (SACK/NACK) and probe answers need paths back to the peer: a small reverse set,
  used round-robin across planes so that one dead reverse path cannot silence a QP.
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from testbed.nic.wire import UDP_PORT

IPPROTO_UDP = 17
ROCE_SPORT_BASE = 0xC000          # RoCEv2 derives the UDP source port from a flow hash in
ROCE_SPORT_MASK = 0x3FFF          # 49152-65535 (IANA dynamic range)
REVERSE_EV_BASE = 0x8000_0000     # reverse EV ids never collide with EvTable ids (base 0)


class FixedRoute:
    """A route that is not an EvTable entry: the pinned ECMP/RC path or a reverse EV.

    It has the fields of `ev_table.Ev` the send path reads (ev_id, plane, path) and counts
    what it carried, so pinned and sprayed QPs report per-EV counters the same way.
    """

    __slots__ = ("ev_id", "plane", "path", "packets_sent", "bytes_sent")

    def __init__(self, ev_id: int, plane: int, path: Any) -> None:
        self.ev_id = ev_id
        self.plane = plane
        self.path = path
        self.packets_sent = 0
        self.bytes_sent = 0

    def to_dict(self) -> dict[str, Any]:
        return {"ev_id": self.ev_id, "plane": self.plane, "path": str(self.path),
                "packets_sent": self.packets_sent, "bytes_sent": self.bytes_sent}


# ------------------------------------------------------------------------------- ECMP hashing


def _addr_bytes(addr: Any) -> bytes:
    return addr if isinstance(addr, bytes) else str(addr).encode()


def _fmix32(h: int) -> int:
    # MurmurHash3 finaliser: CRC32 alone is linear, and taken modulo a small path count its
    # low bits would spread flows that differ in one field poorly.
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    return h ^ (h >> 16)


def five_tuple_hash(src: Any, dst: Any, sport: int, dport: int = UDP_PORT,
                    proto: int = IPPROTO_UDP) -> int:
    """Deterministic 32-bit flow hash (not Python's salted hash()) of a 5-tuple."""
    key = b"|".join((_addr_bytes(src), _addr_bytes(dst), struct.pack(">HHB", sport, dport, proto)))
    return _fmix32(zlib.crc32(key))


def rocev2_source_port(local_qpn: int, remote_qpn: int) -> int:
    """The UDP source port a RoCEv2 NIC would put on this QP's packets (its ECMP entropy)."""
    h = _fmix32(zlib.crc32(struct.pack(">II", local_qpn, remote_qpn)))
    return ROCE_SPORT_BASE | (h & ROCE_SPORT_MASK)


def flattened_paths(paths_by_plane: Mapping[int, Sequence[Any]]) -> list[tuple[int, Any]]:
    """(plane, path) pairs, planes ascending, each plane's paths in order, duplicates dropped."""
    return [(plane, path) for plane in sorted(paths_by_plane)
            for path in dict.fromkeys(paths_by_plane[plane])]


def ecmp_route(paths_by_plane: Mapping[int, Sequence[Any]], src: Any, dst: Any,
               sport: int) -> FixedRoute:
    """The one path an ECMP fabric gives the flow (src, dst, sport, 4791, UDP)."""
    choices = flattened_paths(paths_by_plane)
    plane, path = choices[five_tuple_hash(src, dst, sport) % len(choices)]
    return FixedRoute(sport, plane, path)


# ------------------------------------------------------------------------------- reverse EVs


class ReverseRoutes:
    """The responder's reverse EV set, used round-robin across planes.

    Slot order interleaves planes (plane 1 EV 0, plane 2 EV 0, ..., plane 1 EV 1, ...), so
    consecutive SACKs leave on different planes, and a dead reverse path loses only every
    (planes x per_plane)-th feedback packet; every SACK is cumulative, so the next one repairs
    the loss.

    Cumulative repair fails when few packets are in flight: with a window of one packet, a
    SACK lost on a dead reverse path costs a packet timeout every time its slot comes round,
    and the requester's window never regrows. So the responder replaces a reverse path once
    it has evidence its SACK did not arrive (`replace`), with another path of the same plane
    from `pool` [reference E13: "break the current reverse path => responder switches
    reverse EV; no timeout storm"].

    A plane whose port is down, ours or the peer's (`set_plane`), is passed over: its
    slots' turns go to the next route on a live plane, so no SACK or NACK leaves on it;
    with every plane down the rotation is used as is (there is nothing better).
    """

    __slots__ = ("_routes", "_cursor", "_pool", "_rng", "replaced", "_down")

    def __init__(self, routes: Sequence[FixedRoute],
                 pool: Mapping[int, Sequence[Any]] | None = None,
                 rng: random.Random | None = None) -> None:
        if not routes:
            raise ValueError("a reverse route set needs at least one route")
        self._routes = list(routes)
        self._cursor = 0
        self._pool = {plane: list(dict.fromkeys(paths)) for plane, paths in (pool or {}).items()}
        self._rng = rng or random.Random(0)
        self.replaced = 0
        self._down: set[int] = set()

    @classmethod
    def sampled(cls, paths_by_plane: Mapping[int, Sequence[Any]], per_plane: int,
                rng: random.Random) -> ReverseRoutes:
        per_plane_routes: list[list[tuple[int, Any]]] = []
        for plane in sorted(paths_by_plane):
            distinct = list(dict.fromkeys(paths_by_plane[plane]))
            picked = rng.sample(distinct, min(per_plane, len(distinct)))
            per_plane_routes.append([(plane, path) for path in picked])
        interleaved = [pair for rank in range(per_plane)
                       for routes in per_plane_routes if rank < len(routes)
                       for pair in (routes[rank],)]
        return cls([FixedRoute(REVERSE_EV_BASE + i, plane, path)
                    for i, (plane, path) in enumerate(interleaved)], paths_by_plane, rng)

    def replace(self, route: FixedRoute) -> bool:
        """Put another path of `route`'s plane, not in the rotation, in its slot (same EV id);
        False when there is none (a pinned route, or every path of the plane in use)."""
        if route not in self._routes:
            return False                        # replaced already
        in_use = {r.path for r in self._routes if r.plane == route.plane}
        spare = [p for p in self._pool.get(route.plane, ()) if p not in in_use]
        if not spare:
            return False
        self._routes[self._routes.index(route)] = FixedRoute(
            route.ev_id, route.plane, self._rng.choice(spare))
        self.replaced += 1
        return True

    def next(self) -> FixedRoute:
        routes, cursor = self._routes, self._cursor
        count = len(routes)
        route = routes[cursor]
        down = self._down
        if down and route.plane in down:        # a dead plane's turn: the next live one's
            for step in range(1, count):
                candidate = routes[(cursor + step) % count]
                if candidate.plane not in down:
                    route, cursor = candidate, (cursor + step) % count
                    break
        self._cursor = (cursor + 1) % count
        route.packets_sent += 1
        return route

    def set_plane(self, plane: int, up: bool) -> bool:
        """Whether the rotation uses `plane` (the port status of either end of its paths);
        returns whether that changed."""
        if (plane not in self._down) == up:
            return False
        if up:
            self._down.discard(plane)
        else:
            self._down.add(plane)
        return True

    @property
    def planes_down(self) -> frozenset[int]:
        return frozenset(self._down)

    @property
    def routes(self) -> list[FixedRoute]:
        return list(self._routes)
