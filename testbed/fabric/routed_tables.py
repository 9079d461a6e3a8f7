"""Each switch's destination-routed IPv6 tables, for the routed fabric mode.

The same bridges that forward MRC's uSID carriers (`flow_tables`) also route
plain IPv6 by destination, as a BGP-routed Clos does for RoCEv2, TCP and
MPTCP: a packet whose destination is a host port's address (``fd00:0:0:p::n``,
no uSID block) misses the uSID rules of table 0 and meets, at a lower
priority in the same table, a /128 route to that host port. So MRC and the
routed baselines cross the same switches, links and queues.

A route toward a host on another switch points to an OpenFlow select group
holding one bucket per equal-cost next hop (ECMP); the switch hashes each
packet's 5-tuple, UDP or TCP source port included, to pick the bucket
(`testbed.controller.ofp_groups` says how the hash is asked for). There is
one group per destination edge switch, its id that switch's uSID, so a
reconvergence only rewrites group buckets and never a flow.

The next hops are every neighbour one hop closer to the destination edge
switch over the links believed up: what ECMP over shortest paths yields once
a routing protocol has converged (in an up-down Clos, the up-down paths).
A switch with no live route keeps an empty group and drops, as a router
with no route does. Each plane routes every address of a host to that
host's port on the plane (`addresses_via`).
"""
from __future__ import annotations

import ipaddress
from collections import deque
from dataclasses import dataclass

from testbed.fabric.usid_plan import GATEWAY_MAC, FabricPlan, HostPort

ROUTED_PRIORITY = 10        # below the uSID rules (flow_tables.PRIORITY)

LinkKey = frozenset[str]    # the two switches of a switch-to-switch link


@dataclass(frozen=True)
class HostRoute:
    """A host port attached here: deliver with its MAC, from the gateway's."""
    address: str
    port: int
    eth_dst: str
    eth_src: str = GATEWAY_MAC


@dataclass(frozen=True)
class GroupRoute:
    """A host port behind another switch: its destination switch's group."""
    address: str
    group_id: int


RoutedRule = HostRoute | GroupRoute


@dataclass(frozen=True)
class SwitchRouting:
    """One switch's routed state: its groups (id -> next-hop ports, sorted)
    and its /128 routes."""
    groups: dict[int, tuple[int, ...]]
    routes: tuple[RoutedRule, ...]


def link_key(a: str, b: str) -> LinkKey:
    return frozenset((a, b))


def routed_tables(plan: FabricPlan, down: frozenset[LinkKey] = frozenset()
                  ) -> dict[str, SwitchRouting]:
    """switch name -> its routed tables, with the links in `down` removed."""
    groups: dict[str, dict[int, tuple[int, ...]]] = {n: {} for n in plan.switches}
    routes: dict[str, list[RoutedRule]] = {n: [] for n in plan.switches}
    for edge in _edge_switches(plan):
        gid = plan.switches[edge].usid
        hosts = sorted(plan.hosts_on(edge), key=lambda p: p.address)
        reached = [(address, p) for p in hosts
                   for address in addresses_via(plan, p)]
        for switch, ports in next_hops(plan, edge, down).items():
            groups[switch][gid] = ports
            routes[switch] += [GroupRoute(a, gid) for a, _ in reached]
        routes[edge] += [HostRoute(a, p.switch_port, p.mac) for a, p in reached]
    return {n: SwitchRouting(groups[n], tuple(routes[n])) for n in plan.switches}


def addresses_via(plan: FabricPlan, port: HostPort) -> list[str]:
    """The addresses a plane delivers to this host port: its own first,
    then the host's addresses on the other planes, as when a host announces
    each of its addresses into every plane. So MPTCP's subflow on plane p,
    which the kernel opens toward the peer's initial address (on another
    plane), crosses plane p (the peer's kernel takes any of its addresses on
    any port)."""
    return [port.address] + [plan.host_ports[(port.host, q)].address
                             for q in plan.planes if q != port.plane]


def next_hops(plan: FabricPlan, target: str, down: frozenset[LinkKey]
              ) -> dict[str, tuple[int, ...]]:
    """Every other switch of target's plane -> its ports toward the live
    neighbours one hop closer to `target` (empty: no route)."""
    live = {n: {m: port for m, port in plan.neighbours(n).items()
                if link_key(n, m) not in down} for n in plan.switches}
    distance = {target: 0}
    queue = deque([target])
    while queue:
        node = queue.popleft()
        for nxt in live[node]:
            if nxt not in distance:
                distance[nxt] = distance[node] + 1
                queue.append(nxt)
    plane = plan.switches[target].plane
    return {n: tuple(sorted(port for m, port in live[n].items()
                            if n in distance and distance.get(m) == distance[n] - 1))
            for n, info in plan.switches.items()
            if info.plane == plane and n != target}


def _edge_switches(plan: FabricPlan) -> list[str]:
    return sorted({p.switch for p in plan.host_ports.values()})


def host_prefix(address: str) -> tuple[str, str]:
    """(address, mask) of a /128 route, as OpenFlow matches it."""
    return str(ipaddress.IPv6Address(address)), 'ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff'
