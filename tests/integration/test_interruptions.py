"""SIGINT and SIGTERM mid-run: the run tears down what it built by itself,
without `mrc-testbed clean`."""
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testbed.fabric.clean import leftovers

REPO = Path(__file__).resolve().parents[2]


def wait_for_fabric(timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if leftovers()['bridges'] and leftovers()['processes']:
            return
        time.sleep(0.1)
    raise AssertionError('the fabric never came up')


@pytest.mark.parametrize('sig,code', [(signal.SIGINT, 130),
                                      (signal.SIGTERM, 143)])
def test_signal_mid_scenario_leaves_nothing(sig, code, tmp_path):
    proc = subprocess.Popen(
        [sys.executable, '-m', 'testbed.cli', 'run',
         'scenarios/link_failure_allreduce.yaml', '--quick',
         '--out', str(tmp_path)], cwd=REPO, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True)
    try:
        wait_for_fabric()
        time.sleep(1.5)            # into the workload, faults pending
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err[-2000:]
    left = {k: v for k, v in leftovers().items() if v}
    assert left == {}


def test_sigkill_mid_scenario_then_clean_restores_a_spotless_machine(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, '-m', 'testbed.cli', 'run',
         'scenarios/link_failure_allreduce.yaml', '--quick',
         '--out', str(tmp_path)], cwd=REPO, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
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
    assert {k: v for k, v in leftovers().items() if v} == {}
