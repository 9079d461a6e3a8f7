"""Scenario files: the shipped ones validate, and every refusal names the
file, the field and the problem."""
from __future__ import annotations

import copy
import random
import re
from pathlib import Path

import pytest
import yaml

from testbed.workload.scenario import (
    WORKLOAD_TYPES, ScenarioError,
    load_scenario, parse_scenario)
from testbed.fabric.faults.catalogue import FAULT_KINDS, markdown_table
from testbed.nic.emulated_timescale import MTU, data_frame_bytes
from testbed.nic.hardware_profile import PAPER_FABRIC
from testbed.workload.emulation_health import FAITHFUL_DATA_PACKET_HOPS_S
from testbed.workload.model import Fault, Scenario
from testbed.workload.workloads import build_workload

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / 'scenarios').glob('*.yaml'))
SHIPPED = ('link_failure_allreduce', 'core_switch_failure', 'plane_failure',
           'flapping_link', 'gray_failure_1pct', 'incast_7to1_victim',
           'permutation_ecmp_vs_mrc', 'nic_port_failure')

BASE = {
    'name': 'unit',
    'description': 'a scenario for the tests',
    'topology': 'fattree,k=4,planes=2',
    'link_rate_mbit': 10,
    'transports': ['mrc', 'rc'],
    'workload': {'type': 'ring_allreduce', 'hosts': ['h1', 'h5', 'h9', 'h13'],
                 'size_mb': 1, 'iterations': 2},
    'faults': [{'at': 3, 'type': 'link_down', 'link': ['p1a0x0', 'p1c0']},
               {'at': 9, 'type': 'link_up', 'link': ['p1a0x0', 'p1c0']}],
    'duration_s': 30,
}


def base(**changes) -> dict:
    data = copy.deepcopy(BASE)
    data.update(changes)
    return data


def refused(data, *, field: str, words: str, base_dir: Path = ROOT) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, base_dir, source='unit.yaml')
    err = info.value
    assert err.file == 'unit.yaml'
    assert err.field == field, str(err)
    assert re.search(words, err.problem), str(err)
    assert str(err).startswith('unit.yaml: ')


# -- shipped scenarios -----------------------------------------------------------

def test_every_listed_scenario_is_shipped():
    assert {p.stem for p in SCENARIOS} == set(SHIPPED)


@pytest.mark.parametrize('path', SCENARIOS, ids=lambda p: p.stem)
def test_shipped_scenario_and_its_quick_form_validate(path):
    scenario = load_scenario(path)
    quick = scenario.quick_version()
    assert scenario.name == path.stem
    assert scenario.source_text == path.read_text()
    assert path.read_text().startswith('#'), 'starts with what it shows'
    assert scenario.description.strip()
    assert quick.is_quick and not scenario.is_quick
    assert quick.duration_s <= 15, 'quick runs fit in ~20 s per transport'
    assert quick.name == scenario.name
    assert quick.transports == scenario.transports
    for form in (scenario, quick):
        workload = build_workload(form.workload, form.hosts, form.plan(),
                                  random.Random(form.seed))
        assert workload.flows
        assert all(f.at < form.duration_s for f in form.timeline())


def offered_data_packet_hops_s(scenario: Scenario) -> float:
    """What a scenario offers the emulator, as BENCHMARKS.md section 5
    counts it: every sending host at all its ports' line rate in full MRC
    frames, times the switches on the longest path of its flows (each
    switch forwards every packet once)."""
    plan = scenario.plan()
    workload = build_workload(scenario.workload, scenario.hosts, plan,
                              random.Random(1))
    hops: dict[str, int] = {}
    for f in workload.flows:
        longest = max(len(p.switches) for p in plan.all_paths(f.src, f.dst))
        hops[f.src] = max(hops.get(f.src, 0), longest)
    mtu = int(scenario.topo_spec.kwargs().get('mtu', MTU))
    per_port = scenario.link_rate_mbit * 1e6 / (data_frame_bytes(mtu) * 8)
    return sum(len(plan.planes) * per_port * n for n in hops.values())


