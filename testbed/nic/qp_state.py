"""QP states and the attributes each transition requires (mrc.h `mrc_modify_qp`).

RESET -> INIT -> RTR -> RTS, plus ERROR from anywhere and RESET from anywhere, as in verbs.
The MRC attributes per step follow mrc.h
(https://github.com/opencomputeproject/OCP-Multipath-Reliable-Connection/blob/main/mrc.h,
"Next State / Required Attributes"); the verbs attributes an emulated QP also needs (the
address vector, the peer's QP number and PSNs) are required alongside them. Every refusal is
a `QpError` with an errno code, as the C API would return.
"""

from __future__ import annotations

import enum
import errno
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from testbed.nic.cc import CcProfile
from testbed.nic.ev_table import EvTableConfig
from testbed.nic.wire import EP_OP_QP, PSN_MASK

TIMEOUT_UNIT_S = 1.024e-6          # mrc.h: local ACK timeout = 1.024 us * 2^timeout
RC_TIMEOUT_UNIT_S = 4.096e-6       # IBA (verbs ibv_qp_attr.timeout): 4.096 us * 2^timeout
VERBS_RETRY_CNT = 7                # ibv_qp_attr.retry_cnt: 3 bits, 7 on common RoCE setups
MAX_TIMEOUT_EXPONENT = 24          # mrc.h: max 24 (17.17 s)
MAX_LINEAR_CNT = 7                 # mrc.h: linear (fixed interval) retry limit, max 7
MAX_EXP_CNT = 25                   # mrc.h: exponential retry limit, max 25 ...
INFINITE_EXP_CNT = 25              # ... and 25 means infinite
MAX_MPR = 0xFF                     # mrc.h: uint8, units of 128 PSNs
MAX_WIMM = 0xFFFF                  # mrc.h: uint16

# verbs attributes mrc_modify_qp refuses (mrc.h), under their Python names.
UNSUPPORTED_ATTRS = frozenset({
    "port", "rnr_retry", "min_rnr_timer", "max_rd_atomic", "max_dest_rd_atomic",
    "alt_path", "path_mig_state", "retry_cnt",
})


class QpState(enum.StrEnum):
    RESET = "RESET"
    INIT = "INIT"
    RTR = "RTR"
    RTS = "RTS"
    ERROR = "ERROR"


class QpError(ValueError):
    """A refused QP verb. `code` is the errno the verbs call would return (EINVAL mostly)."""

    def __init__(self, message: str, code: int = errno.EINVAL, field: str | None = None) -> None:
        super().__init__(f"{errno.errorcode.get(code, code)}: {message}")
        self.code = code
        self.field = field


def timeout_seconds(exponent: int, unit_s: float = TIMEOUT_UNIT_S) -> float:
    """The local ACK timeout: unit x 2^timeout (mrc.h's 1.024 us; an RC QP's 4.096 us)."""
    return unit_s * (1 << exponent)


@dataclass(frozen=True, slots=True)
class RetryConfig:
    """mrc.h `retry`: linear (fixed-interval) retries, then exponential-backoff retries."""

    linear_cnt: int
    exp_cnt: int

    def __post_init__(self) -> None:
        _check_int("retry.linear_cnt", self.linear_cnt, 0, MAX_LINEAR_CNT)
        _check_int("retry.exp_cnt", self.exp_cnt, 0, MAX_EXP_CNT)

    @classmethod
    def verbs(cls, retry_cnt: int = VERBS_RETRY_CNT) -> RetryConfig:
        """An RC QP's retry budget as verbs defines it: `retry_cnt` retries (0..7), each
        after the same local ACK timeout, no exponential phase; the counter restarts on
        every acknowledgement of progress (RetryTimer.on_progress)."""
        return cls(linear_cnt=retry_cnt, exp_cnt=0)

    @property
    def infinite(self) -> bool:
        return self.exp_cnt == INFINITE_EXP_CNT

    @property
    def budget(self) -> float:
        """Retries allowed without progress (math.inf for exp_cnt 25)."""
        return math.inf if self.infinite else self.linear_cnt + self.exp_cnt

    @classmethod
    def coerce(cls, value: Any) -> RetryConfig:
        if isinstance(value, RetryConfig):
            return value
        if isinstance(value, Mapping):
            return cls(int(value["linear_cnt"]), int(value["exp_cnt"]))
        if isinstance(value, Sequence) and len(value) == 2:
            return cls(int(value[0]), int(value[1]))
        raise QpError(f"retry must be RetryConfig, (linear_cnt, exp_cnt) or a dict, got {value!r}",
                      field="retry")


@dataclass(frozen=True, slots=True)
class QpHint:
    """mrc.h `mrc_qp_hint_attr`: advisory sizing hints; kept for stats, never acted on."""

    num_qps_per_peer: int = 1
    num_send_peers: int = 1
    num_remote_recv_peers: int = 1


@dataclass(frozen=True, slots=True)
class InitAttrs:
    ev_table: EvTableConfig
    cc_profile: CcProfile
    hint: QpHint


@dataclass(frozen=True, slots=True)
class RtrAttrs:
    max_wimm_dest: int
    mpr_dest: int
    dest_addr: Any
    dest_qp: int
    rq_psn: int
    paths_by_plane: Mapping[int, Sequence[Any]]
    dynamic_mpr_dest: bool = False
    pinned_path: tuple[int, Any] | None = None   # RC/ECMP: (plane, path) chosen by the caller


