"""What a full kernel adds (OVS kernel datapath, netem link delay, RED/ECN
marking), chosen by the same detection `mrc-testbed doctor` prints.

Every branch runs where the machine can take it and is skipped, saying why,
elsewhere: on the development box (no openvswitch module, no sch_netem, no
sch_red) the refusals run; in the Vagrant VM (README, "CI in a Vagrant VM")
the applied options do.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.fabric import features, ovs
from tests.integration.leaks import leaked
from testbed.fabric.link_options import FeatureMissing, LinkFeatures
from testbed.fabric.net import FabricError, FabricNet
from testbed.fabric.run_lock import RunLock
from testbed.fabric.topo_spec import parse_topo_spec

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, '-m', 'testbed.cli']
TINY = 'leafspine,leaves=2,spines=1,hosts=1,planes=1'


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + list(args), capture_output=True, text=True,
                          timeout=300, cwd=REPO)


def spotless() -> bool:
    return leaked() == {}


@pytest.fixture(scope='module')
def here() -> LinkFeatures:
    return LinkFeatures.detect()


def doctor() -> dict[str, dict]:
    result = run('doctor', '--json')
    assert result.returncode == 0, result.stderr
    return {f['name']: f for f in json.loads(result.stdout)}


def test_doctor_lists_what_a_full_kernel_adds(here):
    found = doctor()
    assert found['OVS kernel datapath']['present'] == \
        features.ovs_kernel_datapath()
    assert found['netem']['present'] == here.netem
    assert found['RED/ECN']['present'] == here.red_ecn
    assert 'delay=' in found['netem']['without']
    assert 'ecn=1' in found['RED/ECN']['without']
    text = run('doctor').stdout
    for name in ('OVS kernel datapath', 'netem', 'RED/ECN'):
        assert any(line.startswith(name + ' ') for line in text.splitlines())


def test_fabric_datapath_follows_the_detection(fabric_factory):
    kernel = features.ovs_kernel_datapath()
    fab = fabric_factory(TINY)
    assert fab.datapath == ('kernel' if kernel else 'user')
    dp_type = subprocess.run(
        ['ovs-vsctl', 'get', 'bridge', 'p1l0', 'datapath_type'],
        capture_output=True, text=True, check=True).stdout.strip().strip('"')
    assert dp_type in (('', 'system') if kernel else ('netdev',))


def assert_refused_before_building(spec: str, words: str) -> None:
    with pytest.raises(FabricError, match=words) as err:
        FabricNet(parse_topo_spec(spec))
    assert isinstance(err.value.__cause__, FeatureMissing)
    lock = RunLock()
    lock.acquire(wait_s=0)          # never taken: nothing was started
    lock.release()
    assert spotless()
    result = run('verify', '--topo', spec)
    assert result.returncode == 2
    assert words in result.stderr and 'mrc-testbed doctor' in result.stderr
    assert spotless()


def test_delay_is_refused_without_netem(here):
    if here.netem:
        pytest.skip('this kernel has sch_netem: the delay is applied instead')
    assert_refused_before_building(TINY + ',bw=10,delay=2',
                                   'delay= needs netem')


def test_ecn_is_refused_without_red(here):
    if here.red_ecn:
        pytest.skip('this kernel has sch_red: ECN marking is applied instead')
    assert_refused_before_building(TINY + ',bw=10,ecn=1',
                                   'ecn=1 needs RED/ECN')


def test_ecn_without_a_rate_is_refused_on_any_kernel():
    result = run('verify', '--topo', TINY + ',ecn=1')
    assert result.returncode == 2 and 'ecn=1 needs bw=' in result.stderr
    assert spotless()


def qdiscs(fab: FabricNet) -> list[str]:
    """tc's view of both ends of every link of leaf p1l0 and host h1."""
    switch = [subprocess.run(['tc', 'qdisc', 'show', 'dev', intf.name],
                             capture_output=True, text=True).stdout
              for intf in fab.net['p1l0'].intfList() if intf.name != 'lo']
    return switch + [fab.net['h1'].cmd('tc qdisc show dev h1-p1')]


def test_delay_is_applied_with_netem(here, fabric_factory):
    if not here.netem:
        pytest.skip('no sch_netem on this kernel: see the refusal test')
    fab = fabric_factory(TINY + ',bw=10,delay=5')
    assert fab.link_options['delay'] == '5ms'
    for shown in qdiscs(fab):
        assert 'htb' in shown and 'netem' in shown and 'delay 5ms' in shown


def test_ecn_marking_is_applied_with_red(here, fabric_factory):
    if not here.red_ecn:
        pytest.skip('no sch_red on this kernel: see the refusal test')
    fab = fabric_factory(TINY + ',bw=10,ecn=1')
    assert fab.link_options['enable_ecn'] is True
    for shown in qdiscs(fab):
        assert 'htb' in shown and ' red ' in shown and 'ecn' in shown


def test_plain_shaping_needs_no_probe_and_builds(fabric_factory):
    fab = fabric_factory(TINY + ',bw=10')
    assert fab.link_options == {'cls': fab.link_options['cls'], 'bw': 10.0}
    assert all('htb' in shown for shown in qdiscs(fab))
    assert ovs.list_bridges(ours_only=True)