def test_a_hardware_profile_sizes_the_links_to_its_mtu():
    sized = parse_scenario(base(hardware=PAPER_FABRIC.name), ROOT)
    assert sized.topo_spec.kwargs()['mtu'] == PAPER_FABRIC.mtu == 4096
    named = parse_scenario(base(hardware=PAPER_FABRIC.name,
                                topology='fattree,k=4,planes=2,mtu=1500'), ROOT)
    assert named.topo_spec.kwargs()['mtu'] == 1500      # the file's choice stands
    assert 'mtu' not in parse_scenario(base(), ROOT).topo_spec.kwargs()


def test_the_budget_is_the_one_benchmarks_measured():
    """The constant is BENCHMARKS.md's own figure (section 6, written by
    `mrc-testbed bench --sections emulator_scale` from its sweep)."""
    text = (ROOT / 'BENCHMARKS.md').read_text()
    said = re.search(r'switches per path under ~([\d,]+) data packet-hops/s',
                     text)
    assert said, 'BENCHMARKS.md no longer states its fidelity budget'
    assert int(said.group(1).replace(',', '')) == FAITHFUL_DATA_PACKET_HOPS_S


def test_offered_load_counts_what_the_bench_counts():
    # BENCHMARKS.md section 6's trusted 5 Mbit/s row: 8 cross-pod senders x
    # 2 planes x 5 Mbit/s, 5 switches per path: 33,113 data packet-hops/s.
    bench_row = parse_scenario(base(link_rate_mbit=5, workload={
        'type': 'permutation', 'hosts': ['h1', 'h2', 'h3', 'h4', 'h9', 'h10',
                                         'h11', 'h12'], 'size_mb': 1}), ROOT)
    assert round(offered_data_packet_hops_s(bench_row)) == 33_113


@pytest.mark.parametrize('path', SCENARIOS, ids=lambda p: p.stem)
def test_shipped_scenario_stays_within_the_emulators_budget(path):
    """Offered load within what the health gate trusted in BENCHMARKS.md
    section 6 (FAITHFUL_DATA_PACKET_HOPS_S), in its full and quick forms."""
    scenario = load_scenario(path)
    for form in (scenario, scenario.quick_version()):
        assert offered_data_packet_hops_s(form) <= FAITHFUL_DATA_PACKET_HOPS_S


def test_default_scenario_is_the_link_failure_allreduce():
    scenario = load_scenario(ROOT / 'scenarios/link_failure_allreduce.yaml')
    assert scenario.topology == 'fattree,afxdp=auto,k=4,mtu=3500,planes=2'
    assert scenario.transports == ('mrc', 'rc', 'ecmp')
    assert scenario.workload.type == 'ring_allreduce'
    pods = {scenario.plan().host_ports[(h, 1)].switch[3]
            for h in scenario.workload.hosts}
    assert len(pods) == 4, 'one host per pod'
    kinds = [f.kind for f in scenario.faults]
    assert kinds == ['link_down', 'link_up']
    assert scenario.faults[0].get('link') == ('p1a0x0', 'p1c0')


def test_result_is_frozen_and_typed():
    scenario = parse_scenario(base(), ROOT)
    assert isinstance(scenario, Scenario)
    with pytest.raises(AttributeError):
        scenario.name = 'other'     # type: ignore[misc]
    assert scenario.link_rate_mbit == 10.0
    assert scenario.transports == ('mrc', 'rc')
    assert scenario.workload.hosts == ('h1', 'h5', 'h9', 'h13')
    assert scenario.workload.size_bytes == 1_000_000
    assert scenario.faults[0] == Fault('link_down', 3.0,
                                       link=('p1a0x0', 'p1c0'))
    assert scenario.shaped_topology == 'fattree,k=4,planes=2,bw=10'
    hash(scenario)


def test_defaults():
    data = base()
    del data['faults'], data['description']
    scenario = parse_scenario(data, ROOT)
    assert (scenario.seed, scenario.repetitions, scenario.faults,
            scenario.description) == (1, 1, (), '')
    assert scenario.quick_version() is scenario


