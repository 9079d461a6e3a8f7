"""Unit tests for testbed.nic.cc.nscc (NSCC per UEC 1.0 §3.6.13, MRC checklist C1-C5).

Selecting NSCC by profile (C5) is tested with the registry, in test_cc_base.py."""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field, replace

import pytest

from testbed.nic.cc.nscc import Nscc, rtt_sample_is_unambiguous
from testbed.nic.cc.nscc_config import UINT32_MAX, NsccConfig, NsccConfigError

MTU = 4096
US = 1e-6

# 100 Gbit/s x 10 us with trimming: BDP 125 000 B, target 7.5 us, QA by
# delay switched off. eta is zeroed where a test wants one quadrant alone.
DC = NsccConfig.defaults(100e9, 10 * US, MTU, trimming=True)
DC_NO_ETA = replace(DC, eta=0.0)
BASE = DC.base_rtt_s
TARGET = DC.target_delay_s


def fresh(cfg: NsccConfig = DC_NO_ETA, cwnd: int = 100_000, inflight: int = 150_000) -> Nscc:
    cc = Nscc(cfg, now=0.0, initial_cwnd=cwnd)
    cc.on_send(inflight, 0.0)
    return cc


def ack_many(cc: Nscc, count: int, delay: float, ecn: bool, start: float,
             step: float = 0.1 * US, nbytes: int = MTU) -> float:
    """Feed ``count`` SACKs of ``nbytes`` with a fixed queueing delay."""
    now = start
    for _ in range(count):
        cc.on_ack(nbytes, BASE + delay, ecn, now)
        now += step
    return now


# --------------------------------------------------------------------------
# Four quadrants (C1)
# --------------------------------------------------------------------------


def test_no_ecn_below_target_is_proportional_increase() -> None:
    cc = fresh()
    headroom = TARGET / 2
    # 9 SACKs pass adjust_bytes_threshold (8 MTU) and apply the increase.
    ack_many(cc, 9, delay=headroom, ecn=False, start=1 * US)
    expected = 100_000 + DC.alpha * 9 * MTU * (TARGET - headroom) / 100_000
    assert cc.cwnd == pytest.approx(expected)
    assert cc.counters.prop_inc_count == 9
    assert (cc.counters.fair_inc_count, cc.counters.md_count, cc.counters.fi_count) == (0, 0, 0)


def test_proportional_increase_shrinks_as_delay_approaches_target() -> None:
    gains = []
    for delay in (0.2 * TARGET, 0.5 * TARGET, 0.9 * TARGET):
        cc = fresh()
        ack_many(cc, 9, delay=delay, ecn=False, start=1 * US)
        gains.append(cc.cwnd - 100_000)
    assert gains[0] > gains[1] > gains[2] > 0


def test_no_ecn_at_or_above_target_is_fair_increase() -> None:
    cc = fresh()
    ack_many(cc, 9, delay=2 * TARGET, ecn=False, start=1 * US)
    assert cc.cwnd == pytest.approx(100_000 + DC.fi * 9 * MTU / 100_000)
    assert cc.counters.fair_inc_count == 9
    assert (cc.counters.prop_inc_count, cc.counters.md_count) == (0, 0)


def test_fair_increase_adds_about_fi_per_window_whatever_the_window() -> None:
    # A whole window acked gains ~fi bytes for small and large windows
    # alike: the additive step that makes competing senders converge.
    small, large = fresh(cwnd=9 * MTU), fresh(cwnd=27 * MTU)
    ack_many(small, 9, delay=2 * TARGET, ecn=False, start=1 * US, nbytes=MTU)
    ack_many(large, 9, delay=2 * TARGET, ecn=False, start=1 * US, nbytes=3 * MTU)
    assert small.cwnd - 9 * MTU == pytest.approx(DC.fi)
    assert large.cwnd - 27 * MTU == pytest.approx(DC.fi, rel=0.05)


