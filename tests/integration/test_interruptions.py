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
import yaml

from testbed.fabric import ovs
from testbed.fabric.clean import leftovers
from tests.integration.children import default_sigint
from tests.integration.leaks import leaked

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


@pytest.mark.parametrize('sig,code,times', [(signal.SIGINT, 130, 1),
                                            (signal.SIGTERM, 143, 1),
                                            (signal.SIGINT, 130, 3),
                                            # the terminal closed under it
                                            (signal.SIGHUP, 129, 1)])
def test_signal_mid_scenario_leaves_nothing(sig, code, times, tmp_path):
    proc = subprocess.Popen(
        [sys.executable, '-m', 'testbed.cli', 'run',
         'scenarios/link_failure_allreduce.yaml', '--quick',
         '--out', str(tmp_path)], cwd=REPO, stdout=subprocess.DEVNULL,
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
    assert not list(tmp_path.rglob('summary.json')), err[-2000:]
    assert leaked() == {}


def test_sigkill_mid_scenario_then_clean_restores_a_spotless_machine(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, '-m', 'testbed.cli', 'run',
         'scenarios/link_failure_allreduce.yaml', '--quick',
         '--out', str(tmp_path)], cwd=REPO, stdout=subprocess.DEVNULL,
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


def long_quick_scenario(tmp_path: Path) -> Path:
    """The default scenario whose --quick workload lasts 4x its own (~2.5 s;
    still within its duration_s): two `mrc-testbed clean` processes must
    start and act while it runs, each a second or so of Python start-up on a
    busy machine, which the original's ~1.5 s left after the first progress
    line did not always cover."""
    scenario = yaml.safe_load((REPO / 'scenarios/link_failure_allreduce.yaml').read_text())
    scenario['quick']['workload']['iterations'] *= 4
    path = tmp_path / 'long_quick.yaml'
    path.write_text(yaml.safe_dump(scenario))
    return path


def test_clean_refuses_a_live_fabric_and_force_removes_it(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, '-m', 'testbed.cli', 'run',
         str(long_quick_scenario(tmp_path)), '--quick',
         '--transport', 'mrc', '--out', str(tmp_path)], cwd=REPO,
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
