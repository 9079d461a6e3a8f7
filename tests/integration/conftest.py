"""Integration tests build real fabrics: root, OVS, namespaces, veths.

Every test cleans up after itself; at the end of the session the machine
must hold nothing of ours, or the session fails.
"""
import json
import os
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest

from testbed.fabric import build_log, ovs
from testbed.fabric.clean import clean, leftovers
from testbed.fabric.net import BUILD_PHASES, FabricNet
from testbed.fabric.run_lock import RunLock
from testbed.fabric.topo_spec import parse_topo_spec
from testbed.workload.runner import TransportRunner
from tests.integration.time_limits import (BASE_S, Watchdog, build_allowance,
                                           run_allowance)

NEEDS_ROOT = ('integration tests need root: they build network namespaces, '
              'veths and OVS bridges')
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    """Without root every test here is skipped, saying why (a module-level
    skip in a conftest would hide them from `pytest tests` and break
    `pytest tests/integration`)."""
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason=NEEDS_ROOT)
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)


@pytest.fixture(scope='session', autouse=True)
def spotless_machine(fabrics_grant_time):
    """Leftovers are judged only while we hold the run lock: with it, no
    fabric of anyone's is running, so whatever is there was leaked."""
    if os.geteuid() != 0:
        pytest.skip(NEEDS_ROOT)
    lock = RunLock()
    lock.acquire()
    try:
        ovs.ensure_running()
        if any(leftovers().values()):
            clean()  # a previous run died: start from a clean machine
    finally:
        lock.release()
    yield
    lock.acquire()
    try:
        left = {k: v for k, v in leftovers().items() if v}
        if left:
            clean()
    finally:
        lock.release()
    assert not left, 'the test session leaked: %s' % left


@pytest.fixture
def fabric_factory():
    """Build fabrics that are torn down whatever the test does."""
    built = []

    def build(spec: str, **options) -> FabricNet:
        fab = FabricNet(parse_topo_spec(spec), **options)
        built.append(fab)
        fab.start()
        return fab
    yield build
    for fab in built:
        fab.stop()


WATCHDOG = Watchdog()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """The test's time limit (tests/integration/time_limits.py), from before
    its fixtures build anything: its mark's, or BASE_S and what it builds
    and runs as it goes. And which test the fabrics built from here on
    belong to (the summary below)."""
    mark = item.get_closest_marker('time_limit')
    seconds, why = (mark.args[0], mark.kwargs['why']) if mark else (BASE_S, 'base')
    WATCHDOG.start(item.nodeid, seconds, why)
    with open(FABRIC_LOG, 'a') as f:
        f.write(json.dumps({'event': 'test', 'test': item.nodeid}) + '\n')


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    WATCHDOG.stop()


@pytest.fixture(scope='session', autouse=True)
def fabrics_grant_time():
    """Each fabric built and each scenario transport run in this process
    extends the running test's limit by its allowance; a fabric's teardown
    and a wait for the run lock are never cut short by the alarm."""
    start, stop, execute = FabricNet.start, FabricNet.stop, TransportRunner.execute
    acquire = RunLock.acquire

    def timed_start(fab):
        WATCHDOG.grant('build %s' % fab.spec,
                       build_allowance(fab.switch_port_count, fab.afxdp))
        return start(fab)

    def paused(method):
        def call(*args, **kwargs):
            with WATCHDOG.pause():
                return method(*args, **kwargs)
        return call

    def timed_execute(runner, *args, **kwargs):
        WATCHDOG.grant('run %s' % runner.run.transport, run_allowance(runner.sc.duration_s))
        return execute(runner, *args, **kwargs)
    FabricNet.start, FabricNet.stop = timed_start, paused(stop)
    TransportRunner.execute, RunLock.acquire = timed_execute, paused(acquire)
    yield
    FabricNet.start, FabricNet.stop, TransportRunner.execute = start, stop, execute
    RunLock.acquire = acquire


# Every fabric this session builds, in this process or a child, phase by phase
# (testbed.fabric.build_log); summed per test module at the end.
FABRIC_LOG = Path(tempfile.gettempdir()) / ('pytest-fabric-builds-%d.jsonl' % os.getpid())


def pytest_configure(config):
    os.environ[build_log.ENV] = str(FABRIC_LOG)


def pytest_terminal_summary(terminalreporter):
    """Fabric builds per test module: how many, of which kind, and where
    their time went (shown with -q too: a slow suite is read from here)."""
    if not FABRIC_LOG.exists():
        return
    rows, module = defaultdict(lambda: defaultdict(float)), '?'
    for line in FABRIC_LOG.read_text().splitlines():
        event = json.loads(line)
        if event['event'] == 'test':
            module = event['test'].split('::')[0]
            continue
        row = rows[(module, 'afxdp' if event['afxdp'] else 'system')]
        if event['event'] == 'built':
            row['builds'] += 1
            row['lock_wait_s'] += event.get('lock_wait_s', 0)
            for phase in BUILD_PHASES:
                row[phase] += event.get(phase, 0)
        else:
            row['teardown_s'] += event.get('teardown_s', 0)
    FABRIC_LOG.unlink()
    if not rows:
        return
    write = terminalreporter.write_line
    terminalreporter.section('fabric builds per module (s)')
    names = ('builds', 'lock_wait_s') + BUILD_PHASES + ('teardown_s',)
    write('%-44s %-6s ' % ('module', 'ports') + ' '.join('%9s' % n[:9] for n in names))
    for (module, kind), row in sorted(rows.items(), key=lambda kv: -sum(kv[1].values())):
        write('%-44s %-6s ' % (module[-44:], kind)
              + ' '.join('%9.1f' % row[n] for n in names))
