"""NSCC's configuration: ``struct mrc_ctl_cc_nscc_cfg`` [MRC] and its UEC defaults [UEC].

Everything that decides what an NSCC configuration may hold and what it holds by default
lives here; the controller that reads it is cc/nscc.py (the sources are cited there by the
same tags). Kept apart from the controller on purpose: the controller is part of the
compiled endpoint core (testbed/native_core.py), whose typed attributes would refuse a
wrong-typed field before the checks below could name it; this module stays Python, so a
bad configuration always fails here, with NsccConfigError.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from testbed.nic.cc.base import CcConfigError

UINT8_MAX = 0xFF
UINT32_MAX = 0xFFFF_FFFF

NS_PER_S = 1_000_000_000

# [UEC] §3.6.13.3 / [HTSIM] initNsccParams: gains are scaled against a
# 100 Gbit/s x 12 us reference network, i.e. a 150 000 B reference BDP.
REFERENCE_BDP_BYTES = 150_000
REFERENCE_RTT_S = 12e-6

# [UEC] §3.6.13.3 default gain multipliers (times MTU * scaling_a).
DEFAULT_ETA_MTU = 0.15
DEFAULT_FI_MTU = 5.0
DEFAULT_FI_SCALE = 0.25
DEFAULT_GAMMA = 0.8
DEFAULT_MAX_MD_JUMP = 0.5          # [HTSIM] multiplicative_decrease floor
DEFAULT_QA_GATE = 3                # [HTSIM] initNsccParams: qa_gate 3
DEFAULT_ADJUST_BYTES_MTU = 8       # [HTSIM] _adjust_bytes_threshold = 8*MTU
MAX_CWND_BDP = 1.5                 # [UEC] update_base_rtt: max_wnd = 1.5*BDP
TARGET_WITH_TRIMMING = 0.75        # [UEC] target_qdelay = 0.75*base_rtt
TARGET_WITHOUT_TRIMMING = 1.0      # [UEC] target_qdelay = 1.0*base_rtt
QA_THRESHOLD_TARGETS = 4           # [UEC] qa_threshold = 4*target (5 BDP drop)
# [UEC] "set qa_threshold to a large value when trimming is enabled"; the
# largest value its uint32 ns field can hold [MRC] (4.29 s).
QA_THRESHOLD_OFF_NS = UINT32_MAX


class NsccConfigError(CcConfigError):
    """An NSCC configuration field is out of range."""


def _require_int(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise NsccConfigError(
            f"NsccConfig.{name}: must be an int, got {type(value).__name__} {value!r}")
    if not low <= value <= high:
        raise NsccConfigError(f"NsccConfig.{name}: must be in [{low}, {high}], got {value}")


def _require_float(name: str, value: object, low: float, high: float,
                   low_inclusive: bool = True) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise NsccConfigError(
            f"NsccConfig.{name}: must be a number, got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise NsccConfigError(f"NsccConfig.{name}: must be finite, got {value}")
    too_low = value < low if low_inclusive else value <= low
    if too_low or value > high:
        bracket = "[" if low_inclusive else "("
        raise NsccConfigError(f"NsccConfig.{name}: must be in {bracket}{low}, {high}], got {value}")


def _ns(seconds: float) -> int:
    return int(round(seconds * NS_PER_S))


@dataclass(frozen=True, kw_only=True)
class NsccConfig:
    """``struct mrc_ctl_cc_nscc_cfg`` [MRC] plus the MTU the gains refer to.

    Units follow the C struct: times in ns (uint32), sizes in bytes (uint32),
    gains as floats. ``alpha`` is not an MRC field; it is derived (see
    :attr:`alpha`).
    """

    disable_qa: bool
    adjust_bytes_threshold: int    # B: apply accumulated increases after this
    adjust_period_threshold: int   # ns: ... or after this long; also adds eta
    base_rtt: int                  # ns: config_base_rtt (longest path, 1 MTU)
    eta: float                     # B per adjust period, additive
    fi: float                      # B: fair-increase gain
    fi_scale: float                # B per B acked in fast increase
    gamma: float                   # multiplicative-decrease gain
    max_md_jump: float             # floor of one MD factor
    max_cwnd: int                  # B: MaxWnd, also the initial cwnd
    qa_gate: int                   # QA only if achieved < max_cwnd >> qa_gate
    qa_threshold: int              # ns: delay that triggers QA without trims
    target_delay: int              # ns: target_qdelay
    mtu: int                       # B

    def __post_init__(self) -> None:
        if not isinstance(self.disable_qa, bool):
            raise NsccConfigError(
                f"NsccConfig.disable_qa: must be a bool, got {self.disable_qa!r}")
        _require_int("mtu", self.mtu, 1, UINT32_MAX)
        _require_int("adjust_bytes_threshold", self.adjust_bytes_threshold, 1, UINT32_MAX)
        _require_int("adjust_period_threshold", self.adjust_period_threshold, 1, UINT32_MAX)
        _require_int("base_rtt", self.base_rtt, 1, UINT32_MAX)
        _require_int("max_cwnd", self.max_cwnd, self.mtu, UINT32_MAX)
        _require_int("qa_gate", self.qa_gate, 0, UINT8_MAX)
        _require_int("qa_threshold", self.qa_threshold, 1, UINT32_MAX)
        _require_int("target_delay", self.target_delay, 1, UINT32_MAX)
        _require_float("eta", self.eta, 0.0, math.inf)
        _require_float("fi", self.fi, 0.0, math.inf)
        _require_float("fi_scale", self.fi_scale, 0.0, math.inf)
        _require_float("gamma", self.gamma, 0.0, 1.0)
        _require_float("max_md_jump", self.max_md_jump, 0.0, 1.0, low_inclusive=False)

    @classmethod
    def defaults(cls, link_rate_bps: float, base_rtt_s: float, mtu: int,
                 trimming: bool) -> NsccConfig:
        """UEC default parameters for one link rate and base RTT [UEC], [HTSIM].

        ``link_rate_bps`` is min(sender, receiver) rate in bit/s,
        ``base_rtt_s`` the unloaded longest-path RTT of one MTU packet.
        """
        if isinstance(link_rate_bps, bool) or not link_rate_bps > 0:
            raise NsccConfigError(f"defaults: link_rate_bps must be > 0, got {link_rate_bps!r}")
        if isinstance(base_rtt_s, bool) or not base_rtt_s > 0:
            raise NsccConfigError(f"defaults: base_rtt_s must be > 0, got {base_rtt_s!r}")
        _require_int("mtu", mtu, 1, UINT32_MAX)
        bdp = link_rate_bps / 8.0 * base_rtt_s
        scaling_a = bdp / REFERENCE_BDP_BYTES
        target_s = base_rtt_s * (TARGET_WITH_TRIMMING if trimming else TARGET_WITHOUT_TRIMMING)
        target_ns = _ns(target_s)
        qa_threshold_ns = (QA_THRESHOLD_OFF_NS if trimming
                           else min(QA_THRESHOLD_TARGETS * target_ns, UINT32_MAX))
        return cls(
            disable_qa=False,
            adjust_bytes_threshold=DEFAULT_ADJUST_BYTES_MTU * mtu,
            adjust_period_threshold=_ns(base_rtt_s),   # [HTSIM]: one network RTT
            base_rtt=_ns(base_rtt_s),
            eta=DEFAULT_ETA_MTU * mtu * scaling_a,
            fi=DEFAULT_FI_MTU * mtu * scaling_a,
            fi_scale=DEFAULT_FI_SCALE * scaling_a,
            gamma=DEFAULT_GAMMA,
            max_md_jump=DEFAULT_MAX_MD_JUMP,
            max_cwnd=max(mtu, int(round(MAX_CWND_BDP * bdp))),
            qa_gate=DEFAULT_QA_GATE,
            qa_threshold=qa_threshold_ns,
            target_delay=target_ns,
            mtu=mtu,
        )

    # -- derived values --------------------------------------------------

    @property
    def base_rtt_s(self) -> float:
        return self.base_rtt / NS_PER_S

    @property
    def target_delay_s(self) -> float:
        return self.target_delay / NS_PER_S

    @property
    def qa_threshold_s(self) -> float:
        return self.qa_threshold / NS_PER_S

    @property
    def adjust_period_threshold_s(self) -> float:
        return self.adjust_period_threshold / NS_PER_S

    @property
    def bdp_bytes(self) -> float:
        # MRC carries no link rate; max_cwnd is 1.5 x BDP by definition of
        # the default, so it is the one field that encodes the BDP.
        return self.max_cwnd / MAX_CWND_BDP

    @property
    def scaling_a(self) -> float:
        return self.bdp_bytes / REFERENCE_BDP_BYTES

    @property
    def scaling_b(self) -> float:
        return self.target_delay_s / REFERENCE_RTT_S

    @property
    def alpha(self) -> float:
        """Proportional-increase gain, bytes per second of headroom [UEC].

        alpha = 4 * scaling_a * scaling_b * MTU / target_qdelay. MRC does not
        make it configurable, so it follows max_cwnd and target_delay.
        """
        return 4.0 * self.scaling_a * self.scaling_b * self.mtu / self.target_delay_s