def test_ecn_below_target_holds_the_window() -> None:
    cc = fresh()
    ack_many(cc, 30, delay=TARGET / 2, ecn=True, start=1 * US, step=1 * US)
    assert cc.cwnd == 100_000
    assert cc.counters.hold_count == 30
    assert cc.counters.md_count == 0


def test_ecn_at_or_above_target_is_multiplicative_decrease() -> None:
    cc = fresh()
    # MD waits one base RTT after the last decrease (initially: creation).
    cc.on_ack(MTU, BASE + 2 * TARGET, True, 11 * US)
    # avg delay 15 us, target 7.5 us: factor 1 - 0.8 * 7.5 / 15 = 0.6.
    assert cc.cwnd == pytest.approx(60_000)
    assert cc.counters.md_count == 1
    assert (cc.counters.prop_inc_count, cc.counters.fair_inc_count) == (0, 0)


def test_multiplicative_decrease_never_below_max_md_jump_and_once_per_base_rtt() -> None:
    cc = fresh()
    cc.on_ack(MTU, BASE + 100 * TARGET, True, 11 * US)
    assert cc.cwnd == pytest.approx(100_000 * DC.max_md_jump)
    # More ECN + high delay inside the same base RTT: no further cut.
    ack_many(cc, 20, delay=100 * TARGET, ecn=True, start=12 * US, step=0.4 * US)
    assert cc.cwnd == pytest.approx(50_000)
    assert cc.counters.md_count == 1
    cc.on_ack(MTU, BASE + 100 * TARGET, True, 11 * US + BASE + 0.1 * US)
    assert cc.cwnd == pytest.approx(25_000)
    assert cc.counters.md_count == 2


@pytest.mark.parametrize("gamma_delay", [1.01, 1.5, 3.0, 10.0, 1000.0])
def test_one_md_step_is_bounded_by_max_md_jump(gamma_delay: float) -> None:
    cc = fresh()
    before = cc.cwnd
    cc.on_ack(MTU, BASE + gamma_delay * TARGET, True, 11 * US)
    assert before * DC.max_md_jump - 1e-9 <= cc.cwnd < before


def test_md_never_below_one_mtu() -> None:
    cc = fresh(cwnd=MTU + 100)
    cc.on_ack(MTU, BASE + 100 * TARGET, True, 11 * US)
    assert cc.cwnd == MTU


def test_fast_increase_after_a_window_of_near_zero_delay() -> None:
    cc = fresh(cwnd=20_000)
    ack_many(cc, 4, delay=0.0, ecn=False, start=1 * US)
    assert cc.counters.fi_count == 0          # 16 384 B < cwnd: not yet
    before = cc.cwnd
    ack_many(cc, 3, delay=0.0, ecn=False, start=2 * US)
    assert cc.counters.fi_count == 3
    assert cc.cwnd == pytest.approx(before + 3 * MTU * DC.fi_scale)


def test_fast_increase_stops_on_the_first_delayed_sample() -> None:
    cc = fresh(cwnd=20_000)
    ack_many(cc, 8, delay=0.0, ecn=False, start=1 * US)
    fast = cc.counters.fi_count
    ack_many(cc, 1, delay=TARGET / 2, ecn=False, start=3 * US)
    ack_many(cc, 1, delay=0.0, ecn=False, start=4 * US)
    assert cc.counters.fi_count == fast
    assert cc.counters.prop_inc_count >= 2


def test_eta_is_added_once_per_adjust_period() -> None:
    cc = fresh(cfg=DC)
    cc.on_ack(0, BASE + TARGET / 2, True, DC.adjust_period_threshold_s + 1 * US)
    assert cc.cwnd == pytest.approx(100_000 + DC.eta)
    cc.on_ack(0, BASE + TARGET / 2, True, DC.adjust_period_threshold_s + 2 * US)
    assert cc.cwnd == pytest.approx(100_000 + DC.eta)


