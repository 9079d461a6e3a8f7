"""Tests of the NULL congestion controller (testbed/nic/cc/null.py)."""

from __future__ import annotations

import math

import pytest

from testbed.nic.cc import CcProfile, NullCc, make_cc

MTU = 4096
US = 1e-6


def test_null_controller_never_limits_and_says_so() -> None:
    cc = make_cc(CcProfile())
    assert isinstance(cc, NullCc) and cc.limits_sending is False
    for i in range(10_000):
        assert cc.can_send(MTU)
        cc.on_send(MTU, i * US)
    cc.on_trim(MTU, 1.0, last_hop=False)
    cc.on_loss(MTU, 1.0)
    cc.on_ack(MTU, 100.0, True, 1.0, rcv_cwnd_pen=127)
    assert cc.can_send(10**9) and not cc.ack_request()
    assert cc.cwnd == math.inf
    assert cc.inflight == 9_997 * MTU
    assert cc.stats()["trim_count"] == 1


def test_null_controller_checks_its_arguments_like_any_controller() -> None:
    cc = NullCc()
    with pytest.raises(ValueError, match="nbytes"):
        cc.on_send(-1, 0.0)
    with pytest.raises(ValueError, match="rcv_cwnd_pen"):
        cc.on_receiver_penalty(128, 0.0)
    assert cc.on_receiver_penalty(127, 0.0) is False
