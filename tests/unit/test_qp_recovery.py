"""SACK/NACK recovery, probes and congestion control on a sprayed QP: the SACK bitmap and
exactly the lost PSNs resent, each NACK reason's effect, retransmission on a fresh EV and the
retry budget, reliability probes that consume no PSN, recovery with trim NACKs off.
"""

from __future__ import annotations

import pytest

from testbed.nic.cc import NSCC_ALGORITHM, CcProfile, NsccConfig, NullCc
from testbed.nic.completion import WcStatus
from testbed.nic.ev_table import EvState, EvTableConfig
from testbed.nic.loopback import Loopback
from testbed.nic.qp_state import QpState, RetryConfig
from testbed.nic.transport_config import TransportConfig
from testbed.nic.wire import (
    EvProbe,
    EvProbeReply,
    Nack,
    NackReason,
    Sack,
    decode,
    max_payload,
    psn_add,
)

from testbed.nic.qp_pair import (
    RKEY,
    Pair,
    Trace,
    data_psn,
    done,
    is_data,
    is_retransmit,
    make_pair,
    payload,
)

P = max_payload(1500)


def test_reference_worked_example_psn_5_and_8_lost() -> None:
    """§5: PSNs 0-11 sent, 5 and 8 lost => SACK cack 4 / offset 1 / bitmap 0x76, two resends."""
    pair = make_pair(psn_a=0)
    data = payload(12 * P)
    pair.qa.post_write(data, 0, RKEY, wr_id=1)
    loop = Loopback([pair.a, pair.b], delay_s=50e-6)
    loop.drop_if = lambda now, src, out: (is_data(out) and not is_retransmit(out)
                                          and data_psn(out) in (5, 8))
    trace = Trace().attach(loop)
    loop.run(stop=done(pair.a))
    first = trace.first_sends()
    assert sorted(first) == list(range(12))
    rtx = trace.retransmissions()
    assert [d.psn for d in rtx] == [5, 8]
    assert pair.qa.counters.retransmitted_packets == 2
    assert pair.qa.counters.packet_timeouts == 0
    for d in rtx:
        assert d.ev_id != first[d.psn].ev_id                 # never the EV it was lost on
    assert any((s.cack_psn, s.sack_offset, s.bitmap) == (4, 1, 0x76) for _, s in trace.sacks)
    assert pair.mr.buf[:len(data)] == data
    assert [(wc.wr_id, wc.ok) for wc in pair.a.poll_cq()] == [(1, True)]


def test_a_lost_retransmission_is_repaired_by_later_arrivals_not_its_timer() -> None:
    """PSN 5 is lost, and so is its first retransmission (as on a second dead EV not yet
    demoted): the packets sent after that retransmission arrive, which says it is lost
    too (RACK's rule), and PSN 5 goes out a third time long before any packet timeout."""
    pair = make_pair(psn_a=0, mr_size=1 << 20)
    data = payload(600 * P)
    pair.qa.post_write(data, 0, RKEY, wr_id=1)
    # At a line rate, new packets keep leaving after the retransmission: their SACKs
    # are the evidence (unpaced, the whole MPR window would be out before the first SACK).
    loop = Loopback([pair.a, pair.b], delay_s=50e-6, rate_bps=1e9)
    copies = {5: 0}

    def lose_twice(now, src, out) -> bool:
        if not is_data(out) or data_psn(out) != 5:
            return False
        copies[5] += 1
        return copies[5] <= 2
    loop.drop_if = lose_twice
    trace = Trace().attach(loop)
    loop.run(stop=done(pair.a))
    assert [d.psn for d in trace.retransmissions()] == [5, 5]
    assert pair.qa.counters.packet_timeouts == 0
    assert pair.qa.counters.fast_retransmits == 2
    assert pair.mr.buf[:len(data)] == data
    assert [(wc.wr_id, wc.ok) for wc in pair.a.poll_cq()] == [(1, True)]


