"""Outstanding reliability probes of one QP: id allocation, answers and timeouts.

A reliability probe is QP-scoped, consumes no PSN and elicits a SACK [P2 §II-C; 3P:expl;
3P:ns3]; the testbed carries a 24-bit probe id in the BTH PSN field and the SACK
returns it as trigger PSN with PROBE_REPLY set (docs/wire-format.md §6.1). A probe unanswered
within its timeout has failed -- unless a probe sent later on the same EV was answered first:
the path worked more recently than that failure says, so it is stale and not reported.

Probe ids with ACK_REFRESH_PROBE_BIT set are ACK-refresh probes (Requester: a QP that heard no
SACK for a while asks for its ACK state, "to refresh ACK state when SACKs may be lost"
[P2 §II-C]); they test no path, so this tracker never issues them and they never fail an EV.
"""

from __future__ import annotations

from collections import deque

from testbed.nic.wire import PSN_MASK

ACK_REFRESH_PROBE_BIT = (PSN_MASK + 1) >> 1     # the top bit of the 24-bit probe id
_PATH_PROBE_ID_MASK = ACK_REFRESH_PROBE_BIT - 1


class ProbeTracker:
    __slots__ = ("_pending", "_deadlines", "_next_id", "_last_success_sent")

    def __init__(self) -> None:
        self._pending: dict[int, tuple[int, float]] = {}      # probe id -> (ev_id, sent at)
        self._deadlines: deque[tuple[float, int]] = deque()
        self._next_id = 0
        self._last_success_sent: dict[int, float] = {}

    def issue(self, now: float, ev_id: int, timeout_s: float) -> int:
        probe_id = self._next_id
        self._next_id = (probe_id + 1) & _PATH_PROBE_ID_MASK
        self._pending[probe_id] = (ev_id, now)
        self._deadlines.append((now + timeout_s, probe_id))   # constant timeout: FIFO order
        return probe_id

    def answered(self, probe_id: int) -> int | None:
        """The EV a probe was sent on, once; None for an unknown or already settled id."""
        entry = self._pending.pop(probe_id, None)
        if entry is None:
            return None
        ev_id, sent = entry
        if sent > self._last_success_sent.get(ev_id, -1.0):
            self._last_success_sent[ev_id] = sent
        return ev_id

    def expired(self, now: float) -> list[int]:
        """EVs of probes whose timeout passed unanswered (stale failures left out)."""
        failed = []
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now:
            _, probe_id = deadlines.popleft()
            entry = self._pending.pop(probe_id, None)
            if entry is not None and entry[1] > self._last_success_sent.get(entry[0], -1.0):
                failed.append(entry[0])
        return failed

    def next_deadline(self) -> float | None:
        return self._deadlines[0][0] if self._deadlines else None

    def clear(self) -> None:
        self._pending.clear()
        self._deadlines.clear()
        self._last_success_sent.clear()

    def __len__(self) -> int:
        return len(self._pending)
