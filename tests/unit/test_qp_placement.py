"""Reorder-free placement: RETH in every packet, bounds checks."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.nic.completion import WcStatus
from testbed.nic.loopback import Loopback
from testbed.nic.memory import MemoryRegion, PlacementResult, ReorderFreePlacement
from testbed.nic.qp_state import QpState
from testbed.nic.wire import Nack, NackReason, decode, max_payload

from testbed.nic.qp_pair import RKEY, make_pair, payload

MTU_PAYLOAD = max_payload(1500)


def packets_of_write(nbytes: int, remote_offset: int = 0, seed: int = 0):
    pair = make_pair(mr_size=1 << 17)
    data = payload(nbytes, seed)
    pair.qa.post_write(data, remote_offset, RKEY)
    outs = pair.a.poll_tx(0.0, 10_000)
    return pair, data, outs


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 40).flatmap(
    lambda n: st.tuples(st.just(n), st.permutations(range(n)), st.integers(0, 1000))))
def test_random_permutation_lands_byte_identical(case: tuple[int, list[int], int]) -> None:
    npkts, order, offset = case
    nbytes = (npkts - 1) * MTU_PAYLOAD + 1 + offset % MTU_PAYLOAD
    pair, data, outs = packets_of_write(nbytes, remote_offset=offset, seed=npkts)
    assert len(outs) == npkts
    buf = pair.mr.buf
    for step, i in enumerate(order):
        out = outs[i]
        pair.b.on_packet(1e-3 * step, out.data, out.ev_id, out.plane, "A")
        pkt = decode(out.data)
        # Placed on arrival: this packet's bytes are in memory now, whatever came before.
        start = pkt.remote_offset
        assert buf[start:start + len(pkt.payload)] == pkt.payload
    assert buf[offset:offset + nbytes] == data
    assert not any(buf[:offset]) and not any(buf[offset + nbytes:])
    responder = pair.qb.responder
    assert responder.window.ooo == 0 and responder.received_bytes == nbytes


def test_duplicates_are_not_placed_twice_and_are_acknowledged() -> None:
    pair, data, outs = packets_of_write(3 * MTU_PAYLOAD)
    for out in outs + outs[:2]:
        pair.b.on_packet(0.0, out.data, out.ev_id, out.plane, "A")
    assert pair.qb.counters.duplicates_received == 2
    assert pair.qb.responder.received_bytes == len(data)
    feedback = [decode(o.data) for o in pair.b.poll_tx(0.0, 100)]
    assert all(not isinstance(f, Nack) for f in feedback)


def run_bad_write(pair, data: bytes, remote_offset: int, rkey: int = RKEY) -> Loopback:
    pair.qa.post_write(data, remote_offset, rkey, wr_id=42)
    loop = Loopback([pair.a, pair.b])
    loop.run(until=0.1)
    return loop


@pytest.mark.parametrize("remote_offset, rkey", [
    ((1 << 16) - 1000, RKEY),      # runs off the end of the region
    (1 << 20, RKEY),               # starts beyond it
    (0, RKEY + 1),                 # no such region
])
def test_write_outside_a_region_is_refused_whole(remote_offset: int, rkey: int) -> None:
    pair = make_pair(mr_size=1 << 16)
    run_bad_write(pair, payload(3000), remote_offset, rkey)
    assert not any(pair.mr.buf)                                  # not a byte written
    assert pair.qb.state is QpState.ERROR
    assert pair.qb.counters.nacks_sent_by_reason["UNEXP_EVENT"] == 1
    assert pair.qa.state is QpState.ERROR
    [wc] = pair.a.poll_cq()
    assert wc.wr_id == 42 and wc.status is WcStatus.REM_OP_ERR


def test_write_that_exactly_fills_a_region_is_fine() -> None:
    pair = make_pair(mr_size=1 << 16)
    data = payload(5000)
    run_bad_write(pair, data, (1 << 16) - 5000)
    assert pair.mr.buf[-5000:] == data and pair.qb.state is QpState.RTS
    assert [wc.status for wc in pair.a.poll_cq()] == [WcStatus.SUCCESS]


def test_region_without_remote_write() -> None:
    pair = make_pair()
    pair.b.register_mr(bytearray(100), rkey=5, remote_write=False)
    run_bad_write(pair, b"abc", 0, rkey=5)
    assert pair.qb.state is QpState.ERROR and pair.qa.state is QpState.ERROR
    assert pair.qb.error[1] == "WRITE to a region without remote write access"


def test_placement_table_unit() -> None:
    table = ReorderFreePlacement()
    region = table.register(MemoryRegion(9, bytearray(10)))
    assert table.place(9, 8, b"ab") is PlacementResult.OK and region.buf[8:] == b"ab"
    assert table.place(9, 9, b"ab") is PlacementResult.OUT_OF_BOUNDS
    assert table.place(9, -1, b"a") is PlacementResult.OUT_OF_BOUNDS
    assert table.place(8, 0, b"a") is PlacementResult.UNKNOWN_RKEY
    with pytest.raises(ValueError):
        table.register(MemoryRegion(9, bytearray(1)))
    with pytest.raises(TypeError):
        MemoryRegion(1, b"immutable")          # type: ignore[arg-type]


def test_nack_reason_reflects_the_refusal() -> None:
    pair, _, outs = packets_of_write(100, remote_offset=(1 << 17) - 10)
    out = outs[0]
    pair.b.on_packet(0.0, out.data, out.ev_id, out.plane, "A")
    [nack] = [decode(o.data) for o in pair.b.poll_tx(0.0, 10)]
    assert isinstance(nack, Nack) and nack.reason is NackReason.UNEXP_EVENT
    assert nack.ev == out.ev_id and nack.psn == decode(out.data).psn
