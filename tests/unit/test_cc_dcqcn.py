"""DCQCN's reaction point (testbed/nic/cc/dcqcn.py) against the published equations
(Zhu et al., SIGCOMM 2015, §3.1) and the NIC defaults it is scaled from."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from testbed.nic.cc import (
    DCQCN_ALGORITHM,
    CcProfile,
    Dcqcn,
    DcqcnConfig,
    DcqcnConfigError,
    make_cc,
)
from testbed.nic.cc.base import cc_algorithm
from testbed.nic.cc.dcqcn import (
    HARDWARE_BASE_RTT_S,
    HW_MIN_RATE_PACKET_SHARE,
    NIC,
    PAPER,
    PROFILES,
)

LINE = 10e6
RTT = 0.026                    # the incast scenario's fabric: 5 Mbit/s, 6-link paths


def config(**changes) -> DcqcnConfig:
    """The reaction point's mechanisms under the NIC's profile (it has every
    period, a rate-reduce one included)."""
    return replace(DcqcnConfig.defaults(LINE, RTT, profile=NIC), **changes)


def test_profile_selects_dcqcn_and_asks_for_cnps() -> None:
    profile = CcProfile.for_fabric(DCQCN_ALGORITHM, LINE, RTT, 1500, trimming=True)
    cc = make_cc(profile)
    assert isinstance(cc, Dcqcn) and cc.paces and not cc.limits_sending
    assert profile.cnp_interval_s == cc.config.cnp_interval_s > 0
    assert CcProfile.from_json(profile.to_json()) == profile


def test_the_paper_s_profile_is_the_default_and_the_nic_s_is_registered_too() -> None:
    # Zhu et al. 2015 section 5 as htsim runs it (sim/dcqcn.cpp): 55 us timers, a
    # 10 MB byte counter, g = 1/256, F = 5, steps of line/20 and line/10.
    assert (PAPER.name, PAPER.rate_timer_s, PAPER.byte_counter_bytes, PAPER.g,
            PAPER.fast_recovery_steps) == (DCQCN_ALGORITHM, 55e-6, 10_000_000, 1 / 256, 5)
    hardware = DcqcnConfig.hardware()
    assert (hardware.ai_rate_bps, hardware.hai_rate_bps) == (5e9, 10e9)
    assert DcqcnConfig.defaults(LINE, RTT) == DcqcnConfig.defaults(LINE, RTT, profile=PAPER)
    for profile in PROFILES.values():
        algorithm = cc_algorithm(profile.name)
        assert algorithm.marks_last_hop            # RoCE's ECN marks every egress
        assert algorithm.defaults(LINE, RTT) == DcqcnConfig.defaults(
            LINE, RTT, profile=profile)


@pytest.mark.parametrize('profile', [PAPER, NIC], ids=lambda p: p.name)
def test_timers_scale_with_the_base_rtt_and_rates_with_the_line_rate(profile) -> None:
    cfg = DcqcnConfig.defaults(LINE, RTT, profile=profile)
    scale = RTT / HARDWARE_BASE_RTT_S
    assert cfg.rate_timer_s == pytest.approx(profile.rate_timer_s * scale)
    assert cfg.cnp_interval_s == pytest.approx(profile.cnp_interval_s * scale)
    assert cfg.alpha_period_s == pytest.approx(profile.alpha_period_s * scale)
    hardware = DcqcnConfig.hardware(profile=profile)
    assert cfg.ai_rate_bps / LINE == pytest.approx(hardware.ai_rate_bps / hardware.line_rate_bps)
    # The byte counter stays the same share of a bandwidth-delay product.
    assert cfg.byte_counter_bytes / (LINE / 8 * RTT) == pytest.approx(
        hardware.byte_counter_bytes / (hardware.line_rate_bps / 8 * HARDWARE_BASE_RTT_S),
        rel=1e-3)


def test_the_minimum_rate_lets_a_packet_leave_within_the_share_of_the_ack_timeout() -> None:
    # Hardware: one 4 KB packet at rpg_min_rate takes ~half an RC ACK timeout (timeout 14).
    timeout = 0.2
    cfg = DcqcnConfig.defaults(LINE, RTT, 1500, ack_timeout_s=timeout)
    assert 1500 * 8 / cfg.min_rate_bps == pytest.approx(HW_MIN_RATE_PACKET_SHARE * timeout)
    assert DcqcnConfig.defaults(LINE, RTT).min_rate_bps < cfg.min_rate_bps   # scaled alone


def test_starts_at_line_rate_and_paces_each_packet_at_the_rate() -> None:
    cfg = config(frame_overhead_bytes=100)
    cc = Dcqcn(cfg, now=1.0)
    assert cc.rate_bps == LINE and cc.next_send_time() == 1.0
    cc.on_transmit(1400, now=1.0)
    assert cc.next_send_time() == pytest.approx(1.0 + 1500 * 8 / LINE)


def test_pacing_banks_no_credit_over_idle_time() -> None:
    cc = Dcqcn(config(frame_overhead_bytes=0), now=0.0)
    cc.on_transmit(1250, now=5.0)          # one packet time = 1 ms at 10 Mbit/s
    cc.on_transmit(1250, now=5.0)
    assert cc.next_send_time() == pytest.approx(5.001)   # one late packet's time, no more


def test_a_cnp_cuts_the_rate_by_alpha_over_two_and_raises_alpha() -> None:
    cfg = config(alpha_period_s=1e9)       # no decay between the two CNPs
    cc = Dcqcn(cfg)
    alpha = cc.alpha
    cc.on_cnp(now=0.0)
    assert cc.rate_bps == pytest.approx(LINE * (1 - alpha / 2))
    assert cc.target_bps == LINE                       # rt remembers the rate before the cut
    assert cc.alpha == pytest.approx((1 - cfg.g) * alpha + cfg.g)
    second = cc.alpha
    rate = cc.rate_bps
    cc.on_cnp(now=cfg.rate_reduce_period_s)
    assert cc.rate_bps == pytest.approx(rate * (1 - second / 2))
    assert cc.counters.rate_cuts == 2 and cc.counters.cnps_received == 2


def test_cnps_within_the_rate_reduce_period_cut_once() -> None:
    cfg = config()
    cc = Dcqcn(cfg)
    cc.on_cnp(now=0.0)
    cc.on_cnp(now=cfg.rate_reduce_period_s / 2)
    assert cc.counters.rate_cuts == 1 and cc.counters.cnps_received == 2


def test_alpha_decays_by_one_minus_g_per_period_without_cnps() -> None:
    cfg = config(rate_timer_s=1e9)         # no rate increase to mix in
    cc = Dcqcn(cfg)
    cc.on_cnp(now=0.0)
    alpha = cc.alpha
    periods = 7
    cc.on_transmit(0, now=(periods + 0.5) * cfg.alpha_period_s)   # just after the 7th
    assert cc.alpha == pytest.approx(alpha * (1 - cfg.g) ** periods)


def test_a_cut_never_takes_more_than_max_cut() -> None:
    cc = Dcqcn(config(initial_alpha=1.0, max_cut=0.25))
    cc.on_cnp(now=0.0)
    assert cc.rate_bps == pytest.approx(0.75 * LINE)


def test_the_rate_never_falls_below_the_minimum() -> None:
    cfg = config(min_rate_bps=LINE / 10, initial_alpha=1.0)
    cc = Dcqcn(cfg)
    for i in range(20):
        cc.on_cnp(now=i * cfg.rate_reduce_period_s)
    assert cc.rate_bps == cfg.min_rate_bps


def timer_events(cc: Dcqcn, cut_at: float, count: int) -> None:
    """Tell the RP the time just after the rate timer's `count`-th expiry since a cut."""
    cc.on_transmit(0, now=cut_at + (count + 0.5) * cc.config.rate_timer_s)


