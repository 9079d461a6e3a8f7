"""SIGINT, SIGTERM and SIGHUP mid-run: the run tears down what it built by
itself, without `mrc-testbed clean`; `clean` refuses a live fabric, and
`clean --force` removes it."""
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from testbed.fabric import ovs
from testbed.fabric.clean import leftovers
from tests.integration.children import default_sigint
from tests.integration.leaks import leaked
from tests.integration.scenario_files import DEFAULT, tiny_default
from tests.integration.time_limits import BASE_S, build_allowance, run_allowance

REPO = Path(__file__).resolve().parents[2]


def wait_for_fabric(timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if leftovers()['bridges'] and leftovers()['processes']:
            return
        time.sleep(0.1)
    raise AssertionError('the fabric never came up')


def wait_for_workload(proc: subprocess.Popen, timeout_s: float = 120) -> list:
    """Read the run's progress until a transport reports flows under way
    (its first report comes a second into the workload, faults pending);
    the rest of stderr goes on being collected in the background."""
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            lines.append(line)
            if 'flows done' in line:
                started.set()
    threading.Thread(target=read, daemon=True).start()
    if not started.wait(timeout_s):
        raise AssertionError('the workload never started:\n' + ''.join(lines))
    return lines


# A child's run of the default scenario stopped in its first transport: that
# fabric's build (fattree,k=4,planes=2: 160 switch ports) and a few seconds of
# workload; the tiny one's 10 ports build in seconds.
DEFAULT_FIRST_TRANSPORT_S = build_allowance(160, afxdp=True) + run_allowance(15)
TINY_RUN_S = 3 * (build_allowance(10, afxdp=True) + run_allowance(15))


@pytest.mark.parametrize('sig,code,times,scenario', [
    (signal.SIGINT, 130, 1, 'tiny'),
    (signal.SIGTERM, 143, 1, 'tiny'),
    # the README's command, its user impatient: the default scenario
    pytest.param(signal.SIGINT, 130, 3, 'default', marks=[pytest.mark.slow, pytest.mark.time_limit(
        BASE_S + DEFAULT_FIRST_TRANSPORT_S, why="the default scenario's first transport")]),
    # the terminal closed under it
    (signal.SIGHUP, 129, 1, 'tiny')])
@pytest.mark.time_limit(BASE_S + TINY_RUN_S, why='the tiny scenario, three transports')
def test_signal_mid_scenario_leaves_nothing(sig, code, times, scenario, tmp_path):
    """The signal lands in the first transport's workload; the tiny scenario
    (tests/integration/scenario_files.py) is the default one on a fabric
    that builds in seconds, so only the README's Ctrl-C x3 pays for the
    default fabric."""
    path = DEFAULT if scenario == 'default' else tiny_default(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, '-m', 'testbed.cli', 'run', str(path), '--quick',
         '--out', str(tmp_path / 'out')], cwd=REPO, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
        preexec_fn=default_sigint)
    try:
        lines = wait_for_workload(proc)
        assert leftovers()['bridges'] and leftovers()['processes']
        for _ in range(times):     # again and again: while it tears down
            proc.send_signal(sig)
            time.sleep(0.2)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(0.1)                # the reader takes the last lines
    err = ''.join(lines)
    assert proc.returncode == code, err[-2000:]
    # It was stopped in the middle: the run never got to its summary.
    assert not list((tmp_path / 'out').rglob('summary.json')), err[-2000:]
    assert leaked() == {}


@pytest.mark.time_limit(BASE_S + TINY_RUN_S, why='the tiny scenario, three transports')
def test_sigkill_mid_scenario_then_clean_restores_a_spotless_machine(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, '-m', 'testbed.cli', 'run', str(tiny_default(tmp_path)),
         '--quick', '--out', str(tmp_path / 'out')], cwd=REPO, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, preexec_fn=default_sigint)
    try:
        wait_for_fabric()
        time.sleep(1.5)
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert any(leftovers().values())         # SIGKILL left debris behind
    clean = subprocess.run([sys.executable, '-m', 'testbed.cli', 'clean'],
                           capture_output=True, text=True, cwd=REPO)
    assert clean.returncode == 0, clean.stderr
    assert leaked() == {}


