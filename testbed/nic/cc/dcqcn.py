"""DCQCN: RoCEv2's rate-based congestion control, for the RC and ECMP baselines.

DCQCN (Zhu et al., "Congestion Control for Large-Scale RDMA Deployments", SIGCOMM 2015,
§3) has three parts. The congestion point (the switch) ECN-marks packets above a queue
threshold: here the switch ports' eBPF program (docs/switch-port.md). The notification
point (the receiving NIC) answers a CE-marked packet with a CNP, at most one per QP per
``cnp_interval_s``: the responder does that (responder.py), because this profile asks for
it (``CcProfile.cnp_interval_s``). The reaction point (the sending NIC) is this module: it
paces the QP at a rate ``rc`` and reacts to CNPs:

    on a CNP (at most one cut per rate_reduce_period_s)
        rt <- rc;  rc <- rc * (1 - alpha / 2);  alpha <- (1 - g) * alpha + g
        timer and byte counter restart, both stage counts back to 0
    every alpha_period_s without a CNP
        alpha <- (1 - g) * alpha
    every rate_timer_s (timer stage T += 1) and every byte_counter_bytes sent (stage B += 1)
        rc <- (rt + rc) / 2, after rt moved by the stage the counts put it in:

        | stage           | when                      | rt                          |
        |-----------------|---------------------------|-----------------------------|
        | fast recovery   | max(T, B) <= F            | unchanged                   |
        | additive        | otherwise                 | rt + ai_rate                |
        | hyper           | min(T, B) > F             | rt + (min(T, B) - F) * hai  |

(F is ``fast_recovery_steps``; rt and rc never exceed the line rate, rc never falls below
``min_rate_bps``; a cut never takes more than ``max_cut`` of the rate.) The rate only
paces: DCQCN has no window, so ``limits_sending`` is false and the QP's window bound is
its MPR window.

Parameters come from a named profile (``DcqcnProfile``), each as published, in the
units of the network it was published for:

- ``dcqcn`` (the default): the DCQCN paper's reaction point as the UEC reference simulator
  runs it (htsim, sim/dcqcn.cpp at uet-htsim 40ccb05, BSD-2-Clause): g = 1/256, alpha and
  rate-increase timers of 55 us, a 10 MB byte counter, F = 5 (Zhu et al. 2015, section 5),
  an additive step of line/20 and a hyper step of line/10, a cut at every CNP (at most
  one per 50 us CNP interval of the notification point), alpha starting at 1;
- ``dcqcn-nic``: what NVIDIA ConnectX NICs ship with (the "DCQCN CC Parameters" page of
  NVIDIA's DOCA documentation,
  https://networking-docs.nvidia.com/doca/archive/3-4-0/dcqcn-cc-parameters: dce_tcp_g
  1019 (g = 5/1024), dce_tcp_rtt 1 us, initial_alpha_value 1023, rpg_min_dec_fac 50 %,
  rpg_min_rate 1 Mb/s; and the rate-increase and NP values of the mlx5 firmware:
  rpg_time_reset 300 us, rpg_byte_reset 32,767 B, rpg_threshold 1, rpg_ai_rate 5 Mb/s,
  rpg_hai_rate 50 Mb/s, rate_reduce_monitor_period 4 us, np min_time_between_cnps 4 us).
  Its additive step is a thousandth of the paper's: two colliding QPs cut to the minimum
  rate take hundreds of base RTTs to climb back.

Both are read against one reference network, 100 Gbit/s links with a 12 us base RTT (the
one NSCC's gains are scaled against too, nscc.REFERENCE_RTT_S).

The emulated timescale (``DcqcnConfig.defaults``), one rule for every profile: every timer
is scaled by the ratio of the fabric's base RTT to the reference's, every rate by the ratio
of the QP's line rate to the reference's, and the byte counter by both (so it stays the
same share of a BDP); the minimum rate is kept where one packet still leaves within the
share of the QP's ACK timeout it takes on hardware (HW_MIN_RATE_PACKET_SHARE). On the
default 10 Mbit/s fabric (base RTT 18 ms) the paper's 55 us timer becomes 83 ms, 4.6 base
RTTs as on the reference network, and the NIC's 300 us one 0.45 s.

Timers are evaluated lazily: the RP's timer events up to ``now`` are applied whenever it
is told the time (a CNP, a transmission, a pacing question), in the order they fell due,
which is what a hardware timer firing on time would have done before that event.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial

from testbed.nic.cc.base import CcConfigError, Unlimited, register_cc

DCQCN_ALGORITHM = "dcqcn"               # the default profile, PAPER

HARDWARE_LINE_RATE_BPS = 100e9
HARDWARE_BASE_RTT_S = 12e-6
HW_MIN_RATE_BPS = 1e6                  # rpg_min_rate, kept for every profile (below)


@dataclass(frozen=True)
class DcqcnProfile:
    """DCQCN's parameters as one source publishes them, on the reference network
    (HARDWARE_LINE_RATE_BPS, HARDWARE_BASE_RTT_S): seconds, bit/s, bytes."""

    name: str
    g: float
    alpha_period_s: float
    initial_alpha: float
    max_cut: float
    rate_timer_s: float
    byte_counter_bytes: int
    fast_recovery_steps: int
    ai_rate_bps: float
    hai_rate_bps: float
    rate_reduce_period_s: float
    cnp_interval_s: float


# The DCQCN paper's reaction point as htsim runs it (module docstring).
PAPER = DcqcnProfile(
    DCQCN_ALGORITHM, g=1 / 256, alpha_period_s=55e-6, initial_alpha=1.0,
    max_cut=0.5,                       # rc (1 - alpha / 2), alpha <= 1
    rate_timer_s=55e-6, byte_counter_bytes=10_000_000, fast_recovery_steps=5,
    ai_rate_bps=HARDWARE_LINE_RATE_BPS / 20, hai_rate_bps=HARDWARE_LINE_RATE_BPS / 10,
    rate_reduce_period_s=0.0,          # a cut per CNP; CNPs come once per interval
    cnp_interval_s=50e-6)
# NVIDIA ConnectX defaults (module docstring).
NIC = DcqcnProfile(
    "dcqcn-nic", g=(1024 - 1019) / 1024,          # dce_tcp_g 1019
    alpha_period_s=1e-6,                          # dce_tcp_rtt
    initial_alpha=1023 / 1024,                    # initial_alpha_value
    max_cut=0.5,                                  # rpg_min_dec_fac 50 %
    rate_timer_s=300e-6,                          # rpg_time_reset
    byte_counter_bytes=32_767,                    # rpg_byte_reset
    fast_recovery_steps=1,                        # rpg_threshold
    ai_rate_bps=5e6, hai_rate_bps=50e6,           # rpg_ai_rate, rpg_hai_rate
    rate_reduce_period_s=4e-6,                    # rate_reduce_monitor_period
    cnp_interval_s=4e-6)                          # np min_time_between_cnps
PROFILES = {p.name: p for p in (PAPER, NIC)}

# On hardware one packet at rpg_min_rate (a 4 KB RoCE MTU at 1 Mb/s: 33 ms) takes half of
# an RC QP's local ACK timeout at timeout 14 (4.096 us x 2^14 = 67 ms): at its slowest a QP
# still makes progress within its timer. The emulated ACK timeout is far fewer RTTs than
# the hardware's, so the minimum rate keeps that share of the QP's ACK timeout (when it is
# known) rather than only the hardware's share of the line rate: else a deep cut leaves a
# go-back-N QP without progress for its whole retry budget (measured: a 7:1 incast of RC
# QPs ended in RETRY_EXC_ERR, their rate cut to the scaled 50 bit/s).
HW_MIN_RATE_PACKET_SHARE = (4096 * 8 / HW_MIN_RATE_BPS) / (4.096e-6 * (1 << 14))


class DcqcnConfigError(CcConfigError):
    """A DCQCN configuration field is out of range."""


@dataclass(frozen=True, kw_only=True)
class DcqcnConfig:
    """Reaction- and notification-point parameters of one DCQCN QP (seconds, bit/s, bytes).

    ``frame_overhead_bytes`` is what each data packet adds to its payload on the wire:
    the rate paces wire bytes, the QP reports payload bytes.
    """

    line_rate_bps: float
    min_rate_bps: float
    g: float
    initial_alpha: float
    alpha_period_s: float
    max_cut: float
    rate_reduce_period_s: float
    rate_timer_s: float
    byte_counter_bytes: int
    fast_recovery_steps: int
    ai_rate_bps: float
    hai_rate_bps: float
    cnp_interval_s: float
    frame_overhead_bytes: int = 0

    def __post_init__(self) -> None:
        for name in ("line_rate_bps", "min_rate_bps", "alpha_period_s", "rate_timer_s",
                     "ai_rate_bps", "hai_rate_bps"):
            _require(name, getattr(self, name), 0.0, math.inf, low_open=True)
        for name in ("rate_reduce_period_s", "cnp_interval_s"):
            _require(name, getattr(self, name), 0.0, math.inf)
        _require("g", self.g, 0.0, 1.0, low_open=True)
        _require("initial_alpha", self.initial_alpha, 0.0, 1.0)
        _require("max_cut", self.max_cut, 0.0, 1.0)
        if self.min_rate_bps > self.line_rate_bps:
            raise DcqcnConfigError(f"DcqcnConfig.min_rate_bps: {self.min_rate_bps} exceeds "
                                   f"line_rate_bps {self.line_rate_bps}")
        for name, low in (("byte_counter_bytes", 1), ("fast_recovery_steps", 0),
                          ("frame_overhead_bytes", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise DcqcnConfigError(f"DcqcnConfig.{name}: must be an int >= {low}, "
                                       f"got {value!r}")

    @classmethod
    def hardware(cls, line_rate_bps: float = HARDWARE_LINE_RATE_BPS,
                 frame_overhead_bytes: int = 0, profile: DcqcnProfile = PAPER) -> DcqcnConfig:
        """`profile` as published, on the reference network (module docstring)."""
        return cls.defaults(line_rate_bps, HARDWARE_BASE_RTT_S,
                            frame_overhead_bytes=frame_overhead_bytes,
                            rate_scale=line_rate_bps / HARDWARE_LINE_RATE_BPS,
                            profile=profile)

    @classmethod
    def defaults(cls, line_rate_bps: float, base_rtt_s: float, mtu: int = 1500,
                 trimming: bool = False, *, ack_timeout_s: float | None = None,
                 frame_overhead_bytes: int | None = None,
                 rate_scale: float | None = None,
                 profile: DcqcnProfile = PAPER) -> DcqcnConfig:
        """`profile` on a fabric with this line rate and base RTT: timers scaled by
        base_rtt_s / 12 us, rates by line_rate_bps / 100 Gbit/s, the byte counter by both;
        with the QP's ``ack_timeout_s``, a minimum rate at which a packet of ``mtu`` bytes
        takes the share of it that it takes on hardware (HW_MIN_RATE_PACKET_SHARE).
        ``mtu`` also sets the per-packet wire overhead paced; ``trimming`` changes nothing
        (DCQCN does not read trims) and is taken as every algorithm's defaults take it."""
        _require("line_rate_bps", line_rate_bps, 0.0, math.inf, low_open=True)
        _require("base_rtt_s", base_rtt_s, 0.0, math.inf, low_open=True)
        time_scale = base_rtt_s / HARDWARE_BASE_RTT_S
        if rate_scale is None:
            rate_scale = line_rate_bps / HARDWARE_LINE_RATE_BPS
        if frame_overhead_bytes is None:
            from testbed.nic.wire import max_payload   # the wire knows its headers
            frame_overhead_bytes = mtu - max_payload(mtu)
        min_rate = HW_MIN_RATE_BPS * rate_scale
        if ack_timeout_s is not None:
            min_rate = max(min_rate, mtu * 8 / (HW_MIN_RATE_PACKET_SHARE * ack_timeout_s))
        p = profile
        return cls(
            line_rate_bps=line_rate_bps,
            min_rate_bps=min(line_rate_bps, min_rate),
            g=p.g, initial_alpha=p.initial_alpha,
            alpha_period_s=p.alpha_period_s * time_scale,
            max_cut=p.max_cut,
            rate_reduce_period_s=p.rate_reduce_period_s * time_scale,
            rate_timer_s=p.rate_timer_s * time_scale,
            byte_counter_bytes=max(1, round(p.byte_counter_bytes * rate_scale * time_scale)),
            fast_recovery_steps=p.fast_recovery_steps,
            ai_rate_bps=p.ai_rate_bps * rate_scale,
            hai_rate_bps=p.hai_rate_bps * rate_scale,
            cnp_interval_s=p.cnp_interval_s * time_scale,
            frame_overhead_bytes=frame_overhead_bytes,
        )


