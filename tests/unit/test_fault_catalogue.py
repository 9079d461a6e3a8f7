"""The fault catalogue against the mechanisms it names: every kind is an
injector method that takes exactly what the catalogue says, undo pairs
line up, and a scenario's parameters translate into the method's."""
import inspect

import pytest

from testbed.fabric.faults.catalogue import (FAULT_KINDS, call_args,
                                             disruptive, down_kind,
                                             last_step_at, undo_kinds)
from testbed.fabric.faults.injector import FaultInjector

EXAMPLE = {'link': ('p1a0x0', 'p1c0'), 'switch': 'p1c0', 'plane': 1,
           'host': 'h1', 'loss_pct': 1.0, 'mbit': 2.0, 'period_s': 1.0,
           'count': 2, 'down_s': 0.3}


@pytest.mark.parametrize('kind', sorted(FAULT_KINDS))
def test_every_kind_is_an_injector_method_taking_its_parameters(kind):
    method = getattr(FaultInjector, kind)
    info = FAULT_KINDS[kind]
    required = {p.name: EXAMPLE[p.name] for p in info.params
                if not p.optional}
    everything = {p.name: EXAMPLE[p.name] for p in info.params}
    for params in (required, everything):
        inspect.signature(method).bind(None, **call_args(kind, params))


def test_undo_names_a_kind_on_the_same_target():
    for kind in FAULT_KINDS.values():
        if kind.undoes:
            undone = FAULT_KINDS[kind.undoes]
            assert undone.target == kind.target and undone.disruptive
            assert not kind.disruptive
            assert {p.name for p in kind.params} <= {
                p.name for p in undone.params}


def test_what_the_cli_reads():
    assert down_kind('link') == 'link_down'
    assert down_kind('nic_port') == 'nic_port_down'
    assert undo_kinds('link') == ('link_up', 'gray_clear', 'link_rate_restore')
    assert undo_kinds('plane') == ('plane_up',)


def test_disruptive_events_include_a_flaps_downs():
    assert disruptive('link_flap') and disruptive('link_flap_down')
    assert not disruptive('link_flap_up') and not disruptive('link_up')
    assert not disruptive('restore_all')


def test_call_args_and_a_flaps_last_step():
    assert call_args('link_down', {'link': ('a', 'b')}) == {'a': 'a', 'b': 'b'}
    assert call_args('switch_up', {'switch': 's'}) == {'name': 's'}
    with pytest.raises(KeyError, match='unknown fault'):
        call_args('reboot', {})
    flap = {'period_s': 2.0, 'count': 3}
    assert last_step_at('link_flap', 1.0, flap) == 6.0
    assert last_step_at('link_flap', 1.0, dict(flap, down_s=0.5)) == 5.5
    assert last_step_at('link_down', 1.0, {}) == 1.0
    assert FAULT_KINDS['link_flap'].problem(dict(flap, down_s=2.0)) == (
        'down_s', 'must be shorter than period_s')
