"""The QP-level local ACK (retry) timer: linear, then exponential backoff, with a budget.

mrc.h: `timeout` is the local ACK timeout (1.024 us x 2^timeout); `retry.linear_cnt` (<= 7)
retries at a fixed interval, then `retry.exp_cnt` (<= 25, 25 = infinite) retries with
exponential backoff [P2 Table I: "Retransmit timer scales linearly before transitioning to
exponential backoff"]. Exhausting the retries moves the QP to ERROR with "Retry Counter
Exceeded" [3P:expl].

Project choices (docs/transport.md): the timer runs while anything is unacknowledged; it
counts *consecutive expiries without progress* and any newly acknowledged PSN resets the
count and re-arms at the base interval, so a QP that keeps delivering on other paths never
spends its budget. Interval after the r-th retry: base for r <= linear_cnt, else
base x 2^(r - linear_cnt). NACKs that "count against the retry budget" spend one retry
without touching the deadline.

A timer given `give_up_s` stands in for a deployed one far longer than a trial (an RC QP's,
testbed/nic/deployed_ack_timer.py): it fires every `base_s` (no backoff) and errors only
after `give_up_s` without progress, whatever the count. Every timer keeps its *stalls*
(from the last progress before an expiry to the progress after it): each's start and length.
"""

from __future__ import annotations

import math

from testbed.nic.qp_state import MAX_EXP_CNT, RetryConfig


def retry_interval(base_s: float, retry: RetryConfig, retries_done: int) -> float:
    """Timer interval armed after `retries_done` retries (0: the first arming)."""
    excess = retries_done - retry.linear_cnt
    if excess <= 0:
        return base_s
    # An infinite budget keeps doubling only up to the largest finite phase.
    return base_s * (1 << min(excess, MAX_EXP_CNT))


def retry_schedule(base_s: float, retry: RetryConfig, limit: int = 64) -> list[float]:
    """Intervals from last progress to each expiry, the last one being the fatal expiry.

    For a finite budget the list has linear_cnt + exp_cnt + 1 entries; an infinite budget is
    cut at `limit` entries.
    """
    count = limit if retry.infinite else min(limit, retry.linear_cnt + retry.exp_cnt + 1)
    return [retry_interval(base_s, retry, r) for r in range(count)]


def time_to_error(base_s: float, retry: RetryConfig) -> float:
    """Seconds from the last progress to the QP error on a dead path (inf if infinite)."""
    if retry.infinite:
        return math.inf
    return sum(retry_schedule(base_s, retry))


class RetryTimer:
    """One QP's retry timer; the owner calls expire() when `deadline` has passed."""

    __slots__ = ("base_s", "retry", "retries", "deadline", "expiries", "give_up_s",
                 "waiting_since", "stalled", "ended_stalls")

    def __init__(self, base_s: float, retry: RetryConfig,
                 give_up_s: float | None = None) -> None:
        self.base_s = base_s
        self.retry = retry
        self.retries = 0
        self.deadline: float | None = None
        self.expiries = 0
        self.give_up_s = give_up_s
        self.waiting_since = 0.0       # last progress, or the arming after idle
        self.stalled = False           # expired since the last progress
        self.ended_stalls: list[tuple[float, float]] = []   # (start, length), seconds

    @property
    def budget(self) -> float:
        return math.inf if self.give_up_s is not None else self.retry.budget

    def stalls(self, now: float) -> list[tuple[float, float]]:
        """Every stall as (start, length); one still running counts up to `now`."""
        running = [(self.waiting_since, now - self.waiting_since)] if self.stalled else []
        return self.ended_stalls + running

    def _interval(self) -> float:
        if self.give_up_s is not None:
            return self.base_s
        return retry_interval(self.base_s, self.retry, self.retries)

    def arm_if_idle(self, now: float) -> None:
        if self.deadline is None:
            self.waiting_since = now
            self.deadline = now + self._interval()

    def on_progress(self, now: float, outstanding: bool) -> None:
        if self.stalled:
            self.stalled = False
            self.ended_stalls.append((self.waiting_since, now - self.waiting_since))
        self.retries = 0
        self.waiting_since = now
        self.deadline = now + self.base_s if outstanding else None

    def stop(self) -> None:
        self.deadline = None

    def expire(self, now: float) -> bool:
        """An expiry without progress: True = retry now (timer re-armed), False = exhausted."""
        self.expiries += 1
        self.stalled = True
        if self._exhausted(now):
            self.deadline = None
            return False
        self.retries += 1
        self.deadline = now + self._interval()
        return True

    def _exhausted(self, now: float) -> bool:
        if self.give_up_s is not None:
            return now - self.waiting_since >= self.give_up_s
        return self.retries >= self.budget

    def charge(self) -> bool:
        """Spend one retry for a NACK; False when none was left."""
        if self.retries >= self.budget:
            return False
        self.retries += 1
        return True
