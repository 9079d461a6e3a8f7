"""Results files from synthetic runs: numbers, CSV, events, report, plots."""
import csv
import json

from testbed.nic.deployed_ack_timer import DEPLOYED_RC
from testbed.workload import plots
from testbed.workload.report import markdown, table
from testbed.workload.results import (aggregate, new_results_dir, run_metrics,
                                      write_events, write_timeline)
from testbed.workload.runner import FlowRecord, TransportRun
from testbed.workload.scenario import parse_scenario

HEALTHY = {'trusted': True, 'reasons': [], 'saturated': False}


CC = {'mrc': 'uet-1.0-nscc', 'rc': 'dcqcn', 'tcp': 'cubic'}


def synthetic(transport, dies=False):
    run = TransportRun(transport, 0, cc=CC[transport], fabric_mode='srv6')
    run.flows = [FlowRecord(1, 0, 'h1', 'h5', 1000, started=0.0, finished=1.0,
                            status='done', delivered=1000),
                 FlowRecord(2, 1, 'h5', 'h1', 1000, started=1.0,
                            finished=None if dies else 2.0,
                            status='failed' if dies else 'done',
                            error='retry counter exceeded' if dies else None,
                            delivered=300 if dies else 1000)]
    run.steps = (range(0, 2),)
    run.goodput_bins = [10.0] * 100 + [0.0] * 20 + [10.0] * 80
    run.plane_bins = {1: [5.0] * 200, 2: [5.0] * 200}
    run.path_bytes = {'fcbb:bb01:1000:8001::': 100, 'fcbb:bb02:1000:8001::': 100}
    run.fault_times = [(1.0, 'link_down'), (1.5, 'link_up')]
    run.events = [{'t': 1.0, 'fault': 'link_down'}]
    run.elapsed_s = 2.0
    run.health = HEALTHY
    if dies:
        run.aborted, run.aborted_at = 'phase 1: a flow failed', 1.2
    return run


def test_metrics_of_a_healthy_and_a_dying_run():
    paths = {'fcbb:bb01:1000:8001::', 'fcbb:bb02:1000:8001::'}
    ok = run_metrics(synthetic('mrc'), paths, (1, 2))
    assert ok['completed'] and ok['flows_done'] == 2
    assert ok['step_p50_s'] == 2.0 and ok['jain_planes'] == 1.0
    assert ok['recovery'][0]['recovery_s'] is not None
    # Looked for until the last phase's first flow finished (2.0 s), a second after.
    assert ok['recovery'][0]['observed_s'] == 1.0
    dead = run_metrics(synthetic('rc', dies=True), paths, (1, 2))
    assert not dead['completed'] and dead['qp_errors'] == ['retry counter exceeded']
    assert dead['recovery'][0]['recovery_s'] is None     # the job died
    assert dead['step_p50_s'] is None
    # Every row says its congestion control, the kernel's transports' too.
    assert (ok['congestion_control'], dead['congestion_control']) == ('uet-1.0-nscc', 'dcqcn')
    assert run_metrics(synthetic('tcp'), paths, (1, 2))['congestion_control'] == 'cubic'


def test_a_load_that_ends_before_goodput_returns_says_how_long_it_was_watched():
    run = synthetic('mrc')
    run.flows[1].finished = 1.1                  # the load's tail 0.1 s after the fault
    run.goodput_bins = [10.0] * 100 + [0.0] * 100
    metrics = run_metrics(run, set(), (1, 2))
    recovery, = metrics['recovery']
    assert recovery['recovery_s'] is None and recovery['observed_s'] == 0.1
    # The table says it was not back within that, not that it never came back.
    assert ' >0.10 ' in table({'mrc': {**metrics, 'trusted': True}})


def test_files_table_report_and_plots(tmp_path):
    runs = [synthetic('mrc'), synthetic('rc', dies=True)]
    out = new_results_dir(tmp_path, 'demo')
    assert new_results_dir(tmp_path, 'demo') != out      # never reused
    write_timeline(out / 'timeline.csv', runs)
    rows = list(csv.DictReader((out / 'timeline.csv').open()))
    assert len(rows) == 400 and rows[0]['plane1_mbps'] and rows[0]['plane2_mbps']
    write_events(out / 'events.jsonl', runs)
    events = [json.loads(x) for x in (out / 'events.jsonl').read_text().splitlines()]
    assert {e['transport'] for e in events} == {'mrc', 'rc'}
    summary = {r.transport: aggregate([run_metrics(r, set(r.path_bytes), (1, 2))])
               for r in runs}
    text = table(summary)
    assert 'completed' in text and 'QP error: retry counter exceeded' in text
    plots.goodput_plot(out / 'goodput.png', runs, 'demo')
    plots.plane_plot(out / 'planes.png', runs)
    plots.path_plot(out / 'paths.png', runs, sorted(runs[0].path_bytes))
    plots.cdf_plot(out / 'cdf.png', runs, {'mrc': [2.0], 'rc': []})
    plots.comparison_plot(out / 'comparison.png', summary)
    for name in ('goodput', 'planes', 'paths', 'cdf', 'comparison'):
        png = (out / (name + '.png')).read_bytes()
        assert png[:8] == b'\x89PNG\r\n\x1a\n' and len(png) > 5000
    scenario = parse_scenario({
        'name': 'demo', 'description': 'synthetic',
        'topology': 'fattree,k=4,planes=2', 'link_rate_mbit': 10,
        'transports': ['mrc', 'rc'], 'duration_s': 2,
        'workload': {'type': 'point_to_point', 'src': 'h1', 'dst': 'h5',
                     'size_mb': 1}}, tmp_path)
    report = markdown(scenario, summary, ['goodput.png'],
                      {'started_utc': 'now', 'machine': 'here'})
    assert '| mrc | srv6 | uet-1.0-nscc |' in report and '| rc | srv6 | dcqcn |' in report
    assert '![goodput.png](goodput.png)' in report


