"""Integration tests build real fabrics: root, OVS, namespaces, veths.

Every test cleans up after itself; at the end of the session the machine
must hold nothing of ours, or the session fails.
"""
import os
from pathlib import Path

import pytest

from testbed.fabric import ovs
from testbed.fabric.clean import clean, leftovers
from testbed.fabric.net import FabricNet
from testbed.fabric.run_lock import RunLock
from testbed.fabric.topo_spec import parse_topo_spec

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
def spotless_machine():
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