def test_window_stays_within_mtu_and_max_cwnd_under_random_feedback() -> None:
    rng = random.Random(7)
    cc = Nscc(DC, now=0.0)
    now = 0.0
    for _ in range(5000):
        now += rng.uniform(0.05, 2.0) * US
        event = rng.random()
        if event < 0.05:
            cc.on_trim(MTU, now, last_hop=rng.random() < 0.5)
        elif event < 0.07:
            cc.on_loss(MTU, now)
        else:
            if cc.can_send(MTU):
                cc.on_send(MTU, now)
            cc.on_ack(MTU, BASE + rng.uniform(0, 5) * TARGET, rng.random() < 0.3, now,
                      rcv_cwnd_pen=rng.choice([0] * 20 + [64]), restore_cwnd=rng.random() < 0.1)
        assert MTU <= cc.cwnd <= DC.max_cwnd


# --------------------------------------------------------------------------
# RTT sampling and the SACK clock (C2)
# --------------------------------------------------------------------------


def test_inflight_follows_sends_and_received_bytes_and_may_go_negative() -> None:
    cc = Nscc(DC, now=0.0)
    cc.on_send(3 * MTU, 0.0)
    assert cc.inflight == 3 * MTU
    cc.on_ack(2 * MTU, BASE, False, 1 * US)
    assert cc.inflight == MTU
    cc.on_ack(MTU + 256, BASE, False, 2 * US)    # 256 B rounding of Rcvd_Bytes
    assert cc.inflight == -256


def test_can_send_compares_inflight_plus_packet_with_cwnd() -> None:
    cc = Nscc(DC, now=0.0, initial_cwnd=10 * MTU)
    cc.on_send(9 * MTU, 0.0)
    assert cc.can_send(MTU)
    cc.on_send(MTU, 0.0)
    assert not cc.can_send(MTU)
    assert cc.can_send(0)


def test_service_time_is_not_queueing_delay() -> None:
    cc = fresh()
    service = 5 * TARGET
    cc.on_ack(MTU, BASE + service, True, 11 * US, service_time_s=service)
    assert cc.avg_delay == 0.0
    assert cc.counters.md_count == 0 and cc.counters.hold_count == 1


def test_ambiguous_or_missing_rtt_samples_are_ignored() -> None:
    cc = fresh()
    cc.on_ack(MTU, BASE + 100 * TARGET, True, 11 * US, retransmitted=True)
    cc.on_ack(MTU, None, True, 12 * US)
    assert cc.cwnd == 100_000
    assert cc.avg_delay == 0.0
    assert cc.counters.invalid_rtt_samples == 2
    assert cc.inflight == 150_000 - 2 * MTU        # the ACK clock still runs


def test_rtt_sample_rule_for_retransmits() -> None:
    assert rtt_sample_is_unambiguous(0, False)
    assert rtt_sample_is_unambiguous(1, True)
    assert not rtt_sample_is_unambiguous(1, False)
    assert not rtt_sample_is_unambiguous(0, True)
    assert not rtt_sample_is_unambiguous(2, True)


def test_base_rtt_never_drops_below_config_by_default() -> None:
    cc = fresh()
    cc.on_ack(MTU, BASE / 2, False, 1 * US)
    assert cc.base_rtt == BASE
    assert cc.max_wnd == DC.max_cwnd


def test_base_rtt_tracks_min_sample_when_floor_lowered() -> None:
    cc = Nscc(DC, now=0.0, base_rtt_floor_s=0.0)
    cc.on_send(10 * MTU, 0.0)
    cc.on_ack(MTU, BASE / 2, False, 1 * US)
    assert cc.base_rtt == pytest.approx(BASE / 2)
    assert cc.max_wnd == pytest.approx(DC.max_cwnd / 2)
    assert cc.cwnd <= cc.max_wnd
    cc.on_ack(MTU, BASE, False, 2 * US)
    assert cc.base_rtt == pytest.approx(BASE / 2)


# --------------------------------------------------------------------------
# Trim, loss, quick adapt (C3)
# --------------------------------------------------------------------------