def test_congestion_control_defaults_per_transport():
    scenario = parse_scenario(base(transports=['mrc', 'rc', 'ecmp', 'tcp', 'mptcp']), ROOT)
    # The kernel's transports run CUBIC, as Linux ships it, whatever this
    # machine's default (testbed.kernel.congestion).
    assert [scenario.cc_of(t) for t in ('mrc', 'rc', 'ecmp', 'tcp', 'mptcp')] == [
        'uet-1.0-nscc', 'dcqcn', 'dcqcn', 'cubic', 'cubic']


def test_congestion_control_chosen_per_transport():
    scenario = parse_scenario(base(cc={'rc': 'none', 'mrc': 'dcqcn', 'tcp': 'bbr'}), ROOT)
    assert (scenario.cc_of('rc'), scenario.cc_of('mrc'), scenario.cc_of('ecmp'),
            scenario.cc_of('tcp'), scenario.cc_of('mptcp')) == (
        'none', 'dcqcn', 'dcqcn', 'bbr', 'cubic')


def test_qps_per_connection_is_nccls_one_unless_chosen():
    scenario = parse_scenario(base(qps_per_connection={'rc': 16}), ROOT)
    assert [scenario.qps_of(t) for t in ('mrc', 'rc', 'ecmp', 'tcp')] == [1, 16, 1, 1]


def test_refuses_qps_per_connection_where_a_flow_is_not_split():
    refused(base(qps_per_connection={'mrc': 2}), field='qps_per_connection.mrc',
            words='mrc keeps one QP per connection')
    refused(base(qps_per_connection={'tcp': 2}), field='qps_per_connection.tcp',
            words='tcp keeps one QP per connection')
    refused(base(qps_per_connection={'rc': 0}), field='qps_per_connection.rc',
            words='must be >= 1')
    refused(base(qps_per_connection={'ecmp': 129}), field='qps_per_connection.ecmp',
            words=r'at most 128')
    refused(base(qps_per_connection={'rc': 2.5}), field='qps_per_connection.rc',
            words='expected a whole number')


def test_refuses_unknown_congestion_control_with_the_registered_ones():
    refused(base(cc={'rc': 'cubic'}), field='cc.rc',
            words=r"unknown congestion control 'cubic' \(one of: dcqcn, dcqcn-nic, none, uet-1.0-nscc\)")
    refused(base(cc={'tcp': 'dcqcn'}), field='cc.tcp',
            words=r"unknown congestion control 'dcqcn' \(one of: bbr, cubic, reno\)")
    refused(base(cc={'udp': 'cubic'}), field='cc.udp',
            words=r'unknown key \(allowed: mrc, rc, ecmp, tcp, mptcp\)')
    refused(base(cc='dcqcn'), field='cc', words='expected a mapping of transport')
    refused(base(quick={'cc': {'rc': 'none'}}), field='quick.cc', words='cannot be overridden')


def test_topology_is_canonical():
    scenario = parse_scenario(base(topology='fattree, planes=2 ,k=4'), ROOT)
    assert scenario.topology == 'fattree,k=4,planes=2'


def test_quick_merges_into_the_workload_and_replaces_lists():
    data = base(quick={'duration_s': 12, 'workload': {'iterations': 1},
                       'faults': [{'at': 1, 'type': 'plane_down',
                                   'plane': 2}]})
    quick = parse_scenario(data, ROOT).quick_version()
    assert quick.duration_s == 12
    assert quick.workload.iterations == 1
    assert quick.workload.hosts == ('h1', 'h5', 'h9', 'h13')
    assert quick.faults == (Fault('plane_down', 1.0, plane=2),)


def test_quick_may_replace_the_workload_with_another_type():
    data = base(quick={'workload': {'type': 'point_to_point', 'src': 'h1',
                                    'dst': 'h2', 'size_mb': 0.1}})
    quick = parse_scenario(data, ROOT).quick_version()
    assert (quick.workload.type, quick.workload.hosts) == (
        'point_to_point', ())