def _require(name: str, value: object, low: float, high: float, low_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise DcqcnConfigError(f"DcqcnConfig.{name}: must be a number, got {value!r}")
    if (value <= low if low_open else value < low) or value > high:
        raise DcqcnConfigError(f"DcqcnConfig.{name}: must be in {'(' if low_open else '['}"
                               f"{low}, {high}], got {value}")


@dataclass
class DcqcnCounters:
    """What the reaction point counts (stats(); the QP reports them under "cc")."""

    sent_bytes: int = 0
    acks: int = 0
    acked_bytes: int = 0
    cnps_received: int = 0
    rate_cuts: int = 0
    fast_recovery_steps: int = 0
    additive_increases: int = 0
    hyper_increases: int = 0
    trim_count: int = 0
    last_hop_trim_count: int = 0
    loss_count: int = 0


class Dcqcn(Unlimited):
    """The DCQCN reaction point of one QP (module docstring); no window (Unlimited)."""

    paces = True

    def __init__(self, config: DcqcnConfig, *, now: float = 0.0) -> None:
        self.config = config
        self.counters = DcqcnCounters()
        self.rate_bps = config.line_rate_bps      # rc: what the QP is paced at
        self.target_bps = config.line_rate_bps    # rt
        self.alpha = config.initial_alpha
        self._inflight = 0
        self._next_send = now
        self._cut_allowed_at = -math.inf
        self._alpha_due: float | None = None      # runs from the first CNP on
        self._rate_timer_due: float | None = None # runs while recovering from a cut
        self._timer_stage = 0
        self._byte_stage = 0
        self._bytes_toward_stage = 0

    # -- the reaction point ---------------------------------------------------------------

    def on_cnp(self, now: float) -> None:
        self._advance(now)
        config = self.config
        self.counters.cnps_received += 1
        if now >= self._cut_allowed_at:
            self._cut(now)
        self.alpha = (1 - config.g) * self.alpha + config.g
        self._alpha_due = now + config.alpha_period_s

    def _cut(self, now: float) -> None:
        config = self.config
        self.counters.rate_cuts += 1
        self.target_bps = self.rate_bps
        factor = max(1 - self.alpha / 2, 1 - config.max_cut)
        self.rate_bps = max(config.min_rate_bps, self.rate_bps * factor)
        self._cut_allowed_at = now + config.rate_reduce_period_s
        self._timer_stage = self._byte_stage = self._bytes_toward_stage = 0
        self._rate_timer_due = now + config.rate_timer_s

    def _increase(self) -> None:
        """One timer or byte-counter event: move rt by the stage, rc halfway to it."""
        config, counters = self.config, self.counters
        steps = config.fast_recovery_steps
        low, high = sorted((self._timer_stage, self._byte_stage))
        if high <= steps:
            counters.fast_recovery_steps += 1
        elif low > steps:
            counters.hyper_increases += 1
            self.target_bps += (low - steps) * config.hai_rate_bps
        else:
            counters.additive_increases += 1
            self.target_bps += config.ai_rate_bps
        line = config.line_rate_bps
        self.target_bps = min(self.target_bps, line)
        self.rate_bps = min((self.target_bps + self.rate_bps) / 2, line)
        if self.rate_bps >= line:               # recovered: nothing left to increase
            self.rate_bps = self.target_bps = line
            self._rate_timer_due = None

    def _advance(self, now: float) -> None:
        """Apply the alpha and rate timers' expiries up to `now`, oldest first."""
        config = self.config
        due = self._alpha_due
        if due is not None and due <= now:
            periods = int((now - due) // config.alpha_period_s) + 1
            self.alpha *= (1 - config.g) ** periods
            self._alpha_due = due + periods * config.alpha_period_s
        while self._rate_timer_due is not None and self._rate_timer_due <= now:
            self._rate_timer_due += config.rate_timer_s
            self._timer_stage += 1
            self._increase()

    # -- pacing ---------------------------------------------------------------------------

    def next_send_time(self) -> float:
        """When the QP's next packet may leave at the current rate."""
        return self._next_send

    def on_transmit(self, nbytes: int, now: float) -> None:
        """A data packet of `nbytes` payload left (new or retransmitted): it takes its wire
        time at the current rate, and counts toward the byte counter."""
        self._advance(now)
        wire = nbytes + self.config.frame_overhead_bytes
        # A late loop turn may send at most one packet's time early, so that coarse
        # timing does not slow the QP below its rate; idle time earns no burst.
        start = max(self._next_send, now - wire * 8 / self.rate_bps)
        self._next_send = start + wire * 8 / self.rate_bps
        if not self._recovering():
            return                              # at line rate: no increase to count
        self._bytes_toward_stage += wire
        while self._bytes_toward_stage >= self.config.byte_counter_bytes:
            self._bytes_toward_stage -= self.config.byte_counter_bytes
            self._byte_stage += 1
            self._increase()
            if not self._recovering():
                break

    def _recovering(self) -> bool:
        """Whether a cut is being recovered from (the rate timer runs). A method, not an
        inline test: mypy keeps `self._rate_timer_due is None` narrowed across the
        _increase() call that clears it, and the compiled core would trust that."""
        return self._rate_timer_due is not None

    # -- stats ----------------------------------------------------------------------------

    def stats(self) -> dict[str, float | int | bool | None]:
        state = super().stats()
        state.update(rate_bps=round(self.rate_bps), target_rate_bps=round(self.target_bps),
                     alpha=round(self.alpha, 6))
        return state


def _make_dcqcn(config: DcqcnConfig, *, now: float, initial_cwnd: int | None,
                base_rtt_floor_s: float | None) -> Dcqcn:
    return Dcqcn(config, now=now)


for _profile in PROFILES.values():
    register_cc(_profile.name, _make_dcqcn, config_type=DcqcnConfig,
                defaults=partial(DcqcnConfig.defaults, profile=_profile),
                marks_last_hop=True)
