"""The EV planner: the control plane's side of explicit SRv6 EVs, from the fabric's paths to
ONLINE EXP EV profiles. (In the OCP control API this is "the controller"; here that word
means the os-ken switch application, so this one is the planner.)

For a (src host, dst host) pair the planner computes every path of every plane
(:meth:`FabricPlan.paths`), gives each plane an equal share of the QP's EVs, and installs
them as the explicit array of an EXP EV profile (OCP ``mrc_ctl.h``) whose entries are
compact SRv6 EVs (``EvEntry(val, port=plane)``). Expanding an entry through the profile's
fields (the OCP repository's ``examples/ev_expansion/ev_expansion.c``) yields exactly the path's uSID carrier; :meth:`PairEvs.path_for` maps an
entry back to its :class:`Path`.

Choices (where the sources leave room):

1. **One format for the whole fabric**: SRV6, the carrier as eight 16-bit words (128 bits,
   one DA, no SRH). Word 0 is ``fcbb``, word 1 is ``bb0<plane>``, words 2-7 are uSID slots.
   Word-sized fields let every uSID slot and the block's plane bits be described
   separately; the format profile is shared by every pair's EV profile.
2. **The plane travels in the EV**. The 32-bit block differs per plane, so it cannot be
   one fixed field. Rather than one profile per plane (a QP names a single EV profile, so
   per-plane profiles could not feed one QP), the plane bits of word 1 are EV-carried like
   any other varying bit. The entry's port says the same thing; expansion does not read
   the port, so the value has to carry it too.
3. **Per-pair varying-bit fields**. For each word, the bits that differ between the pair's
   carriers (all planes, all paths) form the field's mask; the bits they share are the
   field's ``init_val``. A word every path agrees on is a fixed field. A compact EV thus
   holds only the path's choices (e.g. 6 bits for a k=4 cross-pod pair on 2 planes:
   2 plane bits, 1+2+1 bits for agg/core/agg), close to P1's (plane, T0-uplink) EVs, and
   it fits the 32-bit entropy the SACK reflects. The fields cover every path of the pair,
   so :meth:`PairEvs.ev_for` can encode paths trimmed out of the array (e.g. for a later
   REPLACE_EV). Nothing is assumed about how the plan numbers blocks or uSIDs. A compact
   EV means something only under its own pair's profile: the same bits may name a path
   of another pair, as with any EV read under another profile.
4. **One EXP profile per pair**, the array plane by plane (ascending), each plane's slots
   exactly :meth:`EvPlanner.paths_by_plane` for that plane, so the profile and
   the QP's EvTable see the same paths in the same proportions.
5. **Equal share per plane**. By default ``ceil(128 / planes)`` EVs per plane (P1: 128-256
   per QP), rounded up so that ``ev_count`` is a multiple of ``ev_count_align``; an
   explicit ``per_plane`` that breaks the alignment is refused (EINVAL) with the step to
   use. A plane with fewer paths than its share repeats them in order (use counts differ
   by at most one); one with more draws a seeded random subset ([3P:expl]: "random subset
   of paths within a plane"), so QPs of different pairs do not all pile onto the
   lowest-numbered spines/cores. Seeds derive from ``seed``, the pair and the plane, so
   a run is repeatable.
6. **ev_min_active = half of one plane's share** (at least 1). The NIC may demote every
   plane but one and half of the last, which absorbs any plane or link failure, while an
   endpoint-side event that times out every EV at once cannot blacklist the whole set.
7. **event_mask = GOOD | ASSUMED_BAD**, both reportable states: the planner wants the
   demotions and the resurrections to correlate failures across QPs (``mrc_ctl.h``: only
   GOOD and ASSUMED_BAD are maskable).
8. **Profile ids** are sequential from 1 (format and EV profiles are separate id spaces);
   the application learns them out of band from :attr:`PairEvs.ev_profile`.
9. **Deny / allow** is MODIFY_EV_STATE on the pair's profile. It applies to every copy of
   the EV, i.e. to every slot that uses the path.
"""
from __future__ import annotations

import errno
import ipaddress
import math
import random
from dataclasses import dataclass, field, replace
from itertools import count
from typing import Any, Iterable, Mapping, Sequence