def test_timeline_orders_faults_and_a_flap_ends_with_its_last_up():
    data = base(faults=[
        {'at': 2.5, 'type': 'switch_down', 'switch': 'p2c1'},
        {'at': 1, 'type': 'link_flap', 'link': ['p1e0x0', 'p1a0x0'],
         'period_s': 2, 'count': 3}])
    events = parse_scenario(data, ROOT).timeline()
    assert [(e.kind, e.at) for e in events] == [('link_flap', 1),
                                                ('switch_down', 2.5)]
    assert events[0].end == 6         # down at 1, 3, 5; up half a period later
    short = base(faults=[{'at': 1, 'type': 'link_flap', 'down_s': 0.5,
                          'link': ['p1e0x0', 'p1a0x0'], 'period_s': 2,
                          'count': 3}])
    assert parse_scenario(short, ROOT).faults[0].end == 5.5
    with pytest.raises(ScenarioError, match=r'faults\[0\]\.down_s: must be '
                       'shorter'):
        parse_scenario(base(faults=[dict(short['faults'][0], down_s=2)]), ROOT)


def test_every_fault_kind_has_an_example_in_the_docs():
    text = (ROOT / 'docs/scenarios.md').read_text()
    block = re.search(r'```yaml\nfaults:\n(.*?)```', text, re.S).group(0)
    faults = yaml.safe_load(block.strip('`').removeprefix('yaml'))['faults']
    assert {f['type'] for f in faults} == set(FAULT_KINDS)
    scenario = parse_scenario(base(faults=faults), ROOT)
    assert len(scenario.faults) == len(FAULT_KINDS)


def test_every_workload_type_has_an_example_in_the_docs():
    text = (ROOT / 'docs/scenarios.md').read_text()
    examples = [yaml.safe_load(m) for m in re.findall(
        r'```yaml\n(workload:.*?)```', text, re.S)]
    assert {e['workload']['type'] for e in examples} == set(WORKLOAD_TYPES)
    for example in examples:
        parse_scenario(base(workload=example['workload']), ROOT / 'scenarios')


def test_the_docs_list_the_fault_catalogue():
    # docs/scenarios.md carries the catalogue's own table, so the kinds and
    # parameters a reader sees are the ones the loader takes.
    assert markdown_table() in (ROOT / 'docs/scenarios.md').read_text()


def test_victim_size_defaults_to_the_incast_size():
    data = base(workload={'type': 'incast', 'fan_in': 3, 'receiver': 'h1',
                          'size_mb': 0.5, 'victim': {'src': 'h3',
                                                     'dst': 'h2'}})
    assert parse_scenario(data, ROOT).workload.victim.size_mb == 0.5


def test_connection_matrix_path_is_relative_to_the_scenario(tmp_path):
    (tmp_path / 'm.cm').write_text('Nodes 16\nConnections 1\n'
                                   '0->15 id 1 start 0 size 1000\n')
    scenario = parse_scenario(base(workload={
        'type': 'connection_matrix', 'file': 'm.cm'}), tmp_path)
    assert scenario.workload.file == str((tmp_path / 'm.cm').resolve())
    assert scenario.workload.matrix.connections[0].dst == 15


# -- refusals: one test per class --------------------------------------------------

def test_refuses_unknown_top_level_key():
    refused(base(bogus=1), field='bogus', words='unknown key.*allowed: name')


def test_refuses_unknown_workload_parameter():
    data = base(workload={'type': 'permutation', 'size_mb': 1, 'count': 3})
    refused(data, field='workload.count',
            words=r'unknown key \(allowed: type, size_mb, hosts\)')


def test_refuses_unknown_fault_parameter():
    data = base(faults=[{'at': 1, 'type': 'switch_down', 'switch': 'p1c0',
                         'plane': 1}])
    refused(data, field='faults[0].plane', words='unknown key')


