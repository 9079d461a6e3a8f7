"""EV format profiles, EV profiles and the shared profile lifecycle of the MRC control API.

A model of the controller-side objects of ``mrc_ctl.h`` (API 1.0.1) in
github.com/opencomputeproject/OCP-Multipath-Reliable-Connection:

- :class:`EvFormatProfile` -- ``struct mrc_ctl_ev_fmt_profile_attr``: a mode (STEV, SRV6,
  UDP) and an ordered list of format field widths, i.e. the wire layout of an expanded EV.
- :class:`EvProfile` -- ``struct mrc_ctl_ev_profile_attr``: mode (AUTO, EXP, GEN), format
  profile, ``ev_count``, ``ev_min_active``, ``ev_event_mask``, the field definitions that
  drive expansion (:mod:`testbed.mrc_ctl.ev_expansion`) and the EV array with a state per entry.
- The lifecycle both share: INIT -> OFFLINE -> ONLINE -> OFFLINE -> INIT, the attributes each
  transition needs, and EBUSY while the profile is in use.

Every refusal raises :class:`ProfileError` (a ``ValueError``) naming the field and the
problem, with an errno-like ``code``: EINVAL (bad argument or not allowed in this state),
EBUSY (in use), E2BIG (beyond a device limit, or a query array too small; ``needed`` holds
the size), ENOENT (EV not found). Batched EV operations do not raise for a failing entry:
like the C API they stop at the first failure and report per-entry results
(:class:`EvOpResult`), keeping what earlier entries did.

Choices made where the public sources (OCP ``mrc_ctl.h`` and its examples) are silent:

1. **EV values are compact** (``mrc_ctl.h`` does not say whether ``val`` is compact or
   expanded). ``EvEntry.val`` holds the compact bit string that
   ``examples/ev_expansion/ev_expansion.c`` expands, for explicit and generated EVs alike;
   the wire form (STEV value, SRv6 DA [+ SRH segment]) is ``EvProfile.wire_ev(entry)``.
   :func:`srv6_carrier` / :func:`srv6_ev_from_carrier` convert to and from the 128-bit
   carrier address.
2. **GEN generation** (how values are drawn is not specified), :func:`generate_evs`. Each
   field with a mask yields an n-bit number (n = popcount(mask)) in ``[min_val, max_val]``;
   ``max_val == 0`` means "no upper bound" (2**n - 1), as the C sample's generated profiles
   use it. The candidate set is the product of the field ranges, indexed in mixed radix
   (first field most significant).
   Ports come from the device port mask and are assigned round-robin in ascending order:
   entry ``i`` uses ``ports[i % P]``, so per-plane counts differ by at most one and are equal
   when ``ev_count`` is a multiple of P. Each port draws its entries from its own
   ``random.Random((seed << 8) | port)`` without replacement, so within a plane paths are
   distinct until the candidate set is exhausted, after which one shuffled order of the whole
   set repeats. The seed defaults to the profile id. The array is regenerated whenever mode,
   count or fields change.
3. **AUTO profiles** need only MODE to go OFFLINE (no format, fields or array: "controller
   supplies nothing"); COUNT is optional and defaults to 0; EV operations are refused.
4. **Required attributes** for a transition are those given in this call or set earlier;
   leaving INIT needs all of them in the same call, because an INIT profile takes no
   attributes otherwise. Returning to INIT clears the configuration.
5. **ONLINE changes**: with ``MODIFY_ONLINE`` only EVENT_MASK, MODIFY_FIELDS and REPLACE_EV
   are accepted, even with active QPs. Anything else is EBUSY while QPs are attached and
   EINVAL otherwise. A QP can attach only to an ONLINE profile, so a profile in use is
   always ONLINE. A format profile is busy while any EV profile using it is ONLINE, and an EV
   profile goes ONLINE only if its format profile is ONLINE.
6. **ev_count alignment**: an EXP count that is not a multiple of ``ev_count_align`` is
   EINVAL; a GEN count is rounded up ("implementation-adjusted, alignment-compliant").
7. **REPLACE_EV** without ``ALL_COPIES`` replaces the lowest-index copy. The new EV takes the
   entry's ``state`` (required by the API's entry table), or GOOD when none is given (as a
   replaced EV "starts GOOD" in the repository history). **MODIFY_EV_STATE** applies to
   every copy of the EV; **QUERY_EV_STATE** reports the lowest-index copy. Unpopulated slots
   report UNKNOWN.
8. **Width limits per format mode**: STEV 32 bits (flow label 16 + UDP sport 16), UDP 16
   bits, SRV6 128 bits (one DA) or 256 bits when the device supports a single-segment SRH.
   The sum of a profile's field widths is also bounded by ``ev_max_width`` (E2BIG).
"""

from __future__ import annotations

import enum
import errno
import random
from dataclasses import dataclass, field, replace
from functools import lru_cache
from ipaddress import IPv6Address
from math import prod
from typing import Callable, ClassVar, Iterable, Mapping, Sequence, Union

from testbed.mrc_ctl.ev_expansion import (
    EV_MAX_BITS,
    EV_MAX_BYTES,
    EvField,
    Expander,
    ProfileError,
    check_profs,
    compact_bits,
    compact_from_bits,
    compact_from_field_bits,
    low_mask,
)
from testbed.nic.ev_table import EvState

