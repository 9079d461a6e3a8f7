"""Path probes: one IPv6-in-IPv6 UDP packet per path, sent from inside the
source host's namespace to the path's uSID carrier and received by a UDP
socket inside the destination host's namespace. All in this process: a
socket keeps the namespace it was created in.

On the routed fabric mode a "path" is an ECMP choice (`routed_choices`): its
carrier is the destination's own address, and its probe goes as plain IPv6
with a UDP source port of its own, which the switches hash.
"""
from __future__ import annotations

import select
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from testbed.fabric.netns import inside
from testbed.fabric.usid_plan import FabricPlan, Path

PROBE_PORT = 4790           # not 4791: probes must never reach an MRC agent
UDP_NO_CHECK6_RX = 102      # accept the zero UDP checksum of our inner packets
IPPROTO_IPV6_IN_IPV6 = 41
IPPROTO_RAW = 255           # plain IPv6, the header as written
ROUTED_SPORT_BASE = 0xC000  # routed probes' source ports, as RoCEv2's
BATCH = 64                  # probes in flight at once: the userspace datapath
                            # drops bursts far larger than its socket buffers
QUIET_S = 0.02              # a batch is done when nothing arrived for this long


@dataclass(frozen=True)
class ProbeResult:
    ok: frozenset[int]      # indexes of paths whose probe arrived
    sent: int               # probes sent, retries included


class PathProber:
    """Sockets in every host namespace, opened once, closed by close()."""

    def __init__(self, plan: FabricPlan, host_pids: dict[str, int]) -> None:
        self.plan = plan
        self.raw: dict[str, socket.socket] = {}
        self.plain: dict[str, socket.socket] = {}
        self.rx: dict[str, socket.socket] = {}
        for host, pid in host_pids.items():
            with inside(pid):
                self.raw[host] = socket.socket(
                    socket.AF_INET6, socket.SOCK_RAW, IPPROTO_IPV6_IN_IPV6)
                self.plain[host] = socket.socket(
                    socket.AF_INET6, socket.SOCK_RAW, IPPROTO_RAW)
                self.rx[host] = _udp_listener()

    def close(self) -> None:
        for s in [*self.raw.values(), *self.plain.values(), *self.rx.values()]:
            s.close()

    def probe(self, paths: list[Path], tries: int = 3,
              timeout_s: float = 0.5) -> ProbeResult:
        """A path is ok when any of `tries` probes on it arrives. Batches go
        out as soon as the previous one has arrived or gone quiet; only the
        end of each try waits the full timeout for stragglers."""
        ok: set[int] = set()
        sent = 0
        for _ in range(tries):
            todo = [i for i in range(len(paths)) if i not in ok]
            if not todo:
                break
            for start in range(0, len(todo), BATCH):
                batch = todo[start:start + BATCH]
                for i in batch:
                    self._send(i, paths[i])
                sent += len(batch)
                ok |= self._collect(set(batch) - ok, QUIET_S)
            ok |= self._collect(set(todo) - ok, timeout_s)
        return ProbeResult(frozenset(ok), sent)

    def _send(self, index: int, path: Path) -> None:
        src = self.plan.host_ports[(path.src, path.plane)].address
        dst = self.plan.host_ports[(path.dst, path.plane)].address
        routed = path.carrier == dst
        packet = inner_udp(src, dst, PROBE_PORT, struct.pack('!I', index),
                           sport=ROUTED_SPORT_BASE + index % 0x4000 if routed
                           else PROBE_PORT)
        sock = self.plain if routed else self.raw
        try:
            sock[path.src].sendto(packet, (path.carrier, 0))
        except OSError:
            pass   # refused at the sender's own port (down, full): lost

    def _collect(self, want: set[int], idle_s: float) -> set[int]:
        """Receive until everything wanted arrived or nothing did for
        `idle_s`; whatever else arrives (stragglers) counts too."""
        got: set[int] = set()
        socks = list(self.rx.values())
        while want - got:
            ready, _, _ = select.select(socks, [], [], idle_s)
            if not ready:
                break
            for s in ready:
                got |= _drain(s)
        return got


def _udp_listener() -> socket.socket:
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_UDP, UDP_NO_CHECK6_RX, 1)
    s.setblocking(False)
    s.bind(('::', PROBE_PORT))
    return s


def _drain(s: socket.socket) -> set[int]:
    got = set()
    while True:
        try:
            data = s.recv(64)
        except BlockingIOError:
            return got
        if len(data) == 4:
            got.add(struct.unpack('!I', data)[0])


def inner_udp(src: str, dst: str, dport: int, payload: bytes,
              sport: int = 4790, flow_label: int = 0) -> bytes:
    """Inner IPv6 + UDP (checksum 0) around a payload."""
    length = 8 + len(payload)
    ip6 = struct.pack('!IHBB16s16s', 6 << 28 | flow_label, length, 17, 64,
                      socket.inet_pton(socket.AF_INET6, src),
                      socket.inet_pton(socket.AF_INET6, dst))
    return ip6 + struct.pack('!HHHH', sport, dport, length, 0) + payload


def routed_choices(plan: FabricPlan, src: str, dst: str, plane: int) -> list[Path]:
    """The routed mode's probes of a pair on a plane: one per equal-cost
    path of the plan, each its own flow (source port) to the destination's
    address; which path each takes is the switches' hash."""
    address = plan.host_ports[(dst, plane)].address
    return [Path(plane, src, dst, (), address)
            for _ in plan.paths(src, dst, plane)]


def all_pairs(hosts: Iterable[str]) -> list[tuple[str, str]]:
    hosts = list(hosts)
    return [(a, b) for a in hosts for b in hosts if a != b]


def sample_pairs(hosts: Iterable[str]) -> list[tuple[str, str]]:
    """For big fabrics: each host to its neighbour and to the host half the
    fabric away, which crosses every tier and every pod."""
    hosts = list(hosts)
    n = len(hosts)
    pairs = {(hosts[i], hosts[(i + step) % n]) for i in range(n)
             for step in (1, n // 2) if step % n}
    return sorted(pairs)