def test_refuses_missing_required_key():
    data = base()
    del data['duration_s']
    refused(data, field='duration_s', words='missing')


@pytest.mark.parametrize('field,value,words', [
    ('link_rate_mbit', '10', 'expected a number, got a string'),
    ('link_rate_mbit', True, 'expected a number, got true/false'),
    ('duration_s', [30], 'expected a number, got a list'),
    ('seed', 1.5, 'expected a whole number'),
    ('transports', 'mrc', 'expected a list'),
    ('workload', 'ring_allreduce', 'expected a mapping'),
    ('faults', {'at': 1}, 'expected a list'),
    ('description', 3, 'expected a string'),
    ('repetitions', 0, 'must be >= 1'),
    ('link_rate_mbit', 0, 'must be > 0'),
    ('duration_s', -1, 'must be > 0'),
])
def test_refuses_wrong_types_and_ranges(field, value, words):
    refused(base(**{field: value}), field=field, words=words)


def test_refuses_wrong_type_inside_the_workload():
    data = base(workload={'type': 'ring_allreduce', 'size_mb': 1,
                          'iterations': '3'})
    refused(data, field='workload.iterations', words='expected a whole number')


@pytest.mark.parametrize('topology,words', [
    ('fattree,k=5,planes=2', 'k must be even'),
    ('torus,k=4', 'unknown topology'),
    ('fattree,k=4,planes=9', 'planes must be 1..8'),
    ('fattree,k=4,bw=10', 'remove bw=10.*link_rate_mbit'),
])
def test_refuses_impossible_topology(topology, words):
    refused(base(topology=topology), field='topology', words=words)


def test_refuses_fault_on_a_link_that_does_not_exist():
    data = base(faults=[{'at': 1, 'type': 'link_down',
                         'link': ['p1a0x0', 'p1c2']}])
    refused(data, field='faults[0].link',
            words='no link between p1a0x0 and p1c2 .*links to p1c0, p1c1')


def test_refuses_fault_on_a_node_that_does_not_exist():
    data = base(faults=[{'at': 1, 'type': 'gray_failure', 'loss_pct': 1,
                         'link': ['p1a0x0', 'p1cc0']}])
    refused(data, field='faults[0].link[1]',
            words="no node 'p1cc0'.*did you mean p1c0")


def test_refuses_malformed_link():
    data = base(faults=[{'at': 1, 'type': 'link_up', 'link': 'p1a0x0-p1c0'}])
    refused(data, field='faults[0].link', words='expected a list')
    data = base(faults=[{'at': 1, 'type': 'link_up', 'link': ['p1a0x0']}])
    refused(data, field='faults[0].link', words='two node names')


def test_refuses_unknown_switch_plane_and_fault_type():
    refused(base(faults=[{'at': 1, 'type': 'switch_down', 'switch': 'p3c0'}]),
            field='faults[0].switch', words="no switch 'p3c0'")
    refused(base(faults=[{'at': 1, 'type': 'plane_down', 'plane': 3}]),
            field='faults[0].plane', words=r'no plane 3 .*planes 1, 2')
    refused(base(faults=[{'at': 1, 'type': 'meteor'}]),
            field='faults[0].type', words="unknown fault type 'meteor'")


def test_refuses_out_of_range_fault_values():
    link = ['p1e0x0', 'p1a0x0']
    refused(base(faults=[{'at': 1, 'type': 'gray_failure', 'link': link,
                          'loss_pct': 0}]),
            field='faults[0].loss_pct', words='must be > 0')
    refused(base(faults=[{'at': 1, 'type': 'gray_failure', 'link': link,
                          'loss_pct': 101}]),
            field='faults[0].loss_pct', words='must be <= 100')
    refused(base(faults=[{'at': 1, 'type': 'link_rate', 'link': link,
                          'mbit': -1}]),
            field='faults[0].mbit', words='must be > 0')
    refused(base(faults=[{'at': -1, 'type': 'link_up', 'link': link}]),
            field='faults[0].at', words='must be >= 0')