__all__ = [
    "DeviceCaps",
    "EV_OP_F_ALL_COPIES",
    "EV_UNPOPULATED",
    "EvEntry",
    "EvField",
    "EvFormat",
    "EvFormatProfile",
    "EvMode",
    "EvOp",
    "EvOpEntry",
    "EvOpEntryResult",
    "EvOpResult",
    "EvProfile",
    "EvProfileConfig",
    "EV_STATE_BITS",
    "EvState",
    "FmtMode",
    "PROFILE_TRANSITIONS",
    "ProfileError",
    "ProfileState",
    "Srv6Carrier",
    "check_format",
    "generate_evs",
    "gen_bounds",
    "max_format_width",
    "srv6_carrier",
    "srv6_ev_from_carrier",
    "srv6_ev_from_usids",
]


class FmtMode(enum.IntEnum):
    """``enum mrc_ctl_ev_fmt_mode``."""

    STEV = 1 << 0  # EV bits in IPv6 flow label + UDP source port
    SRV6 = 1 << 1  # SRv6 uSID carrier (+ optional single-segment SRH)
    UDP = 1 << 2  # EV entirely in the UDP source port


SRV6_DA_BITS = 128
_MODE_MAX_WIDTH = {FmtMode.STEV: 32, FmtMode.UDP: 16, FmtMode.SRV6: 2 * SRV6_DA_BITS}
FMT_FIELD_MAX_WIDTH = 255  # mrc_ctl_ev_fmt_field.width is a uint8


def max_format_width(mode: FmtMode, srh: bool = True) -> int:
    """Largest total format width a mode can carry."""
    if mode is FmtMode.SRV6 and not srh:
        return SRV6_DA_BITS
    return _MODE_MAX_WIDTH[mode]


class EvMode(enum.IntEnum):
    """``enum mrc_ctl_ev_mode``."""

    AUTO = 1 << 0
    EXP = 1 << 1
    GEN = 1 << 2


class ProfileState(enum.IntEnum):
    """``enum mrc_ctl_profile_state``, shared by format, EV and CC profiles."""

    INIT = 0
    OFFLINE = 1
    ONLINE = 2


PROFILE_TRANSITIONS = frozenset(
    {
        (ProfileState.INIT, ProfileState.OFFLINE),
        (ProfileState.OFFLINE, ProfileState.ONLINE),
        (ProfileState.ONLINE, ProfileState.OFFLINE),
        (ProfileState.OFFLINE, ProfileState.INIT),
    }
)


# ``enum mrc_ctl_ev_state``: the API's bit for each state (controller view; SKIP is
# NIC-internal and has none). Event masks are sets of states here, and ints in the C API.
EV_STATE_BITS: Mapping[EvState, int] = {
    EvState.GOOD: 1 << 0,
    EvState.ASSUMED_BAD: 1 << 1,
    EvState.DENIED: 1 << 2,
    EvState.UNKNOWN: 1 << 31,
}
SETTABLE_EV_STATES = (EvState.GOOD, EvState.ASSUMED_BAD, EvState.DENIED)
EVENT_MASK_STATES = frozenset({EvState.GOOD, EvState.ASSUMED_BAD})  # only these are reportable
EventMask = Union[EvState, Iterable[EvState], int]


def mask_bits(states: Iterable[EvState]) -> int:
    """The C API's ``event_mask`` for a set of states."""
    return sum(EV_STATE_BITS[state] for state in set(states))


def mask_states(bits: int) -> frozenset[EvState]:
    """The states an API bitmask names; bits of no state are refused."""
    states = frozenset(s for s, bit in EV_STATE_BITS.items() if bits & bit)
    if bits & ~mask_bits(states):
        raise ProfileError("event_mask", f"{bits:#x} has bits of no EV state")
    return states


class EvOp(enum.IntEnum):
    """``enum mrc_ctl_ev_op``."""

    REPLACE_EV = 0
    MODIFY_EV_STATE = 1
    QUERY_EV_STATE = 2
    QUERY_EV_ARRAY = 3


EV_OP_F_ALL_COPIES = 1 << 0


@dataclass(frozen=True)
class DeviceCaps:
    """The subset of ``struct mrc_ctl_device_attr`` that profiles depend on."""

    phy_port_mask: int = 0b1_1111_1110  # bit N = port N (1-based): ports 1..8
    ev_count_align: int = 0  # 0 = any count
    ev_max_count_profile: int = 4096
    ev_max_width: int = EV_MAX_BITS
    ev_fmt_mode_mask: int = FmtMode.STEV | FmtMode.SRV6 | FmtMode.UDP
    ev_mode_mask: int = EvMode.AUTO | EvMode.EXP | EvMode.GEN
    ev_op_max_entries: int = 0  # 0 = no cap
    ev_profile_modify_online: bool = False
    ev_explicit_range: bool = False
    srv6_srh: bool = True

    @property
    def ports(self) -> tuple[int, ...]:
        return tuple(port for port in range(1, 32) if (self.phy_port_mask >> port) & 1)


@dataclass(frozen=True)
class EvFormat:
    """An EV format: mode plus ordered field widths (the wire layout)."""

    mode: FmtMode
    widths: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", FmtMode(self.mode))
        object.__setattr__(self, "widths", tuple(self.widths))
        check_format(self.mode, self.widths)

    @property
    def total_width(self) -> int:
        return sum(self.widths)


def check_format(mode: FmtMode, widths: Sequence[int], srh: bool = True) -> None:
    if not widths:
        raise ProfileError("fmt_fields", "a format needs at least one field")
    for index, width in enumerate(widths):
        if isinstance(width, bool) or not isinstance(width, int):
            raise ProfileError(f"fmt_fields[{index}].width", f"{width!r} is not an integer")
        if not 1 <= width <= FMT_FIELD_MAX_WIDTH:
            raise ProfileError(
                f"fmt_fields[{index}].width", f"{width} is outside 1..{FMT_FIELD_MAX_WIDTH}"
            )
    limit = max_format_width(mode, srh)
    if sum(widths) > limit:
        raise ProfileError(
            "fmt_fields",
            f"total width {sum(widths)} exceeds {limit} bits for {mode.name}",
            errno.E2BIG,
        )


