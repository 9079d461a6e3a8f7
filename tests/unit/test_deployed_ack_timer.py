"""RC's deployed ACK timer, and what a compressed stall stands for."""

from __future__ import annotations

import pytest

from testbed.nic.completion import WcStatus
from testbed.nic.deployed_ack_timer import DEPLOYED_RC, DeployedAckTimer
from testbed.nic.emulated_timescale import fabric_qp_profile, timer_scale
from testbed.nic.loopback import Loopback
from testbed.nic.qp_pair import RKEY, make_pair, payload
from testbed.nic.qp_state import QpState, RetryConfig
from testbed.nic.transport_config import TransportConfig


def test_nccl_defaults_in_hardware_seconds() -> None:
    # NCCL_IB_TIMEOUT 20: 4.096 us x 2^20; NCCL_IB_RETRY_CNT 7: 8 timeouts to the error.
    assert DEPLOYED_RC.timeout_s == pytest.approx(4.294967296)
    assert DEPLOYED_RC.budget_s == pytest.approx(8 * 4.294967296)
    assert DeployedAckTimer(exponent=18).timeout_s == pytest.approx(1.073741824)


def test_a_stall_stands_for_one_timeout_per_stretched_timeout_it_covers() -> None:
    scale = 10.0                                    # one hardware timeout: 42.95 s here
    assert DEPLOYED_RC.hardware_timeouts([(5.0, 0.3)], scale) == 1
    assert DEPLOYED_RC.hardware_timeouts([(5.0, 42.9)], scale) == 1
    assert DEPLOYED_RC.hardware_timeouts([(5.0, 43.0)], scale) == 2
    assert DEPLOYED_RC.hardware_timeouts([], scale) == 0


def test_stalls_before_the_deployed_retry_are_one_timeout() -> None:
    """The compressed retries met the fabric mid-repair and stalled again; the deployed
    retry, 42.95 s after the first stall began, finds it all over: one timeout. A stall
    begun after that retry is a timeout of its own, and one that runs past it costs
    another."""
    scale = 10.0
    assert DEPLOYED_RC.hardware_timeouts([(1.0, 3.0), (4.5, 0.4), (30.0, 1.0)], scale) == 1
    assert DEPLOYED_RC.hardware_timeouts([(1.0, 3.0), (50.0, 1.0)], scale) == 2
    assert DEPLOYED_RC.hardware_timeouts([(1.0, 3.0), (40.0, 5.0)], scale) == 2
    assert DEPLOYED_RC.counters([[(1.0, 0.3), (2.0, 0.4)], [], [(9.0, 60.0)]], 1, scale) == {
        'ack_timer_stalls': 3, 'ack_timer_stalled_qps': 2,
        'ack_timer_hardware_timeouts': 3, 'ack_timer_stalled_at_end': 1}


def test_an_rc_profile_gives_up_after_the_deployed_budget_on_the_timers_clock() -> None:
    rtt = 0.0276                                    # the default scenario's fat-tree
    rc = fabric_qp_profile('rc', 10e6, 2, 6, base_rtt_override_s=rtt)
    give_up = rc.transport_config.retry_give_up_s
    assert give_up == pytest.approx(DEPLOYED_RC.budget_s * timer_scale(rtt))
    assert DEPLOYED_RC.scale_of(give_up) == pytest.approx(timer_scale(rtt))
    # ... minutes of emulated time, hundreds of its packet timeouts.
    assert give_up > 300 * rc.transport_config.packet_timeout_s
    for other in ('mrc', 'ecmp'):
        assert fabric_qp_profile(other, 10e6, 2, 6).transport_config.retry_give_up_s is None


def test_an_rc_qp_rides_out_a_dead_path_and_resumes_intact() -> None:
    """A path dead for 30 timeouts (far past retry_cnt 7) and then back: the QP keeps
    retrying every T, completes intact, and reports one stall as long as the outage."""
    T = 1e-3
    pair = make_pair("rc", timeout_s=T, retry=RetryConfig.verbs(),
                     transport_config=TransportConfig(retry_give_up_s=1000 * T))
    loop = Loopback([pair.a, pair.b])
    path = pair.qa.pinned_route.path
    loop.kill_path(path)
    loop.at(30 * T, lambda: loop.revive_path(path))
    data = payload(20_000)
    pair.qa.post_write(data, 0, RKEY, wr_id=1)
    loop.run(until=1.0, stop=lambda: bool(pair.a.poll_cq()))
    assert pair.qa.state is QpState.RTS and pair.qa.error is None
    assert pair.mr.buf[:len(data)] == data
    [(start, length)] = pair.qa.stats()['requester']['stalls']
    assert 30 * T <= length <= 32 * T     # the outage, up to the next expiry and its ACK


def test_an_rc_qp_errors_once_the_budget_has_passed() -> None:
    T = 1e-3
    pair = make_pair("rc", timeout_s=T, retry=RetryConfig.verbs(),
                     transport_config=TransportConfig(retry_give_up_s=50 * T))
    loop = Loopback([pair.a, pair.b])
    loop.kill_path(pair.qa.pinned_route.path)
    pair.qa.post_write(b"hello", 0, RKEY, wr_id=7)
    loop.run(stop=lambda: pair.qa.state is QpState.ERROR)
    [wc] = pair.a.poll_cq()
    assert wc.status is WcStatus.RETRY_EXC_ERR
    assert wc.time == pytest.approx(50 * T)      # 50 expiries of T, not retry_cnt's 8