@pytest.mark.parametrize('where,workload', [
    ('workload.src', {'type': 'point_to_point', 'src': 'h17', 'dst': 'h1',
                      'size_mb': 1}),
    ('workload.hosts[2]', {'type': 'all_to_all', 'size_mb': 1,
                           'hosts': ['h1', 'h2', 'x3']}),
    ('workload.receiver', {'type': 'incast', 'receiver': 'h0', 'fan_in': 2,
                           'size_mb': 1}),
    ('workload.victim.src', {'type': 'incast', 'receiver': 'h1', 'fan_in': 2,
                             'size_mb': 1, 'victim': {'src': 'h99',
                                                      'dst': 'h2'}}),
])
def test_refuses_unknown_host(where, workload):
    refused(base(workload=workload), field=where,
            words=r'unknown host .*h1\.\.h16')


def test_refuses_unknown_host_in_a_fault():
    refused(base(faults=[{'at': 1, 'type': 'nic_port_down', 'host': 'h20',
                          'plane': 1}]),
            field='faults[0].host', words='unknown host')


@pytest.mark.parametrize('at', [30, 31.5])
def test_refuses_fault_at_or_after_the_end(at):
    data = base(faults=[{'at': at, 'type': 'plane_down', 'plane': 1}])
    refused(data, field='faults[0].at', words=r'not before the end.*30')


def test_refuses_flap_that_outlasts_the_run():
    data = base(faults=[{'at': 20, 'type': 'link_flap', 'period_s': 4,
                         'count': 3, 'link': ['p1e0x0', 'p1a0x0']}])
    refused(data, field='faults[0]', words='ends at 30 s')


@pytest.mark.parametrize('name', ['../escape', 'a/b', '..', '.', 'Caps',
                                  'with space', '', 'x' * 65])
def test_refuses_name_escaping_the_results_directory(name):
    refused(base(name=name), field='name', words='may use only')


def test_refuses_empty_duplicate_and_unknown_transports():
    refused(base(transports=[]), field='transports', words='empty')
    refused(base(transports=['mrc', 'mrc']), field='transports[1]',
            words='listed twice')
    refused(base(transports=['mrc', 'roce']), field='transports[1]',
            words="unknown transport 'roce'")


def test_refuses_unknown_workload_type():
    refused(base(workload={'type': 'gossip', 'size_mb': 1}),
            field='workload.type', words="unknown workload type 'gossip'")


def test_refuses_incast_victim_not_sharing_the_last_hop():
    data = base(workload={'type': 'incast', 'fan_in': 2, 'receiver': 'h1',
                          'size_mb': 1, 'victim': {'src': 'h5',
                                                   'dst': 'h4'}})
    refused(data, field='workload.victim.dst',
            words="not off the receiver h1's last-hop switch.*h2")


def test_refuses_incast_without_or_with_both_sender_forms():
    data = base(workload={'type': 'incast', 'receiver': 'h1', 'size_mb': 1})
    refused(data, field='workload', words='either senders .* or fan_in')
    data['workload'].update(fan_in=2, senders=['h5'])
    refused(data, field='workload', words='not both')


def test_refuses_incast_fan_in_beyond_the_hosts():
    data = base(workload={'type': 'incast', 'fan_in': 16, 'receiver': 'h1',
                          'size_mb': 1})
    refused(data, field='workload.fan_in', words='only 15 hosts')


def test_refuses_point_to_point_to_itself():
    data = base(workload={'type': 'point_to_point', 'src': 'h1', 'dst': 'h1',
                          'size_mb': 1})
    refused(data, field='workload.dst', words='same host')


def test_refuses_quick_overriding_name_or_transports():
    refused(base(quick={'name': 'other'}), field='quick.name',
            words='cannot be overridden in quick')
    refused(base(quick={'transports': ['mrc']}), field='quick.transports',
            words='cannot be overridden')


def test_refuses_a_quick_form_that_does_not_validate():
    refused(base(quick={'duration_s': 5}), field='faults[1].at (quick form)',
            words='not before the end of the run')
    refused(base(quick={'workload': {'iterations': 0}}),
            field='workload.iterations (quick form)', words='must be >= 1')


