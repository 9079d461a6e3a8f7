"""Tests of the in-process QP pair (testbed/nic/qp_pair.py) that tests and benchmarks use."""

from __future__ import annotations

import pytest

from testbed.nic.loopback import Loopback
from testbed.nic.qp_pair import (
    PAIR_PROFILE,
    RKEY,
    Trace,
    data_psn,
    done,
    is_data,
    is_retransmit,
    make_pair,
    payload,
)
from testbed.nic.qp_state import QpState


def test_a_pair_is_connected_with_the_pair_profile_and_writes_through_the_loopback() -> None:
    pair = make_pair(psn_a=5)
    assert pair.qa.state is pair.qb.state is QpState.RTS
    assert pair.qa.rts.timeout_s == PAIR_PROFILE.timeout_s and pair.qa.rts.sq_psn == 5
    assert pair.qa.init.ev_table is PAIR_PROFILE.ev_table
    data = payload(10_000, seed=3)
    pair.qa.post_write(data, 0, RKEY)
    loop = Loopback([pair.a, pair.b])
    trace = Trace().attach(loop)
    assert loop.run(stop=done(pair.a))
    assert bytes(pair.mr.buf[:len(data)]) == data
    assert sorted(trace.first_sends()) == [5 + i for i in range(8)] and trace.sacks
    assert trace.retransmissions() == [] and trace.retransmits_on_previous_ev() == []


def test_profile_fields_replace_the_pair_profile_and_a_wrong_name_is_refused() -> None:
    assert make_pair(mpr=1).qa.rts.mpr == 1
    with pytest.raises(TypeError):
        make_pair(link_rate_bps=1e6)


def test_raw_packet_predicates() -> None:
    pair = make_pair(psn_a=0x123456)
    pair.qa.post_write(payload(100), 0, RKEY)
    (out,) = pair.a.poll_tx(0.0)
    assert is_data(out) and data_psn(out) == 0x123456 and not is_retransmit(out)