def test_recovery_stages_fast_recovery_then_additive_then_hyper() -> None:
    # Byte counter out of reach: only the timer counts stages (T), B stays 0 < F.
    cfg = config(fast_recovery_steps=3, byte_counter_bytes=10**12, alpha_period_s=1e9)
    cc = Dcqcn(cfg)
    cc.on_cnp(now=0.0)
    target, rate = cc.target_bps, cc.rate_bps
    for _ in range(cfg.fast_recovery_steps):   # T = 1..F: rc halfway to rt, rt stays
        timer_events(cc, 0.0, cc._timer_stage + 1)
        rate = (target + rate) / 2
        assert (cc.target_bps, cc.rate_bps) == (target, pytest.approx(rate))
    assert cc.counters.fast_recovery_steps == cfg.fast_recovery_steps
    # T > F but B <= F: additive increase (rt capped at the line rate it started at).
    timer_events(cc, 0.0, cc._timer_stage + 1)
    assert cc.counters.additive_increases == 1 and cc.counters.hyper_increases == 0


def test_hyper_increase_when_both_counters_pass_f() -> None:
    cfg = config(fast_recovery_steps=1, alpha_period_s=1e9, frame_overhead_bytes=0)
    cc = Dcqcn(replace(cfg, line_rate_bps=LINE, ai_rate_bps=1.0, hai_rate_bps=1000.0))
    for i in range(6):                      # cut deep, so increases do not hit the line rate
        cc.on_cnp(now=i * cfg.rate_reduce_period_s)
    cut_at = 5 * cfg.rate_reduce_period_s
    timer_events(cc, cut_at, 2)             # T = 1: fast recovery; T = 2 > F, B = 0: additive
    before = cc.target_bps
    for _ in range(2):                      # B = 1: additive; B = 2, both > F: hyper
        cc.on_transmit(cfg.byte_counter_bytes, now=cut_at + 2.5 * cfg.rate_timer_s)
    assert cc.counters.hyper_increases == 1 and cc.counters.additive_increases == 2
    # hyper: rt + (min(T, B) - F) * hai = + 1 * 1000, after the additive + 1.
    assert cc.target_bps == pytest.approx(before + 1.0 + 1000.0)