def test_trim_without_quick_adapt_cuts_one_packet() -> None:
    cc = fresh()
    cc.on_trim(MTU, 1 * US, last_hop=False)      # no QA window measured yet
    assert cc.cwnd == 100_000 - MTU
    assert cc.inflight == 150_000 - MTU
    assert cc.counters.trim_count == 1 and cc.counters.qa_count == 0


def test_last_hop_trim_also_cuts_without_rccc() -> None:
    cc = fresh()
    cc.on_trim(MTU, 1 * US, last_hop=True)
    assert cc.cwnd == 100_000 - MTU
    assert cc.counters.last_hop_trim_count == 1


def test_inferred_loss_cuts_one_packet_down_to_mtu() -> None:
    cc = fresh(cwnd=2 * MTU + 100)
    cc.on_loss(MTU, 1 * US)
    assert cc.cwnd == MTU + 100
    assert cc.inflight == 150_000 - MTU
    cc.on_loss(MTU, 2 * US)
    assert cc.cwnd == MTU
    assert cc.counters.qa_count == 0


def open_qa_window(cc: Nscc, delivered_packets: int) -> None:
    """Start a QA window at 1 us, then deliver ``delivered_packets`` in it."""
    cc.on_ack(MTU, BASE, False, 1 * US)          # window ends 1 + 10 + 7.5 us
    ack_many(cc, delivered_packets, delay=0.0, ecn=False, start=2 * US)


def test_quick_adapt_sets_cwnd_to_bytes_delivered_in_last_rtt() -> None:
    cc = Nscc(DC, now=0.0)
    cc.on_send(40 * MTU, 0.0)
    open_qa_window(cc, 3)
    cc.on_trim(MTU, 20 * US, last_hop=False)
    assert cc.counters.qa_count == 1
    assert cc.cwnd == 3 * MTU
    # Feedback from packets already queued is ignored: no MD, no trim cut.
    cc.on_ack(MTU, BASE + 100 * TARGET, True, 31 * US)
    cc.on_trim(MTU, 32 * US, last_hop=False)
    assert cc.cwnd == 3 * MTU
    assert cc.counters.md_count == 0
    assert cc.counters.ignored_feedback == 2


def test_quick_adapt_fires_at_most_once_per_rtt() -> None:
    cc = Nscc(DC_NO_ETA, now=0.0)
    cc.on_send(6 * MTU, 0.0)
    open_qa_window(cc, 3)
    cc.on_trim(MTU, 20 * US, last_hop=False)     # QA; 1 MTU left to ignore
    assert (cc.counters.qa_count, cc.cwnd) == (1, 3 * MTU)
    cc.on_ack(MTU, BASE, False, 21 * US)         # ignore phase over
    before = cc.cwnd
    cc.on_trim(MTU, 22 * US, last_hop=False)     # same QA window: plain cut
    assert cc.counters.qa_count == 1
    assert cc.cwnd == before - MTU
    # That trim latched a QA request [UEC trigger_qa]; it fires with the
    # first feedback of the next window, sized by what arrived since 20 us.
    cc.on_send(4 * MTU, 22 * US)
    cc.on_ack(MTU, BASE, False, 40 * US)
    assert cc.counters.qa_count == 2
    assert cc.cwnd == 2 * MTU


def test_quick_adapt_storm_stays_one_per_window() -> None:
    # A trim every 0.5 us and a SACK every 4 us: delivered bytes per window
    # stay under the gate, so QA is wanted all the time, yet fires at most
    # once per QA window (base RTT + target).
    cc = Nscc(DC, now=0.0)
    cc.on_send(400 * MTU, 0.0)
    window = BASE + TARGET
    qa_times: list[float] = []
    for tick in range(1, 800):
        now = tick * 0.5 * US
        qa_before = cc.counters.qa_count
        if tick % 8 == 0:
            cc.on_ack(MTU, BASE + TARGET, False, now)
        cc.on_trim(MTU, now, last_hop=False)
        if cc.counters.qa_count > qa_before:
            qa_times.append(now)
    assert len(qa_times) >= 5
    gaps = [later - earlier for earlier, later in zip(qa_times, qa_times[1:])]
    assert min(gaps) >= window - 1e-12


