"""The controller's static tables, checked by walking every path through
them the way OVS would (no root needed)."""
import ipaddress

import pytest

from testbed.fabric.flow_tables import (NextUsidOutput, ShiftAndForward,
                                        switch_rules)
from testbed.fabric.topo_spec import parse_topo_spec
from testbed.fabric.usid_plan import FabricPlan


def plan(spec):
    return FabricPlan.from_topo(parse_topo_spec(spec).build())


def matches(rule, dst: int) -> bool:
    value, mask = (int(ipaddress.IPv6Address(x)) for x in rule.match.masked_dst())
    return dst & mask == value


def forward(p, switch, dst):
    """One switch: table 0 then table 1, as installed. Returns (dst, port,
    eth_dst) or None for a drop."""
    rules = switch_rules(p, switch)
    for rule in rules:
        if isinstance(rule, ShiftAndForward) and matches(rule, dst):
            usids = dst & ((1 << 96) - 1)
            dst = (dst >> 96 << 96) | ((usids << 16) & ((1 << 96) - 1))
            break
    else:
        return None
    for rule in rules:
        if isinstance(rule, NextUsidOutput) and matches(rule, dst):
            return dst, rule.port, rule.eth_dst
    return None


def walk(p, path):
    """Follow a carrier hop by hop; return the host port it reaches."""
    src_port = p.host_ports[(path.src, path.plane)]
    switch, dst = src_port.switch, int(ipaddress.IPv6Address(path.carrier))
    visited = []
    while True:
        visited.append(switch)
        out = forward(p, switch, dst)
        assert out is not None, 'dropped at %s' % switch
        dst, port, eth_dst = out
        peer = [n for n, local in p.neighbours(switch).items() if local == port]
        if not peer:
            host = [hp for hp in p.hosts_on(switch) if hp.switch_port == port]
            return host[0], tuple(visited), dst, eth_dst
        switch = peer[0]


@pytest.mark.parametrize('spec', ['fattree,k=4,planes=2',
                                  'leafspine,leaves=3,spines=2,hosts=2,planes=2'])
def test_every_path_reaches_its_destination_via_its_switches(spec):
    p = plan(spec)
    for src in p.hosts:
        for dst in p.hosts:
            if src == dst:
                continue
            for path in p.all_paths(src, dst):
                port, visited, final, eth_dst = walk(p, path)
                assert (port.host, port.plane) == (dst, path.plane)
                assert visited == path.switches
                assert ipaddress.IPv6Address(final) == \
                    ipaddress.IPv6Address(port.sid)   # host decaps on its SID
                assert eth_dst == port.mac


def test_tables_hold_only_shift_and_next_usid():
    p = plan('fattree,k=4,planes=1')
    for name, info in p.switches.items():
        rules = switch_rules(p, name)
        shifts = [r for r in rules if isinstance(r, ShiftAndForward)]
        assert len(shifts) == 1 and shifts[0].match.usid == info.usid
        outputs = [r for r in rules if isinstance(r, NextUsidOutput)]
        assert len(outputs) == len(p.neighbours(name)) + len(p.hosts_on(name))
        assert all(r.match.plane == info.plane for r in rules)


def test_foreign_plane_and_unknown_usids_are_dropped():
    p = plan('fattree,k=4,planes=2')
    edge = 'p1e0x0'
    other_plane = int(ipaddress.IPv6Address('fcbb:bb02:1000:8001::'))
    assert forward(p, edge, other_plane) is None
    nowhere = int(ipaddress.IPv6Address('fcbb:bb01:1000:3fff::'))
    assert forward(p, edge, nowhere) is None

