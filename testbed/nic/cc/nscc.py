"""NSCC congestion control for an MRC QP congestion controller (QPCC).

NSCC is the sender-based, window-driven, SACK-clocked ECN+RTT algorithm of
UEC 1.0 §3.6.13 (derived from SMaRTT and STrack). MRC selects it with the CC
profile algorithm string "uet-1.0-nscc" and configures it through
``struct mrc_ctl_cc_nscc_cfg`` (mrc_ctl.h in
https://github.com/opencomputeproject/OCP-Multipath-Reliable-Connection).

Sources followed (rules and constants below cite them by tag):

[UEC]   UEC Specification 1.0, §3.6.13.3-3.6.13.6 (NSCC parameters, source
        state, OnACK/OnNACK/OnInferredLoss and internal functions),
        https://ultraethernet.org/ . Read through a public translated copy of
        the pseudo-code.
[HTSIM] htsim UEC model, https://github.com/Broadcom/csg-htsim sim/uec.cpp
        (UecSrc::initNsccParams, quick_adapt, fast_increase, ...), the
        reference simulator the UEC defaults were tuned with.
[MRC]   mrc_ctl.h ``struct mrc_ctl_cc_nscc_cfg``: field names, widths, units.

One controller governs one QPCC: a single byte window shared by every path
(EV) and every QP mapped to it. Time is always passed in (``now``, seconds,
float); nothing here reads a clock, so behaviour is deterministic.

Everything that affects how NSCC reacts lives here; what it is configured with is
cc/nscc_config.py, what makes it selectable (the registry, CcProfile) is
cc/base.py, and the last line of this module is its registration under
NSCC_ALGORITHM.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass

from testbed.nic.cc.base import (
    RCV_CWND_PEN_MAX,
    check_bytes,
    check_penalty,
    Unpaced,
    register_cc,
)
from testbed.nic.cc.nscc_config import (
    REFERENCE_RTT_S,
    NsccConfig,
    NsccConfigError,
)

NSCC_ALGORITHM = "uet-1.0-nscc"
"""CC profile algorithm string defined by mrc_ctl.h for NSCC [MRC]."""

DELAY_BUCKETS_PER_TARGET = 4      # delay_histogram resolution: a quarter target
DELAY_HISTOGRAM_TARGETS = 16      # ... up to 16 targets, the rest in one bucket
# [UEC] fast_increase fires when "delay ~= 0"; [HTSIM] reads that as
# delay < 1 us on its 12 us reference RTT. Scale the same ratio to the
# configured RTT so emulated millisecond RTTs (with their timer jitter)
# still have a reachable "near zero" band.
FAST_INCREASE_DELAY_FRACTION = 1e-6 / REFERENCE_RTT_S

# [UEC] apply_cwnd_penalty: window_decrease = (pen * bytes) >> 7, pen 0..RCV_CWND_PEN_MAX.
RCV_CWND_PEN_SHIFT = 7


# --------------------------------------------------------------------------
# Counters
# --------------------------------------------------------------------------


@dataclass
class NsccCounters:
    """Event counters exported for stats; counts, not bytes, unless named so."""

    sent_bytes: int = 0
    acked_bytes: int = 0
    acks: int = 0
    invalid_rtt_samples: int = 0
    prop_inc_count: int = 0
    fair_inc_count: int = 0
    fi_count: int = 0            # fast-increase applications
    hold_count: int = 0          # ECN with delay below target: no change
    md_count: int = 0
    qa_count: int = 0
    ignored_feedback: int = 0    # ECN feedback skipped right after a QA
    adjust_count: int = 0        # fulfill_adjustment runs
    trim_count: int = 0
    last_hop_trim_count: int = 0
    loss_count: int = 0
    penalty_count: int = 0       # ACKs carrying rcv_cwnd_pen > 0
    restore_count: int = 0


def delay_percentile(histogram: list[int], fraction: float) -> float | None:
    """The `fraction` quantile of an Nscc.delay_histogram, in targets: the
    upper edge of the bucket it falls in (inf past the last edge); None
    without samples."""
    total = sum(histogram)
    if not total:
        return None
    rank, seen = fraction * total, 0
    for index, count in enumerate(histogram):
        seen += count
        if seen >= rank and count:
            if index == len(histogram) - 1:
                return float('inf')
            return (index + 1) / DELAY_BUCKETS_PER_TARGET
    return float('inf')


def rtt_sample_is_unambiguous(rtx_count: int, retx_echo: bool) -> bool:
    """Whether an ACK may feed the RTT estimator [UEC] §3.6.13.1.

    Valid when the packet was never retransmitted and the ACK does not echo
    the retransmit flag, or it was retransmitted exactly once and the ACK
    echoes the flag. Callers pass ``retransmitted=not ...`` to ``on_ack``.
    """
    return (rtx_count == 0 and not retx_echo) or (rtx_count == 1 and retx_echo)


# --------------------------------------------------------------------------
# NSCC
# --------------------------------------------------------------------------


class Nscc(Unpaced):
    """NSCC window for one QPCC [UEC] §3.6.13.5-6.

    ``initial_cwnd`` defaults to max_cwnd (UEC: cwnd starts at MaxWnd).
    ``base_rtt_floor_s`` bounds the tracked base RTT from below; by default it
    is the configured base RTT, so emulator timer noise or a misreported
    service time can never shrink the baseline and inflate every later delay.
    Pass 0.0 for the UEC rule (track the minimum sample downward freely).
    """

    limits_sending = True

    def __init__(self, config: NsccConfig, now: float = 0.0,
                 initial_cwnd: int | None = None,
                 base_rtt_floor_s: float | None = None) -> None:
        self._cfg = config
        self.counters = NsccCounters()
        self._base_rtt_floor = config.base_rtt_s if base_rtt_floor_s is None else base_rtt_floor_s
        if self._base_rtt_floor < 0:
            raise ValueError(f"base_rtt_floor_s: must be >= 0, got {base_rtt_floor_s!r}")
        self._base_rtt = config.base_rtt_s
        self._max_wnd = float(config.max_cwnd)
        start = config.max_cwnd if initial_cwnd is None else initial_cwnd
        self._cwnd = float(self._bounded(start))
        self._inflight = 0
        self._saved_cwnd: float | None = None
        self._achieved_bytes = 0
        self._received_bytes = 0
        self._near_zero_bytes = 0        # UEC ccc.fi_count
        self._fast_increase_active = False
        self._trigger_qa = False
        self._qa_endtime: float | None = None
        self._bytes_to_ignore = 0
        self._bytes_ignored = 0
        self._inc_bytes = 0.0
        self._last_adjust_time = now
        self._last_dec_time = now
        self._delays: deque[tuple[float, float]] = deque()
        self._delay_sum = 0.0
        # Every delay sample, in quarters of the target (the last bucket holds
        # everything from DELAY_HISTOGRAM_TARGETS targets on): what a run
        # reports as the queueing MRC saw, at a cost of one index per ACK.
        self.delay_histogram = [0] * (DELAY_HISTOGRAM_TARGETS * DELAY_BUCKETS_PER_TARGET + 1)
        self._per_bucket = DELAY_BUCKETS_PER_TARGET / config.target_delay_s \
            if config.target_delay_s > 0 else 0.0
        self._fi_delay_threshold = config.base_rtt_s * FAST_INCREASE_DELAY_FRACTION
        # Derived values the per-ACK path reads: NsccConfig computes them in properties
        # (alpha through four of them), and it is frozen, so they are taken once.
        self._config_base_rtt = config.base_rtt_s
        self._target_delay = config.target_delay_s
        self._adjust_period = config.adjust_period_threshold_s
        self._qa_threshold = config.qa_threshold_s
        self._alpha = config.alpha

    # -- read-only state ---------------------------------------------------

    @property
    def config(self) -> NsccConfig:
        return self._cfg

    @property
    def cwnd(self) -> float:
        return self._cwnd

    @property
    def inflight(self) -> int:
        return self._inflight

    @property
    def base_rtt(self) -> float:
        return self._base_rtt

    @property
    def max_wnd(self) -> float:
        return self._max_wnd

    @property
    def avg_delay(self) -> float:
        """Mean queueing delay of the samples seen in the last base RTT."""
        return self._delay_sum / len(self._delays) if self._delays else 0.0

    @property
    def receiver_limited(self) -> bool:
        return self._saved_cwnd is not None

    def stats(self) -> dict[str, float | int | bool | None]:
        state: dict[str, float | int | bool | None] = {
            "cwnd": self._cwnd, "inflight": self._inflight,
            "base_rtt": self._base_rtt, "avg_delay": self.avg_delay,
            "max_wnd": self._max_wnd, "saved_cwnd": self._saved_cwnd,
        }
        state.update(asdict(self.counters))
        return state

    # -- sending -------------------------------------------------------------

    def can_send(self, nbytes: int) -> bool:
        # [UEC] CanSend tests inflight + MTU; its footnote allows the real
        # packet size, which keeps small WRITE packets from waiting a full MTU.
        return self._inflight + nbytes <= self._cwnd

    def on_send(self, nbytes: int, now: float) -> None:
        if type(nbytes) is not int or nbytes < 0:     # per packet: test inline, raise there
            check_bytes("nbytes", nbytes)
        self._inflight += nbytes
        self.counters.sent_bytes += nbytes

    def ack_request(self, ack_gen_trigger: int = 0) -> bool:
        """[UEC] AckRequest: ask for an ACK when the window cannot trigger one."""
        return (self._cwnd - self._inflight) < self._cfg.mtu or self._cwnd < ack_gen_trigger

    # -- feedback --------------------------------------------------------------

    def on_ack(self, acked_bytes: int, rtt_s: float | None, ecn: bool, now: float,
               service_time_s: float = 0.0, retransmitted: bool = False,
               rcv_cwnd_pen: int = 0, restore_cwnd: bool = False) -> None:
        """One SACK [UEC] NSCC.OnACK.

        ``acked_bytes`` is the growth of the SACK's received-bytes counter
        (the ACK clock), ``rtt_s`` the raw ack_time - tx_time of the packet
        that triggered it, ``retransmitted`` True when that sample is
        ambiguous (see :func:`rtt_sample_is_unambiguous`).
        """
        if type(acked_bytes) is not int or acked_bytes < 0:   # per SACK: test inline
            check_bytes("acked_bytes", acked_bytes)
        if type(rcv_cwnd_pen) is not int or not 0 <= rcv_cwnd_pen <= RCV_CWND_PEN_MAX:
            check_penalty(rcv_cwnd_pen)
        self._count_delivery(acked_bytes)
        receiver_limited = self._apply_penalty(rcv_cwnd_pen, restore_cwnd, acked_bytes)
        sample = self._rtt_sample(rtt_s, service_time_s, retransmitted)
        if sample is None:
            return
        self._update_base_rtt(sample)
        delay = max(0.0, sample - self._base_rtt)
        self._record_delay(delay, now)
        if self._quick_adapt(now, is_loss=False, ecn=ecn, delay=delay):
            return
        self._react(acked_bytes, delay, ecn, receiver_limited, now)
        if self._adjustment_due(now):
            self._fulfill_adjustment(now)

    def on_trim(self, nbytes: int, now: float, last_hop: bool,
                rtt_s: float | None = None, retransmitted: bool = False) -> None:
        """A NACK TRIMMED / TRIMMED_LASTHOP for ``nbytes`` [UEC] NSCC.OnNACK.

        MRC has no receiver-credit CC, so last-hop trims cut the window as
        well (UEC exempts them only when RCCC is running).
        """
        check_bytes("nbytes", nbytes)
        self.counters.trim_count += 1
        self.counters.last_hop_trim_count += int(last_hop)
        self._inflight -= nbytes
        sample = self._rtt_sample(rtt_s, 0.0, retransmitted)
        if sample is not None:
            self._update_base_rtt(sample)
        # A trim means a queue hit its trim threshold: about one config
        # base RTT of queueing [UEC] ("update_delay(config_base_rtt)").
        self._record_delay(self._config_base_rtt, now)
        self._bytes_ignored += nbytes
        self._trigger_qa = True
        # Trimmed packets count as ECN-marked so they fall into the
        # post-QA ignore phase too [UEC].
        if not self._quick_adapt(now, is_loss=True, ecn=True, delay=0.0):
            self._set_cwnd(self._cwnd - nbytes)

    def on_loss(self, nbytes: int, now: float) -> None:
        """Inferred loss (timeout) of ``nbytes`` [UEC] NSCC.OnInferredLoss.

        No quick adapt here, as in UEC: MRC reads an untrimmed loss as a
        failed path, not congestion [P1 §2.1 in the reference].
        """
        check_bytes("nbytes", nbytes)
        self.counters.loss_count += 1
        self._set_cwnd(self._cwnd - nbytes)
        self._bytes_ignored += nbytes
        self._inflight -= nbytes

    def on_receiver_penalty(self, pen: int, now: float, acked_bytes: int = 0,
                            restore: bool = False) -> bool:
        """Apply a SACK's ``rcv_cwnd_pen`` / ``restore_cwnd`` on its own.

        ``on_ack`` already does this for SACKs; use this for penalty-only
        updates. ``acked_bytes`` are the bytes that SACK acknowledged (already
        taken off ``inflight``). Returns whether the receiver limits the
        window (pen > 0).
        """
        check_penalty(pen)
        check_bytes("acked_bytes", acked_bytes)
        return self._apply_penalty(pen, restore, acked_bytes)

    # -- internals: bookkeeping ------------------------------------------------

    def _bounded(self, cwnd: float) -> float:
        return min(max(cwnd, float(self._cfg.mtu)), self._max_wnd)

    def _set_cwnd(self, cwnd: float) -> None:
        self._cwnd = self._bounded(cwnd)

    def _count_delivery(self, acked_bytes: int) -> None:
        self.counters.acks += 1
        self.counters.acked_bytes += acked_bytes
        # Signed on purpose [UEC]: rounding of the received-bytes clock and
        # reordering may take inflight slightly below zero.
        self._inflight -= acked_bytes
        self._bytes_ignored += acked_bytes
        self._received_bytes += acked_bytes
        self._achieved_bytes += acked_bytes

    def _rtt_sample(self, rtt_s: float | None, service_time_s: float,
                    retransmitted: bool) -> float | None:
        if rtt_s is None or retransmitted:
            self.counters.invalid_rtt_samples += 1
            return None
        # The responder's own service time is not network queueing (SVC_TIME).
        return rtt_s - service_time_s

    def _update_base_rtt(self, sample: float) -> None:
        if sample >= self._base_rtt:
            return
        base_rtt = max(sample, self._base_rtt_floor)
        if base_rtt == self._base_rtt:
            return      # held at the floor: MaxWnd, hence the bounded cwnd, stay as they are
        self._base_rtt = base_rtt
        # [UEC] rescales MaxWnd to 1.5 x linkspeed x base_rtt; MRC has no link
        # rate, so scale max_cwnd by the same RTT ratio.
        ratio = self._base_rtt / self._config_base_rtt
        self._max_wnd = max(float(self._cfg.mtu), self._cfg.max_cwnd * ratio)
        self._set_cwnd(self._cwnd)

    def _record_delay(self, delay: float, now: float) -> None:
        # [UEC] leaves the average to the implementation ("average delay
        # over the last base_rtt"); a sliding time window keeps it meaningful
        # at emulated rates with only a handful of ACKs per RTT.
        self._delays.append((now, delay))
        self._delay_sum += delay
        hist = self.delay_histogram
        hist[min(int(delay * self._per_bucket), len(hist) - 1)] += 1
        horizon = now - self._base_rtt
        while len(self._delays) > 1 and self._delays[0][0] < horizon:
            self._delay_sum -= self._delays.popleft()[1]

    # -- internals: the control law ----------------------------------------------

    def _react(self, acked_bytes: int, delay: float, ecn: bool,
               receiver_limited: bool, now: float) -> None:
        below_target = delay < self._target_delay
        if not ecn and not below_target and not receiver_limited:
            self._fair_increase(acked_bytes)
        elif not ecn and below_target and not receiver_limited:
            self._proportional_increase(acked_bytes, delay)
        elif ecn and not below_target:
            self._multiplicative_decrease(now)
        elif ecn:
            # Early congestion only: let EV load balancing react first [UEC].
            self.counters.hold_count += 1

    def _fair_increase(self, acked_bytes: int) -> None:
        self.counters.fair_inc_count += 1
        self._inc_bytes += self._cfg.fi * acked_bytes

    def _proportional_increase(self, acked_bytes: int, delay: float) -> None:
        if self._fast_increase(acked_bytes, delay):
            return
        self.counters.prop_inc_count += 1
        headroom = self._target_delay - delay
        self._inc_bytes += self._alpha * acked_bytes * headroom

    def _fast_increase(self, acked_bytes: int, delay: float) -> bool:
        if delay >= self._fi_delay_threshold:
            self._near_zero_bytes = 0
            self._fast_increase_active = False
            return False
        self._near_zero_bytes += acked_bytes
        # Exponential growth only once a whole window saw an empty network.
        if self._near_zero_bytes > self._cwnd or self._fast_increase_active:
            self._set_cwnd(self._cwnd + acked_bytes * self._cfg.fi_scale)
            self._fast_increase_active = True
            self.counters.fi_count += 1
            return True
        self._fast_increase_active = False
        return False

    def _multiplicative_decrease(self, now: float) -> None:
        self._fast_increase_active = False
        self._near_zero_bytes = 0
        avg = self.avg_delay
        target = self._target_delay
        if avg <= target or now - self._last_dec_time <= self._base_rtt:
            return
        # Cut by the fraction of the queue above target, so that all senders
        # doing the same drain it in about one RTT; never more than one
        # max_md_jump step per base RTT.
        factor = max(1.0 - self._cfg.gamma * (avg - target) / avg, self._cfg.max_md_jump)
        self._set_cwnd(self._cwnd * factor)
        self._last_dec_time = now
        self.counters.md_count += 1

    def _quick_adapt(self, now: float, is_loss: bool, ecn: bool, delay: float) -> bool:
        """[UEC] quick_adapt; True when the caller must skip its cwnd update."""
        if self._cfg.disable_qa:
            return False
        skip = False
        if self._bytes_ignored < self._bytes_to_ignore and ecn:
            # Feedback from packets already queued when QA fired would
            # otherwise trigger a second, redundant cut.
            self.counters.ignored_feedback += 1
            skip = True
        elif self._qa_endtime is None or now >= self._qa_endtime:
            if self._qa_endtime is not None and self._qa_wanted(is_loss, delay):
                self._set_cwnd(self._achieved_bytes)
                self._bytes_to_ignore = self._inflight
                self._bytes_ignored = 0
                self._trigger_qa = False
                self.counters.qa_count += 1
                skip = True
            self._achieved_bytes = 0
            self._qa_endtime = now + self._base_rtt + self._target_delay
        if skip:
            self._inc_bytes = 0.0
            self._received_bytes = 0
        return skip

    def _qa_wanted(self, is_loss: bool, delay: float) -> bool:
        signalled = self._trigger_qa or is_loss or delay > self._qa_threshold
        # Only a collapse in delivered bytes justifies jumping the window.
        gate = int(self._max_wnd) >> self._cfg.qa_gate
        return signalled and self._achieved_bytes < gate

    def _adjustment_due(self, now: float) -> bool:
        return (now - self._last_adjust_time >= self._adjust_period
                or self._received_bytes > self._cfg.adjust_bytes_threshold)

    def _fulfill_adjustment(self, now: float) -> None:
        # Increases accumulate as bytes^2 and are divided by cwnd once, so
        # every sender gains the same bytes per RTT whatever its window.
        cwnd = self._cwnd + self._inc_bytes / self._cwnd
        if now - self._last_adjust_time >= self._adjust_period:
            self._last_adjust_time = now
            cwnd += self._cfg.eta
        self._set_cwnd(cwnd)
        self._inc_bytes = 0.0
        self._received_bytes = 0
        self.counters.adjust_count += 1

    def _apply_penalty(self, pen: int, restore: bool, acked_bytes: int) -> bool:
        """[UEC] apply_cwnd_penalty (destination flow control, §3.6.13.2)."""
        if pen > 0:
            if self._saved_cwnd is None:
                self._saved_cwnd = self._cwnd
                # UEC clamps cwnd to inflight; doing it on every ACK (with
                # inflight already reduced) would collapse any window to one
                # MTU within an RTT, contradicting its own "64 for one RTT
                # halves cwnd". Clamp once, on entry, to what was in use
                # before this ACK, so an idle window cannot dodge the penalty.
                in_use = self._inflight + acked_bytes
                self._set_cwnd(min(self._cwnd, in_use))
            window_decrease = (pen * acked_bytes) >> RCV_CWND_PEN_SHIFT
            self._set_cwnd(self._cwnd - window_decrease)
            self.counters.penalty_count += 1
            return True
        if restore and self._saved_cwnd is not None:
            self._set_cwnd(self._saved_cwnd)
            self._saved_cwnd = None
            self.counters.restore_count += 1
        return False


def _make_nscc(config: NsccConfig, *, now: float, initial_cwnd: int | None,
               base_rtt_floor_s: float | None) -> Nscc:
    return Nscc(config, now=now, initial_cwnd=initial_cwnd, base_rtt_floor_s=base_rtt_floor_s)


__all__ = [
    "NSCC_ALGORITHM", "NsccConfig", "NsccConfigError", "NsccCounters", "Nscc",
    "rtt_sample_is_unambiguous",
]

def _fabric_defaults(link_rate_bps: float, base_rtt_s: float, mtu: int, trimming: bool, *,
                     ack_timeout_s: float | None = None) -> NsccConfig:
    return NsccConfig.defaults(link_rate_bps, base_rtt_s, mtu, trimming)  # no timer to meet


register_cc(NSCC_ALGORITHM, _make_nscc, config_type=NsccConfig, defaults=_fabric_defaults)