def test_quick_adapt_needs_a_collapse_below_max_cwnd_gate() -> None:
    cc = Nscc(DC, now=0.0)
    cc.on_send(40 * MTU, 0.0)
    gate_packets = (DC.max_cwnd >> DC.qa_gate) // MTU + 1
    open_qa_window(cc, gate_packets)
    cc.on_trim(MTU, 20 * US, last_hop=False)
    assert cc.counters.qa_count == 0
    assert cc.cwnd == DC.max_cwnd - MTU


def test_quick_adapt_on_delay_above_qa_threshold_without_trimming() -> None:
    cfg = NsccConfig.defaults(100e9, 10 * US, MTU, trimming=False)
    cc = Nscc(cfg, now=0.0)
    cc.on_send(40 * MTU, 0.0)
    cc.on_ack(MTU, cfg.base_rtt_s, False, 1 * US)   # window ends 21 us
    ack_many(cc, 2, delay=0.0, ecn=False, start=2 * US)
    cc.on_ack(MTU, cfg.base_rtt_s + 1.01 * cfg.qa_threshold_s, False, 25 * US)
    assert cc.counters.qa_count == 1
    assert cc.cwnd == 3 * MTU


def test_disable_qa_switches_quick_adapt_off() -> None:
    cc = Nscc(replace(DC, disable_qa=True), now=0.0)
    cc.on_send(40 * MTU, 0.0)
    open_qa_window(cc, 3)
    cc.on_trim(MTU, 20 * US, last_hop=False)
    assert cc.counters.qa_count == 0
    assert cc.cwnd == DC.max_cwnd - MTU


# --------------------------------------------------------------------------
# Receiver penalty (C4)
# --------------------------------------------------------------------------


def one_rtt_of_penalised_acks(cc: Nscc, pen: int, packets: int) -> None:
    """ACK a full window with ``pen`` while the sender refills as allowed."""
    now = 1 * US
    for _ in range(packets):
        cc.on_ack(MTU, BASE, False, now, rcv_cwnd_pen=pen)
        while cc.can_send(MTU):
            cc.on_send(MTU, now)
        now += 0.2 * US


def test_receiver_penalty_64_for_one_rtt_halves_cwnd_and_restore_brings_it_back() -> None:
    window = 40 * MTU
    cc = Nscc(DC_NO_ETA, now=0.0, initial_cwnd=window)
    cc.on_send(window, 0.0)
    one_rtt_of_penalised_acks(cc, 64, 40)
    assert cc.cwnd == pytest.approx(window / 2)
    assert cc.receiver_limited
    assert cc.counters.penalty_count == 40
    assert cc.counters.prop_inc_count == 0 and cc.counters.fi_count == 0
    cc.on_receiver_penalty(0, 10 * US, restore=True)
    assert cc.cwnd == window
    assert not cc.receiver_limited
    assert cc.counters.restore_count == 1


def test_receiver_penalty_127_leaves_about_one_packet_per_rtt() -> None:
    window = 40 * MTU
    cc = Nscc(DC_NO_ETA, now=0.0, initial_cwnd=window)
    cc.on_send(window, 0.0)
    one_rtt_of_penalised_acks(cc, 127, 40)
    assert cc.cwnd == MTU


def test_restore_through_a_sack_then_normal_control_resumes() -> None:
    window = 40 * MTU
    cc = Nscc(DC_NO_ETA, now=0.0, initial_cwnd=window)
    cc.on_send(window, 0.0)
    one_rtt_of_penalised_acks(cc, 64, 40)
    cc.on_ack(MTU, BASE + TARGET / 2, False, 20 * US, restore_cwnd=True)
    assert window <= cc.cwnd < window + MTU
    assert cc.counters.prop_inc_count == 1