@dataclass(frozen=True)
class EvEntry:
    """``struct mrc_ctl_ev``: a compact EV value (32 bytes) and its 1-based port (= plane)."""

    val: bytes = bytes(EV_MAX_BYTES)
    port: int = 0

    def __post_init__(self) -> None:
        value = bytes(self.val)
        if len(value) > EV_MAX_BYTES:
            raise ProfileError("ev.val", f"{len(value)} bytes exceed {EV_MAX_BYTES}")
        object.__setattr__(self, "val", value.ljust(EV_MAX_BYTES, b"\0"))
        if isinstance(self.port, bool) or not isinstance(self.port, int):
            raise ProfileError("ev.port", f"{self.port!r} is not an integer")
        if not 0 <= self.port <= 0xFF:
            raise ProfileError("ev.port", f"{self.port} is not a uint8")

    @classmethod
    def from_bits(cls, value: int, nbits: int, port: int) -> EvEntry:
        """Entry whose compact EV is the ``nbits``-wide number ``value``."""
        return cls(compact_from_bits(value, nbits), port)

    def bits(self, nbits: int) -> int:
        """The first ``nbits`` bits of the compact EV as a number."""
        return compact_bits(self.val, nbits)

    @property
    def is_unpopulated(self) -> bool:
        return self == EV_UNPOPULATED

    def __repr__(self) -> str:
        shown = self.val.rstrip(b"\0").hex() or "00"
        return f"EvEntry(val=0x{shown}, port={self.port})"


EV_UNPOPULATED = EvEntry()  # MRC_CTL_EV_UNPOPULATED: all-zero value, port 0


@dataclass(frozen=True)
class EvOpEntry:
    """``struct mrc_ctl_ev_op_entry``."""

    ev: EvEntry = EV_UNPOPULATED
    ev_new: EvEntry | None = None
    state: EvState | None = None
    flags: int = 0


@dataclass(frozen=True)
class EvOpEntryResult:
    """Outcome of one entry: ``code`` 0 on success, else the errno of ``error``."""

    index: int
    code: int = 0
    error: ProfileError | None = None
    ev: EvEntry | None = None
    state: EvState | None = None
    slots: tuple[int, ...] = ()  # array positions the entry touched or read


@dataclass(frozen=True)
class EvOpResult:
    """Per-entry results of one batched EV operation; processing stops at the first failure."""

    op: EvOp
    results: tuple[EvOpEntryResult, ...]
    requested: int

    @property
    def completed(self) -> int:
        return sum(1 for result in self.results if result.code == 0)

    @property
    def error(self) -> ProfileError | None:
        return next((r.error for r in self.results if r.error is not None), None)

    @property
    def ok(self) -> bool:
        return self.completed == self.requested

    def raise_for_error(self) -> EvOpResult:
        if self.error is not None:
            raise self.error
        return self


# --------------------------------------------------------------------------- lifecycle


class _Lifecycle:
    """The state machine every MRC control profile follows.

    Subclasses declare their attribute names, which of them the MODIFY_ONLINE capability
    opens up, what each target state requires and when the profile is in use.
    """

    KIND: ClassVar[str] = "profile"
    ATTRS: ClassVar[frozenset[str]] = frozenset()
    ONLINE_ATTRS: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, profile_id: int, caps: DeviceCaps) -> None:
        if isinstance(profile_id, bool) or not isinstance(profile_id, int):
            raise ProfileError("profile_id", f"{profile_id!r} is not an integer")
        if not 0 <= profile_id < 1 << 64:
            raise ProfileError("profile_id", f"{profile_id} is not a uint64")
        self.profile_id = profile_id
        self.caps = caps
        self._state = ProfileState.INIT
        self._set_attrs: frozenset[str] = frozenset()

    @property
    def state(self) -> ProfileState:
        return self._state

    def _modify_online_capable(self) -> bool:
        return False

    def _in_use(self) -> bool:
        return False

    def _busy_reason(self) -> str:
        return "in use"

    @property
    def label(self) -> str:
        return f"{self.KIND} {self.profile_id}"

    def _check_access(self, given: frozenset[str], target: ProfileState | None) -> ProfileState:
        """Refuse a modify call the current state does not allow; return the next state."""
        unknown = given - self.ATTRS
        if unknown:
            raise ProfileError(sorted(unknown)[0], f"not an attribute of a {self.KIND}")
        new_state = self._state if target is None else ProfileState(target)
        changing = new_state is not self._state
        if changing and (self._state, new_state) not in PROFILE_TRANSITIONS:
            raise ProfileError(
                "state",
                f"{self.label}: {self._state.name} -> {new_state.name} is not allowed "
                "(INIT -> OFFLINE -> ONLINE -> OFFLINE -> INIT)",
            )
        online_ok = (
            not changing and given <= self.ONLINE_ATTRS and self._modify_online_capable()
        )
        if (changing or given) and self._in_use() and not online_ok:
            raise ProfileError("state", f"{self.label} is {self._busy_reason()}", errno.EBUSY)
        if self._state is ProfileState.INIT and given and new_state is not ProfileState.OFFLINE:
            raise ProfileError(
                sorted(given)[0], f"{self.label} is INIT: configure it with state=OFFLINE"
            )
        if self._state is ProfileState.ONLINE and given and not online_ok:
            raise ProfileError(
                sorted(given - self.ONLINE_ATTRS or given)[0],
                f"cannot be modified while {self.label} is ONLINE",
            )
        return new_state

    def _check_required(
        self, given: frozenset[str], new_state: ProfileState, needed: frozenset[str]
    ) -> None:
        """``needed`` attributes must come with this call or, outside INIT, earlier ones."""
        if new_state is self._state:
            return
        have = given if self._state is ProfileState.INIT else given | self._set_attrs
        missing = needed - have
        if missing:
            raise ProfileError(
                sorted(missing)[0],
                f"{self.label}: moving to {new_state.name} needs {', '.join(sorted(missing))}",
            )


