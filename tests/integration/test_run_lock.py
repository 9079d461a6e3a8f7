"""Two fabrics never run at once; a dead holder never blocks the next run."""
import os
import signal
import subprocess
import sys
import time

import pytest

from testbed.fabric.run_lock import FabricBusy, RunLock


def hold_lock_in_child(path):
    code = ('import sys, time; sys.path.insert(0, %r); '
            'from testbed.fabric.run_lock import RunLock; '
            'RunLock(%r).acquire(); print("held", flush=True); time.sleep(60)'
            % (os.getcwd(), path))
    child = subprocess.Popen([sys.executable, '-c', code],
                             stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == 'held'
    return child


def test_second_run_is_refused_with_the_holder_named(tmp_path, capsys):
    path = str(tmp_path / 'lock')
    child = hold_lock_in_child(path)
    try:
        with pytest.raises(FabricBusy, match='pid %d' % child.pid):
            RunLock(path).acquire(wait_s=0.5)
        assert 'waiting for the fabric of pid %d' % child.pid in \
            capsys.readouterr().err
    finally:
        child.kill()
        child.wait()


def test_a_sigkilled_holder_releases_the_lock(tmp_path):
    path = str(tmp_path / 'lock')
    child = hold_lock_in_child(path)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    lock = RunLock(path)
    start = time.monotonic()
    lock.acquire(wait_s=5)
    assert time.monotonic() - start < 1
    lock.release()
