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