def test_refuses_missing_or_bad_connection_matrix(tmp_path):
    data = base(workload={'type': 'connection_matrix', 'file': 'none.cm'})
    refused(data, field='workload.file', words='cannot read',
            base_dir=tmp_path)
    (tmp_path / 'big.cm').write_text('Nodes 32\nConnections 1\n'
                                     '0->31 id 1 start 0 size 10\n')
    data['workload']['file'] = 'big.cm'
    refused(data, field='workload.file', words=r'node 31 is h32, not a host',
            base_dir=tmp_path)
    (tmp_path / 'fail.cm').write_text(
        'Nodes 16\nConnections 1\nFailures 1\n0->1 id 1 start 0 size 10\n'
        'failure switch_type CORE switch_id 0\n')
    data['workload']['file'] = 'fail.cm'
    refused(data, field='workload.file', words='failure.*scenario faults',
            base_dir=tmp_path)


# -- refusals of whole files ---------------------------------------------------------

def test_refuses_yaml_that_is_not_a_mapping(tmp_path):
    for text in ('- a\n- b\n', 'just a string\n', ''):
        path = tmp_path / 'x.yaml'
        path.write_text(text)
        with pytest.raises(ScenarioError, match='expected a scenario') as info:
            load_scenario(path)
        assert info.value.file == str(path)


def test_refuses_unsafe_yaml(tmp_path):
    path = tmp_path / 'evil.yaml'
    path.write_text(yaml.safe_dump(base()) +
                    'seed: !!python/object/apply:os.system ["true"]\n')
    with pytest.raises(ScenarioError, match='not safe YAML') as info:
        load_scenario(path)
    assert info.value.file == str(path)


def test_refuses_invalid_yaml_and_missing_files(tmp_path):
    path = tmp_path / 'broken.yaml'
    path.write_text('name: [unclosed\n')
    with pytest.raises(ScenarioError, match='not valid YAML'):
        load_scenario(path)
    with pytest.raises(ScenarioError, match='cannot read'):
        load_scenario(tmp_path / 'absent.yaml')


def test_errors_from_files_name_the_file_and_field(tmp_path):
    path = tmp_path / 'typo.yaml'
    path.write_text(yaml.safe_dump(base(link_rate_mbt=10)))
    with pytest.raises(ScenarioError) as info:
        load_scenario(path)
    assert str(info.value).startswith('%s: link_rate_mbt: unknown key' % path)
    assert isinstance(info.value, ValueError)


# -- capture -----------------------------------------------------------------

def test_capture_is_typed_and_defaults_its_snap_length():
    sc = parse_scenario(base(capture={'links': [['p1e0x0', 'p1a0x0']], 'hosts': ['h1']}),
                        ROOT, source='unit.yaml')
    assert sc.capture is not None
    assert sc.capture.links == (('p1e0x0', 'p1a0x0'),) and sc.capture.hosts == ('h1',)
    assert sc.capture.snaplen == 256
    assert parse_scenario(base(), ROOT, source='unit.yaml').capture is None


@pytest.mark.parametrize('capture, field, words', [
    ({}, 'capture', 'names nothing to capture'),
    ({'hosts': ['h99']}, 'capture.hosts[0]', 'unknown host'),
    ({'links': [['p1e0x0', 'p1c0']]}, 'capture.links[0]', 'no link between'),
    ({'links': [['p1e0x0', 'p1a0x0'], ['p1e0x0', 'p1a0x0']]}, 'capture.links[1]',
     'listed twice'),
    ({'hosts': ['h1'], 'snaplen': 100}, 'capture.snaplen', 'must be >= 114'),
    ({'hosts': ['h1'], 'ports': [1]}, 'capture.ports', 'unknown key'),
    (['h1'], 'capture', 'expected a mapping'),
])
def test_refuses_bad_capture(capture, field, words):
    refused(base(capture=capture), field=field, words=words)