def _given(**attrs: object) -> frozenset[str]:
    return frozenset(name for name, value in attrs.items() if value is not None)


# ------------------------------------------------------------------- format profile


class EvFormatProfile(_Lifecycle):
    """``mrc_ctl_modify_ev_fmt_profile``: OFFLINE needs MODE, ONLINE needs MODIFY_FIELDS."""

    KIND = "EV format profile"
    ATTRS = frozenset({"mode", "fmt_fields"})

    def __init__(self, profile_id: int, caps: DeviceCaps | None = None) -> None:
        super().__init__(profile_id, caps or DeviceCaps())
        self._mode: FmtMode | None = None
        self._widths: tuple[int, ...] | None = None
        self._users: list[EvProfile] = []

    @property
    def mode(self) -> FmtMode | None:
        return self._mode

    @property
    def widths(self) -> tuple[int, ...] | None:
        return self._widths

    @property
    def fmt(self) -> EvFormat | None:
        if self._mode is None or self._widths is None:
            return None
        return EvFormat(self._mode, self._widths)

    @staticmethod
    def _required_for(target: ProfileState) -> frozenset[str]:
        return {
            ProfileState.OFFLINE: frozenset({"mode"}),
            ProfileState.ONLINE: frozenset({"fmt_fields"}),
        }.get(target, frozenset())

    def _in_use(self) -> bool:
        return any(user.state is ProfileState.ONLINE for user in self._users)

    def _busy_reason(self) -> str:
        return "used by an ONLINE EV profile"

    def modify(
        self,
        *,
        state: ProfileState | None = None,
        mode: FmtMode | None = None,
        fmt_fields: Sequence[int] | None = None,
    ) -> None:
        given = _given(mode=mode, fmt_fields=fmt_fields)
        new_state = self._check_access(given, state)
        self._check_required(given, new_state, self._required_for(new_state))
        if new_state is ProfileState.INIT:
            self._reset()
            return
        new_mode = self._checked_mode(mode) if mode is not None else self._mode
        new_widths = tuple(fmt_fields) if fmt_fields is not None else self._widths
        if new_widths is not None and new_mode is not None:
            check_format(new_mode, new_widths, self.caps.srv6_srh)
        self._mode, self._widths = new_mode, new_widths
        self._set_attrs |= given
        self._state = new_state

    def _checked_mode(self, mode: FmtMode) -> FmtMode:
        try:
            mode = FmtMode(mode)
        except ValueError:
            raise ProfileError("mode", f"{mode!r} is not an EV format mode") from None
        if not self.caps.ev_fmt_mode_mask & mode:
            raise ProfileError("mode", f"{mode.name} is not supported by the device")
        return mode

    def _reset(self) -> None:
        self._state = ProfileState.INIT
        self._mode = None
        self._widths = None
        self._set_attrs = frozenset()

    def query_fields(self, capacity: int | None = None) -> tuple[int, ...]:
        """MRC_CTL_EV_FMT_OP_QUERY_FIELDS; E2BIG (with ``needed``) if capacity is short."""
        widths = self._widths or ()
        if capacity is not None and capacity < len(widths):
            raise ProfileError(
                "fmt_field_count",
                f"{capacity} < {len(widths)} fields",
                errno.E2BIG,
                needed=len(widths),
            )
        return widths

    def _attach_user(self, profile: EvProfile) -> None:
        if profile not in self._users:
            self._users.append(profile)

    def _detach_user(self, profile: EvProfile) -> None:
        if profile in self._users:
            self._users.remove(profile)


# ------------------------------------------------------------------------ generation


def gen_bounds(index: int, ev_field: EvField) -> tuple[int, int]:
    """Inclusive range of the n-bit number a GEN field draws (``max_val == 0``: unbounded)."""
    high = ev_field.max_val or low_mask(ev_field.ev_bits)
    if ev_field.min_val > high:
        raise ProfileError(
            f"fields[{index}].min_val",
            f"{ev_field.min_val:#x} is above the generation maximum {high:#x}",
        )
    return ev_field.min_val, high


def _distinct_indices(space: int, count: int, rng: random.Random) -> list[int]:
    """``count`` indices of ``range(space)`` in random order, repeating only when exhausted."""
    if count <= 0:
        return []
    if space <= 4 * count:
        order = list(range(space))
        rng.shuffle(order)
        return [order[i % space] for i in range(count)]
    seen: set[int] = set()
    drawn: list[int] = []
    while len(drawn) < count:
        candidate = rng.randrange(space)
        if candidate not in seen:
            seen.add(candidate)
            drawn.append(candidate)
    return drawn


def _field_bits_for(index: int, bounds: Sequence[tuple[int, int]]) -> list[int]:
    """Mixed-radix digits of ``index``, first field most significant."""
    digits = []
    for low, high in reversed(bounds):
        index, digit = divmod(index, high - low + 1)
        digits.append(low + digit)
    return digits[::-1]


