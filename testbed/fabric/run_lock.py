"""One fabric at a time per machine.

Two fabrics would trample each other: the same switch names, one OVS, and
teardown that restarts ovs-vswitchd when it believes every bridge is its
own. An flock on a file in /run serialises them; the kernel drops it when
its holder dies, even by SIGKILL, so a crash never leaves a stale lock.
"""
from __future__ import annotations

import fcntl
import os
import sys
import time

LOCK_PATH = '/run/mrc-testbed.lock'
DEFAULT_WAIT_S = 600.0


class FabricBusy(RuntimeError):
    """Another fabric held the machine for longer than we were willing to wait."""


class RunLock:
    def __init__(self, path: str = LOCK_PATH) -> None:
        self.path = path
        self.fd: int | None = None

    def acquire(self, wait_s: float = DEFAULT_WAIT_S) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait_s
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _read_holder(fd)
                if time.monotonic() >= deadline:
                    os.close(fd)
                    raise FabricBusy(
                        'another mrc-testbed fabric is running (pid %s); '
                        'wait for it, or stop it and run `mrc-testbed clean`'
                        % holder) from None
                if not told:
                    print('mrc-testbed: waiting for the fabric of pid %s to '
                          'finish ...' % holder, file=sys.stderr)
                    told = True
                time.sleep(0.2)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)     # closing drops the flock
            self.fd = None


def _read_holder(fd: int) -> str:
    return os.pread(fd, 32, 0).decode(errors='replace').strip() or '?'