STOPPED_BRIDGE = 'p99c99'          # a core switch no test fabric has


def test_clean_removes_our_bridges_when_ovs_vswitchd_was_left_stopped():
    # What a teardown killed during its offline bridge deletion leaves: our bridge in
    # OVSDB, and the tap a userspace bridge makes in the kernel, named as the bridge (a
    # switch's name, so that `clean` knows the tap as ours and leaked() would see it).
    subprocess.run(['ovs-vsctl', 'add-br', STOPPED_BRIDGE, '--', 'set', 'Bridge',
                    STOPPED_BRIDGE, 'external_ids:%s=1' % ovs.OWNER_KEY,
                    'datapath_type=netdev'], check=True, timeout=30)
    try:
        subprocess.run(['ovs-appctl', '-t', 'ovs-vswitchd', 'exit'],
                       check=True, timeout=60)
        assert not ovs.running()
        left = leftovers()
        assert STOPPED_BRIDGE in left['bridges'] and STOPPED_BRIDGE in left['links']
        clean = subprocess.run([sys.executable, '-m', 'testbed.cli', 'clean'],
                               capture_output=True, text=True, cwd=REPO,
                               timeout=120)
        assert clean.returncode == 0, clean.stderr
        assert ovs.running()
        assert leaked() == {}
    finally:
        ovs.ensure_running()
        subprocess.run(['ovs-vsctl', '--timeout=10', '--if-exists', 'del-br',
                        STOPPED_BRIDGE], timeout=30)


@pytest.mark.time_limit(BASE_S + TINY_RUN_S, why='the tiny scenario, one transport')
def test_clean_refuses_a_live_fabric_and_force_removes_it(tmp_path):
    """The tiny default scenario (tests/integration/scenario_files.py) with its
    quick workload four times as long (~2.5 s; still within its duration_s):
    two `mrc-testbed clean` processes must start and act while it runs, each
    a second or so of Python start-up on a busy machine, which the original's
    ~1.5 s left after the first progress line did not always cover."""
    proc = subprocess.Popen(
        [sys.executable, '-m', 'testbed.cli', 'run',
         str(tiny_default(tmp_path, iterations_times=4)), '--quick',
         '--transport', 'mrc', '--out', str(tmp_path / 'out')], cwd=REPO,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        preexec_fn=default_sigint)
    try:
        lines = wait_for_workload(proc)
        # The run holds the run lock from its build to its teardown: while
        # it runs, what is on the machine is its fabric, and nobody else's.
        before = leftovers()
        refused = subprocess.run([sys.executable, '-m', 'testbed.cli',
                                  'clean'], capture_output=True, text=True,
                                 cwd=REPO, timeout=60)
        assert refused.returncode == 2, refused.stderr
        assert 'clean --force' in refused.stderr
        assert str(proc.pid) in refused.stderr       # names the holder
        assert proc.poll() is None, 'the run goes on'
        after = leftovers()
        assert after['bridges'] == before['bridges']
        assert after['netns'] == before['netns']
        forced = subprocess.run([sys.executable, '-m', 'testbed.cli',
                                 'clean', '--force'], capture_output=True,
                                text=True, cwd=REPO, timeout=120)
        assert forced.returncode == 0, forced.stderr
        removed = forced.stdout
        assert 'removed:' in removed
        assert '%d bridges' % len(before['bridges']) in removed, removed
        # Its fabric gone from under it, the run ends without a result.
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    time.sleep(0.1)
    err = ''.join(lines)
    assert proc.returncode != 0, err[-2000:]
    assert leaked() == {}, err[-2000:]
