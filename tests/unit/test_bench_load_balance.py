"""The load-balance section's figures from a trial's flows (no fabric): a
finished permutation scored as htsim scores one, an unfinished one never
scored at its cap."""
from __future__ import annotations

import pytest

from testbed.bench.harness import Trial
from testbed.bench.load_balance import (DID_NOT_FINISH, RATE_MBIT, VARIANTS,
                                        finished_text, measure, outcome)
from testbed.workload.runner import FlowRecord, TransportRun

ONE_PLANE = VARIANTS[0]
MB = 10 ** 6
IDEAL_S = MB * 8 / (RATE_MBIT * 1e6)       # one flow at its NIC's line rate


def trial_of(finish: list[float | None]) -> Trial:
    """Two senders' 1 MB flows, both started at 0, done at `finish` (None:
    still running when the trial stopped at its cap)."""
    run = TransportRun('ecmp', 0, health={'trusted': True, 'reasons': []})
    run.elapsed_s = 3 * IDEAL_S
    run.flows = [FlowRecord(i, 0, 'h%d' % (i + 1), 'h9', MB, started=0.0,
                            finished=end, status='running' if end is None else 'done',
                            delivered=MB // 2 if end is None else MB)
                 for i, end in enumerate(finish)]
    trial = Trial('ecmp', ONE_PLANE.label, 0, run, 1)
    measure(trial, ONE_PLANE, senders=2)
    return trial


def test_a_finished_permutation_scores_its_makespan_and_mean_ideal_over_fct():
    trial = trial_of([IDEAL_S, 2 * IDEAL_S])   # one at line rate, one at half
    v = trial.values
    assert v['completed'] and v['makespan_s'] == pytest.approx(2 * IDEAL_S)
    assert v['fraction'] == pytest.approx(0.5)            # 2 MB over 2 ideals
    assert v['mean_ideal_over_fct'] == pytest.approx((1 + 0.5) / 2)
    assert v['fct_spread'] == pytest.approx(2.0)
    assert outcome(trial) == '50% of ideal'


def test_a_permutation_still_running_at_its_cap_is_not_scored():
    trial = trial_of([IDEAL_S, None])
    v = trial.values
    assert not v['completed'] and (v['flows_done'], v['flows']) == (1, 2)
    assert v['fraction'] is v['mean_ideal_over_fct'] is v['makespan_s'] is None
    assert outcome(trial) == DID_NOT_FINISH + ' (1 of 2 flows done at the cap)'
    assert finished_text([trial])('42%') == DID_NOT_FINISH
    assert finished_text([trial, trial_of([IDEAL_S, IDEAL_S])])('42%') == '42%'
