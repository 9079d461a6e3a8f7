"""WRITE_WITH_IMM: MSN-ordered completions, WIMM limits, no RNR."""

from __future__ import annotations

from dataclasses import replace

from testbed.nic.completion import WcOpcode, WcStatus
from testbed.nic.loopback import Loopback
from testbed.nic.qp_state import QpState
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


def test_swapped_last_packets_complete_in_msn_order() -> None:
    pair = make_pair()
    for wr_id in (1, 2):
        pair.qb.post_recv(wr_id)
    first, second = payload(3 * P, 1), payload(3 * P, 2)
    pair.qa.post_write(first, 0, RKEY, imm=0xAAAA)
    pair.qa.post_write(second, 3 * P, RKEY, imm=0xBBBB)
    late_psn = pair.qa.requester.window.wire_psn(2)           # LAST_WITH_IMM of message 1
    loop = Loopback([pair.a, pair.b], delay_s=20e-6)
    loop.delay_if = lambda now, src, out: (
        300e-6 if is_data(out) and data_psn(out) == late_psn and not is_retransmit(out) else 0.0)
    trace = Trace().attach(loop)
    loop.run(stop=done(pair.a, pair.b, count=2))
    wcs = pair.b.poll_cq()
    assert [(wc.wr_id, wc.imm_data) for wc in wcs] == [(1, 0xAAAA), (2, 0xBBBB)]
    assert all(wc.opcode is WcOpcode.RECV_RDMA_WITH_IMM and wc.ok for wc in wcs)
    assert [wc.byte_len for wc in wcs] == [3 * P, 3 * P]
    # Message 2's last packet was there first, yet its completion waited for message 1.
    last2 = pair.qa.requester.window.wire_psn(5)
    arrival_last2 = min(d.time for d in trace.data if d.psn == last2) + 20e-6
    assert wcs[0].time == wcs[1].time > arrival_last2
    assert pair.mr.buf[:6 * P] == first + second


def test_plain_writes_between_immediates_complete_nothing_at_the_responder() -> None:
    pair = make_pair()
    pair.qb.post_recv(10)
    pair.qb.post_recv(11)
    blobs = [payload(2 * P + 7, i) for i in range(4)]
    pair.qa.post_write(blobs[0], 0, RKEY, imm=1, wr_id=100)
    pair.qa.post_write(blobs[1], 10_000, RKEY, wr_id=101)
    pair.qa.post_write(blobs[2], 20_000, RKEY, wr_id=102)
    pair.qa.post_write(blobs[3], 30_000, RKEY, imm=2, wr_id=103)
    loop = Loopback([pair.a, pair.b], seed=4, jitter_s=200e-6, rate_bps=1e9)
    loop.run(stop=lambda: len(pair.a.cq) >= 4 and len(pair.b.cq) >= 2)
    assert [(wc.wr_id, wc.imm_data) for wc in pair.b.poll_cq()] == [(10, 1), (11, 2)]
    assert [wc.wr_id for wc in pair.a.poll_cq()] == [100, 101, 102, 103]   # posting order
    for offset, blob in zip((0, 10_000, 20_000, 30_000), blobs):
        assert pair.mr.buf[offset:offset + len(blob)] == blob


def test_zero_length_write_with_immediate() -> None:
    pair = make_pair()
    pair.qb.post_recv(5)
    pair.qa.post_write(b"", 0, RKEY, imm=77, wr_id=6)
    Loopback([pair.a, pair.b]).run(stop=done(pair.a, pair.b))
    [wc] = pair.b.poll_cq()
    assert (wc.wr_id, wc.imm_data, wc.byte_len) == (5, 77, 0)
    assert [wc.wr_id for wc in pair.a.poll_cq()] == [6]


def test_exceeding_max_wimm_dest_is_a_qp_error() -> None:
    # A misconfigured requester allows 4 WriteIMMs in flight, the responder only 2.
    pair = make_pair_asymmetric("mrc", replace(PAIR_PROFILE, max_wimm=4),
                                replace(PAIR_PROFILE, max_wimm_dest=2))
    for wr_id in range(3):
        pair.qb.post_recv(wr_id)
    for imm in range(3):
        pair.qa.post_write(b"x" * 10, imm * 10, RKEY, imm=imm)
    held = pair.qa.requester.window.wire_psn(0)
    loop = Loopback([pair.a, pair.b])
    loop.drop_if = lambda now, src, out: (is_data(out) and data_psn(out) == held
                                          and not is_retransmit(out))
    loop.run(until=0.05)
    assert pair.qb.state is QpState.ERROR
    assert pair.qb.error[0] is WcStatus.REM_INV_REQ_ERR
    assert "max_wimm_dest 2" in pair.qb.error[1]
    assert pair.qa.state is QpState.ERROR                       # told by NACK UNEXP_EVENT
    assert all(wc.status is WcStatus.WR_FLUSH_ERR for wc in pair.b.poll_cq())


def test_write_with_immediate_without_posted_receive_is_fatal() -> None:
    pair = make_pair()
    pair.qa.post_write(b"abc", 0, RKEY, imm=1)
    Loopback([pair.a, pair.b]).run(until=0.05)
    assert pair.qb.state is QpState.ERROR
    assert pair.qb.error == (WcStatus.LOC_QP_OP_ERR, "WriteIMM without a posted receive")
    assert pair.qa.state is QpState.ERROR


def test_requester_keeps_at_most_max_wimm_immediates_in_flight() -> None:
    pair = make_pair(max_wimm=1)
    for wr_id in range(3):
        pair.qb.post_recv(wr_id)
    for imm in range(3):
        pair.qa.post_write(payload(2 * P, imm), imm * 2 * P, RKEY, imm=imm, wr_id=imm)
    loop = Loopback([pair.a, pair.b])
    trace = Trace().attach(loop)
    loop.run(stop=lambda: len(pair.a.cq) >= 3 and len(pair.b.cq) >= 3)
    completions = {wc.wr_id: wc.time for wc in pair.a.poll_cq()}
    starts = {}
    for d in trace.data:
        if d.src == "A":
            starts.setdefault(d.packet.msn, d.time)
    msn0 = min(starts)
    assert starts[msn0 + 1] >= completions[0] and starts[msn0 + 2] >= completions[1]
    assert [wc.imm_data for wc in pair.b.poll_cq()] == [0, 1, 2]
