"""uSID plan and path enumeration (no root needed)."""
import ipaddress

import pytest

from testbed.fabric.topo_spec import parse_topo_spec
from testbed.fabric.usid_plan import FabricPlan, carrier, carrier_usids


def plan(spec):
    return FabricPlan.from_topo(parse_topo_spec(spec).build())


@pytest.fixture(scope='module')
def k4():
    return plan('fattree,k=4,planes=2')


def test_blocks_are_32_bit_per_plane(k4):
    for (host, p), port in k4.host_ports.items():
        assert ipaddress.IPv6Address(port.sid).packed[:4] == \
            bytes.fromhex('fcbbbb%02x' % p)


def test_usids_unique_within_a_plane_and_tier_tagged(k4):
    for p in k4.planes:
        usids = [s.usid for s in k4.switches.values() if s.plane == p]
        usids += [hp.usid for hp in k4.host_ports.values() if hp.plane == p]
        assert len(set(usids)) == len(usids)
        assert 0 not in usids
    tiers = {s.tier: s.usid >> 12 for s in k4.switches.values()}
    assert tiers == {'edge': 1, 'agg': 2, 'core': 3}


def test_cross_pod_carrier_fills_128_bits(k4):
    path = k4.paths('h1', 'h16', 1)[0]
    assert len(path.switches) == 5
    value = int(ipaddress.IPv6Address(path.carrier))
    assert value & 0xFFFF == k4.host_ports[('h16', 1)].usid


def test_carrier_round_trip():
    address = carrier(3, [0x1001, 0x2002, 0x8005])
    assert address == 'fcbb:bb03:1001:2002:8005::'
    assert carrier_usids(address) == (3, [0x1001, 0x2002, 0x8005])


@pytest.mark.parametrize('spec,src,dst,count', [
    ('fattree,k=4,planes=2', 'h1', 'h16', 4),    # cross-pod: (k/2)^2
    ('fattree,k=4,planes=2', 'h1', 'h3', 2),     # same pod: k/2
    ('fattree,k=4,planes=2', 'h1', 'h2', 1),     # same edge
    ('fattree,k=8,planes=1', 'h1', 'h128', 16),
    ('leafspine,leaves=4,spines=3,hosts=2,planes=2', 'h1', 'h8', 3),
])
def test_path_counts(spec, src, dst, count):
    p = plan(spec)
    for plane in p.planes:
        paths = p.paths(src, dst, plane)
        assert len(paths) == count
        assert len({x.carrier for x in paths}) == count
        assert all(x.plane == plane for x in paths)


def test_paths_stay_in_their_plane(k4):
    for path in k4.all_paths('h1', 'h13'):
        assert {k4.switches[s].plane for s in path.switches} == {path.plane}


def test_cross_pod_paths_are_up_down(k4):
    for path in k4.paths('h1', 'h16', 2):
        tiers = [k4.switches[s].tier for s in path.switches]
        assert tiers == ['edge', 'agg', 'core', 'agg', 'edge']


def test_json_round_trip(k4):
    again = FabricPlan.from_json(k4.to_json())
    assert again.switches == k4.switches
    assert again.host_ports == k4.host_ports
    assert again.paths('h1', 'h16', 1) == k4.paths('h1', 'h16', 1)


@pytest.mark.parametrize('spec, links', [
    ('fattree,k=4,planes=2', 6),                 # host, edge, agg, core, ...
    ('leafspine,leaves=2,spines=2,hosts=1,planes=1', 4),
    ('leafspine,leaves=1,spines=1,hosts=2,planes=1', 2),
])
def test_longest_path_links(spec, links):
    assert plan(spec).longest_path_links == links