@dataclass(frozen=True, slots=True)
class RtsAttrs:
    max_wimm: int
    mpr: int
    retry: RetryConfig
    timeout: int
    timeout_s: float          # the effective ACK timeout (override, or unit x 2^timeout)
    sq_psn: int
    dynamic_mpr: bool = False


REQUIRED: dict[QpState, tuple[str, ...]] = {
    QpState.INIT: ("ev_table", "cc_profile"),
    QpState.RTR: ("max_wimm_dest", "mpr_dest", "dest_addr", "dest_qp", "rq_psn", "paths_by_plane"),
    QpState.RTS: ("max_wimm", "mpr", "retry", "timeout"),
}
OPTIONAL: dict[QpState, tuple[str, ...]] = {
    QpState.INIT: ("hint",),
    QpState.RTR: ("dynamic_mpr_dest", "pinned_path"),
    QpState.RTS: ("timeout_s", "sq_psn", "dynamic_mpr"),
}
_FORWARD = {QpState.RESET: QpState.INIT, QpState.INIT: QpState.RTR, QpState.RTR: QpState.RTS}


def check_transition(current: QpState, target: QpState, attrs: Mapping[str, Any]) -> None:
    """Refuse a transition verbs would refuse, or one missing/with unknown attributes."""
    _refuse_unsupported(attrs)
    if target in (QpState.RESET, QpState.ERROR):
        if attrs:
            raise QpError(f"->{target} takes no attributes, got {sorted(attrs)}")
        return
    if _FORWARD.get(current) is not target:
        raise QpError(f"invalid transition {current} -> {target}", field="state")
    missing = [name for name in REQUIRED[target] if name not in attrs]
    if missing:
        raise QpError(f"->{target} requires {', '.join(missing)}", field=missing[0])
    unknown = set(attrs) - set(REQUIRED[target]) - set(OPTIONAL[target])
    if unknown:
        raise QpError(f"->{target} does not take {', '.join(sorted(unknown))}",
                      field=sorted(unknown)[0])


def _refuse_unsupported(attrs: Mapping[str, Any]) -> None:
    bad = sorted(set(attrs) & UNSUPPORTED_ATTRS)
    if bad:
        raise QpError(f"attribute(s) {', '.join(bad)} not supported by MRC QPs", field=bad[0])


def init_attrs(attrs: Mapping[str, Any], ev_table: EvTableConfig,
               cc_profile: CcProfile) -> InitAttrs:
    """INIT attributes once the caller has resolved profile ids to objects."""
    hint = attrs.get("hint") or QpHint()
    if not isinstance(hint, QpHint):
        raise QpError(f"hint must be a QpHint, got {hint!r}", field="hint")
    return InitAttrs(ev_table, cc_profile, hint)


def rtr_attrs(attrs: Mapping[str, Any]) -> RtrAttrs:
    _check_int("max_wimm_dest", attrs["max_wimm_dest"], 0, MAX_WIMM)
    _check_int("mpr_dest", attrs["mpr_dest"], 1, MAX_MPR)
    _check_int("dest_qp", attrs["dest_qp"], 0, PSN_MASK)
    if attrs["dest_qp"] == EP_OP_QP:
        raise QpError("dest_qp 0x2 is reserved for endpoint operations", field="dest_qp")
    _check_int("rq_psn", attrs["rq_psn"], 0, PSN_MASK)
    paths = attrs["paths_by_plane"]
    if not isinstance(paths, Mapping) or not paths or not all(paths.values()):
        raise QpError("paths_by_plane must map each plane to a non-empty list of paths",
                      field="paths_by_plane")
    pinned = attrs.get("pinned_path")
    if pinned is not None and (len(pinned) != 2 or pinned[1] not in paths.get(pinned[0], ())):
        raise QpError(f"pinned_path {pinned!r} is not a (plane, path) of paths_by_plane",
                      field="pinned_path")
    return RtrAttrs(attrs["max_wimm_dest"], attrs["mpr_dest"], attrs["dest_addr"],
                    attrs["dest_qp"], attrs["rq_psn"], paths,
                    bool(attrs.get("dynamic_mpr_dest", False)),
                    None if pinned is None else (pinned[0], pinned[1]))


def rts_attrs(attrs: Mapping[str, Any], default_sq_psn: int,
              timeout_unit_s: float = TIMEOUT_UNIT_S) -> RtsAttrs:
    _check_int("max_wimm", attrs["max_wimm"], 0, MAX_WIMM)
    _check_int("mpr", attrs["mpr"], 1, MAX_MPR)
    _check_int("timeout", attrs["timeout"], 0, MAX_TIMEOUT_EXPONENT)
    try:
        retry = RetryConfig.coerce(attrs["retry"])
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, QpError):
            raise
        raise QpError(f"bad retry {attrs['retry']!r}: {exc}", field="retry") from exc
    timeout_s = attrs.get("timeout_s")
    if timeout_s is None:
        timeout_s = timeout_seconds(attrs["timeout"], timeout_unit_s)
    elif (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))
          or not timeout_s > 0):
        raise QpError(f"timeout_s must be > 0 seconds, got {timeout_s!r}", field="timeout_s")
    sq_psn = attrs.get("sq_psn", default_sq_psn)
    _check_int("sq_psn", sq_psn, 0, PSN_MASK)
    return RtsAttrs(attrs["max_wimm"], attrs["mpr"], retry, attrs["timeout"], float(timeout_s),
                    sq_psn, bool(attrs.get("dynamic_mpr", False)))


def _check_int(name: str, value: Any, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise QpError(f"{name} must be an integer in [{low}, {high}], got {value!r}", field=name)