def test_recovered_to_line_rate_stops_the_timer() -> None:
    cfg = config(alpha_period_s=1e9)
    cc = Dcqcn(cfg)
    cc.on_cnp(now=0.0)
    timer_events(cc, 0.0, 200)
    assert cc.rate_bps == LINE and cc.target_bps == LINE and cc._rate_timer_due is None


def test_the_byte_counter_can_finish_a_recovery() -> None:
    # The timer out of reach: only bytes sent count stages, until the rate is back at the
    # line rate, in the middle of one large transmission's byte stages.
    cfg = config(alpha_period_s=1e9, rate_timer_s=1e9)
    cc = Dcqcn(cfg)
    cc.on_cnp(now=0.0)
    assert cc.rate_bps < LINE
    cc.on_transmit(1000 * cfg.byte_counter_bytes, now=0.001)
    assert cc.rate_bps == LINE and cc._rate_timer_due is None
    assert cc.counters.fast_recovery_steps + cc.counters.additive_increases < 1000


def test_window_accounting_and_stats() -> None:
    cc = Dcqcn(config())
    cc.on_send(1000, 0.0)
    cc.on_ack(400, 0.01, False, 0.01)
    cc.on_loss(600, 0.02)
    stats = cc.stats()
    assert stats["inflight"] == 0 and stats["cwnd"] == math.inf
    assert stats["rate_bps"] == LINE and stats["loss_count"] == 1


@pytest.mark.parametrize("field, value", [("g", 0.0), ("g", 1.5), ("line_rate_bps", 0),
                                          ("byte_counter_bytes", 0), ("max_cut", -0.1),
                                          ("min_rate_bps", 2 * LINE)])
def test_bad_config_is_refused(field: str, value: object) -> None:
    with pytest.raises(DcqcnConfigError, match=field):
        config(**{field: value})
