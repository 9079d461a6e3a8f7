"""RC (one path, go-back-N) and ECMP (hashed path, selective repeat) baselines."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from testbed.nic.completion import WcStatus
from testbed.nic.endpoint import Endpoint, connect
from testbed.nic.loopback import Loopback, make_paths
from testbed.nic.qp_state import QpState, RetryConfig
from testbed.nic.retry_timer import time_to_error
from testbed.nic.routes import ecmp_route, five_tuple_hash, flattened_paths, rocev2_source_port
from testbed.nic.wire import max_payload

from testbed.nic.qp_pair import (
    PAIR_PROFILE,
    RKEY,
    Trace,
    data_psn,
    done,
    is_data,
    is_retransmit,
    make_pair,
    make_pair_asymmetric,
    payload,
)

P = max_payload(1500)
BASE, RETRY = 2e-3, RetryConfig(3, 3)
KILL_AT = 3e-3


@pytest.mark.parametrize("transport", ["rc", "ecmp"])
def test_dead_path_exhausts_the_retry_budget(transport: str) -> None:
    pair = make_pair(transport, mr_size=4 << 20, timeout_s=BASE, retry=RETRY)
    pinned = pair.qa.pinned_route.path
    pair.qa.post_write(payload(2 << 20), 0, RKEY, wr_id=9)
    loop = Loopback([pair.a, pair.b], rate_bps=1e9)
    trace = Trace().attach(loop)
    loop.at(KILL_AT, lambda: loop.kill_path(pinned))
    loop.run(stop=lambda: pair.qa.state is QpState.ERROR)
    [wc] = pair.a.poll_cq()
    assert (wc.wr_id, wc.status, wc.status_text) == (9, WcStatus.RETRY_EXC_ERR,
                                                       "retry counter exceeded")
    # The budget runs from the last acknowledgement, a round trip around the kill.
    assert wc.time == pytest.approx(KILL_AT + time_to_error(BASE, RETRY), abs=0.5e-3)
    assert {d.path for d in trace.data if d.src == "A"} == {pinned}     # never steered
    assert pair.qa.counters.retry_timeouts == RETRY.budget


def test_rc_recovers_a_single_loss_by_going_back_n() -> None:
    pair = make_pair("rc")
    data = payload(40 * P)
    pair.qa.post_write(data, 0, RKEY)
    lost = pair.qa.requester.window.wire_psn(10)
    loop = Loopback([pair.a, pair.b])
    loop.drop_if = lambda now, src, out: (is_data(out) and not is_retransmit(out)
                                          and data_psn(out) == lost)
    trace = Trace().attach(loop)
    loop.run(stop=done(pair.a))
    assert pair.mr.buf[:len(data)] == data
    # All 40 left at once; the NAK for PSN 10 sends 10..39 again: 30 packets, one round.
    resent = [d.psn for d in trace.retransmissions()]
    assert resent == [pair.qa.requester.window.wire_psn(i) for i in range(10, 40)]
    assert pair.qa.counters.go_back_n_rounds == 1
    assert pair.qb.counters.nacks_sent_by_reason["NO_BITMAP"] == 1       # one NAK per gap
    assert pair.qb.counters.out_of_order_received == 29
    assert pair.qa.counters.packet_timeouts == 0


@pytest.mark.parametrize("transport, unit_s", [("rc", 4.096e-6), ("mrc", 1.024e-6),
                                               ("ecmp", 1.024e-6)])
def test_the_timeout_exponent_counts_in_the_transports_unit(transport: str,
                                                             unit_s: float) -> None:
    # verbs (IBA): 4.096 us x 2^timeout for an RC QP; mrc.h: 1.024 us x 2^timeout.
    pair = make_pair(transport, timeout=14, timeout_s=None)
    assert pair.qa.rts.timeout_s == pytest.approx(unit_s * 2 ** 14)


def test_rc_retry_counter_restarts_on_progress() -> None:
    # Budget of one retry (verbs retry_cnt 1): five separate losses, each answered by a
    # sequence-error NAK that spends the retry, each followed by progress that restores
    # it. Without the restart the second loss would end the QP in RETRY_EXC_ERR.
    pair = make_pair("rc", retry=RetryConfig.verbs(1))
    data = payload(60 * P)
    pair.qa.post_write(data, 0, RKEY)
    window = pair.qa.requester.window
    lost = {window.wire_psn(i) for i in (5, 15, 25, 35, 45)}
    loop = Loopback([pair.a, pair.b], rate_bps=1e9)
    loop.drop_if = lambda now, src, out: (is_data(out) and not is_retransmit(out)
                                          and data_psn(out) in lost)
    loop.run(stop=done(pair.a))
    assert [wc.ok for wc in pair.a.poll_cq()] == [True]
    assert pair.mr.buf[:len(data)] == data
    assert pair.qb.counters.nacks_sent_by_reason["NO_BITMAP"] == len(lost)


def test_rc_survives_random_loss_on_a_live_path() -> None:
    pair = make_pair("rc", mr_size=2 << 20)
    data = payload(1 << 20, seed=2)
    pair.qa.post_write(data, 0, RKEY)
    loop = Loopback([pair.a, pair.b], seed=3, loss=0.01, rate_bps=1e9)
    loop.run(stop=done(pair.a))
    assert [wc.ok for wc in pair.a.poll_cq()] == [True]
    assert pair.mr.buf[:len(data)] == data
    assert pair.qa.counters.go_back_n_rounds > 0


def test_rc_uses_the_path_it_is_given() -> None:
    paths = make_paths("A", "B", 2, 4)
    pair = make_pair_asymmetric("rc", replace(PAIR_PROFILE, pinned_path=(2, paths[2][3])),
                                PAIR_PROFILE)
    pair.qa.post_write(payload(20 * P), 0, RKEY)
    loop = Loopback([pair.a, pair.b])
    trace = Trace().attach(loop)
    loop.run(stop=done(pair.a))
    assert {(d.path, d.ev_id) for d in trace.data if d.src == "A"} == {
        (paths[2][3], pair.qa.pinned_route.ev_id)}


def test_ecmp_retransmits_selectively_on_its_one_path() -> None:
    pair = make_pair("ecmp", mr_size=2 << 20)
    data = payload(1 << 20, seed=5)
    pair.qa.post_write(data, 0, RKEY)
    loop = Loopback([pair.a, pair.b], seed=8, loss=0.01, rate_bps=1e9)
    trace = Trace().attach(loop)
    loop.run(stop=done(pair.a))
    assert pair.mr.buf[:len(data)] == data
    assert {d.path for d in trace.data if d.src == "A"} == {pair.qa.pinned_route.path}
    assert pair.qa.counters.go_back_n_rounds == 0
    assert 0 < pair.qa.counters.retransmitted_packets < 3 * loop.dropped_random
    assert pair.qa.ev_table is None


def test_ecmp_hash_is_deterministic_and_spreads_flows() -> None:
    paths = make_paths("A", "B", 2, 4)
    flow = ("fd00::1", "fd00::2", 50000)
    assert five_tuple_hash(*flow) == five_tuple_hash(*flow)
    assert five_tuple_hash(*flow) != five_tuple_hash("fd00::1", "fd00::2", 50001)
    sports = [rocev2_source_port(0x100 + i, 0x200 + i) for i in range(256)]
    assert all(0xC000 <= s <= 0xFFFF for s in sports) and len(set(sports)) > 240
    routes = [ecmp_route(paths, "A", "B", s) for s in sports]
    again = [ecmp_route(paths, "A", "B", s) for s in sports]
    assert [(r.plane, r.path) for r in routes] == [(r.plane, r.path) for r in again]
    load = Counter(r.path for r in routes)
    assert set(load) == {p for _, p in flattened_paths(paths)}          # every path used
    assert max(load.values()) <= 2 * 256 / 8 and min(load.values()) >= 256 / 8 / 2
    assert all(r.ev_id == s for r, s in zip(routes, sports))           # EV = UDP source port


def test_ecmp_qps_between_two_hosts_land_on_different_paths() -> None:
    a, b = Endpoint("A"), Endpoint("B")
    paths_ab, paths_ba = make_paths("A", "B", 2, 4), make_paths("B", "A", 2, 4)
    chosen = Counter(connect(a, b, paths_ab, paths_ba, "ecmp")[0].pinned_route.path
                     for _ in range(16))
    assert len(chosen) >= 5                      # 16 flows over 8 paths: some collide
    assert max(chosen.values()) >= 2
