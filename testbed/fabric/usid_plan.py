"""The fabric's deterministic SRv6 uSID plan and its paths.

Every plane p owns a 32-bit uSID block ``fcbb:bb0p::/32``. Inside a plane each
switch has a 16-bit uN uSID whose top nibble is its tier (1 edge/leaf,
2 aggregation/spine, 3 core) and each host port the uSID ``0x8000 + host
number``. A path is one IPv6 address, its *uSID carrier*: the block, the uSID
of every switch on the path, the destination host port's uSID, then zeros
(RFC 9800). A cross-pod fat-tree path (edge, agg, core, agg, edge, host)
fills exactly 128 bits.

The plan is computed from the Topo alone (no running network), so the
controller, the host plumbing and the tests all derive the same values.
"""
from __future__ import annotations

import ipaddress
import json
from collections import deque
from dataclasses import asdict, dataclass
from functools import cached_property

from mininet.topo import Topo

BLOCK_BASE = 0xFCBB_BB00
TIER_NIBBLE = {'edge': 1, 'leaf': 1, 'agg': 2, 'spine': 2, 'core': 3}
HOST_USID_BASE = 0x8000
GATEWAY_LL = 'fe80::1'      # every host's per-plane next hop (a static neighbour)
GATEWAY_MAC = '02:00:00:00:00:01'


def block(plane: int) -> int:
    return BLOCK_BASE | plane


def carrier(plane: int, usids: list[int] | tuple[int, ...]) -> str:
    """The carrier address for a uSID list on a plane."""
    if not 1 <= len(usids) <= 6:
        raise ValueError('a carrier holds 1-6 uSIDs, got %d' % len(usids))
    value = block(plane) << 96
    for i, usid in enumerate(usids):
        value |= usid << (80 - 16 * i)
    return str(ipaddress.IPv6Address(value))


def carrier_usids(address: str) -> tuple[int, list[int]]:
    """Inverse of `carrier`: (plane, uSIDs up to the first zero)."""
    value = int(ipaddress.IPv6Address(address))
    plane = (value >> 96) - BLOCK_BASE
    usids = [(value >> (80 - 16 * i)) & 0xFFFF for i in range(6)]
    return plane, usids[:usids.index(0)] if 0 in usids else usids


@dataclass(frozen=True)
class SwitchInfo:
    name: str
    plane: int
    tier: str
    index: int
    usid: int
    dpid: int


@dataclass(frozen=True)
class HostPort:
    """One NIC port of a host: its plane, address, SID and attachment."""
    host: str
    plane: int
    intf: str
    usid: int
    address: str
    mac: str
    switch: str
    switch_port: int

    @property
    def sid(self) -> str:
        """The End.DT6 SID the host decapsulates on."""
        return carrier(self.plane, [self.usid])


@dataclass(frozen=True)
class SwitchLink:
    a: str
    a_port: int
    b: str
    b_port: int


@dataclass(frozen=True)
class Path:
    """One path between two host ports of a plane, as its uSID carrier."""
    plane: int
    src: str
    dst: str
    switches: tuple[str, ...]
    carrier: str

    def hops(self) -> list[frozenset[str]]:
        """The switch-to-switch links crossed, as unordered pairs."""
        return [frozenset(p) for p in zip(self.switches, self.switches[1:])]


