"""Link options against injected kernel features: both branches of every
choice, without root and without probing this machine."""

import pytest

from testbed.fabric import link_options
from testbed.fabric.link_options import (FeatureMissing, LinkFeatures,
                                         LinkOptionError, LinkRequest,
                                         resolve, tclink_kwargs)
from testbed.fabric.topo_spec import TopoSpecError, parse_topo_spec
from testbed.topologies import fattree, leafspine
from testbed.topologies.link_params import SizedLink

FULL = LinkFeatures(netem=True, red_ecn=True)
BARE = LinkFeatures(netem=False, red_ecn=False)   # like the development box
STRUCTURAL = {'node1', 'node2', 'port1', 'port2', 'intfName1'}


def test_bandwidth_alone_needs_no_optional_qdisc():
    request = LinkRequest(bw_mbit=10)
    assert tclink_kwargs(request, BARE) == {'cls': SizedLink, 'bw': 10.0}
    assert tclink_kwargs(LinkRequest(), BARE) == {}


def test_an_mtu_alone_sizes_the_links_without_shaping_them():
    assert tclink_kwargs(LinkRequest(mtu=4096), BARE) == {'cls': SizedLink,
                                                          'mtu': 4096}
    assert resolve({'k': 4, 'mtu': 4096}) == {'cls': SizedLink, 'mtu': 4096}


def test_delay_with_netem_goes_to_tclink():
    kwargs = tclink_kwargs(LinkRequest(bw_mbit=10, delay_ms=2.5), FULL)
    assert kwargs == {'cls': SizedLink, 'bw': 10.0, 'delay': '2.5ms'}


def test_delay_without_netem_is_refused_naming_the_feature():
    with pytest.raises(FeatureMissing, match=r'delay= needs netem') as err:
        tclink_kwargs(LinkRequest(delay_ms=1), LinkFeatures(False, True))
    assert err.value.missing == [('delay=', 'netem')]
    assert 'mrc-testbed doctor' in str(err.value)


def test_ecn_with_red_goes_to_tclink():
    kwargs = tclink_kwargs(LinkRequest(bw_mbit=20, ecn=True),
                           LinkFeatures(netem=False, red_ecn=True))
    assert kwargs == {'cls': SizedLink, 'bw': 20.0, 'enable_ecn': True}


def test_ecn_without_red_is_refused_naming_the_feature():
    with pytest.raises(FeatureMissing, match=r'ecn=1 needs RED/ECN') as err:
        tclink_kwargs(LinkRequest(bw_mbit=20, ecn=True),
                      LinkFeatures(netem=True, red_ecn=False))
    assert err.value.missing == [('ecn=1', 'RED/ECN')]


def test_every_missing_feature_is_named_at_once():
    with pytest.raises(FeatureMissing) as err:
        tclink_kwargs(LinkRequest(bw_mbit=5, delay_ms=1, ecn=True), BARE)
    assert err.value.missing == [('delay=', 'netem'), ('ecn=1', 'RED/ECN')]


@pytest.mark.parametrize('available', [FULL, BARE])
def test_ecn_without_a_rate_is_refused_whatever_the_kernel(available):
    with pytest.raises(LinkOptionError, match='ecn=1 needs bw='):
        tclink_kwargs(LinkRequest(ecn=True), available)


def test_resolve_probes_only_when_a_qdisc_is_asked_for(monkeypatch):
    def no_probe():
        raise AssertionError('probed the kernel for plain HTB links')
    monkeypatch.setattr(LinkFeatures, 'detect', staticmethod(no_probe))
    assert resolve({'k': 4, 'bw': 10.0}) == {'cls': SizedLink, 'bw': 10.0}
    monkeypatch.setattr(LinkFeatures, 'detect', staticmethod(lambda: BARE))
    with pytest.raises(FeatureMissing):
        resolve({'k': 4, 'delay': 1.0})
    monkeypatch.setattr(LinkFeatures, 'detect', staticmethod(lambda: FULL))
    assert resolve({'k': 4, 'delay': 1.0})['delay'] == '1ms'


def test_detect_reads_the_features_doctor_prints(monkeypatch):
    monkeypatch.setattr(link_options.features, 'netem_available', lambda: True)
    monkeypatch.setattr(link_options.features, 'red_ecn_available',
                        lambda: False)
    assert LinkFeatures.detect() == LinkFeatures(netem=True, red_ecn=False)


REQUESTS = [LinkRequest(), LinkRequest(bw_mbit=10),
            LinkRequest(bw_mbit=10, delay_ms=3),
            LinkRequest(bw_mbit=7.5, delay_ms=0.5, ecn=True),
            LinkRequest(delay_ms=1)]


@pytest.mark.parametrize('request_', REQUESTS)
def test_topologies_give_every_link_exactly_the_resolved_options(request_):
    want = tclink_kwargs(request_, FULL)
    args = dict(bw=request_.bw_mbit, delay=request_.delay_ms,
                ecn=int(request_.ecn))
    for topo in (fattree.MultiPlaneFatTree(k=4, planes=2, **args),
                 leafspine.MultiPlaneLeafSpine(planes=2, **args)):
        for _a, _b, info in topo.links(withInfo=True):
            got = {k: v for k, v in info.items() if k not in STRUCTURAL}
            assert got == want


def test_spec_parses_delay_and_ecn():
    spec = parse_topo_spec('leafspine,planes=2,delay=2.5,ecn=1,bw=10')
    assert spec.kwargs() == {'planes': 2, 'delay': 2.5, 'ecn': 1, 'bw': 10.0}
    # Without bw it still parses: scenarios add bw= from link_rate_mbit.
    assert parse_topo_spec('fattree,k=4,ecn=1').kwargs()['ecn'] == 1


@pytest.mark.parametrize('text,words', [
    ('fattree,k=4,ecn=2', "ecn='2' must be 0 or 1"),
    ('fattree,k=4,ecn=yes', "ecn='yes' must be 0 or 1"),
    ('fattree,k=4,delay=0', 'delay must be positive'),
    ('fattree,k=4,delay=1ms', "delay='1ms' is not a number"),
])
def test_spec_refusals_name_the_option(text, words):
    with pytest.raises(TopoSpecError, match=words):
        parse_topo_spec(text)