def generate_evs(
    fields: Sequence[EvField], ev_count: int, ports: Sequence[int], seed: int
) -> tuple[EvEntry, ...]:
    """Draw ``ev_count`` compact EVs for a GEN profile (see the module docstring, choice 2)."""
    if not ports:
        raise ProfileError("phy_port_mask", "no port to assign generated EVs to")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ProfileError("gen_seed", f"{seed!r} is not a non-negative integer")
    masked = [(i, f) for i, f in enumerate(fields) if f.mask]
    bounds = [gen_bounds(i, f) for i, f in masked]
    space = prod(high - low + 1 for low, high in bounds)
    plane_count = len(ports)
    per_port = {
        port: _distinct_indices(
            space,
            ev_count // plane_count + (1 if rank < ev_count % plane_count else 0),
            random.Random((seed << 8) | port),
        )
        for rank, port in enumerate(ports)
    }
    entries = []
    for position in range(ev_count):
        port = ports[position % plane_count]
        chunks = _field_bits_for(per_port[port][position // plane_count], bounds)
        entries.append(EvEntry(compact_from_field_bits(fields, chunks), port))
    return tuple(entries)


# ------------------------------------------------------------------------ EV profile


@dataclass(frozen=True)
class EvProfileConfig:
    """Attributes of an EV profile; replaced as a whole so a refused call changes nothing."""

    mode: EvMode | None = None
    fmt_profile: EvFormatProfile | None = None
    ev_count: int = 0
    min_active: int | None = None
    event_mask: frozenset[EvState] | None = None
    fields: tuple[EvField, ...] = ()


@dataclass
class _EvArray:
    entries: list[EvEntry] = field(default_factory=list)
    states: list[EvState] = field(default_factory=list)

    def copy(self) -> _EvArray:
        return _EvArray(list(self.entries), list(self.states))

    def slots_of(self, ev: EvEntry) -> list[int]:
        return [slot for slot, entry in enumerate(self.entries) if entry == ev]


class EvProfile(_Lifecycle):
    """``mrc_ctl_modify_ev_profile`` / ``mrc_ctl_query_ev_profile`` for one EV profile.

    OFFLINE needs MODE, FMT_ID, COUNT, MODIFY_FIELDS (AUTO: MODE); ONLINE needs MIN_ACTIVE,
    EVENT_MASK and, for EXP, an array with no UNPOPULATED entry.
    """

    KIND = "EV profile"
    ATTRS = frozenset({"mode", "fmt_profile", "ev_count", "min_active", "event_mask", "fields"})
    ONLINE_ATTRS = frozenset({"event_mask", "fields"})
    _OFFLINE_NEEDS = frozenset({"mode", "fmt_profile", "ev_count", "fields"})
    _ONLINE_NEEDS = frozenset({"min_active", "event_mask"})

    def __init__(
        self, profile_id: int, caps: DeviceCaps | None = None, *, gen_seed: int | None = None
    ) -> None:
        super().__init__(profile_id, caps or DeviceCaps())
        self.gen_seed = profile_id if gen_seed is None else gen_seed
        self._config = EvProfileConfig()
        self._array = _EvArray()
        self._active_qps = 0
        self.version = 0  # bumped on every change of the EV array or its states

    # ---- read-only views

    @property
    def config(self) -> EvProfileConfig:
        return self._config

    @property
    def mode(self) -> EvMode | None:
        return self._config.mode

    @property
    def fmt_profile(self) -> EvFormatProfile | None:
        return self._config.fmt_profile

    @property
    def ev_count(self) -> int:
        return self._config.ev_count

    @property
    def min_active(self) -> int | None:
        return self._config.min_active

    @property
    def event_mask(self) -> frozenset[EvState] | None:
        return self._config.event_mask

    @property
    def fields(self) -> tuple[EvField, ...]:
        return self._config.fields

    @property
    def ev_array(self) -> tuple[EvEntry, ...]:
        return tuple(self._array.entries)

    @property
    def ev_states(self) -> tuple[EvState, ...]:
        return tuple(self._array.states)

    @property
    def active_qps(self) -> int:
        return self._active_qps

    @property
    def expander(self) -> Expander:
        fmt_profile = self._config.fmt_profile
        if fmt_profile is None or fmt_profile.widths is None:
            raise ProfileError("fmt_profile", f"{self.label} has no format to expand with")
        return _expander(fmt_profile.widths, self._config.fields)

    def wire_ev(self, entry: EvEntry) -> bytes:
        """Expanded (wire) form of a compact EV under this profile, 32 bytes."""
        return self.expander.expand(entry.val)

    # ---- QP association

    def attach_qp(self) -> None:
        """A QP names this profile at INIT; only ONLINE profiles can be used."""
        if self._state is not ProfileState.ONLINE:
            raise ProfileError("ev_profile_id", f"{self.label} is {self._state.name}, not ONLINE")
        self._active_qps += 1

    def detach_qp(self) -> None:
        if not self._active_qps:
            raise ProfileError("ev_profile_id", f"{self.label} has no active QP")
        self._active_qps -= 1

    # ---- lifecycle hooks

    def _modify_online_capable(self) -> bool:
        return self.caps.ev_profile_modify_online

    def _in_use(self) -> bool:
        return self._active_qps > 0

    def _busy_reason(self) -> str:
        return f"used by {self._active_qps} active QP(s)"

    def _required_for(self, target: ProfileState, mode: EvMode | None) -> frozenset[str]:
        if target is ProfileState.OFFLINE:
            return frozenset({"mode"}) if mode is EvMode.AUTO else self._OFFLINE_NEEDS
        if target is ProfileState.ONLINE:
            return self._ONLINE_NEEDS
        return frozenset()

    # ---- modify

    def modify(
        self,
        *,
        state: ProfileState | None = None,
        mode: EvMode | None = None,
        fmt_profile: EvFormatProfile | None = None,
        ev_count: int | None = None,
        min_active: int | None = None,
        event_mask: EventMask | None = None,
        fields: Sequence[EvField] | None = None,
    ) -> None:
        """Apply the given attributes and/or state change atomically, or raise ProfileError."""
        attrs = dict(
            mode=mode,
            fmt_profile=fmt_profile,
            ev_count=ev_count,
            min_active=min_active,
            event_mask=event_mask,
            fields=None if fields is None else tuple(fields),
        )
        updates = {name: value for name, value in attrs.items() if value is not None}
        given = frozenset(updates)
        new_state = self._check_access(given, state)
        if mode is not None:
            updates["mode"] = self._checked_mode(mode)
        next_mode = updates.get("mode", self._config.mode)
        self._check_required(given, new_state, self._required_for(new_state, next_mode))
        if new_state is ProfileState.INIT:
            self._reset()
            return
        candidate = self._validated(replace(self._config, **updates))
        array = self._prospective_array(candidate)
        if new_state is ProfileState.ONLINE:
            self._check_online_ready(candidate, array)
        self._commit(candidate, array, given, new_state)

    def _checked_mode(self, mode: EvMode) -> EvMode:
        try:
            mode = EvMode(mode)
        except ValueError:
            raise ProfileError("mode", f"{mode!r} is not an EV mode") from None
        if not self.caps.ev_mode_mask & mode:
            raise ProfileError("mode", f"{mode.name} is not supported by the device")
        return mode

    def _validated(self, config: EvProfileConfig) -> EvProfileConfig:
        config = replace(config, ev_count=self._checked_count(config))
        if config.mode is not EvMode.AUTO:
            self._check_fields(config)
        self._check_min_active(config)
        return replace(config, event_mask=_checked_event_mask(config.event_mask))

    def _checked_count(self, config: EvProfileConfig) -> int:
        count = config.ev_count
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise ProfileError("ev_count", f"{count!r} is not a count")
        if config.mode is EvMode.AUTO:
            return count
        if count == 0:
            raise ProfileError("ev_count", f"a {config.mode.name} profile needs at least one EV")
        align = self.caps.ev_count_align
        if align and count % align:
            if config.mode is EvMode.EXP:
                raise ProfileError(
                    "ev_count", f"{count} is not a multiple of ev_count_align {align}"
                )
            count += align - count % align
        if count > self.caps.ev_max_count_profile:
            raise ProfileError(
                "ev_count",
                f"{count} exceeds ev_max_count_profile {self.caps.ev_max_count_profile}",
                errno.E2BIG,
            )
        return count

    def _check_fields(self, config: EvProfileConfig) -> None:
        fmt_profile = config.fmt_profile
        if not isinstance(fmt_profile, EvFormatProfile):
            raise ProfileError("fmt_profile", f"{fmt_profile!r} is not an EV format profile")
        if fmt_profile.widths is None or fmt_profile.state is ProfileState.INIT:
            raise ProfileError(
                "fmt_profile", f"{fmt_profile.label} has no format fields configured"
            )
        for ev_field in config.fields:
            if not isinstance(ev_field, EvField):
                raise ProfileError("fields", f"{ev_field!r} is not an EvField")
        check_profs(fmt_profile.widths, config.fields)
        total = sum(f.width for f in config.fields)
        if total > self.caps.ev_max_width:
            raise ProfileError(
                "fields",
                f"total width {total} exceeds ev_max_width {self.caps.ev_max_width}",
                errno.E2BIG,
            )
        if config.mode is EvMode.GEN:
            for index, ev_field in enumerate(config.fields):
                if ev_field.mask:
                    gen_bounds(index, ev_field)

    @staticmethod
    def _check_min_active(config: EvProfileConfig) -> None:
        value = config.min_active
        if value is None:
            return
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ProfileError("min_active", f"{value!r} is not a count")
        if value > config.ev_count:
            raise ProfileError(
                "min_active", f"{value} exceeds ev_count {config.ev_count}"
            )

    def _prospective_array(self, config: EvProfileConfig) -> _EvArray:
        """The EV array the profile would hold with ``config`` (the current one if unchanged)."""
        old = self._config
        fresh = self._state is ProfileState.INIT or config.mode is not old.mode
        if config.mode is EvMode.AUTO:
            return _EvArray()
        if config.mode is EvMode.GEN:
            if fresh or (config.ev_count, config.fields) != (old.ev_count, old.fields):
                return self._generated(config)
            return self._array.copy()
        if fresh:
            return _unpopulated(config.ev_count)
        array = self._array.copy()
        missing = config.ev_count - len(array.entries)
        array.entries = array.entries[: config.ev_count] + [EV_UNPOPULATED] * max(0, missing)
        array.states = array.states[: config.ev_count] + [EvState.UNKNOWN] * max(0, missing)
        return array

    def _generated(self, config: EvProfileConfig) -> _EvArray:
        entries = generate_evs(config.fields, config.ev_count, self.caps.ports, self.gen_seed)
        return _EvArray(list(entries), [EvState.GOOD] * len(entries))

    def _check_online_ready(self, config: EvProfileConfig, array: _EvArray) -> None:
        if config.mode is EvMode.AUTO:
            return
        fmt_profile = config.fmt_profile
        assert fmt_profile is not None and fmt_profile.widths is not None
        if fmt_profile.state is not ProfileState.ONLINE:
            raise ProfileError(
                "fmt_profile", f"{fmt_profile.label} is {fmt_profile.state.name}, not ONLINE"
            )
        unpopulated = sum(1 for entry in array.entries if entry.is_unpopulated)
        if unpopulated:
            raise ProfileError(
                "ev_array",
                f"{unpopulated} of {len(array.entries)} entries are UNPOPULATED; "
                "REPLACE_EV them before going ONLINE",
            )
        expander = _expander(fmt_profile.widths, config.fields)
        for slot, entry in enumerate(array.entries):
            _check_ev_fits(f"ev_array[{slot}]", entry, expander)
        if config.mode is EvMode.EXP and self.caps.ev_explicit_range:
            _check_contiguous(array.entries, expander.compact_width)

    def _commit(
        self,
        config: EvProfileConfig,
        array: _EvArray,
        given: frozenset[str],
        new_state: ProfileState,
    ) -> None:
        old_fmt = self._config.fmt_profile
        if old_fmt is not None and old_fmt is not config.fmt_profile:
            old_fmt._detach_user(self)
        if config.fmt_profile is not None:
            config.fmt_profile._attach_user(self)
        if array.entries != self._array.entries or array.states != self._array.states:
            self.version += 1
        self._config = config
        self._array = array
        self._set_attrs |= given
        self._state = new_state

    def _reset(self) -> None:
        if self._config.fmt_profile is not None:
            self._config.fmt_profile._detach_user(self)
        self._state = ProfileState.INIT
        self._config = EvProfileConfig()
        self._array = _EvArray()
        self._set_attrs = frozenset()
        self.version += 1

    # ---- EV operations

    def ev_op(self, op: EvOp, entries: Sequence[EvOpEntry]) -> EvOpResult:
        """Run one batched EV operation; per-entry results stop at the first failure.

        For QUERY_EV_ARRAY the length of ``entries`` is the caller's capacity.
        """
        op = EvOp(op)
        self._check_ev_op_access(op)
        cap = self.caps.ev_op_max_entries
        if cap and len(entries) > cap:
            raise ProfileError(
                "entry_count",
                f"{len(entries)} entries exceed ev_op_max_entries {cap}",
                errno.E2BIG,
            )
        if op is EvOp.QUERY_EV_ARRAY:
            return self._query_array_op(len(entries))
        handler = self._entry_handlers()[op]
        results: list[EvOpEntryResult] = []
        for index, entry in enumerate(entries):
            try:
                results.append(handler(index, entry))
            except ProfileError as error:
                results.append(EvOpEntryResult(index, error.code, error, entry.ev))
                break
        return EvOpResult(op, tuple(results), len(entries))

    def query_ev_array(self, capacity: int | None = None) -> tuple[EvEntry, ...]:
        """QUERY_EV_ARRAY; E2BIG with ``needed`` when ``capacity`` is too small."""
        self._check_ev_op_access(EvOp.QUERY_EV_ARRAY)
        if capacity is not None:
            self._check_capacity(capacity)
        return self.ev_array

    def _entry_handlers(self) -> dict[EvOp, Callable[[int, EvOpEntry], EvOpEntryResult]]:
        return {
            EvOp.REPLACE_EV: self._replace_one,
            EvOp.MODIFY_EV_STATE: self._modify_state_one,
            EvOp.QUERY_EV_STATE: self._query_state_one,
        }

    def _check_ev_op_access(self, op: EvOp) -> None:
        if self._state is ProfileState.INIT:
            raise ProfileError("ev_op", f"{self.label} is INIT and has no EV array")
        if self._config.mode is EvMode.AUTO:
            raise ProfileError("ev_op", f"{self.label} is AUTO and has no EV array")
        if op is not EvOp.REPLACE_EV or self._state is not ProfileState.ONLINE:
            return
        if self.caps.ev_profile_modify_online:
            return
        if self._in_use():
            raise ProfileError("ev_op", f"{self.label} is {self._busy_reason()}", errno.EBUSY)
        raise ProfileError("ev_op", f"REPLACE_EV needs MODIFY_ONLINE while {self.label} is ONLINE")

    def _check_capacity(self, capacity: int) -> None:
        needed = len(self._array.entries)
        if capacity < needed:
            raise ProfileError(
                "entry_count", f"{capacity} < {needed} EVs", errno.E2BIG, needed=needed
            )

    def _query_array_op(self, capacity: int) -> EvOpResult:
        self._check_capacity(capacity)
        results = tuple(
            EvOpEntryResult(slot, ev=entry, state=state, slots=(slot,))
            for slot, (entry, state) in enumerate(zip(self._array.entries, self._array.states))
        )
        return EvOpResult(EvOp.QUERY_EV_ARRAY, results, len(results))

    def _replace_one(self, index: int, entry: EvOpEntry) -> EvOpEntryResult:
        if entry.ev_new is None:
            raise ProfileError(f"entries[{index}].ev_new", "REPLACE_EV needs a new EV")
        requested = EvState.GOOD if entry.state is None else entry.state
        new_state = _checked_settable(f"entries[{index}].state", requested)
        self._check_new_ev(f"entries[{index}].ev_new", entry.ev_new)
        slots = self._slots_or_enoent(index, entry.ev)
        if not entry.flags & EV_OP_F_ALL_COPIES:
            slots = slots[:1]
        for slot in slots:
            self._array.entries[slot] = entry.ev_new
            self._array.states[slot] = new_state
        self.version += 1
        return EvOpEntryResult(index, ev=entry.ev_new, state=new_state, slots=tuple(slots))

    def _modify_state_one(self, index: int, entry: EvOpEntry) -> EvOpEntryResult:
        if entry.state is None:
            raise ProfileError(f"entries[{index}].state", "MODIFY_EV_STATE needs a state")
        new_state = _checked_settable(f"entries[{index}].state", entry.state)
        if entry.ev.is_unpopulated:
            raise ProfileError(f"entries[{index}].ev", "an UNPOPULATED entry has no state")
        slots = self._slots_or_enoent(index, entry.ev)
        for slot in slots:
            self._array.states[slot] = new_state
        self.version += 1
        return EvOpEntryResult(index, ev=entry.ev, state=new_state, slots=tuple(slots))

    def _query_state_one(self, index: int, entry: EvOpEntry) -> EvOpEntryResult:
        slot = self._slots_or_enoent(index, entry.ev)[0]
        return EvOpEntryResult(
            index, ev=entry.ev, state=self._array.states[slot], slots=(slot,)
        )

    def _slots_or_enoent(self, index: int, ev: EvEntry) -> list[int]:
        slots = self._array.slots_of(ev)
        if not slots:
            raise ProfileError(
                f"entries[{index}].ev", f"{ev!r} is not in the EV array", errno.ENOENT
            )
        return slots

    def _check_new_ev(self, name: str, ev: EvEntry) -> None:
        if ev.is_unpopulated:
            raise ProfileError(name, "cannot replace with the UNPOPULATED EV")
        if ev.port not in self.caps.ports:
            raise ProfileError(
                f"{name}.port",
                f"port {ev.port} is not in phy_port_mask {self.caps.phy_port_mask:#x}",
            )
        _check_ev_fits(name, ev, self.expander)


@lru_cache(maxsize=256)
def _expander(widths: tuple[int, ...], fields: tuple[EvField, ...]) -> Expander:
    # Expansion sits on the send path; validating the profile once per layout is enough.
    return Expander(widths, fields)


def _unpopulated(count: int) -> _EvArray:
    return _EvArray([EV_UNPOPULATED] * count, [EvState.UNKNOWN] * count)


def _checked_event_mask(mask: EventMask | None) -> frozenset[EvState] | None:
    """A set of states, from a state, states, or the C API's bitmask."""
    if mask is None:
        return None
    if isinstance(mask, EvState):
        states = frozenset({mask})
    elif isinstance(mask, int) and not isinstance(mask, bool) and mask >= 0:
        states = mask_states(mask)
    elif isinstance(mask, (set, frozenset, tuple, list)) and all(
            isinstance(s, EvState) for s in mask):
        states = frozenset(mask)
    else:
        raise ProfileError("event_mask", f"{mask!r} is not a state mask")
    if not states <= EVENT_MASK_STATES:
        raise ProfileError("event_mask", f"{sorted(states)}: only GOOD and ASSUMED_BAD can be "
                           "monitored")
    return states


def _checked_settable(name: str, state: EvState) -> EvState:
    if state not in SETTABLE_EV_STATES:
        raise ProfileError(name, f"{state!r} is not GOOD, ASSUMED_BAD or DENIED")
    return EvState(state)


def _check_ev_fits(name: str, ev: EvEntry, expander: Expander) -> None:
    try:
        expander.check_compact(ev.val)
    except ProfileError as error:
        raise ProfileError(f"{name}.val", error.problem, error.code) from None


def _check_contiguous(entries: Sequence[EvEntry], nbits: int) -> None:
    """MRC_CTL_OPT_CAP_EV_EXPLICIT_RANGE: values base, base+1, ..., base+n-1."""
    values = [entry.bits(nbits) for entry in entries]
    for slot, value in enumerate(values):
        if value != values[0] + slot:
            raise ProfileError(
                f"ev_array[{slot}]",
                f"{value:#x} breaks the contiguous range from {values[0]:#x} (EXPLICIT_RANGE)",
            )


# ------------------------------------------------------------------------------ SRv6


@dataclass(frozen=True)
class Srv6Carrier:
    """The wire form of an SRv6 EV: outer DA, optional SRH segment, and the NIC port."""

    da: IPv6Address
    srh_segment: IPv6Address | None
    port: int


def _require_srv6(fmt: EvFormat) -> None:
    if fmt.mode is not FmtMode.SRV6:
        raise ProfileError("fmt.mode", f"{fmt.mode.name} is not SRV6")


def srv6_carrier(ev: EvEntry, fmt: EvFormat, fields: Sequence[EvField]) -> Srv6Carrier:
    """Expand a compact SRv6 EV into its carrier address (and SRH segment beyond 128 bits)."""
    _require_srv6(fmt)
    wire = _expander(fmt.widths, tuple(fields)).expand(ev.val)
    srh = IPv6Address(wire[16:]) if fmt.total_width > SRV6_DA_BITS else None
    return Srv6Carrier(IPv6Address(wire[:16]), srh, ev.port)


def srv6_ev_from_carrier(
    carrier: Srv6Carrier, fmt: EvFormat, fields: Sequence[EvField]
) -> EvEntry:
    """Inverse of :func:`srv6_carrier`; EINVAL if the carrier is not an expansion."""
    _require_srv6(fmt)
    if carrier.srh_segment is not None and fmt.total_width <= SRV6_DA_BITS:
        raise ProfileError("srh_segment", "the format has no SRH part")
    srh = carrier.srh_segment.packed if carrier.srh_segment is not None else bytes(16)
    compact = _expander(fmt.widths, tuple(fields)).compress(carrier.da.packed + srh)
    return EvEntry(compact, carrier.port)


def srv6_ev_from_usids(
    usids: Sequence[int], port: int, fmt: EvFormat, fields: Sequence[EvField]
) -> EvEntry:
    """Compact EV for a uSID list: one full uSID value per field that takes EV bits.

    Bits of a uSID outside its field's mask must equal that field's ``init_val``.
    """
    _require_srv6(fmt)
    compact = _expander(fmt.widths, tuple(fields)).compact_from_field_values(list(usids))
    return EvEntry(compact, port)