def test_a_routed_row_says_its_fabric_delay_and_when_routes_moved():
    run = synthetic('rc')
    run.fabric_mode, run.convergence_delay_s = 'routed', 0.5
    run.path_bytes = {'fd00:0:0:1::5': 200}       # routed: the peer's address
    run.events += [
        {'t': 1.01, 'source': 'controller', 'event': 'port_status'},
        {'t': 1.52, 'source': 'controller', 'event': 'group_change'},
        {'t': 1.53, 'source': 'controller', 'event': 'group_change'}]
    m = run_metrics(run, {'fcbb:bb01:1000:8001::'}, (1, 2))
    assert (m['fabric'], m['convergence_delay_s']) == ('routed', 0.5)
    assert m['routes_moved'] == [{'fault': 'link_down', 'at_s': 1.0,
                                  'groups_changed_at_s': 1.52, 'after_s': 0.52}]
    assert m['jain_paths'] is None               # no carriers to judge
    mrc = run_metrics(synthetic('mrc'), {'fcbb:bb01:1000:8001::'}, (1, 2))
    text = table({'rc': aggregate([m]), 'mrc': aggregate([dict(mrc, fabric='srv6')])})
    assert 'routed (converges 0.50 s)' in text and '+0.52' in text


def test_the_report_says_which_switch_ports_ran_and_where():
    from testbed.workload.report import emulator_section
    placed = {'pmd_cores': [0], 'endpoint_cores': [1], 'endpoint_nice': -10}
    lines = emulator_section({
        'mrc': {'health': {'switch_ports': {'type': 'afxdp', 'why': 'afxdp=auto: AF_XDP '
                                            'ports fit here'}, 'cpu_placement': placed}},
        'tcp': {'health': {'switch_ports': {'type': 'system', 'why': 'afxdp=0'},
                           'cpu_placement': None}}})
    assert lines == [
        '## Emulator', '',
        '- mrc: afxdp switch ports (afxdp=auto: AF_XDP ports fit here); PMD thread on '
        'core 0, endpoint loop on core 1 at nice -10',
        '- tcp: system switch ports (afxdp=0)', '']
    # runs recorded before the fields existed say nothing
    assert emulator_section({'mrc': {'health': {}}}) == []
    waits = {'long_cpu_wait_s': 0.000276, 'long_cpu_wait': {'endpoint': 0.011, 'vswitchd': 0.015},
             'longest_cpu_wait_s': {'endpoint': 0.004096, 'vswitchd': 0.008192}}
    assert emulator_section({'mrc': {'health': {
        'switch_ports': {'type': 'afxdp', 'why': 'afxdp=1'}, 'cpu_placement': None,
        **waits}}})[2] == (
        '- mrc: afxdp switch ports (afxdp=1); waits for a CPU of 0.28 ms or more (the '
        "gate's): endpoint loop 1.1 %, ovs-vswitchd 1.5 % of the run (the longest under 4 "
        'and 8 ms)')


def test_a_compressed_ack_timer_says_what_its_stalls_stood_for():
    """RC's deployed ACK timer (testbed/nic/deployed_ack_timer.py): its row
    says the hardware wait its emulated times leave out, and its QPs."""
    run = synthetic('rc')
    run.qps_per_connection = 16
    run.deployed_ack_timer = DEPLOYED_RC.describe(12.0)
    run.transport_counters = {'ack_timer_stalls': 3, 'ack_timer_stalled_qps': 2,
                              'ack_timer_hardware_timeouts': 2, 'ack_timer_stalled_at_end': 0}
    metrics = run_metrics(run, set(), (1, 2))
    assert metrics['qps_per_connection'] == 16
    text = table({'rc': {**metrics, 'trusted': True}})
    assert 'completed; 3 ACK-timer stall(s) = 2 x 4.29 s in hardware ' \
        '(NCCL_IB_TIMEOUT 20), not in its times' in text
    assert ' 16 ' in text
    assert run_metrics(synthetic('tcp'), set(), (1, 2))['qps_per_connection'] is None
