"""The routed fabric mode's tables, computed from the plan: ECMP next hops
over shortest paths, repaired around dead links, and the controller's view
of which links are dead."""
import struct

import pytest

from testbed.controller.ofp_groups import (HASH_FIELDS, NTR_VENDOR_ID,
                                           SelectionMethodProperty, hash_basis)
from testbed.controller.reconvergence import RoutedView
from testbed.fabric.routed_tables import (GroupRoute, HostRoute, link_key,
                                          routed_tables)
from testbed.fabric.topo_spec import parse_topo_spec
from testbed.fabric.usid_plan import FabricPlan


@pytest.fixture(scope='module')
def plan() -> FabricPlan:
    return FabricPlan.from_topo(parse_topo_spec('fattree,k=4,planes=1').build())


def ports_to(plan, switch, *neighbours):
    return tuple(sorted(plan.neighbours(switch)[n] for n in neighbours))


def group_toward(plan, tables, switch, host):
    dst_edge = plan.host_ports[(host, 1)].switch
    return tables[switch].groups[plan.switches[dst_edge].usid]


def test_healthy_fat_tree_next_hops_are_the_up_down_paths(plan):
    tables = routed_tables(plan)
    # h1 sits on p1e0x0 (pod 0), h16 on p1e3x1 (pod 3).
    assert group_toward(plan, tables, 'p1e0x0', 'h16') == ports_to(
        plan, 'p1e0x0', 'p1a0x0', 'p1a0x1')          # both aggregations up
    assert group_toward(plan, tables, 'p1a0x0', 'h16') == ports_to(
        plan, 'p1a0x0', 'p1c0', 'p1c1')              # both cores up
    assert group_toward(plan, tables, 'p1c0', 'h16') == ports_to(
        plan, 'p1c0', 'p1a3x0')                      # one way down
    assert group_toward(plan, tables, 'p1a3x0', 'h16') == ports_to(
        plan, 'p1a3x0', 'p1e3x1')


def test_each_host_has_one_route_per_switch(plan):
    tables = routed_tables(plan)
    for name, table in tables.items():
        assert sorted(r.address for r in table.routes) == sorted(
            p.address for p in plan.host_ports.values())
    local = [r for r in tables['p1e0x0'].routes if isinstance(r, HostRoute)]
    assert {r.address for r in local} == {'fd00:0:0:1::1', 'fd00:0:0:1::2'}
    assert all(r.eth_dst == plan.host_ports[('h%d' % int(r.address[-1], 16), 1)].mac
               for r in local)
    assert all(isinstance(r, GroupRoute) for r in tables['p1c0'].routes)


def test_every_plane_routes_each_host_address_to_its_own_port():
    two = FabricPlan.from_topo(parse_topo_spec('fattree,k=4,planes=2').build())
    tables = routed_tables(two)
    h1_plane1 = two.host_ports[('h1', 1)].address
    h1_plane2 = two.host_ports[('h1', 2)]
    # plane 2 carries h1's plane-1 address to h1's plane-2 port (MPTCP's
    # plane-2 subflow toward it), its own address first
    edge = tables[h1_plane2.switch]
    local = {r.address: r for r in edge.routes if isinstance(r, HostRoute)}
    assert local[h1_plane1].port == local[h1_plane2.address].port == \
        h1_plane2.switch_port and local[h1_plane1].eth_dst == h1_plane2.mac
    core = tables['p2c0']
    assert sorted(r.address for r in core.routes) == sorted(
        p.address for p in two.host_ports.values())
    via = {r.address: r.group_id for r in core.routes}
    assert via[h1_plane1] == two.switches[h1_plane2.switch].usid


def test_a_dead_link_leaves_every_group_that_used_it(plan):
    down = frozenset({link_key('p1a3x0', 'p1c0')})
    tables = routed_tables(plan, down)
    # Every other pod's aggregation 0 stops sending h16's traffic to p1c0,
    # which now only reaches pod 3 the long way round...
    for pod in range(3):
        agg = 'p1a%dx0' % pod
        assert group_toward(plan, tables, agg, 'h16') == ports_to(plan, agg, 'p1c1')
    # ...while h1's edge keeps both aggregations: each still has a core path.
    assert group_toward(plan, tables, 'p1e0x0', 'h16') == ports_to(
        plan, 'p1e0x0', 'p1a0x0', 'p1a0x1')
    # Routes toward pod 0 do not use the link and do not change.
    healthy = routed_tables(plan)
    assert group_toward(plan, tables, 'p1c0', 'h1') == \
        group_toward(plan, healthy, 'p1c0', 'h1')


def test_a_switch_cut_off_keeps_an_empty_group(plan):
    down = frozenset(link_key('p1e0x0', a) for a in ('p1a0x0', 'p1a0x1'))
    tables = routed_tables(plan, down)
    assert group_toward(plan, tables, 'p1e0x0', 'h16') == ()
    assert group_toward(plan, tables, 'p1a0x0', 'h1') == ()


def test_the_view_changes_on_the_first_end_reported_and_comes_back(plan):
    view = RoutedView(plan)
    healthy = view.tables
    a, b = plan.switches['p1a3x0'], plan.switches['p1c0']
    a_port, b_port = plan.neighbours('p1a3x0')['p1c0'], plan.neighbours('p1c0')['p1a3x0']
    first = view.apply(a.dpid, a_port, up=False)
    assert first and {c.switch for c in first} >= {'p1a0x0', 'p1a1x0', 'p1a2x0'}
    assert all(c.before != c.after for c in first)
    assert view.apply(b.dpid, b_port, up=False) == []     # the other end
    assert view.apply(a.dpid, a_port, up=True) == []      # still down at b
    back = view.apply(b.dpid, b_port, up=True)
    assert {(c.switch, c.group_id) for c in back} == {(c.switch, c.group_id)
                                                      for c in first}
    assert view.tables == healthy


def test_a_host_port_is_no_concern_of_routing(plan):
    view = RoutedView(plan)
    port = plan.host_ports[('h1', 1)]
    assert view.apply(plan.switches[port.switch].dpid, port.switch_port,
                      up=False) == []


def test_the_selection_method_property_asks_for_a_hash_of_the_five_tuple():
    data = SelectionMethodProperty(0xDEADBEEF).serialize()
    kind, length, vendor, subtype = struct.unpack_from('!HHII', data)
    assert (kind, vendor, subtype) == (0xFFFF, NTR_VENDOR_ID, 1)
    assert data[16:32].rstrip(b'\0') == b'hash'
    assert struct.unpack_from('!Q', data, 32) == (0xDEADBEEF,)  # the hash's basis
    assert length == 40 + sum(4 + size for _, size in HASH_FIELDS)
    assert len(data) % 8 == 0 and data[length:] == b'\0' * (len(data) - length)
    fields = set()
    offset = 40
    while offset < length:
        cls, field, size = struct.unpack_from('!HBB', data, offset)
        assert cls == 0x8000 and not field & 1      # no mask bit
        fields.add(field >> 1)
        offset += 4 + size
    assert {15, 13, 26, 27, 10} <= fields         # udp_src, tcp_src, src, dst, proto


def test_every_switch_hashes_from_a_basis_of_its_own(plan):
    # One basis everywhere polarizes the hash (testbed.controller.ofp_groups).
    bases = [hash_basis(name) for name in plan.switches]
    assert len(set(bases)) == len(bases)