@dataclass(frozen=True)
class FabricPlan:
    switches: dict[str, SwitchInfo]
    hosts: tuple[str, ...]
    host_ports: dict[tuple[str, int], HostPort]
    links: tuple[SwitchLink, ...]

    @classmethod
    def from_topo(cls, topo: Topo) -> 'FabricPlan':
        switches = {name: _switch_info(name, topo.nodeInfo(name))
                    for name in topo.switches()}
        hosts = tuple(sorted(topo.hosts(), key=lambda h: int(h[1:])))
        ports: dict[tuple[str, int], HostPort] = {}
        links = []
        for a, b, info in topo.links(withInfo=True):
            pa, pb = topo.port(a, b)
            if a in switches and b in switches:
                links.append(SwitchLink(a, pa, b, pb))
                continue
            host, sw, sw_port = (a, b, pb) if b in switches else (b, a, pa)
            intf = info.get('intfName1') if host == a else info.get('intfName2')
            port = _host_port(host, switches[sw], sw_port, intf)
            ports[(host, port.plane)] = port
        return cls(switches, hosts, ports, tuple(links))

    @cached_property
    def planes(self) -> tuple[int, ...]:
        return tuple(sorted({s.plane for s in self.switches.values()}))

    @cached_property
    def _adjacency(self) -> dict[str, dict[str, int]]:
        """switch -> {neighbour switch: local port}."""
        adj: dict[str, dict[str, int]] = {n: {} for n in self.switches}
        for link in self.links:
            adj[link.a][link.b] = link.a_port
            adj[link.b][link.a] = link.b_port
        return adj

    @cached_property
    def longest_path_links(self) -> int:
        """Links a packet crosses host to host on the fabric's longest path
        (our fabrics are symmetric: the first host is as far as any)."""
        first, plane = self.hosts[0], self.planes[0]
        return max((len(self.paths(first, h, plane)[0].switches) + 1
                    for h in self.hosts[1:]), default=2)

    def neighbours(self, switch: str) -> dict[str, int]:
        return self._adjacency[switch]

    def hosts_on(self, switch: str) -> list[HostPort]:
        return [p for p in self.host_ports.values() if p.switch == switch]

    def paths(self, src: str, dst: str, plane: int) -> list[Path]:
        """Every shortest path from src's port to dst's port on a plane: in
        a fat-tree or leaf-spine these are exactly the up-down paths."""
        first = self.host_ports[(src, plane)].switch
        last = self.host_ports[(dst, plane)]
        routes = self._shortest_routes(first, last.switch)
        return [Path(plane, src, dst, route, carrier(plane, [
            self.switches[s].usid for s in route] + [last.usid]))
            for route in routes]

    def all_paths(self, src: str, dst: str) -> list[Path]:
        return [p for plane in self.planes for p in self.paths(src, dst, plane)]

    def _shortest_routes(self, first: str, last: str) -> list[tuple[str, ...]]:
        parents: dict[str, list[str]] = {first: []}
        depth = {first: 0}
        queue = deque([first])
        while queue:
            node = queue.popleft()
            for nxt in self._adjacency[node]:
                if nxt not in depth:
                    depth[nxt] = depth[node] + 1
                    parents[nxt] = [node]
                    queue.append(nxt)
                elif depth[nxt] == depth[node] + 1:
                    parents[nxt].append(node)
        return sorted(_unwind(parents, last))

    def to_dict(self) -> dict:
        """What the controller process needs to compute its tables."""
        return {'switches': [asdict(s) for s in self.switches.values()],
                'hosts': list(self.hosts),
                'host_ports': [asdict(p) for p in self.host_ports.values()],
                'links': [asdict(l) for l in self.links]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> 'FabricPlan':
        data = json.loads(text)
        ports = [HostPort(**p) for p in data['host_ports']]
        return cls({s['name']: SwitchInfo(**s) for s in data['switches']},
                   tuple(data['hosts']),
                   {(p.host, p.plane): p for p in ports},
                   tuple(SwitchLink(**l) for l in data['links']))


def _unwind(parents: dict[str, list[str]], node: str) -> list[tuple[str, ...]]:
    if not parents[node]:
        return [(node,)]
    return [route + (node,) for parent in parents[node]
            for route in _unwind(parents, parent)]


def _switch_info(name: str, info: dict) -> SwitchInfo:
    tier, index = info['tier'], info['index']
    if index >= 0x1000:
        raise ValueError('%s: index %d does not fit a 12-bit uSID field'
                         % (name, index))
    return SwitchInfo(name, info['plane'], tier, index,
                      TIER_NIBBLE[tier] << 12 | index, int(info['dpid'], 16))


def _host_port(host: str, switch: SwitchInfo, switch_port: int,
               intf: str | None) -> HostPort:
    number, plane = int(host[1:]), switch.plane
    if number >= 0x8000:
        raise ValueError('%s: host number does not fit a uSID' % host)
    return HostPort(
        host=host, plane=plane, intf=intf or '%s-p%d' % (host, plane),
        usid=HOST_USID_BASE + number,
        address='fd00:0:0:%x::%x' % (plane, number),
        mac='02:00:%02x:%02x:%02x:%02x' % (plane, 0, number >> 8, number & 0xFF),
        switch=switch.name, switch_port=switch_port)
