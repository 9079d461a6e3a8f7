"""MPR window, PSN_OOR_WINDOW, dynamic MPR and the 24-bit PSN wrap."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.nic.loopback import Loopback
from testbed.nic.receive_window import Arrival, ReceiveWindow
from testbed.nic.send_window import SendWindow
from testbed.nic.wire import (
    PSN_MASK,
    DataPacket,
    Nack,
    NackReason,
    Opcode,
    Sack,
    decode,
    max_payload,
    psn_add,
)

from testbed.nic.qp_pair import RKEY, data_psn, done, is_data, is_retransmit, make_pair, payload

P = max_payload(1500)


def test_requester_never_sends_beyond_cack_plus_mpr() -> None:
    pair = make_pair(mpr=1, mpr_dest=1)                      # 128 PSNs
    data = payload(400 * P)
    pair.qa.post_write(data, 0, RKEY)
    first = pair.qa.requester.window.wire_psn(0)
    loop = Loopback([pair.a, pair.b])
    loop.drop_if = lambda now, src, out: (is_data(out) and data_psn(out) == first
                                          and not is_retransmit(out))
    sends_before_rtx = []
    overshoot = []

    def watch(now, src, out) -> None:
        if src is not pair.a or not is_data(out):
            return
        if is_retransmit(out):
            sends_before_rtx.append(None)
        elif None not in sends_before_rtx:
            sends_before_rtx.append(out)
        # the responder's cumulative point is never behind the requester's view of it
        index = pair.qb.responder.window.to_index(data_psn(out))
        if index - pair.qb.responder.window.expected >= 128:
            overshoot.append(index)

    loop.on_send = watch
    loop.run(stop=done(pair.a))
    assert sends_before_rtx.index(None) == 128             # the window, and not one more
    assert not overshoot
    assert pair.qb.counters.nacks_sent_by_reason["PSN_OOR_WINDOW"] == 0
    assert pair.mr.buf[:len(data)] == data


def forged(pair, index: int) -> bytes:
    psn = psn_add(pair.qb.rtr.rq_psn, index)
    return DataPacket(Opcode.WRITE_ONLY, pair.qb.qpn, psn, 0, 0, 0, RKEY, 4, b"abcd").encode()


def test_packet_beyond_the_responder_window_gets_psn_oor_window() -> None:
    pair = make_pair(mpr_dest=2)                             # 256 PSNs
    pair.b.on_packet(0.0, forged(pair, 256), 9, 1, "A")
    [nack] = [decode(o.data) for o in pair.b.poll_tx(0.0, 10)]
    assert isinstance(nack, Nack) and nack.reason is NackReason.PSN_OOR_WINDOW
    assert nack.ev == 9 and not any(pair.mr.buf[:4])
    pair.b.on_packet(0.0, forged(pair, 255), 9, 1, "A")    # last PSN inside: accepted
    [sack] = [decode(o.data) for o in pair.b.poll_tx(0.0, 10)]
    assert isinstance(sack, Sack) and pair.mr.buf[:4] == b"abcd"
    assert pair.qb.responder.window.ooo == 1


def test_psn_wraps_at_24_bits() -> None:
    start = PSN_MASK - 49
    pair = make_pair(psn_a=start)
    data = payload(200 * P + 11)
    pair.qa.post_write(data, 0, RKEY)
    loop = Loopback([pair.a, pair.b], seed=5, loss=0.03, jitter_s=30e-6, rate_bps=1e9)
    psns, rtx = set(), set()

    def watch(now, src, out) -> None:
        if src is pair.a and is_data(out):
            (rtx if is_retransmit(out) else psns).add(data_psn(out))

    loop.on_send = watch
    loop.run(stop=done(pair.a))
    assert pair.mr.buf[:len(data)] == data
    assert {PSN_MASK, 0, 1} <= psns and max(psns) == PSN_MASK
    assert psns == {psn_add(start, i) for i in range(201)}
    assert rtx and rtx <= psns
    assert pair.qb.responder.window.cack_psn == psn_add(start, 200)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, PSN_MASK), st.lists(st.integers(0, 300), min_size=1, max_size=60))
def test_windows_agree_across_the_wrap(initial: int, arrivals: list[int]) -> None:
    """Any arrival pattern: the SACK the receiver builds acks exactly what arrived."""
    rx = ReceiveWindow(initial, mpr_units=4)
    tx = SendWindow(initial)
    tx.nxt = 301                        # PSN bookkeeping only: no packet records needed
    for index in arrivals:
        if rx.classify(rx.to_index(rx.wire_psn(index))) is Arrival.NEW:
            rx.mark(index)
    offset, bitmap = rx.sack_fields(max(arrivals))
    tx.ack_through(tx.to_index(rx.cack_psn), [])
    tx.ack_bitmap(tx.to_index(rx.cack_psn) + offset, bitmap, [])
    received = set(arrivals)
    assert tx.una == rx.expected == next(i for i in range(302) if i not in received)
    assert rx.ooo == len({i for i in received if i > rx.expected})


def test_dynamic_mpr_shrink_stops_new_psns() -> None:
    pair = make_pair(dynamic_mpr_dest=True, dynamic_mpr=True, mpr=8, mpr_dest=8,
                     mr_size=1 << 22)
    data = payload(2500 * P)
    pair.qa.post_write(data, 0, RKEY)
    loop = Loopback([pair.a, pair.b], rate_bps=1e9)
    in_flight_after = []
    shrink_at = 2e-3

    def watch(now, src, out) -> None:
        if src is pair.a and is_data(out) and not is_retransmit(out) and now > shrink_at + 1e-3:
            in_flight_after.append(pair.qa.requester.window.in_flight)

    loop.on_send = watch
    loop.at(shrink_at, lambda: pair.qb.responder.set_mpr_dest(1))
    loop.run(stop=done(pair.a))
    assert in_flight_after and max(in_flight_after) <= 128
    assert pair.qa.requester.stats()["mpr_window_psns"] == 128
    assert [wc.ok for wc in pair.a.poll_cq()] == [True]
    assert pair.mr.buf[:len(data)] == data


def test_static_mpr_ignores_the_sack_field() -> None:
    pair = make_pair(dynamic_mpr_dest=True, dynamic_mpr=False)
    pair.qa.post_write(payload(10 * P), 0, RKEY)
    loop = Loopback([pair.a, pair.b])
    loop.at(0.0, lambda: pair.qb.responder.set_mpr_dest(1))
    loop.run(stop=done(pair.a))
    assert pair.qa.requester.stats()["mpr_window_psns"] == 8 * 128
