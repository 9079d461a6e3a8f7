"""Which fabric mode each transport runs on: the registry's defaults, and
a scenario's overrides and convergence delay, checked at load."""
from __future__ import annotations

import pytest

from testbed.fabric.convergence import (DEFAULT_CONVERGENCE_DELAY_S,
                                        HARDWARE_CONVERGENCE_S, emulated_delay)
from testbed.workload.scenario import ScenarioError, parse_scenario
from testbed.workload.transports import TRANSPORTS

BASE = {
    'name': 'unit', 'topology': 'fattree,k=4,planes=2', 'link_rate_mbit': 10,
    'transports': ['mrc', 'rc', 'tcp'],
    'workload': {'type': 'point_to_point', 'src': 'h1', 'dst': 'h16',
                 'size_mb': 1},
    'duration_s': 10,
}


def parse(**changes):
    return parse_scenario(dict(BASE, **changes), '.')


def test_the_baselines_default_to_the_routed_fabric_and_mrc_to_srv6():
    assert {n: t.fabric for n, t in TRANSPORTS.items()} == {
        'mrc': 'srv6', 'rc': 'routed', 'ecmp': 'routed', 'tcp': 'routed',
        'mptcp': 'routed'}


def test_a_scenario_overrides_a_transports_fabric_and_the_delay():
    sc = parse(fabric_modes={'rc': 'srv6'}, convergence_delay_s=0.5)
    assert sc.fabric_mode('rc') == 'srv6'
    assert sc.fabric_mode('tcp') is None          # its default
    assert sc.convergence_delay_s == 0.5
    assert parse().convergence_delay_s is None    # the fabric's default


@pytest.mark.parametrize('modes, problem', [
    ({'mrc': 'routed'}, 'unknown fabric mode for mrc'),
    ({'ecmp': 'srv6'}, 'not among the transports'),
    ({'rc': 'ospf'}, 'unknown fabric mode for rc'),
])
def test_a_bad_fabric_mode_is_refused(modes, problem):
    with pytest.raises(ScenarioError, match=problem):
        parse(fabric_modes=modes)


def test_a_negative_delay_is_refused():
    with pytest.raises(ScenarioError, match='convergence_delay_s'):
        parse(convergence_delay_s=-1)


def test_the_default_delay_is_the_hardware_one_on_the_timers_scale():
    assert DEFAULT_CONVERGENCE_DELAY_S == pytest.approx(
        emulated_delay(HARDWARE_CONVERGENCE_S), abs=0.01)


def test_a_fabric_converges_on_its_own_timers_scale():
    """The delay scales with the QP's timers: with the fabric's base RTT, never below
    the tuned fabric's (emulated_timescale.timer_rtt_s)."""
    from testbed.fabric.convergence import delay_for
    from testbed.nic.emulated_timescale import TUNED_RTT_S
    assert delay_for(None) == delay_for(TUNED_RTT_S) == DEFAULT_CONVERGENCE_DELAY_S
    assert delay_for(TUNED_RTT_S / 2) == DEFAULT_CONVERGENCE_DELAY_S
    assert delay_for(2 * TUNED_RTT_S) == pytest.approx(2 * DEFAULT_CONVERGENCE_DELAY_S,
                                                       abs=0.01)
