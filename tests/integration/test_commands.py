"""The `mrc-testbed` command and stock Mininet, as a user runs them."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.fabric.clean import leftovers
from tests.integration.leaks import leaked
from tests.integration.scenario_files import tiny_default
from tests.integration.time_limits import BASE_S, build_allowance, run_allowance

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, '-m', 'testbed.cli']


def run(*args, timeout=300):
    return subprocess.run(CLI + list(args), capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def spotless():
    return leaked() == {}


def test_verify_json_and_exit_status():
    ok = run('verify', '--topo', 'leafspine,leaves=2,spines=2,hosts=2,planes=2',
             '--json')
    assert ok.returncode == 0, ok.stderr
    report = json.loads(ok.stdout)
    assert report['ok'] and report['paths_ok'] == report['paths_total'] == 40
    assert set(report['timings']) >= {'build_s', 'flows_s', 'plumbing_s',
                                      'probe_s', 'teardown_s'}
    failed = run('verify', '--topo', 'leafspine,leaves=2,spines=2,hosts=2,'
                 'planes=2', '--down', 'p1l0-p1s0', '--json')
    assert failed.returncode == 1
    report = json.loads(failed.stdout)
    # h1,h2 on leaf 0 <-> h3,h4 on leaf 1 through spine 0 of plane 1.
    assert report['paths_total'] - report['paths_ok'] == 8
    assert spotless()


def test_bad_input_is_refused_before_anything_is_built():
    for args in (['verify', '--topo', 'fattree,k=3'],
                 ['verify', '--topo', 'mesh'],
                 ['verify', '--down', 'p1a0x0']):
        result = run(*args)
        assert result.returncode == 2
        assert result.stderr.startswith('mrc-testbed: error: ')
    missing = run('verify', '--topo', 'leafspine,leaves=1,spines=1,hosts=1',
                  '--down', 'h1-p1s0')
    assert missing.returncode == 2 and 'no link between' in missing.stderr
    assert spotless()


def test_verbosity_is_mininets_log_level():
    small = ['verify', '--topo', 'leafspine,leaves=2,spines=1,hosts=1']
    default, quiet, verbose = run(*small), run('-q', *small), run('-v', *small)
    assert default.returncode == quiet.returncode == verbose.returncode == 0
    # Mininet says what it builds at info; by default only our progress line.
    assert default.stderr.startswith('building ') and '***' not in default.stderr
    assert quiet.stderr == ''
    assert '*** Creating network' in verbose.stderr
    for result in (default, quiet, verbose):    # the report itself is the same
        assert result.stdout.rstrip().endswith('result         PASS')
    assert spotless()


def test_clean_after_sigkill_leaves_a_spotless_machine():
    proc = subprocess.Popen(CLI + ['verify', '--topo', 'fattree,k=4,planes=2'],
                            cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not leftovers()['bridges']:
        time.sleep(0.1)
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not spotless()             # the kill really left debris
    result = run('clean')
    assert result.returncode == 0, result.stderr
    assert spotless()
    again = run('verify', '--topo', 'leafspine,leaves=2,spines=1,hosts=1')
    assert again.returncode == 0     # and the next run works


STOCK_SWITCHES = ['p1l0', 'p1l1', 'p1s0', 'p1s1', 'p2l0', 'p2l1', 'p2s0', 'p2s1']


def bridges_named(names: list[str]) -> list[str]:
    out = subprocess.run(['ovs-vsctl', '--timeout=10', 'list-br'],
                         capture_output=True, text=True, check=True).stdout
    return [name for name in out.split() if name in names]


def test_stock_mininet_builds_our_topology():
    # Never `mn -c` here: it deletes every OVS bridge on the host, the
    # user's own included, and every /tmp/*.log. Stock mn tears down what it
    # built when the test ends; this checks that, and removes by name only
    # the bridges of this very topology if it did not.
    try:
        result = subprocess.run(
            ['mn', '--custom', str(REPO / 'testbed/topologies/leafspine.py'),
             '--topo', 'leafspine,leaves=2,spines=2,hosts=1,planes=2',
             '--switch', 'ovs,datapath=user', '--controller', 'none',
             '--test', 'none'], capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        assert '*** Adding switches:\n' + ' '.join(STOCK_SWITCHES) \
            in result.stderr
        assert bridges_named(STOCK_SWITCHES) == []
    finally:
        for name in bridges_named(STOCK_SWITCHES):
            subprocess.run(['ovs-vsctl', '--timeout=10', 'del-br', name],
                           capture_output=True)
    assert spotless()


def test_controller_listens_on_loopback_only(fabric_factory):
    fab = fabric_factory('leafspine,leaves=2,spines=1,hosts=1,planes=1')
    out = subprocess.run(['ss', '-Hltnp'], capture_output=True, text=True).stdout
    mine = [line for line in out.splitlines()
            if 'pid=%d,' % fab.controller.pid in line]
    assert mine, out
    for line in mine:
        local = line.split()[3]
        assert local.startswith('127.0.0.1:'), line



# One transport of the default scenario in a child `mrc-testbed run`: its
# fabric (160 AF_XDP ports at most) and its quick duration.
DEFAULT_ONE_TRANSPORT_S = build_allowance(160, afxdp=True) + run_allowance(15)


@pytest.mark.time_limit(BASE_S + 2 * (build_allowance(10, afxdp=True) + run_allowance(15)),
                        why='the tiny scenario, one transport, on a machine at half speed')
def test_run_exits_1_on_a_result_it_does_not_trust(tmp_path):
    # A busy loop pinned to each core takes half of it from everything else
    # (CFS shares a CPU evenly between runnable tasks of one weight), so the
    # endpoint loop and ovs-vswitchd wait for a CPU for far more than the
    # gate's WAIT_LIMIT (10 % of the run) and the machine is busier than
    # BUSY_LIMIT: the gate cannot pass the run, and `run` must say so and
    # exit 1 rather than report a number. That holds for any fabric: the
    # default scenario's mechanisms on one that builds in seconds
    # (tests/integration/scenario_files.py).
    hogs = [subprocess.Popen([sys.executable, '-c', 'import os; os.sched_'
                              'setaffinity(0, {%d})\nwhile True: pass' % cpu])
            for cpu in sorted(os.sched_getaffinity(0))]
    try:
        done = run('run', str(tiny_default(tmp_path)), '--quick',
                   '--transport', 'mrc', '--out', str(tmp_path / 'out'), timeout=600)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    assert 'NOT TRUSTED' in done.stdout
    summary = json.loads(next((tmp_path / 'out').rglob('summary.json')).read_text())
    assert not summary['transports']['mrc']['trusted']
    assert spotless()


# As in the scenario tests: beside a busy core the run sits near the gate's
# limits on this machine kind (once the endpoint loop's waits for a CPU read
# 10 % of the run, the limit itself), so an untrusted run is run again; an
# untrusted result never counts, and this many in a row fail. Three were not
# enough in fresh-clone CI on Dec 7 (busy in a session of its own: unread
# backlog 10.3-12.6 ms a round trip, limit 10, three times in a row, where
# the same test read 6.5-8.6 ms here an hour later).
UNTRUSTED_TRIES = 5


def default_run_beside_a_hog(out: Path, own_session: bool):
    """`run` of the default scenario's MRC, quick, while a busy loop keeps a
    core: the finished process and its summary."""
    hog = subprocess.Popen([sys.executable, '-c', 'while True: pass'],
                           start_new_session=own_session)
    try:
        done = run('run', 'scenarios/link_failure_allreduce.yaml', '--quick',
                   '--transport', 'mrc', '--out', str(out), timeout=600)
    finally:
        hog.kill()
        hog.wait()
    return done, json.loads(next(out.rglob('summary.json')).read_text())


@pytest.mark.parametrize('own_session', [False, True], ids=['busy in our session',
                                                    'busy in a session of its own'])
@pytest.mark.slow
@pytest.mark.time_limit(BASE_S + UNTRUSTED_TRIES * 2 * DEFAULT_ONE_TRANSPORT_S,
                        why='one transport of the default scenario, a core taken, '
                        'up to UNTRUSTED_TRIES times')
def test_default_run_is_trusted_beside_a_busy_core(tmp_path, own_session):
    """The README's main command on a machine where something else keeps a core busy:
    the default scenario builds AF_XDP ports (afxdp=auto), its PMD thread and endpoint
    loop on their own cores above ordinary work (testbed.fabric.cpu_placement), and
    the health gate trusts the run with the endpoint loop under 60 % of a core. With
    system ports it cannot be (ovs-vswitchd's main thread alone took ~0.9 of a core:
    docs/switch-port.md), so a machine without room for AF_XDP ports skips. The gate
    watched each wait for a CPU (the set-up script built its eBPF program): the PMD
    thread's thousands of microsecond wake-ups a second are not what it limits
    (docs/endpoint-core.md, "The health gate"). The busy process runs in this session
    (so the run's autogroup: nice decides) or in one of its own (another autogroup: the
    fabric raises its own and ovs-vswitchd's, cpu_placement)."""
    from testbed.fabric.features import DEFAULT_FABRIC_PORTS, afxdp_misfit
    why_not = afxdp_misfit(DEFAULT_FABRIC_PORTS)
    if why_not or len(os.sched_getaffinity(0)) < 2:
        pytest.skip(why_not or 'one core')
    for attempt in range(1, UNTRUSTED_TRIES + 1):
        done, summary = default_run_beside_a_hog(tmp_path / str(attempt), own_session)
        if summary['transports']['mrc']['trusted']:
            break
    assert summary['fabrics']['per_transport'], summary['fabrics']   # `run`: a fresh one
    mrc = summary['transports']['mrc']
    health = mrc['health']
    assert health['switch_ports']['type'] == 'afxdp', health['switch_ports']
    assert health['long_cpu_wait_s'] is not None, 'each wait was not watched'
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert mrc['trusted'] and mrc['completed'], health['reasons']
    assert health['endpoint_process_cpu'] <= 0.6
    assert spotless()