def test_penalty_on_an_idle_window_first_clamps_to_what_is_in_use() -> None:
    cc = Nscc(DC_NO_ETA, now=0.0, initial_cwnd=40 * MTU)
    cc.on_send(4 * MTU, 0.0)
    cc.on_ack(MTU, BASE, False, 1 * US, rcv_cwnd_pen=64)
    assert cc.cwnd == pytest.approx(4 * MTU - MTU / 2)


def test_restore_without_a_saved_window_is_a_no_op() -> None:
    cc = fresh()
    assert cc.on_receiver_penalty(0, 1 * US, restore=True) is False
    assert cc.cwnd == 100_000 and cc.counters.restore_count == 0


@pytest.mark.parametrize("pen", [-1, 128])
def test_receiver_penalty_range_is_checked(pen: int) -> None:
    with pytest.raises(ValueError, match="rcv_cwnd_pen"):
        fresh().on_receiver_penalty(pen, 0.0)


def test_receiver_penalty_of_another_type_is_refused() -> None:
    # Pure Python: the range check names the field. The compiled core
    # (testbed/native_core.py) refuses a float at its typed parameter first.
    with pytest.raises((ValueError, TypeError)):
        fresh().on_receiver_penalty(1.5, 0.0)  # type: ignore[arg-type]


# --------------------------------------------------------------------------
# Stats
# --------------------------------------------------------------------------


def test_stats_exports_window_and_counters() -> None:
    cc = fresh()
    cc.on_ack(MTU, BASE + 2 * TARGET, True, 11 * US)
    stats = cc.stats()
    assert stats["cwnd"] == cc.cwnd and stats["inflight"] == cc.inflight
    assert stats["md_count"] == 1 and stats["qa_count"] == 0 and stats["fi_count"] == 0


# --------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------


@pytest.mark.parametrize("field_name, bad", [
    ("disable_qa", 1),
    ("adjust_bytes_threshold", 0),
    ("adjust_period_threshold", 1.5),
    ("base_rtt", 0),
    ("base_rtt", UINT32_MAX + 1),
    ("eta", -1.0),
    ("fi", math.nan),
    ("fi_scale", "0.2"),
    ("gamma", 1.5),
    ("max_md_jump", 0.0),
    ("max_md_jump", 1.01),
    ("max_cwnd", MTU - 1),
    ("qa_gate", 256),
    ("qa_threshold", -1),
    ("target_delay", True),
    ("mtu", 0),
])
def test_config_validation_names_the_field(field_name: str, bad: object) -> None:
    with pytest.raises(NsccConfigError, match=rf"NsccConfig\.{field_name}\b"):
        replace(DC, **{field_name: bad})


def test_defaults_rejects_nonsense_inputs() -> None:
    with pytest.raises(NsccConfigError, match="link_rate_bps"):
        NsccConfig.defaults(0, 10 * US, MTU, True)
    with pytest.raises(NsccConfigError, match="base_rtt_s"):
        NsccConfig.defaults(100e9, -1.0, MTU, True)
    with pytest.raises(NsccConfigError, match="mtu"):
        NsccConfig.defaults(100e9, 10 * US, 0, True)


def test_defaults_100g_10us() -> None:
    # BDP = 12.5e9 B/s x 10 us = 125 000 B; scaling_a = 125 000 / 150 000.
    a = 125_000 / 150_000
    cfg = NsccConfig.defaults(100e9, 10e-6, 4096, trimming=True)
    assert cfg.max_cwnd == 187_500
    assert cfg.base_rtt == 10_000
    assert cfg.target_delay == 7_500
    assert cfg.adjust_period_threshold == 10_000
    assert cfg.adjust_bytes_threshold == 8 * 4096
    assert cfg.qa_threshold == UINT32_MAX          # QA by delay off with trimming
    assert cfg.eta == pytest.approx(0.15 * 4096 * a) == pytest.approx(512.0)
    assert cfg.fi == pytest.approx(5 * 4096 * a)
    assert cfg.fi_scale == pytest.approx(0.25 * a)
    assert (cfg.gamma, cfg.max_md_jump, cfg.qa_gate, cfg.disable_qa) == (0.8, 0.5, 3, False)
    assert cfg.scaling_a == pytest.approx(a)
    assert cfg.scaling_b == pytest.approx(7.5 / 12)
    assert cfg.alpha == pytest.approx(4 * a * (7.5 / 12) * 4096 / 7.5e-6)
    no_trim = NsccConfig.defaults(100e9, 10e-6, 4096, trimming=False)
    assert no_trim.target_delay == 10_000
    assert no_trim.qa_threshold == 40_000


