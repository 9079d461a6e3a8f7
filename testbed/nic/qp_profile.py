"""The QP profile: every attribute `bring_up` gives a queue pair, in one typed value.

Everything that decides how a QP is brought up lives here, with the one set of defaults:
the transport knobs it is created with, its EV-table and CC profiles (INIT), the peer
window and immediate limits it grants (RTR), its own window, retry budget and ACK timeout
(RTS), and the per-side choices a caller may pin (RC/ECMP path, initial send PSN). A
profile is frozen and checked when made, so a wrong value fails where it was written, not
three layers down inside a verbs call. `emulated_timescale.emulated_qp_profile` derives
the emulator's profile from these defaults with `dataclasses.replace`.

A profile travels as JSON (`to_json` / `from_json`) to an agent in another process, so a
caller computes it once and the agent builds exactly the same QP.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from testbed.nic.cc import CcProfile
from testbed.nic.ev_table import EvState, EvTableConfig
from testbed.nic.qp_state import MAX_MPR, MAX_TIMEOUT_EXPONENT, MAX_WIMM, RetryConfig
from testbed.nic.transport_config import TransportConfig
from testbed.nic.wire import PSN_MASK


@dataclass(frozen=True)
class QpProfile:
    """What `bring_up` / `connect` give a QP (see the module docstring).

    timeout 14 = 16.8 ms: emulated RTTs are milliseconds, so the hardware examples'
    131-262 us (timeout 7-8) would fire constantly. `timeout_s`, when set, replaces the
    exponent's value as the effective ACK timeout. `pinned_path` is (plane, path) for an
    RC or ECMP QP whose caller picks its path; `sq_psn` pins the initial send PSN.
    """

    transport_config: TransportConfig = field(default_factory=TransportConfig)
    ev_table: EvTableConfig = field(default_factory=EvTableConfig)
    cc_profile: CcProfile = field(default_factory=CcProfile)
    max_wimm_dest: int = 64
    mpr_dest: int = 8
    dynamic_mpr_dest: bool = False
    pinned_path: tuple[int, Any] | None = None
    max_wimm: int = 64
    mpr: int = 8
    dynamic_mpr: bool = False
    retry: RetryConfig = RetryConfig(linear_cnt=7, exp_cnt=7)
    timeout: int = 14
    timeout_s: float | None = None
    sq_psn: int | None = None

    def __post_init__(self) -> None:
        for problem in self._problems():
            raise ValueError(f"QpProfile: {problem}")
        if self.pinned_path is not None:   # JSON gives a list; the QP compares tuples
            object.__setattr__(self, "pinned_path", tuple(self.pinned_path))

    def _problems(self) -> Iterator[str]:
        for name, kind in (("transport_config", TransportConfig), ("ev_table", EvTableConfig),
                           ("cc_profile", CcProfile), ("retry", RetryConfig)):
            if not isinstance(getattr(self, name), kind):
                yield f"{name} must be a {kind.__name__}, got {getattr(self, name)!r}"
        for name, low, high in (("max_wimm_dest", 0, MAX_WIMM), ("mpr_dest", 1, MAX_MPR),
                                ("max_wimm", 0, MAX_WIMM), ("mpr", 1, MAX_MPR),
                                ("timeout", 0, MAX_TIMEOUT_EXPONENT)):
            if not _is_int_in(getattr(self, name), low, high):
                yield f"{name} must be an integer in [{low}, {high}], got {getattr(self, name)!r}"
        for name in ("dynamic_mpr_dest", "dynamic_mpr"):
            if not isinstance(getattr(self, name), bool):
                yield f"{name} must be a bool, got {getattr(self, name)!r}"
        timeout_s = self.timeout_s
        if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(
                timeout_s, (int, float)) or not timeout_s > 0):
            yield f"timeout_s must be > 0 seconds or None, got {timeout_s!r}"
        if self.sq_psn is not None and not _is_int_in(self.sq_psn, 0, PSN_MASK):
            yield f"sq_psn must be an integer in [0, {PSN_MASK}] or None, got {self.sq_psn!r}"
        pinned = self.pinned_path
        if pinned is not None and (not isinstance(pinned, (tuple, list)) or len(pinned) != 2
                                   or not _is_int_in(pinned[0], 0, None)):
            yield f"pinned_path must be (plane, path) or None, got {pinned!r}"

    # -- the attributes of each transition ----------------------------------------------

    def init_attrs(self) -> dict[str, Any]:
        return {"ev_table": self.ev_table, "cc_profile": self.cc_profile}

    def rtr_attrs(self) -> dict[str, Any]:
        """RTR's own attributes; the peer's address, QP and PSN come from its local_info()."""
        return {"max_wimm_dest": self.max_wimm_dest, "mpr_dest": self.mpr_dest,
                "dynamic_mpr_dest": self.dynamic_mpr_dest, "pinned_path": self.pinned_path}

    def rts_attrs(self) -> dict[str, Any]:
        attrs = {"max_wimm": self.max_wimm, "mpr": self.mpr, "dynamic_mpr": self.dynamic_mpr,
                 "retry": self.retry, "timeout": self.timeout, "timeout_s": self.timeout_s}
        if self.sq_psn is not None:       # absent: the PSN the QP drew
            attrs["sq_psn"] = self.sq_psn
        return attrs

    # -- JSON -----------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["transport_config"] = asdict(self.transport_config)
        data["ev_table"] = _ev_table_to_json(self.ev_table)
        data["cc_profile"] = self.cc_profile.to_json()
        data["retry"] = asdict(self.retry)
        data["pinned_path"] = None if self.pinned_path is None else list(self.pinned_path)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> QpProfile:
        """The profile to_json() wrote; absent keys take the defaults, unknown ones are refused."""
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"QpProfile: unknown field(s) {', '.join(unknown)}")
        values = dict(data)
        readers = {"transport_config": lambda d: TransportConfig(**d),
                   "ev_table": _ev_table_from_json, "cc_profile": CcProfile.from_json,
                   "retry": lambda d: RetryConfig(**d)}
        for name, read in readers.items():
            if name in values:
                values[name] = read(values[name])
        return cls(**values)


def _is_int_in(value: Any, low: int, high: int | None) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool) and value >= low
            and (high is None or value <= high))


def _ev_table_to_json(profile: EvTableConfig) -> dict[str, Any]:
    data = asdict(profile)
    data["event_mask"] = sorted(state.value for state in profile.event_mask)
    return data


def _ev_table_from_json(data: dict[str, Any]) -> EvTableConfig:
    values = dict(data)
    if "event_mask" in values:
        values["event_mask"] = frozenset(EvState(state) for state in values["event_mask"])
    return EvTableConfig(**values)
