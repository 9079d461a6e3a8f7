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

    __slots__ = ("base_s", "retry", "retries", "deadline", "expiries")

    def __init__(self, base_s: float, retry: RetryConfig) -> None:
        self.base_s = base_s
        self.retry = retry
        self.retries = 0
        self.deadline: float | None = None
        self.expiries = 0

    @property
    def budget(self) -> float:
        return self.retry.budget

    def arm_if_idle(self, now: float) -> None:
        if self.deadline is None:
            self.deadline = now + retry_interval(self.base_s, self.retry, self.retries)

    def on_progress(self, now: float, outstanding: bool) -> None:
        self.retries = 0
        self.deadline = now + self.base_s if outstanding else None

    def stop(self) -> None:
        self.deadline = None

    def expire(self, now: float) -> bool:
        """An expiry without progress: True = retry now (timer re-armed), False = exhausted."""
        self.expiries += 1
        if self.retries >= self.budget:
            self.deadline = None
            return False
        self.retries += 1
        self.deadline = now + retry_interval(self.base_s, self.retry, self.retries)
        return True

    def charge(self) -> bool:
        """Spend one retry for a NACK; False when none was left."""
        if self.retries >= self.budget:
            return False
        self.retries += 1
        return True