def test_defaults_emulated_50m_1ms() -> None:
    # BDP = 6.25e6 B/s x 1 ms = 6 250 B; no trimming qdisc in Linux.
    a = 6_250 / 150_000
    cfg = NsccConfig.defaults(50e6, 1e-3, 1500, trimming=False)
    assert cfg.max_cwnd == 9_375
    assert cfg.base_rtt == 1_000_000
    assert cfg.target_delay == 1_000_000
    assert cfg.qa_threshold == 4_000_000
    assert cfg.adjust_period_threshold == 1_000_000
    assert cfg.adjust_bytes_threshold == 12_000
    assert cfg.eta == pytest.approx(9.375)
    assert cfg.fi == pytest.approx(312.5)
    assert cfg.fi_scale == pytest.approx(0.25 * a)
    assert cfg.scaling_b == pytest.approx(1e-3 / 12e-6)
    assert cfg.alpha == pytest.approx(4 * a * (1e-3 / 12e-6) * 1500 / 1e-3)
    trimmed = NsccConfig.defaults(50e6, 1e-3, 1500, trimming=True)
    assert trimmed.target_delay == 750_000
    assert trimmed.qa_threshold == UINT32_MAX


# --------------------------------------------------------------------------
# Closed loop: 7 senders through one bottleneck
# --------------------------------------------------------------------------


@dataclass
class Bottleneck:
    """FIFO at ``rate`` B/s with RED-style ECN marking at dequeue and trimming."""

    rate: float
    bdp: float
    ecn_min_bdp: float = 0.2      # test choice: mark from 20 % of a BDP ...
    ecn_max_bdp: float = 0.8      # ... always above 80 %
    trim_bdp: float = 3.0         # trim above 3 BDP of backlog
    link_free: float = 0.0
    rng: random.Random = field(default_factory=lambda: random.Random(1))

    def backlog(self, now: float) -> float:
        return max(0.0, self.link_free - now) * self.rate

    def enqueue(self, nbytes: int, now: float) -> float | None:
        """Departure time, or None when the packet is trimmed."""
        if self.backlog(now) > self.trim_bdp * self.bdp:
            return None
        self.link_free = max(now, self.link_free) + nbytes / self.rate
        return self.link_free

    def ecn_at_dequeue(self, now: float) -> bool:
        fill = self.backlog(now) / self.bdp
        if fill <= self.ecn_min_bdp:
            return False
        if fill >= self.ecn_max_bdp:
            return True
        return self.rng.random() < (fill - self.ecn_min_bdp) / (self.ecn_max_bdp - self.ecn_min_bdp)


@dataclass
class LoopResult:
    cfg: NsccConfig
    delivered: list[int]
    queue_delays: list[float]
    controllers: list[Nscc]
    capacity_bytes: float


