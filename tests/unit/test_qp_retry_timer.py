"""Retry timer: linear then exponential, retry budget, 25 = infinite."""

from __future__ import annotations

import math

import pytest

from testbed.nic.completion import WcStatus
from testbed.nic.loopback import Loopback
from testbed.nic.qp_state import QpState, RetryConfig
from testbed.nic.retry_timer import RetryTimer, retry_interval, retry_schedule, time_to_error

from testbed.nic.qp_pair import RKEY, Trace, make_pair

T = 1.0


@pytest.mark.parametrize("linear, exp, schedule", [
    # intervals from the last progress to each expiry; the last expiry is the fatal one
    (0, 0, [T]),
    (1, 0, [T, T]),
    (3, 0, [T, T, T, T]),
    (0, 3, [T, 2 * T, 4 * T, 8 * T]),
    (3, 2, [T, T, T, T, 2 * T, 4 * T]),
    (7, 1, [T] * 8 + [2 * T]),
    (2, 4, [T, T, T, 2 * T, 4 * T, 8 * T, 16 * T]),
])
def test_schedule_table(linear: int, exp: int, schedule: list[float]) -> None:
    retry = RetryConfig(linear, exp)
    assert retry_schedule(T, retry) == schedule
    assert time_to_error(T, retry) == sum(schedule)
    assert retry.budget == linear + exp


def test_exp_cnt_25_is_infinite_with_a_bounded_interval() -> None:
    retry = RetryConfig(2, 25)
    assert retry.infinite and retry.budget == math.inf
    assert time_to_error(T, retry) == math.inf
    assert retry_schedule(T, retry, limit=6) == [T, T, T, 2 * T, 4 * T, 8 * T]
    assert retry_interval(T, retry, 10_000) == T * (1 << 25)       # no overflow, no runaway
    timer = RetryTimer(T, retry)
    timer.arm_if_idle(0.0)
    assert all(timer.expire(float(i)) for i in range(1000))


def test_timer_counts_consecutive_expiries_and_progress_resets() -> None:
    timer = RetryTimer(0.5, RetryConfig(1, 1))
    assert timer.deadline is None
    timer.arm_if_idle(10.0)
    assert timer.deadline == 10.5
    assert timer.expire(10.5) and timer.deadline == 11.0        # linear retry: +T
    assert timer.expire(11.0) and timer.deadline == 12.0        # exponential retry: +2T
    timer.on_progress(11.5, outstanding=True)                   # an ACK: budget back, +T
    assert timer.retries == 0 and timer.deadline == 12.0
    assert timer.expire(12.0) and timer.expire(12.5)
    assert not timer.expire(13.5)                               # budget of 2 spent
    assert timer.deadline is None
    timer.on_progress(14.0, outstanding=False)
    assert timer.deadline is None


def test_nack_charges_spend_the_same_budget() -> None:
    timer = RetryTimer(1.0, RetryConfig(0, 2))
    assert timer.charge() and timer.charge()
    assert not timer.charge()
    timer.arm_if_idle(0.0)
    assert not timer.expire(1.0)


def test_blackholed_rc_packet_retries_follow_the_schedule() -> None:
    """Q10: retransmission timestamps of a blackholed packet, then the QP error."""
    base, retry = 1e-3, RetryConfig(3, 2)
    pair = make_pair("rc", timeout_s=base, retry=retry)
    loop = Loopback([pair.a, pair.b])
    loop.kill_path(pair.qa.pinned_route.path)
    trace = Trace().attach(loop)
    pair.qa.post_write(b"hello", 0, RKEY, wr_id=7)
    loop.run(stop=lambda: pair.qa.state is QpState.ERROR)
    sends = [d.time for d in trace.data if d.src == "A"]
    intervals = retry_schedule(base, retry)
    expected_sends = [sum(intervals[:i]) for i in range(len(intervals))]
    assert sends == pytest.approx(expected_sends)
    [wc] = pair.a.poll_cq()
    assert wc.wr_id == 7 and wc.status is WcStatus.RETRY_EXC_ERR
    assert wc.status_text == "retry counter exceeded"
    assert wc.time == pytest.approx(time_to_error(base, retry))
    assert pair.qa.error == (WcStatus.RETRY_EXC_ERR, "retry counter exceeded")
    assert pair.qa.counters.retry_timeouts == retry.budget


def test_a_give_up_time_keeps_the_interval_fixed_and_replaces_the_count() -> None:
    """A deployed timer compressed (deployed_ack_timer): an expiry every T however many,
    the error once give_up_s has passed without progress."""
    timer = RetryTimer(1.0, RetryConfig.verbs(), give_up_s=20.0)
    timer.arm_if_idle(0.0)
    for k in range(1, 20):                  # 19 expiries, far past retry_cnt 7
        assert timer.expire(float(k)) and timer.deadline == k + 1.0
    assert not timer.expire(20.0) and timer.deadline is None


def test_stalls_run_from_the_last_progress_to_the_next() -> None:
    timer = RetryTimer(1.0, RetryConfig.verbs(), give_up_s=100.0)
    timer.arm_if_idle(0.0)
    timer.on_progress(0.5, outstanding=True)            # no expiry yet: no stall
    assert timer.expire(1.5) and timer.expire(2.5)      # one stall, two expiries
    timer.on_progress(3.0, outstanding=True)
    assert timer.ended_stalls == [(0.5, 2.5)] and not timer.stalled
    assert timer.expire(4.0)
    assert timer.stalls(now=6.0) == [(0.5, 2.5), (3.0, 3.0)]   # the second still running
