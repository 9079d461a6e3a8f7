import pytest

from testbed.fabric.topo_spec import TopoSpecError, parse_topo_spec


def test_round_trip():
    spec = parse_topo_spec('leafspine,planes=4,leaves=4,spines=4,hosts=2')
    assert str(spec) == 'leafspine,hosts=2,leaves=4,planes=4,spines=4'
    assert parse_topo_spec(str(spec)) == spec


def test_bw_is_a_float():
    assert parse_topo_spec('fattree,k=4,bw=12.5').kwargs()['bw'] == 12.5


@pytest.mark.parametrize('text,words', [
    ('torus,k=4', 'unknown topology'),
    ('fattree,k=4,radix=3', "unknown parameter 'radix=3'"),
    ('fattree,k', "unknown parameter 'k'"),
    ('fattree,k=four', "k='four' is not a whole number"),
    ('fattree,k=-4', 'k must be positive'),
    ('fattree,k=6,planes=9', 'planes must be 1..8'),
    ('fattree,k=7', 'k must be even'),
])
def test_refusals_name_the_problem(text, words):
    with pytest.raises(TopoSpecError, match=words):
        parse_topo_spec(text)


def test_mtu_is_a_whole_number_of_bytes_within_what_links_take():
    assert parse_topo_spec('fattree,k=4,mtu=4096').kwargs()['mtu'] == 4096
    for bad in ('1279', '9001'):
        with pytest.raises(TopoSpecError, match='mtu must be 1280..9000 bytes'):
            parse_topo_spec('fattree,k=4,mtu=' + bad)
    with pytest.raises(TopoSpecError, match='not a whole number'):
        parse_topo_spec('leafspine,mtu=4k')


def test_afxdp_ports_take_at_most_the_mtu_a_veth_runs_native_xdp_at():
    # link_params.AFXDP_MAX_MTU, measured: 3,506 takes the program, 3,507 not.
    assert parse_topo_spec('fattree,k=4,mtu=3506,afxdp=1').kwargs()['mtu'] == 3506
    assert parse_topo_spec('fattree,k=4,mtu=4096,afxdp=0').kwargs()['mtu'] == 4096
    for topo in ('fattree,k=4', 'leafspine'):
        with pytest.raises(TopoSpecError, match=r'1280\.\.3506 bytes with afxdp=1'):
            parse_topo_spec(topo + ',mtu=3507,afxdp=1')


def test_afxdp_is_0_1_or_auto_which_the_fabric_decides_when_built():
    assert parse_topo_spec('leafspine,afxdp=auto').kwargs()['afxdp'] == 'auto'
    # auto may build system ports: an MTU above AF_XDP's is not refused here
    assert parse_topo_spec('leafspine,afxdp=auto,mtu=4096').kwargs()['mtu'] == 4096
    with pytest.raises(TopoSpecError, match="afxdp='2' must be 0 or 1 or auto"):
        parse_topo_spec('leafspine,afxdp=2')
    with pytest.raises(TopoSpecError, match="mark='auto' must be 0 or 1$"):
        parse_topo_spec('leafspine,mark=auto')
