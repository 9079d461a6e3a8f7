"""The Topo classes: shape, names, plane separation (no root needed)."""
from pathlib import Path

import pytest
from mininet.link import TCLink

from testbed.topologies.fattree import MultiPlaneFatTree
from testbed.topologies.leafspine import MultiPlaneLeafSpine

ROOT = Path(__file__).resolve().parents[2]


def plane_of(topo, switch):
    return topo.nodeInfo(switch)['plane']


@pytest.mark.parametrize('k,planes', [(4, 1), (4, 2), (6, 3), (8, 2)])
def test_fattree_counts(k, planes):
    topo = MultiPlaneFatTree(k=k, planes=planes)
    per_plane = (k // 2) ** 2 + k * k      # core + agg + edge
    assert len(topo.hosts()) == k ** 3 // 4
    assert len(topo.switches()) == per_plane * planes
    # per plane: host links + edge-agg + agg-core, each k**3/4
    assert len(topo.links()) == 3 * k ** 3 // 4 * planes


def test_leafspine_counts():
    topo = MultiPlaneLeafSpine(leaves=4, spines=3, hosts=2, planes=4)
    assert len(topo.hosts()) == 8
    assert len(topo.switches()) == 7 * 4
    assert len(topo.links()) == (4 * 3 + 8) * 4


@pytest.mark.parametrize('topo', [MultiPlaneFatTree(k=4, planes=3),
                                  MultiPlaneLeafSpine(planes=3)])
def test_planes_share_no_switch_and_hosts_have_one_port_per_plane(topo):
    for a, b in topo.links():
        if a in topo.switches() and b in topo.switches():
            assert plane_of(topo, a) == plane_of(topo, b)
    for host in topo.hosts():
        planes = sorted(plane_of(topo, sw) for sw in topo.g[host])
        assert planes == [1, 2, 3]


def test_names_show_the_plane():
    topo = MultiPlaneFatTree(k=4, planes=2)
    for sw in topo.switches():
        assert sw.startswith('p%d' % plane_of(topo, sw))
    for a, b, info in topo.links(withInfo=True):
        if a.startswith('h'):
            assert info['intfName1'] == '%s-p%d' % (a, plane_of(topo, b))


def test_dpids_unique():
    topo = MultiPlaneFatTree(k=8, planes=8)
    dpids = [topo.nodeInfo(s)['dpid'] for s in topo.switches()]
    assert len(set(dpids)) == len(dpids)


@pytest.mark.parametrize('cls,kwargs', [
    (MultiPlaneFatTree, {'k': 5}), (MultiPlaneFatTree, {'k': 2}),
    (MultiPlaneFatTree, {'planes': 9}), (MultiPlaneLeafSpine, {'planes': 0}),
    (MultiPlaneLeafSpine, {'spines': 0})])
def test_bad_parameters_refused(cls, kwargs):
    with pytest.raises(ValueError):
        cls(**kwargs)


def test_bw_uses_tclink():
    topo = MultiPlaneLeafSpine(planes=1, bw=20)
    for _a, _b, info in topo.links(withInfo=True):
        assert info['bw'] == 20.0 and issubclass(info['cls'], TCLink)


@pytest.mark.parametrize('name,args,kwargs,spec', [
    ('fattree', (), {'k': 4, 'planes': 2}, 'fattree,k=4,planes=2'),
    ('fattree', (6,), {'bw': 20.0}, 'fattree,k=6,bw=20.0'),
    ('leafspine', (2, 1, 1, 2), {}, 'leafspine,leaves=2,spines=1,hosts=1,planes=2'),
])
def test_a_topology_file_is_a_mininet_custom_file(monkeypatch, name, args,
                                                  kwargs, spec):
    # As `mn --custom FILE` loads it: exec'd into a bare dict, no __file__,
    # from the repository's root with a relative name.
    from testbed.topologies import stock_mn
    from testbed.fabric.topo_spec import parse_topo_spec
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(stock_mn._Built, 'spec', None)
    path = 'testbed/topologies/%s.py' % name
    customs: dict = {}
    exec(compile(open(path).read(), path, 'exec'), customs, customs)
    assert customs['controllers'] == {'mrc': stock_mn.MrcController}
    assert customs['hosts'] == {'mrc': stock_mn.MrcHost}
    topo = customs['topos'][name](*args, **kwargs)
    # what the controller and the hosts will plan from: the topology built
    assert stock_mn._Built.spec == spec
    assert sorted(parse_topo_spec(spec).build().links()) == \
        sorted(topo.links())
