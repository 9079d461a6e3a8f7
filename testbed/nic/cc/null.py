"""The NULL congestion controller: CC disabled, as mrc_ctl.h's NULL algorithm.

Everything that affects a QPCC without congestion control lives here: it tracks what is
in flight and counts events, so stats read the same whichever controller ran (the
counters are NSCC's, zeros where there is nothing to count), and it declares that it
never limits sending, so the QP's send path does not ask it. Registered as "none".
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from testbed.nic.cc.base import (
    NULL_ALGORITHM,
    WindowOnly,
    check_bytes,
    check_penalty,
    register_cc,
)
from testbed.nic.cc.nscc import NsccCounters


class NullCc(WindowOnly):
    """CC disabled (NULL profile): tracks inflight for stats, never limits."""

    limits_sending = False

    def __init__(self) -> None:
        self.counters = NsccCounters()
        self._inflight = 0

    @property
    def cwnd(self) -> float:
        return math.inf

    @property
    def inflight(self) -> int:
        return self._inflight

    def stats(self) -> dict[str, float | int | bool | None]:
        state: dict[str, float | int | bool | None] = {
            "cwnd": math.inf, "inflight": self._inflight}
        state.update(asdict(self.counters))
        return state

    def can_send(self, nbytes: int) -> bool:
        return True

    def on_send(self, nbytes: int, now: float) -> None:
        if type(nbytes) is not int or nbytes < 0:     # per packet: test inline, raise there
            check_bytes("nbytes", nbytes)
        self._inflight += nbytes
        self.counters.sent_bytes += nbytes

    def ack_request(self, ack_gen_trigger: int = 0) -> bool:
        return False

    def on_ack(self, acked_bytes: int, rtt_s: float | None, ecn: bool, now: float,
               service_time_s: float = 0.0, retransmitted: bool = False,
               rcv_cwnd_pen: int = 0, restore_cwnd: bool = False) -> None:
        if type(acked_bytes) is not int or acked_bytes < 0:   # per SACK: test inline
            check_bytes("acked_bytes", acked_bytes)
        self._inflight -= acked_bytes
        self.counters.acks += 1
        self.counters.acked_bytes += acked_bytes

    def on_trim(self, nbytes: int, now: float, last_hop: bool,
                rtt_s: float | None = None, retransmitted: bool = False) -> None:
        check_bytes("nbytes", nbytes)
        self._inflight -= nbytes
        self.counters.trim_count += 1
        self.counters.last_hop_trim_count += int(last_hop)

    def on_loss(self, nbytes: int, now: float) -> None:
        check_bytes("nbytes", nbytes)
        self._inflight -= nbytes
        self.counters.loss_count += 1

    def on_receiver_penalty(self, pen: int, now: float, acked_bytes: int = 0,
                            restore: bool = False) -> bool:
        check_penalty(pen)
        return False


def _make_null_cc(config: Any, *, now: float, initial_cwnd: int | None,
                  base_rtt_floor_s: float | None) -> NullCc:
    return NullCc()


register_cc(NULL_ALGORITHM, _make_null_cc)