def test_four_mib_write_imm_over_reordering_lossy_planes() -> None:
    pair = make_pair(mr_size=4 << 20)
    data = payload(4 << 20, seed=9)
    pair.qb.post_recv(77)
    pair.qa.post_write(data, 0, RKEY, imm=0xC0FFEE, wr_id=78)
    loop = Loopback([pair.a, pair.b], seed=11, jitter_s=100e-6, loss=0.01, rate_bps=1e9)
    trace = Trace().attach(loop)
    end = loop.run(stop=done(pair.a, pair.b))
    loop.run(until=end + 0.05)                               # nothing completes twice
    assert bytes(pair.mr.buf) == data
    [wc_a] = pair.a.poll_cq()
    [wc_b] = pair.b.poll_cq()
    assert (wc_a.wr_id, wc_a.status, wc_a.byte_len) == (78, WcStatus.SUCCESS, 4 << 20)
    assert (wc_b.wr_id, wc_b.imm_data, wc_b.byte_len) == (77, 0xC0FFEE, 4 << 20)
    assert loop.dropped_random > 50                         # the loss really happened
    assert trace.retransmissions()
    assert trace.retransmits_on_previous_ev() == []
    assert len({d.ev_id for d in trace.data if d.src == "A"}) > 8     # sprayed over many EVs
    assert pair.qa.counters.retransmitted_packets < 0.05 * (len(data) // P)


def first_packets(pair, npackets: int = 4):
    pair.qa.post_write(payload(npackets * P), 0, RKEY, wr_id=1)
    return pair.a.poll_tx(0.0, 100)


def inject_nack(pair, out, reason: NackReason, ts_echo: int | None = None) -> list:
    pkt = decode(out.data)
    first_psn = pair.qa.requester.window.wire_psn(0)
    nack = Nack(pair.qa.qpn, pkt.psn, reason, out.ev_id, psn_add(first_psn, -1),
                pkt.tx_timestamp if ts_echo is None else ts_echo)
    pair.a.on_packet(1e-4, nack.encode(), 0x8000_0000, 1, "B")
    return pair.a.poll_tx(1e-4, 100)


@pytest.mark.parametrize("reason, ev_state, charged", [
    (NackReason.TRIMMED, EvState.SKIP, 0),
    (NackReason.TRIMMED_LASTHOP, EvState.GOOD, 0),
    (NackReason.NO_BITMAP, EvState.GOOD, 1),
    (NackReason.NO_PKT_BUFFER, EvState.GOOD, 1),
    (NackReason.NO_RESOURCE, EvState.GOOD, 1),
    (NackReason.PSN_OOR_WINDOW, EvState.GOOD, 0),
])
def test_nack_reasons_and_reactions(reason: NackReason, ev_state: EvState, charged: int) -> None:
    """Q8: each reason's effect on the EV, the retry budget and retransmission."""
    pair = make_pair()
    outs = first_packets(pair)
    target = outs[1]
    again = inject_nack(pair, target, reason)
    assert pair.qa.ev_table.ev(target.ev_id).state is ev_state
    assert [data_psn(o) for o in again] == [data_psn(target)]
    assert is_retransmit(again[0]) and again[0].ev_id != target.ev_id
    assert pair.qa.requester.retry.retries == charged
    assert pair.qa.counters.nacks_received_by_reason[reason.name] == 1


def test_unexp_event_nack_is_fatal_and_not_retried() -> None:
    pair = make_pair()
    outs = first_packets(pair)
    assert inject_nack(pair, outs[0], NackReason.UNEXP_EVENT) == []
    assert pair.qa.state is QpState.ERROR
    [wc] = pair.a.poll_cq()
    assert wc.status is WcStatus.REM_OP_ERR


def test_resource_nacks_spend_the_retry_budget() -> None:
    pair = make_pair(retry=RetryConfig(0, 1))
    outs = first_packets(pair)
    [rtx] = inject_nack(pair, outs[0], NackReason.NO_RESOURCE)
    inject_nack(pair, rtx, NackReason.NO_RESOURCE)
    assert pair.qa.state is QpState.ERROR
    assert pair.qa.error[0] is WcStatus.RETRY_EXC_ERR


def test_nack_about_an_older_transmission_is_ignored() -> None:
    pair = make_pair()
    outs = first_packets(pair)
    pkt = decode(outs[0].data)
    assert inject_nack(pair, outs[0], NackReason.TRIMMED, ts_echo=pkt.tx_timestamp + 1) == []
    assert pair.qa.counters.stale_feedback == 1


def test_trimmed_path_recovers_by_nack_and_skips_the_ev() -> None:
    pair = make_pair()
    data = payload(300 * P)
    pair.qa.post_write(data, 0, RKEY)
    loop = Loopback([pair.a, pair.b], rate_bps=1e9)
    trimmed_path = pair.paths_ab[1][0]
    loop.trim_paths.add(trimmed_path)
    loop.run(stop=done(pair.a))
    assert pair.mr.buf[:len(data)] == data
    assert loop.trimmed > 0
    assert pair.qa.counters.nacks_received_by_reason["TRIMMED"] == loop.trimmed
    on_path = [e for e in pair.qa.ev_snapshot() if e["path"] == trimmed_path]
    assert sum(e["skips"] for e in on_path) > 0
    assert pair.qa.counters.ev_demotions == 0                # trims skip, they do not demote


def test_last_hop_trims_come_back_as_host_backpressure() -> None:
    # An incast at the receiver's own port is trimmed there and marks nothing:
    # the responder answers with a window penalty in its SACKs, and NSCC cuts.
    pair = make_pair(cc_profile=nscc_profile())
    data = payload(300 * P)
    pair.qa.post_write(data, 0, RKEY)
    loop = Loopback([pair.a, pair.b], rate_bps=1e9)
    loop.trim_paths.add(pair.paths_ab[1][0])
    loop.trim_last_hop = True
    loop.run(stop=done(pair.a))
    assert pair.mr.buf[:len(data)] == data
    assert pair.qa.counters.nacks_received_by_reason["TRIMMED_LASTHOP"] == loop.trimmed > 0
    assert pair.qa.cc.counters.penalty_count > 0
    on_path = [e for e in pair.qa.ev_snapshot() if e["path"] == pair.paths_ab[1][0]]
    assert sum(e["skips"] for e in on_path) == 0     # the path is fine: no EV steering
    without = make_pair(cc_profile=nscc_profile(), transport_config=TransportConfig(
        host_backpressure=False))
    without.qa.post_write(data, 0, RKEY)
    loop = Loopback([without.a, without.b], rate_bps=1e9)
    loop.trim_paths.add(without.paths_ab[1][0])
    loop.trim_last_hop = True
    loop.run(stop=done(without.a))
    assert without.qa.cc.counters.penalty_count == 0


def test_after_a_last_hop_trim_the_responder_holds_its_senders_windows() -> None:
    # Trims on one path of eight at the receiver's port: without a hold only the SACKs whose
    # interval held a trim carry a penalty; with a hold longer than the transfer every SACK
    # from the first trim on does, and NSCC grows the window on none of them.
    def run(hold_s: float | None) -> Pair:
        pair = make_pair(cc_profile=nscc_profile(), transport_config=TransportConfig(
            backpressure_hold_s=hold_s))
        pair.qa.post_write(payload(300 * P), 0, RKEY)
        loop = Loopback([pair.a, pair.b], rate_bps=1e9)
        loop.trim_paths.add(pair.paths_ab[1][0])
        loop.trim_last_hop = True
        loop.run(stop=done(pair.a))
        assert pair.qa.counters.nacks_received_by_reason["TRIMMED_LASTHOP"] == loop.trimmed > 0
        return pair

    share_only, held = run(None), run(10.0)
    cc_share, cc_held = share_only.qa.cc.counters, held.qa.cc.counters
    assert cc_held.penalty_count > cc_share.penalty_count
    grew = cc_held.fair_inc_count + cc_held.prop_inc_count + cc_held.fi_count
    assert grew < cc_share.fair_inc_count + cc_share.prop_inc_count + cc_share.fi_count
    assert TransportConfig().backpressure_hold_s is None      # off unless a profile sets it


def test_reliability_probes_consume_no_psn_and_each_gets_a_sack() -> None:
    """Q11: 100 probes of an ASSUMED_BAD EV; PSN space untouched; one SACK per probe."""
    profile = EvTableConfig(active_count=16, backup_per_plane=4, probe_interval_s=1e-3,
                            probes_to_resurrect=1000, demote_same_path=False)   # one EV probed
    pair = make_pair(ev_table=profile)
    table = pair.qa.ev_table
    victim = table.active_evs()[0].ev_id
    assert table.on_loss(victim, now=0.0)
    loop = Loopback([pair.a, pair.b])
    trace = Trace().attach(loop)
    loop.run(until=0.1005)
    sent = pair.qa.counters.probes_sent
    assert sent == 100
    assert pair.qa.counters.probe_replies == sent
    probe_sacks = [s for _, s in trace.sacks if s.probe_reply]
    assert len(probe_sacks) == sent and all(s.ev == victim for s in probe_sacks)
    assert pair.qa.requester.window.nxt == 0                  # no PSN consumed
    assert pair.qb.responder.window.expected == 0
    assert not trace.data


def test_probes_resurrect_an_ev_after_three_successes() -> None:
    pair = make_pair()
    table = pair.qa.ev_table
    victim = table.active_evs()[0].ev_id
    table.on_loss(victim, now=0.0)
    loop = Loopback([pair.a, pair.b])
    loop.run(until=2.5e-3)
    assert table.ev(victim).state is EvState.ASSUMED_BAD
    loop.run(until=3.5e-3)
    assert table.ev(victim).state is EvState.GOOD
    assert table.ev(victim).probe_successes_in_a_row == 3


def nscc_profile() -> CcProfile:
    return CcProfile(NSCC_ALGORITHM, NsccConfig.defaults(link_rate_bps=1e9, base_rtt_s=60e-6,
                                                          mtu=1500, trimming=False))


def test_nscc_window_gates_sending_and_learns_rtt() -> None:
    pair = make_pair(cc_profile=nscc_profile())
    data = payload(400 * P)
    pair.qa.post_write(data, 0, RKEY)
    loop = Loopback([pair.a, pair.b], rate_bps=1e9, delay_s=25e-6)
    over = []

    def watch(now, src, out) -> None:
        cc = pair.qa.cc
        if src is pair.a and is_data(out) and cc.inflight > cc.cwnd:
            over.append((cc.inflight, cc.cwnd))

    loop.on_send = watch
    loop.run(stop=done(pair.a))
    assert not over
    assert pair.mr.buf[:len(data)] == data
    stats = pair.qa.stats()["cc"]
    assert stats["acks"] > 100 and stats["cwnd"] < 20 * P
    assert stats["inflight"] == 0
    assert any(e["rtt_ewma_s"] for e in pair.qa.ev_snapshot())


def test_cc_none_puts_no_limit_on_the_window() -> None:
    pair = make_pair(cc_profile=CcProfile("none"))
    assert isinstance(pair.qa.cc, NullCc)
    pair.qa.post_write(payload(600 * P), 0, RKEY)
    outs = pair.a.poll_tx(0.0, 10_000)
    assert len(outs) == 600                                   # only the MPR window (1024) bounds it


def test_recovery_without_trim_nacks_uses_holes_and_timers() -> None:
    """Q12: a responder without the TRIM_NACK capability; the QP still completes."""
    pair = make_pair(transport_config=TransportConfig(trim_nacks=False))
    data = payload(300 * P)
    pair.qa.post_write(data, 0, RKEY)
    loop = Loopback([pair.a, pair.b], rate_bps=1e9)
    loop.trim_paths.add(pair.paths_ab[1][0])
    loop.run(stop=done(pair.a))
    assert pair.mr.buf[:len(data)] == data
    assert loop.trimmed > 0 and pair.qb.counters.trimmed_received == loop.trimmed
    assert pair.qa.counters.nacks_received == 0
    assert pair.qa.counters.fast_retransmits + pair.qa.counters.packet_timeouts > 0


def test_ev_probe_endpoint_operation_is_answered() -> None:
    pair = make_pair()
    probe = EvProbe(req_id=0x1234, ev=0xABCD, port=2, tx_timestamp=99).encode()
    pair.b.on_packet(0.0, probe, 0xABCD, 2, "A")
    [out] = pair.b.poll_tx(0.0, 10)
    reply = decode(out.data)
    assert isinstance(reply, EvProbeReply) and out.dst_addr == "A"
    assert (reply.req_id, reply.ev, reply.port, reply.rx_port, reply.ts_echo) == (
        0x1234, 0xABCD, 2, 2, 99)
    assert pair.b.ev_probes_answered == 1
    pair.b.on_packet(0.0, probe, 0xABCD, 2, "C")             # no QP to that host
    assert pair.b.ev_probes_unanswerable == 1


def test_malformed_and_misaddressed_packets_are_counted_not_raised() -> None:
    pair = make_pair()
    pair.a.on_packet(0.0, b"\x00" * 7, 0, 1, "B")
    outs = first_packets(pair)
    pair.b.on_packet(0.0, outs[0].data, outs[0].ev_id, 1, "C")  # wrong peer
    assert pair.a.malformed == 1 and pair.b.wrong_source == 1
    assert pair.qb.counters.packets_received == 0


# ACK refresh: TransportConfig.ack_refresh_s, here 1 ms against a 20 ms packet timeout and
# a loopback RTT of ~0.1 ms, so which one acted is never in doubt.
REFRESH = TransportConfig(packet_timeout_s=20e-3, ack_refresh_s=1e-3)


def test_a_lost_tail_sack_is_refreshed_by_a_probe_not_found_by_a_timeout() -> None:
    """Every data SACK from B is lost (as on a dead reverse path at the end of a burst):
    A hears nothing, sends one ACK-refresh probe after ack_refresh_s, and B's answer
    acknowledges the whole write: nothing resent, no timeout, no EV demoted, done in
    about the refresh delay; B swaps the reverse path its last SACK took."""
    pair = make_pair(psn_a=0, transport_config=REFRESH, timeout_s=20e-3)
    data = payload(4 * P)
    pair.qa.post_write(data, 0, RKEY, wr_id=1)
    loop = Loopback([pair.a, pair.b], delay_s=50e-6)

    def lose_data_sacks(now, src, out) -> bool:
        pkt = decode(out.data)
        return src is pair.b and isinstance(pkt, Sack) and not pkt.probe_reply
    loop.drop_if = lose_data_sacks
    loop.run(stop=done(pair.a))
    counters = pair.qa.counters
    assert (counters.ack_refresh_probes, counters.ack_refresh_replies) == (1, 1)
    assert counters.packet_timeouts == counters.retry_timeouts == 0
    assert counters.retransmitted_packets == counters.ev_demotions == 0
    assert counters.probes_sent == 0                 # no path probe: no EV was demoted
    assert loop.now < 2 * REFRESH.ack_refresh_s      # not the 20 ms timer
    assert pair.qb.counters.reverse_routes_replaced == 1
    assert pair.mr.buf[:len(data)] == data
    assert [(wc.wr_id, wc.ok) for wc in pair.a.poll_cq()] == [(1, True)]


def test_a_flowing_qp_sends_no_ack_refresh() -> None:
    """SACKs arrive every few packets while data flows, and after the last one nothing is
    in flight: the refresh timer never finds silence with packets outstanding."""
    pair = make_pair(psn_a=0, mr_size=1 << 20, transport_config=REFRESH, timeout_s=20e-3)
    data = payload(600 * P)
    pair.qa.post_write(data, 0, RKEY, wr_id=1)
    loop = Loopback([pair.a, pair.b], delay_s=50e-6, rate_bps=1e9)
    loop.run(until=0.1)
    assert [(wc.wr_id, wc.ok) for wc in pair.a.poll_cq()] == [(1, True)]
    assert pair.qa.counters.ack_refresh_probes == 0
    assert pair.qb.counters.reverse_routes_replaced == 0
