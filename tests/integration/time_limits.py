"""Every integration test runs against a time limit derived from what it runs,
so a hang fails one test with what it was doing instead of eating CI's budget.

A test starts with BASE_S for its own work besides fabrics (probes, a command
started, a terminal typed into). Each fabric it builds in this process adds
that fabric's allowance as the build starts (`build_allowance`: its switch
ports, by kind, and its teardown), and each scenario transport it runs adds
that run's duration and bookkeeping (`run_allowance`). A test whose fabrics
are built by a child process (`mrc-testbed run`, the interactive CLI) says
what it runs with `@pytest.mark.time_limit(seconds, why=...)`, using the same
allowances.

Past its limit a test fails with the stacks of our processes (py-spy for the
Python ones, the kernel's wait channel for the rest), its own threads' stacks
and the fabric's state; the failure is raised in the test's main thread, so
its teardown (fixtures, `with FabricNet`) still runs and leaves nothing
behind. An alarm that falls inside a fabric's teardown, or in a wait for
the run lock (another session's fabric: RunLock has its own limit), waits
for it to end.
"""
from __future__ import annotations

import faulthandler
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from testbed.fabric.clean import leftovers, our_processes

# A test's own work besides fabrics: the slowest seen so far is the
# interactive CLI's keystrokes and notices (~30 s); four times that.
BASE_S = 120.0
# AF_XDP ports: OVS opens each with 64 MiB of umem the kernel zeroes; the
# slowest build recorded, a fresh machine's first touch of that memory, took
# 0.69 s a port (110 s for the 160 ports of fattree,k=4,planes=2). Twice that.
AFXDP_PORT_S = 1.4
# system ports: ~6 s for the same fat-tree, 0.04 s a port; the fixed part
# (controller, namespaces, flows, plumbing) dominates. Five times each.
SYSTEM_PORT_S = 0.2
FIXED_BUILD_S = 30.0
# A teardown deletes the bridges in one transaction; an AF_XDP port's umem
# is freed with it (~0.1 s a port seen).
TEARDOWN_PORT_S = 0.3
# A transport's run beyond its scenario duration: the base-RTT probe, the
# endpoints' start and close, the results' bookkeeping (~5 s seen).
RUN_OVERHEAD_S = 30.0
# Enough for a teardown or the run lock's wait to go on before the alarm
# fires again.
PAUSE_GRACE_S = 120.0


class TimeLimitExceeded(Exception):
    """The test ran past the time derived from what it runs."""


def build_allowance(switch_ports: int, afxdp: bool) -> float:
    """Seconds a fabric with this many switch ports may take to build and
    tear down."""
    per_port = AFXDP_PORT_S if afxdp else SYSTEM_PORT_S
    return FIXED_BUILD_S + switch_ports * (per_port + TEARDOWN_PORT_S)


def run_allowance(duration_s: float) -> float:
    """Seconds one transport's run of a scenario may take."""
    return duration_s + RUN_OVERHEAD_S


class Watchdog:
    """The running test's deadline, moved by what it starts; SIGALRM at it."""

    def __init__(self) -> None:
        self.deadline: float | None = None
        self.granted: list[tuple[str, float]] = []
        self.paused = 0        # in a teardown or the run lock's wait
        self.test = ''

    def start(self, test: str, seconds: float, why: str) -> None:
        self.test, self.granted = test, [(why, seconds)]
        self.deadline = time.monotonic() + seconds
        signal.signal(signal.SIGALRM, self._expired)
        self._arm()

    def grant(self, what: str, seconds: float) -> None:
        """More time for something the test has started."""
        if self.deadline is None:
            return
        self.granted.append((what, seconds))
        self.deadline += seconds
        self._arm()

    @contextmanager
    def pause(self) -> Iterator[None]:
        """No failure inside: a teardown must finish, a wait for the run
        lock is bounded by the lock itself."""
        self.paused += 1
        try:
            yield
        finally:
            self.paused -= 1

    def stop(self) -> None:
        self.deadline = None
        signal.setitimer(signal.ITIMER_REAL, 0)

    def _arm(self) -> None:
        assert self.deadline is not None
        signal.setitimer(signal.ITIMER_REAL, max(0.01, self.deadline - time.monotonic()))

    def _expired(self, signum, frame) -> None:
        if self.deadline is None:
            return
        if self.paused:
            self.deadline = time.monotonic() + PAUSE_GRACE_S
            self._arm()
            return
        limit = sum(s for _, s in self.granted)
        self.deadline = None
        raise TimeLimitExceeded('%s ran past its limit of %.0f s (%s)\n%s' % (
            self.test, limit, ', '.join('%s %.0f s' % g for g in self.granted),
            diagnostics()))


def diagnostics() -> str:
    """Our threads' and processes' stacks and what of the fabric is up."""
    out = io.StringIO()
    out.write('--- this process, every thread ---\n')
    out.write(_own_stacks())
    for pid, cmdline in our_processes().items():
        out.write('--- pid %d: %s ---\n%s\n' % (pid, cmdline, _stack_of(pid)))
    out.write('--- what of ours is up ---\n')
    for kind, found in leftovers().items():
        out.write('%s: %d %s\n' % (kind, len(found), ' '.join(map(str, found[:8]))))
    log = Path('/var/log/openvswitch/ovs-vswitchd.log')
    if log.exists():
        tail = log.read_text(errors='replace').splitlines()[-15:]
        out.write('--- ovs-vswitchd.log, last lines ---\n%s\n' % '\n'.join(tail))
    return out.getvalue()


def _own_stacks() -> str:
    """faulthandler writes to a descriptor: through a temporary file."""
    with tempfile.TemporaryFile('w+') as tmp:
        faulthandler.dump_traceback(file=tmp, all_threads=True)
        tmp.seek(0)
        return tmp.read()


def _stack_of(pid: int) -> str:
    spy = shutil.which('py-spy') or str(Path(sys.executable).parent / 'py-spy')
    if Path(spy).exists():
        try:
            done = subprocess.run([spy, 'dump', '--pid', str(pid)], capture_output=True,
                                  text=True, timeout=20)
            if done.returncode == 0:
                return done.stdout
        except subprocess.TimeoutExpired:
            pass
    try:
        return 'waiting in %s' % Path('/proc/%d/wchan' % pid).read_text()
    except OSError as err:
        return str(err)