from testbed.fabric.usid_plan import FabricPlan, Path
from testbed.mrc_ctl.ev_expansion import Expander
from testbed.mrc_ctl.ev_profiles import (
    EV_UNPOPULATED,
    DeviceCaps,
    EvEntry,
    EvField,
    EvFormat,
    EvFormatProfile,
    EvMode,
    EvOp,
    EvOpEntry,
    EvOpResult,
    EvProfile,
    EvState,
    FmtMode,
    ProfileError,
    ProfileState,
    Srv6Carrier,
    srv6_carrier,
    srv6_ev_from_carrier,
)
from testbed.nic.ev_table import EvTableConfig

WORD_BITS = 16
CARRIER_WORDS = 8
CARRIER_FORMAT = EvFormat(FmtMode.SRV6, (WORD_BITS,) * CARRIER_WORDS)
DEFAULT_EV_COUNT = 128  # P1 §2.1: "typically 128 to 256 entries" per QP
MONITORED_STATES = frozenset({EvState.GOOD, EvState.ASSUMED_BAD})

# What deny/allow/state calls accept: the EV itself, a Path, or a path's carrier address.
EvTarget = EvEntry | Path | str


class EvPlannerError(ValueError):
    """A request the topology cannot satisfy (no such path, pair not built, ...)."""


class UnknownHostError(EvPlannerError):
    """A host name the fabric plan does not know."""


# ----------------------------------------------------------------------- carrier layout


def carrier_words(address: str) -> tuple[int, ...]:
    """A carrier address as its eight 16-bit words, most significant first."""
    value = int(ipaddress.IPv6Address(address))
    return tuple((value >> (WORD_BITS * (CARRIER_WORDS - 1 - i))) & 0xFFFF
                 for i in range(CARRIER_WORDS))


def varying_bit_fields(carriers: Iterable[str]) -> tuple[EvField, ...]:
    """One field per carrier word: bits that differ between carriers are EV-carried."""
    words = [carrier_words(address) for address in carriers]
    if not words:
        raise EvPlannerError('no carrier to derive EV fields from')
    fields = []
    for slot, reference in enumerate(words[0]):
        mask = 0
        for word in words:
            mask |= word[slot] ^ reference
        fields.append(EvField(WORD_BITS, init_val=reference & ~mask, mask=mask))
    return tuple(fields)


def compact_ev(address: str, plane: int, fields: Sequence[EvField]) -> EvEntry:
    """The compact EV (port = plane) whose expansion under ``fields`` is ``address``."""
    wire = Srv6Carrier(ipaddress.IPv6Address(address), None, plane)
    return srv6_ev_from_carrier(wire, CARRIER_FORMAT, fields)


def expanded_carrier(entry: EvEntry, fields: Sequence[EvField]) -> str:
    return str(srv6_carrier(entry, CARRIER_FORMAT, fields).da)


# ---------------------------------------------------------------------- equal shares


def per_plane_step(planes: int, align: int) -> int:
    """Smallest per-plane increment that keeps ``planes * share`` a multiple of ``align``."""
    return math.lcm(planes, align) // planes if align else 1