def run_shared_bottleneck(senders: int, stagger_rtts: float, rtts: int) -> LoopResult:
    rate_bps, prop_rtt = 100e9, 10 * US
    rate = rate_bps / 8
    service = MTU / rate
    base = prop_rtt + service                    # unloaded RTT of one MTU
    cfg = NsccConfig.defaults(rate_bps, base, MTU, trimming=True)
    link = Bottleneck(rate=rate, bdp=rate * base)
    end, warm_up = rtts * base, rtts * base / 2
    events: list[tuple[float, int, str, int, float, bool]] = []
    order = 0

    def schedule(when: float, kind: str, sender: int, sent_at: float = 0.0,
                 ecn: bool = False) -> None:
        nonlocal order
        order += 1
        heapq.heappush(events, (when, order, kind, sender, sent_at, ecn))

    controllers: list[Nscc] = []
    for i in range(senders):
        controllers.append(Nscc(cfg, now=i * stagger_rtts * base))
        schedule(i * stagger_rtts * base, "start", i)
    delivered, queue_delays = [0] * senders, []

    def pump(i: int, now: float) -> None:
        while controllers[i].can_send(MTU):
            controllers[i].on_send(MTU, now)
            departure = link.enqueue(MTU, now)
            if departure is None:                # trimmed header returns fast
                schedule(now + prop_rtt, "trim", i)
            else:
                schedule(departure, "dequeue", i, now)

    while events:
        now, _, kind, i, sent_at, ecn = heapq.heappop(events)
        if now > end:
            break
        if kind == "dequeue":
            if now > warm_up:
                queue_delays.append(now - sent_at - service)
            schedule(now + prop_rtt, "ack", i, sent_at, link.ecn_at_dequeue(now))
            continue
        if kind == "ack":
            delivered[i] += MTU if now > warm_up else 0
            controllers[i].on_ack(MTU, now - sent_at, ecn, now)
        elif kind == "trim":
            controllers[i].on_trim(MTU, now, last_hop=False)
        pump(i, now)
    return LoopResult(cfg, delivered, queue_delays, controllers, rate * (end - warm_up))


def assert_fair_and_bounded(result: LoopResult, senders: int) -> None:
    total = sum(result.delivered)
    assert total > 0.95 * result.capacity_bytes                  # link kept busy
    for share in result.delivered:
        assert abs(share / total - 1 / senders) <= 0.25 / senders
    target = result.cfg.target_delay_s
    mean_delay = sum(result.queue_delays) / len(result.queue_delays)
    assert 0.5 * target <= mean_delay <= 1.5 * target
    assert max(result.queue_delays) <= 2.0 * target


def test_seven_staggered_senders_converge_to_fair_share_near_target_delay() -> None:
    result = run_shared_bottleneck(senders=7, stagger_rtts=10, rtts=2000)
    assert_fair_and_bounded(result, 7)
    assert all(cc.counters.md_count > 0 for cc in result.controllers)


def test_synchronised_seven_to_one_incast_quick_adapts_then_shares_fairly() -> None:
    result = run_shared_bottleneck(senders=7, stagger_rtts=0, rtts=2000)
    assert_fair_and_bounded(result, 7)
    # Every sender starts at max_cwnd (10.5 BDP in total): some get trimmed
    # and must have quick-adapted, once each.
    trimmed = [cc for cc in result.controllers if cc.counters.trim_count]
    assert trimmed
    assert all(cc.counters.qa_count >= 1 for cc in trimmed)


def test_delay_histogram_counts_every_sample_in_quarter_targets():
    from testbed.nic.cc.nscc import DELAY_BUCKETS_PER_TARGET, delay_percentile
    cfg = NsccConfig.defaults(link_rate_bps=10e6, base_rtt_s=0.02, mtu=1500, trimming=True)
    cc = Nscc(cfg, now=0.0)
    target = cfg.target_delay_s
    for i, delay in enumerate((0.1 * target, 0.1 * target, 0.9 * target, 3.0 * target)):
        cc.on_ack(1500, cfg.base_rtt_s + delay, False, 0.1 * (i + 1))
    hist = cc.delay_histogram
    assert sum(hist) == 4
    assert hist[0] == 2 and hist[3] == 1 and hist[12] == 1
    assert delay_percentile(hist, 0.5) == 1 / DELAY_BUCKETS_PER_TARGET
    assert delay_percentile(hist, 0.75) == 1.0
    assert delay_percentile(hist, 0.99) == 13 / DELAY_BUCKETS_PER_TARGET
    assert delay_percentile([0] * len(hist), 0.5) is None
