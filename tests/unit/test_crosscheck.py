"""The cross-check's figures: the same arithmetic on either side's flows."""
from __future__ import annotations

from pathlib import Path

import pytest

from testbed.reference.crosscheck import (FlowTimes, cell, figures_of, last_hop_ecn, one_plane,
                                          table)
from testbed.workload.scenario import load_scenario

REPO = Path(__file__).resolve().parents[2]

LINE_BPS = 8e6                  # 1 MB/s: a flow of N MB takes N s at line rate


def test_figures_of_an_incast_and_its_victim():
    # Two incast flows of 1 MB into one port, each at half the line rate: 2 s;
    # the victim, 1 MB at a quarter of line rate beside them: 4 s.
    flows = [FlowTimes('incast', 1_000_000, 0.0, 2.0),
             FlowTimes('incast', 1_000_000, 0.0, 2.5),
             FlowTimes('victim', 1_000_000, 0.0, 4.0)]
    f = figures_of(flows, LINE_BPS, rtt_s=0.5, resent=0.1)
    assert f.makespan_rtts == 8.0                   # 4 s in 0.5 s RTTs
    assert f.victim_kept == 0.25
    assert f.incast_spread_rtts == 1.0
    assert f.min_ideal_over_fct == 0.25
    assert f.mean_ideal_over_fct == pytest.approx((0.5 + 0.4 + 0.25) / 3)
    assert (f.flows, f.flows_done, f.resent) == (3, 3, 0.1)


def test_an_unfinished_flow_leaves_no_makespan():
    flows = [FlowTimes('permutation', 1_000_000, 0.0, 1.0),
             FlowTimes('permutation', 1_000_000, 0.0, None)]
    f = figures_of(flows, LINE_BPS, rtt_s=0.5, resent=0.0)
    assert f.makespan_rtts is None and f.flows_done == 1
    assert f.victim_kept is None and f.incast_spread_rtts is None


def test_the_one_plane_form_runs_mrc_and_refuses_faults():
    incast = load_scenario(REPO / 'scenarios/incast_7to1_victim.yaml')
    sc = one_plane(incast)
    assert 'planes=1' in sc.topology and sc.transports == ('mrc',)
    assert sc.workload == incast.workload and sc.link_rate_mbit == incast.link_rate_mbit
    # The last hop marks as htsim's reference NSCC's does, unless asked not to.
    assert last_hop_ecn(sc) and not last_hop_ecn(one_plane(incast, last_hop_ecn=False))
    assert not last_hop_ecn(one_plane(sc, last_hop_ecn=False))     # taken off again
    with pytest.raises(ValueError, match='faults'):
        one_plane(load_scenario(REPO / 'scenarios/link_failure_allreduce.yaml'))


def test_the_table_leaves_out_what_neither_side_has():
    flows = [FlowTimes('permutation', 1_000_000, 0.0, 2.0)]
    f = figures_of(flows, LINE_BPS, rtt_s=0.5, resent=0.05)
    text = table([f], [f])
    assert '| makespan (base RTTs) | 4.0 | 4.0 |' in text
    assert '| resent | 5.0% | 5.0% |' in text
    assert 'victim' not in text and 'spread' not in text


def test_several_seeds_are_a_median_and_a_range():
    assert cell([0.5, None, 0.7, 0.6], '%.0f%%') == '60% (50-70%)'
    assert cell([3.0], '%.1f') == '3.0' and cell([None], '%.1f') == '-'