def per_plane_share(planes: int, caps: DeviceCaps, per_plane: int | None = None,
                    default_count: int = DEFAULT_EV_COUNT) -> int:
    """EVs per plane: the requested share, or the default rounded up to the alignment."""
    step = per_plane_step(planes, caps.ev_count_align)
    if per_plane is None:
        share = -(-default_count // planes)
        share = -(-share // step) * step
    else:
        share = _checked_share(per_plane, planes, step, caps.ev_count_align)
    if share * planes > caps.ev_max_count_profile:
        raise ProfileError(
            'per_plane', f'{share} x {planes} planes = {share * planes} EVs exceeds '
            f'ev_max_count_profile {caps.ev_max_count_profile}', errno.E2BIG)
    return share


def _checked_share(per_plane: Any, planes: int, step: int, align: int) -> int:
    if isinstance(per_plane, bool) or not isinstance(per_plane, int) or per_plane < 1:
        raise ProfileError('per_plane', f'{per_plane!r} is not a positive count')
    if per_plane % step:
        raise ProfileError(
            'per_plane', f'{per_plane} x {planes} planes = {per_plane * planes} EVs is not '
            f'a multiple of ev_count_align {align}; use a multiple of {step} per plane')
    return per_plane


def equal_share(carriers: Sequence[str], share: int, rng: random.Random) -> list[str]:
    """``share`` carriers: all of them repeated in order, or a random subset in path order."""
    if len(carriers) >= share:
        picked = sorted(rng.sample(range(len(carriers)), share))
        return [carriers[i] for i in picked]
    return [carriers[i % len(carriers)] for i in range(share)]


def default_min_active(share: int) -> int:
    """Half of one plane's share (choice 6 of the module docstring)."""
    return max(1, share // 2)


# ------------------------------------------------------------------------ one pair


@dataclass
class PairEvs:
    """The explicit EVs of one (src, dst) pair: profiles, QP input, EV <-> Path maps."""

    src: str
    dst: str
    fmt_profile: EvFormatProfile
    ev_profile: EvProfile
    paths_by_plane: dict[int, list[str]]
    paths: Mapping[str, Path]  # every path of the pair (not only the selected), by carrier
    # What the NIC reported (its EV events, mrc_ctl.h): the QP's EV id -> state.
    nic_states: dict[int, EvState] = field(default_factory=dict)

    @property
    def per_plane(self) -> int:
        return self.ev_count // len(self.paths_by_plane)

    @property
    def ev_count(self) -> int:
        return self.ev_profile.ev_count

    @property
    def min_active(self) -> int:
        assert self.ev_profile.min_active is not None
        return self.ev_profile.min_active

    @property
    def fields(self) -> tuple[EvField, ...]:
        return self.ev_profile.fields

    @property
    def compact_width(self) -> int:
        """Bits of a compact EV of this pair."""
        return Expander(CARRIER_FORMAT.widths, self.fields).compact_width

    def ev_for(self, path: Path | str) -> EvEntry:
        """The compact EV of a path of this pair (a Path or its carrier address)."""
        found = self._path(path)
        return compact_ev(found.carrier, found.plane, self.fields)

    def path_for(self, entry: EvEntry) -> Path:
        """The path an EV names: its expansion's carrier, on the plane of its port."""
        address = expanded_carrier(entry, self.fields)
        path = self.paths.get(address)
        if path is None:
            raise EvPlannerError(f'{entry!r} expands to {address}, which is not a path '
                                    f'from {self.src} to {self.dst}')
        if path.plane != entry.port:
            raise EvPlannerError(f'{entry!r} is on port {entry.port} but expands to '
                                    f'{address}, a path of plane {path.plane}')
        return path

    def entry_of(self, target: EvTarget) -> EvEntry:
        return target if isinstance(target, EvEntry) else self.ev_for(target)

    def set_state(self, target: EvTarget, state: EvState) -> EvOpResult:
        """MODIFY_EV_STATE on every copy of the EV; raises on an EV not in the array."""
        op = EvOpEntry(ev=self.entry_of(target), state=state)
        return self.ev_profile.ev_op(EvOp.MODIFY_EV_STATE, [op]).raise_for_error()

    def state_of(self, target: EvTarget) -> EvState:
        """QUERY_EV_STATE of the EV (its lowest-index copy)."""
        op = EvOpEntry(ev=self.entry_of(target))
        result = self.ev_profile.ev_op(EvOp.QUERY_EV_STATE, [op]).raise_for_error()
        state = result.results[0].state
        assert state is not None
        return state

    def table_config(self, base: EvTableConfig | None = None,
                     active_count: int | None = None) -> EvTableConfig:
        """The QP's EV table for this profile: the profile's array is its EV set
        (`EvTableConfig.explicit`), `active_count` of them active (default all), the
        floor the profile's min_active; everything else from `base`."""
        return replace(base or EvTableConfig(),
                       active_count=active_count or self.ev_count,
                       ev_min_active=self.min_active, explicit=True)

    def ev_array_by_plane(self) -> dict[int, list[str]]:
        """The profile's EV array expanded, per plane in array order: the carrier each
        entry names. This, not the plan, is what a QP's EV table is built from."""
        out: dict[int, list[str]] = {}
        for entry in self.ev_profile.ev_array:
            path = self.path_for(entry)
            out.setdefault(path.plane, []).append(path.carrier)
        return out

    def on_nic_event(self, ev_id: int, carrier: str, new: EvState) -> dict[str, Any]:
        """An EV event from the QP: kept as the NIC's view, and what the log adds to it
        (the profile and the compact EV its path has in it)."""
        self.nic_states[ev_id] = new
        entry = self.ev_for(carrier)
        return {'profile_id': self.ev_profile.profile_id, 'ev': '%#x' % entry.bits(
            self.compact_width)}

    def describe(self) -> dict[str, Any]:
        """The profile as an event log records it."""
        return {'profile_id': self.ev_profile.profile_id, 'mode': 'EXP',
                'ev_count': self.ev_count, 'per_plane': self.per_plane,
                'min_active': self.min_active, 'compact_bits': self.compact_width,
                'event_mask': sorted(str(s) for s in self.ev_profile.event_mask or ())}

    def _path(self, path: Path | str) -> Path:
        address = path.carrier if isinstance(path, Path) else str(path)
        found = self.paths.get(address)
        if found is None or (isinstance(path, Path) and path != found):
            raise EvPlannerError(f'{path!r} is not a path from {self.src} to {self.dst}')
        return found


# ------------------------------------------------------------------------- planner


class EvPlanner:
    """Builds, keeps and edits one ONLINE EXP EV profile per (src, dst) host pair."""

    def __init__(self, plan: FabricPlan, caps: DeviceCaps | None = None, *,
                 default_ev_count: int = DEFAULT_EV_COUNT, seed: int = 0) -> None:
        self.plan = plan
        self.caps = caps or DeviceCaps()
        self.default_ev_count = default_ev_count
        self.seed = seed
        self._fmt_profile: EvFormatProfile | None = None
        self._ev_profile_ids = count(1)
        self._pairs: dict[tuple[str, str], PairEvs] = {}

    # ---- topology

    def planes_between(self, src: str, dst: str) -> tuple[int, ...]:
        """Planes on which both hosts have a NIC port."""
        self._check_pair(src, dst)
        ports = self.plan.host_ports
        planes = tuple(p for p in self.plan.planes if (src, p) in ports and (dst, p) in ports)
        if not planes:
            raise EvPlannerError(f'{src} and {dst} share no plane')
        return planes

    def plane_paths(self, src: str, dst: str) -> dict[int, list[Path]]:
        """Every path of every shared plane."""
        return {p: self.plan.paths(src, dst, p) for p in self.planes_between(src, dst)}

    def paths_by_plane(self, src: str, dst: str,
                       per_plane: int | None = None) -> dict[int, list[str]]:
        """Per plane, the carriers repeated/trimmed to an equal share: a QP's RTR input.

        ``per_plane=None`` on a built pair gives the share its profile was built with,
        so the QP and the profile always agree.
        """
        built = self._pairs.get((src, dst))
        if built is not None and per_plane is None:
            return {plane: list(carriers) for plane, carriers in built.paths_by_plane.items()}
        paths = self.plane_paths(src, dst)
        return self._select(src, dst, paths, self._share(paths, per_plane))

    # ---- profiles

    @property
    def fmt_profile(self) -> EvFormatProfile:
        """The one SRV6 format profile every pair shares, ONLINE."""
        if self._fmt_profile is None:
            profile = EvFormatProfile(1, self.caps)
            profile.modify(state=ProfileState.OFFLINE, mode=CARRIER_FORMAT.mode,
                           fmt_fields=CARRIER_FORMAT.widths)
            profile.modify(state=ProfileState.ONLINE)
            self._fmt_profile = profile
        return self._fmt_profile

    def explicit_evs(self, src: str, dst: str, per_plane: int | None = None) -> PairEvs:
        """The pair's ONLINE EXP profile, built on first use.

        ``per_plane=None`` accepts whatever is built; a different share for a built pair
        is refused: release the pair first (its profile may be in use by QPs).
        """
        built = self._pairs.get((src, dst))
        if built is None:
            built = self._build(src, dst, per_plane)
            self._pairs[(src, dst)] = built
        elif per_plane is not None and per_plane != built.per_plane:
            raise EvPlannerError(
                f'{src}->{dst} is built with {built.per_plane} EVs per plane, not '
                f'{per_plane}; release it first')
        return built

    def built(self, src: str, dst: str) -> PairEvs:
        """The pair's profile if it was built; deny/allow never build one implicitly."""
        self._check_pair(src, dst)
        try:
            return self._pairs[(src, dst)]
        except KeyError:
            raise EvPlannerError(f'no explicit EVs are built for {src}->{dst}') from None

    def release(self, src: str, dst: str) -> None:
        """ONLINE -> OFFLINE -> INIT and forget; EBUSY (kept) while QPs use it."""
        pair = self.built(src, dst)
        pair.ev_profile.modify(state=ProfileState.OFFLINE)
        pair.ev_profile.modify(state=ProfileState.INIT)
        del self._pairs[(src, dst)]

    # ---- EV <-> Path and EV states

    def path_of(self, src: str, dst: str, entry: EvEntry) -> Path:
        return self.built(src, dst).path_for(entry)

    def ev_of(self, path: Path) -> EvEntry:
        return self.built(path.src, path.dst).ev_for(path)

    def deny(self, src: str, dst: str, target: EvTarget) -> EvOpResult:
        """Mark an EV (or the EV of a path) DENIED: the NIC stops using it until allowed."""
        return self.built(src, dst).set_state(target, EvState.DENIED)

    def allow(self, src: str, dst: str, target: EvTarget) -> EvOpResult:
        """Undo :meth:`deny`: the EV is GOOD again."""
        return self.built(src, dst).set_state(target, EvState.GOOD)

    def ev_state(self, src: str, dst: str, target: EvTarget) -> EvState:
        return self.built(src, dst).state_of(target)

    # ---- internals

    def _check_pair(self, src: str, dst: str) -> None:
        for host in (src, dst):
            if host not in self.plan.hosts:
                known = self.plan.hosts
                span = f'{known[0]}..{known[-1]}' if known else 'none'
                raise UnknownHostError(f'unknown host {host!r} (hosts: {span})')
        if src == dst:
            raise EvPlannerError(f'{src} -> {dst}: a host needs no path to itself')

    def _share(self, paths: Mapping[int, list[Path]], per_plane: int | None) -> int:
        return per_plane_share(len(paths), self.caps, per_plane, self.default_ev_count)

    def _select(self, src: str, dst: str, paths: Mapping[int, list[Path]],
                share: int) -> dict[int, list[str]]:
        return {plane: equal_share([p.carrier for p in plane_paths], share,
                                   self._rng(src, dst, plane))
                for plane, plane_paths in sorted(paths.items())}

    def _rng(self, src: str, dst: str, plane: int) -> random.Random:
        # A string seed hashes deterministically (unlike hash()), so runs repeat.
        return random.Random(f'{self.seed}:{src}>{dst}@{plane}')

    def _build(self, src: str, dst: str, per_plane: int | None) -> PairEvs:
        paths = self.plane_paths(src, dst)
        self._check_ports(paths)
        share = self._share(paths, per_plane)
        selected = self._select(src, dst, paths, share)
        fields = varying_bit_fields(p.carrier for ps in paths.values() for p in ps)
        profile = EvProfile(next(self._ev_profile_ids), self.caps)
        profile.modify(state=ProfileState.OFFLINE, mode=EvMode.EXP,
                       fmt_profile=self.fmt_profile, ev_count=share * len(selected),
                       fields=fields)
        self._populate(profile, _explicit_array(selected, fields))
        profile.modify(state=ProfileState.ONLINE, min_active=default_min_active(share),
                       event_mask=MONITORED_STATES)
        by_carrier = {p.carrier: p for ps in paths.values() for p in ps}
        return PairEvs(src, dst, self.fmt_profile, profile, selected, by_carrier)

    def _check_ports(self, paths: Mapping[int, list[Path]]) -> None:
        missing = sorted(set(paths) - set(self.caps.ports))
        if missing:
            raise EvPlannerError(
                f'planes {missing} have no NIC port in phy_port_mask '
                f'{self.caps.phy_port_mask:#x}')

    def _populate(self, profile: EvProfile, entries: list[EvEntry]) -> None:
        """REPLACE_EV every UNPOPULATED slot in order (lowest copy first keeps the order)."""
        ops = [EvOpEntry(ev=EV_UNPOPULATED, ev_new=entry) for entry in entries]
        batch = self.caps.ev_op_max_entries or len(ops)
        for start in range(0, len(ops), batch):
            profile.ev_op(EvOp.REPLACE_EV, ops[start:start + batch]).raise_for_error()


def _explicit_array(selected: Mapping[int, list[str]],
                    fields: Sequence[EvField]) -> list[EvEntry]:
    """The EXP array: plane by plane, slot for slot the carriers of paths_by_plane."""
    cache: dict[tuple[str, int], EvEntry] = {}
    array = []
    for plane in sorted(selected):
        for address in selected[plane]:
            key = (address, plane)
            if key not in cache:
                cache[key] = compact_ev(address, plane, fields)
            array.append(cache[key])
    return array
