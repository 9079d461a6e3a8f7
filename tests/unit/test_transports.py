"""The transport registry: every name has a driver with the runner's
interface, and the readers (scenario schema, command line) take its names."""
import importlib
import inspect

import pytest

from testbed.nic.transport_config import TRANSPORTS as NIC_TRANSPORTS
from testbed.workload.transports import (ENDPOINT_NAMES, NAMES, TRANSPORTS,
                                         Driver, transport)

DRIVER_METHODS = [name for name, _ in inspect.getmembers(
    Driver, inspect.isfunction) if not name.startswith('_')]


@pytest.mark.parametrize('name', NAMES)
def test_every_transport_has_a_driver_with_the_runners_interface(name):
    module, cls = TRANSPORTS[name].driver_class.split(':')
    driver = getattr(importlib.import_module(module), cls)
    for method in DRIVER_METHODS:
        ours = inspect.signature(getattr(Driver, method))
        theirs = inspect.signature(getattr(driver, method))
        assert list(ours.parameters) == list(theirs.parameters), method
    inspect.signature(driver).bind(None, name, 1)      # (fab, name, seed)


def test_names_colours_and_families():
    assert NAMES == ('mrc', 'rc', 'ecmp', 'tcp', 'mptcp')
    assert set(ENDPOINT_NAMES) == set(NIC_TRANSPORTS)
    assert len({t.colour for t in TRANSPORTS.values()}) == len(NAMES)
    assert not transport('mrc').pinned and transport('rc').pinned
    with pytest.raises(KeyError, match='unknown transport'):
        transport('roce')


def test_the_command_line_offers_the_registry():
    from testbed.cli import _parser
    run = next(a for a in _parser()._subparsers._group_actions[0]
               .choices['run']._actions if a.dest == 'transport')
    assert tuple(run.choices) == NAMES
