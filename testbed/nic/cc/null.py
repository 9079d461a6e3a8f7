"""The NULL congestion controller: CC disabled, as mrc_ctl.h's NULL algorithm.

Everything that affects a QPCC without congestion control lives here: it tracks what is
in flight and counts events, so stats read the same whichever controller ran (the
counters are NSCC's, zeros where there is nothing to count), and it declares that it
never limits sending, so the QP's send path does not ask it. Registered as "none".
"""

from __future__ import annotations

from typing import Any

from testbed.nic.cc.base import NULL_ALGORITHM, Unlimited, Unpaced, register_cc
from testbed.nic.cc.nscc import NsccCounters


class NullCc(Unlimited, Unpaced):
    """CC disabled (NULL profile): tracks inflight for stats, never limits."""

    def __init__(self) -> None:
        self.counters = NsccCounters()
        self._inflight = 0



def _make_null_cc(config: Any, *, now: float, initial_cwnd: int | None,
                  base_rtt_floor_s: float | None) -> NullCc:
    return NullCc()


register_cc(NULL_ALGORITHM, _make_null_cc)
