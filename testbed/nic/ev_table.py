"""Per-QP entropy-value (EV) table: active/backup sets, per-packet rotation, path health.

An MRC sender sprays every packet of a QP on a different EV; each EV names one path through one
plane (NIC port). This module keeps the EV set of one QP and its per-EV state machine (states
and "only EVs in the GOOD state are used for transmission": P2 §II-A; silent loss demotes,
probes resurrect: P1 §2.1; SKIP on ECN or a trim, replacement from the same plane's backups:
3P:expl; DENIED set and cleared only by the controller: R:ctl.h):

    GOOD --SKIP_ONCE / TRIMMED--------------------------> SKIP
    SKIP --cursor reaches it after skip_rotations--------> GOOD   (packet goes on the next GOOD EV)
    GOOD/SKIP --timeout / ALWAYS_SKIP / failed probe-----> ASSUMED_BAD (replaced from same-plane backup)
    ASSUMED_BAD --probes_to_resurrect probe successes----> GOOD (or SKIP on a SKIP_ONCE verdict)
    any --controller deny--> DENIED --controller allow--> GOOD

Only GOOD EVs carry data. Everything the public sources leave open is decided in
`EvTableConfig` (docstring and defaults). Nothing here reads a clock: callers pass `now`
(seconds); where it is omitted, the latest `now` the table was given stamps events and schedules
probes. Given the same rng and the same calls, a table behaves identically.
"""

from __future__ import annotations

import enum
import random
from collections import Counter, deque
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

EV_ID_LIMIT = 1 << 32

# The caller's path object: an SRv6 carrier address string or a tuple of uSIDs. It must be
# hashable because distinct paths are found by de-duplication.
Path = Hashable


class EvState(enum.StrEnum):
    """EV states of [P2 §II-A]; a StrEnum so counts and snapshots serialise to JSON as-is.

    The one EV state of the project: the NIC's table and the control API's model
    (`testbed.mrc_ctl`) both use it. SKIP is NIC-internal (the API never reports it);
    UNKNOWN is only the API's state of an unpopulated profile slot, never an EV's here.
    """

    GOOD = "GOOD"
    SKIP = "SKIP"
    ASSUMED_BAD = "ASSUMED_BAD"
    DENIED = "DENIED"
    UNKNOWN = "UNKNOWN"


class EvReason(enum.StrEnum):
    """Why a state transition happened (carried in `EvEvent.reason`)."""

    SKIP_ONCE = "skip_once"
    SKIP_EXPIRED = "skip_expired"
    TIMEOUT = "timeout"
    ALWAYS_SKIP = "always_skip"
    PROBE_FAILED = "probe_failed"
    PROBES_SUCCEEDED = "probes_succeeded"
    DEFERRED_DEMOTION = "deferred_demotion"
    CONTROLLER_DENY = "controller_deny"
    CONTROLLER_ALLOW = "controller_allow"


_USABLE_STATES = (EvState.GOOD, EvState.SKIP)
# Enum members read through the class cost an attribute lookup each; the per-packet path
# uses these module-level names instead.
_GOOD, _SKIP = EvState.GOOD, EvState.SKIP


@dataclass(slots=True, eq=False)
class Ev:
    """One entropy value of a QP, with its health state and counters.

    `in_active` tells the active set from the backup pool (both hold only GOOD/SKIP EVs).
    `suspect` marks an EV whose demotion was refused at the ev_min_active floor.
    """

    ev_id: int
    plane: int
    path: Path
    state: EvState = EvState.GOOD
    packets_sent: int = 0
    bytes_sent: int = 0
    packets_acked: int = 0
    losses: int = 0
    skips: int = 0
    always_skips: int = 0
    rtt_ewma_s: float | None = None
    last_rtt_s: float | None = None
    probes_sent: int = 0
    probe_failures: int = 0
    probe_successes_in_a_row: int = 0
    state_changes: int = 0
    floor_holds: int = 0
    in_active: bool = False
    suspect: bool = False
    skip_until_rotation: int = 0
    next_probe_s: float | None = None
    rotation_slot: int = field(default=-1, repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ev_id": self.ev_id,
            "plane": self.plane,
            "path": _jsonable_path(self.path),
            "state": str(self.state),
            "role": self.role,
            "suspect": self.suspect,
            "packets_sent": self.packets_sent,
            "bytes_sent": self.bytes_sent,
            "packets_acked": self.packets_acked,
            "losses": self.losses,
            "skips": self.skips,
            "always_skips": self.always_skips,
            "rtt_ewma_s": self.rtt_ewma_s,
            "last_rtt_s": self.last_rtt_s,
            "probes_sent": self.probes_sent,
            "probe_failures": self.probe_failures,
            "probe_successes_in_a_row": self.probe_successes_in_a_row,
            "state_changes": self.state_changes,
            "floor_holds": self.floor_holds,
        }

    @property
    def role(self) -> str:
        if self.state in _USABLE_STATES:
            return "active" if self.in_active else "backup"
        return "probing" if self.state is EvState.ASSUMED_BAD else "denied"


def _jsonable_path(path: Path) -> Any:
    if isinstance(path, (str, int, float)) or path is None:
        return path
    if isinstance(path, tuple):
        return [_jsonable_path(p) for p in path]
    return str(path)


@dataclass(frozen=True, slots=True)
class EvEvent:
    """An EV state change as a controller would see it (R:ctl.h: an EV event).

    `drop_count` = events lost to queue overflow between the previous delivered event and this one.
    """

    time: float
    ev_id: int
    plane: int
    path: Path
    old_state: EvState
    new_state: EvState
    reason: EvReason
    drop_count: int = 0


@dataclass(frozen=True, slots=True)
class EvTableConfig:
    """EV-table parameters, including every choice the public MRC sources leave open.

    Set sizes
      active_count: EVs in the active set, split equally across planes ([P1 §2.1]: 128-256).
        If it is not a multiple of the plane count it is rounded DOWN to one, because equal
        per-plane load matters more than the exact count.
      backup_per_plane: backup EVs per plane, promoted to replace demoted EVs of that plane.
        Paths are drawn without repetition where the plane has enough distinct paths: active EVs
        first, then backups from the paths not in the active set; when a plane has fewer distinct
        paths than needed, paths repeat (each with its own ev_id), spread as evenly as possible.
      ev_id_base: ev_ids are ev_id_base, ev_id_base+1, ... (active EVs plane by plane, then the
        backups), so they form one contiguous 32-bit range (cf. EV_EXPLICIT_RANGE).
      explicit: the paths given per plane are an explicit EV array (what an EXP EV profile
        holds, `testbed.mrc_ctl.ev_planner`): every entry is one EV, the first `share` of each
        plane active and the rest its backups, in order; nothing is drawn or de-duplicated and
        backup_per_plane is not used.

    ev_min_active floor (reference §13 Q6)
      ev_min_active: the NIC never demotes an EV when that would leave fewer than this many
        GOOD+SKIP active EVs on up planes. A demotion that is replaced by a same-plane backup
        never lowers the count, so the floor only bites when the plane has no backup. At the
        floor the EV stays in the active set in its current state and keeps carrying data, but is
        flagged `suspect`; the loss/verdict still counts (Ev.losses, Ev.floor_holds,
        EvTable.floor_holds). Controller actions (set_denied) and port-status changes are not
        limited by the floor.
      demote_held_when_possible: a suspect EV is demoted (reason DEFERRED_DEMOTION) as soon as
        the floor allows it again (a backup appears, a plane comes up). An ACK on a suspect EV
        clears the flag: the path evidently delivered.

    SKIP
      skip_rotations: SKIP lasts until the rotation cursor reaches the EV in a rotation at least
        this many rotations after the skip (1 = "end of the current rotation"). When the cursor
        reaches an expired SKIP EV it is restored to GOOD but the packet goes on the next GOOD EV;
        at most one EV is restored per selection. Further SKIP_ONCE verdicts extend the skip.
        SKIP_ONCE on a backup (not active) EV is counted but changes nothing: SKIP is a
        rotation-scoped state and a backup is not in the rotation.
      reshuffle_each_rotation: draw a new random order every rotation (else one random order is
        kept until the active set changes). A rotation also ends early when the order must be
        rebuilt: plane down/up at once, an EV refilling a short plane at the next rotation.

    Demotion and probing
      Timeouts (on_loss), ALWAYS_SKIP verdicts and failed probes demote GOOD/SKIP EVs to
      ASSUMED_BAD at once ("ASSUMED_BAD after one silent timeout").
      demote_same_path: a timeout demotes every GOOD/SKIP EV whose path is the lost
        packet's (same plane, same path), not only the EV it was sent on. Where a plane has
        fewer distinct paths than EVs, entries repeat a path (an EV array of 20 per plane
        over a k=4 fat-tree's 4 paths holds each 5 times, as one EV value): the timeout says
        the path failed ("MRC assumes the path has failed and immediately stops using the
        corresponding EV" [P1 §2.1]), and each repeat left GOOD carried packets into the same
        hole until its own timeout found it (measured: one dead core link demoted the same
        path 5 times over 0.4 s, once per packet timeout, in link_failure_allreduce).
        A loss inferred from SACK holes is weaker evidence (queues that differ by more than
        the reordering guard look the same) and demotes its own EV only: on the whole path
        it took half of an incast victim's paths out at once (10 EVs each), with nothing lost.
      ignore_losses_on_down_plane: timeouts on a plane that is down do not demote: the port
        failure explains them, and demoting would burn that plane's backups for nothing.
      backup_promotion: which same-plane backup replaces a demoted EV: "fifo" (oldest first) or
        "random".
      prefer_distinct_path_backup: skip backups that use the very path that just failed.
      first_probe_delay_s: delay from demotion to the first probe (None = probe_interval_s).
      probe_interval_s: period of background probes of ASSUMED_BAD EVs. EVs on a down plane are
        not probed (and their schedule does not advance) until the plane comes back. DENIED EVs
        are never probed.
      probes_to_resurrect: consecutive probe successes that bring an EV back ([CONV] N=3); a
        failed probe resets the run. Late ACKs/timeouts of data sent before the demotion change
        neither the state nor the run.
      probe_skip_verdict_counts: a probe answered with a SKIP_ONCE verdict counts as a success
        (the path works, it is only congested). If the resurrecting probe had that verdict and
        the EV goes into the active set, it enters SKIP instead of GOOD ([3P:expl]). When False,
        such a probe neither counts nor resets the run.
      Where a resurrected EV goes (also DENIED -> GOOD via the controller): into the active set
        if its plane has fewer active EVs than its share (a demotion earlier found no backup);
        otherwise to the end of the plane's backup pool. Its replacement therefore stays active,
        and the plane's share is never exceeded.

    Events (R:ctl.h: EV events, ev_event_mask, drop_count)
      event_mask: states whose transitions are reported (the API allows GOOD and ASSUMED_BAD).
        A transition is reported when its old or its new state is in the mask...
      report_skip_transitions: ...except GOOD<->SKIP, which happen on every ECN mark and would
        crowd ASSUMED_BAD events out of the bounded queue; set True to report them too.
        Cumulative per-transition counts always include every transition.
      event_queue_capacity: bounded queue; overflow drops the newest events and the next
        delivered event carries the drop count (exact, as with EV_EVENT_PRECISE_DROP_CNT).

    Counters
      rtt_ewma_gain: weight of a new RTT sample in Ev.rtt_ewma_s (the first sample seeds it).
    """

    active_count: int = 128
    backup_per_plane: int = 4
    explicit: bool = False
    ev_min_active: int = 1
    skip_rotations: int = 1
    probe_interval_s: float = 1e-3
    probes_to_resurrect: int = 3
    reshuffle_each_rotation: bool = True
    demote_held_when_possible: bool = True
    demote_same_path: bool = True
    ignore_losses_on_down_plane: bool = True
    backup_promotion: Literal["fifo", "random"] = "fifo"
    prefer_distinct_path_backup: bool = True
    first_probe_delay_s: float | None = None
    probe_skip_verdict_counts: bool = True
    event_mask: frozenset[EvState] = frozenset({EvState.GOOD, EvState.ASSUMED_BAD})
    report_skip_transitions: bool = False
    event_queue_capacity: int = 256
    rtt_ewma_gain: float = 0.125
    ev_id_base: int = 0

    def __post_init__(self) -> None:
        for problem in self._problems():
            raise ValueError(f"EvTableConfig: {problem}")

    def _problems(self) -> Iterator[str]:
        if self.active_count < 1:
            yield f"active_count must be >= 1, got {self.active_count}"
        if self.backup_per_plane < 0:
            yield f"backup_per_plane must be >= 0, got {self.backup_per_plane}"
        if not 0 <= self.ev_min_active <= self.active_count:
            yield (f"ev_min_active must be in 0..active_count ({self.active_count}), "
                   f"got {self.ev_min_active}")
        if self.skip_rotations < 0:
            yield f"skip_rotations must be >= 0, got {self.skip_rotations}"
        if not self.probe_interval_s > 0:
            yield f"probe_interval_s must be > 0, got {self.probe_interval_s}"
        if self.first_probe_delay_s is not None and not self.first_probe_delay_s >= 0:
            yield f"first_probe_delay_s must be >= 0 or None, got {self.first_probe_delay_s}"
        if self.probes_to_resurrect < 1:
            yield f"probes_to_resurrect must be >= 1, got {self.probes_to_resurrect}"
        if self.backup_promotion not in ("fifo", "random"):
            yield f"backup_promotion must be 'fifo' or 'random', got {self.backup_promotion!r}"
        if not set(self.event_mask) <= {EvState.GOOD, EvState.ASSUMED_BAD}:
            yield f"event_mask may hold only GOOD and ASSUMED_BAD, got {sorted(self.event_mask)}"
        if self.event_queue_capacity < 1:
            yield f"event_queue_capacity must be >= 1, got {self.event_queue_capacity}"
        if not 0 < self.rtt_ewma_gain <= 1:
            yield f"rtt_ewma_gain must be in (0, 1], got {self.rtt_ewma_gain}"
        if not 0 <= self.ev_id_base < EV_ID_LIMIT:
            yield f"ev_id_base must be a 32-bit unsigned value, got {self.ev_id_base}"

    @property
    def first_probe_delay(self) -> float:
        return self.probe_interval_s if self.first_probe_delay_s is None else self.first_probe_delay_s


class EvTable:
    """EV set and path-health state machine of one QP (see module docstring)."""

    def __init__(self, paths_by_plane: Mapping[int, Sequence[Path]], config: EvTableConfig,
                 rng: random.Random) -> None:
        self.config = config
        self._rng = rng
        self._planes = _validated_planes(paths_by_plane)
        self._share = config.active_count // len(self._planes)
        if self._share == 0:
            raise ValueError(f"active_count {config.active_count} is smaller than the number of "
                             f"planes ({len(self._planes)}): no plane would get an EV")
        if config.ev_min_active > self._share * len(self._planes):
            raise ValueError(f"ev_min_active {config.ev_min_active} exceeds the active set "
                             f"({self._share} per plane x {len(self._planes)} planes)")
        self._planes_up: set[int] = set(self._planes)
        self._by_id: dict[int, Ev] = {}
        self._active: dict[int, list[Ev]] = {p: [] for p in self._planes}
        self._backup: dict[int, list[Ev]] = {p: [] for p in self._planes}
        self._build_sets(paths_by_plane)
        # Rotation state: one pass over `_order` is a rotation. Slots of EVs that left the active
        # set without a replacement stay in `_order` and are stepped over until the next rebuild.
        self._order: list[Ev] = []
        self._cursor = 0
        self._rotation = 0
        self._order_stale = True
        # A selection scans at most this many slots: enough to outlast any SKIP and reach every
        # slot, so None really means "nothing usable".
        self._scan_limit = (config.skip_rotations + 2) * 2 * self._share * len(self._planes) + 1
        self._probing: dict[int, Ev] = {}
        self._held: dict[int, Ev] = {}
        self._now = 0.0
        self._events: deque[EvEvent] = deque()
        self._pending_drops = 0
        self._events_dropped = 0
        self._transitions: Counter[tuple[EvState, EvState]] = Counter()
        self.floor_holds = 0
        self.unknown_feedback = 0

    # ----------------------------------------------------------------------------- construction

    def _build_sets(self, paths_by_plane: Mapping[int, Sequence[Path]]) -> None:
        active_paths: dict[int, list[Path]] = {}
        backup_paths: dict[int, list[Path]] = {}
        for plane in self._planes:
            if self.config.explicit:
                active_paths[plane], backup_paths[plane] = self._explicit_paths(
                    plane, paths_by_plane[plane])
                continue
            distinct = list(dict.fromkeys(paths_by_plane[plane]))
            active_paths[plane], backup_paths[plane] = self._draw_paths(distinct)
        total = sum(len(v) for v in active_paths.values()) + sum(len(v) for v in backup_paths.values())
        if self.config.ev_id_base + total > EV_ID_LIMIT:
            raise ValueError(f"{total} EVs from ev_id_base {self.config.ev_id_base} overflow 32 bits")
        for plane in self._planes:
            self._active[plane] = [self._new_ev(plane, path, in_active=True)
                                   for path in active_paths[plane]]
        for plane in self._planes:
            self._backup[plane] = [self._new_ev(plane, path, in_active=False)
                                   for path in backup_paths[plane]]

    def _explicit_paths(self, plane: int,
                        array: Sequence[Path]) -> tuple[list[Path], list[Path]]:
        """An explicit EV array's plane, as it is: the first `share` EVs active, the rest
        its backups, in order (the profile that made the array chose them)."""
        if len(array) < self._share:
            raise ValueError(f"plane {plane} has {len(array)} EVs in its explicit array, "
                             f"fewer than its active share {self._share}")
        return list(array[:self._share]), list(array[self._share:])

    def _draw_paths(self, distinct: list[Path]) -> tuple[list[Path], list[Path]]:
        """A random active subset of one plane's paths, then backups from the rest."""
        want_active, want_backup = self._share, self.config.backup_per_plane
        shuffled = self._rng.sample(distinct, len(distinct))
        active = self._repeat_evenly(shuffled, want_active)
        unused = shuffled[want_active:]
        backup = unused[:want_backup]
        if len(backup) < want_backup:
            # Too few distinct paths: backups reuse paths, least-used first.
            uses = Counter(active + backup)
            reuse = sorted(distinct, key=lambda p: (uses[p], shuffled.index(p)))
            backup += self._repeat_evenly(reuse, want_backup - len(backup))
        return active, backup

    def _repeat_evenly(self, paths: list[Path], count: int) -> list[Path]:
        """`count` paths cycling through `paths`, reshuffled per cycle so repeats are not aligned."""
        out: list[Path] = []
        cycle = list(paths)
        while len(out) < count:
            out += cycle[:count - len(out)]
            cycle = self._rng.sample(paths, len(paths))
        return out

    def _new_ev(self, plane: int, path: Path, in_active: bool) -> Ev:
        ev = Ev(ev_id=self.config.ev_id_base + len(self._by_id), plane=plane, path=path,
                in_active=in_active)
        self._by_id[ev.ev_id] = ev
        return ev

    # ------------------------------------------------------------------------- per-packet choice

    def next_ev(self, exclude: int | None = None, usable_planes: set[int] | None = None, *,
                nbytes: int = 0, now: float | None = None) -> Ev | None:
        """The EV for the next packet: the next GOOD EV of the rotation, never `exclude`.

        `usable_planes` restricts the choice to ports with TX space (GetSendParams(free_ports));
        slots on other planes are passed over for this rotation. An expired SKIP EV is restored
        only by a selection it could have served (not excluded, plane usable), so the one
        restoration a selection may do is never spent on an EV that cannot take the packet.
        Counts the packet on the EV. Returns None only when no active EV on a usable plane other
        than `exclude` is GOOD or SKIP.
        """
        if now is not None and now > self._now:
            self._now = now                   # _observe(), inlined on the per-packet path
        # Fast path: the slot under the cursor is usable, as it is for almost every packet.
        # This is exactly the first turn of the scan below when that turn returns.
        cursor, order = self._cursor, self._order
        if cursor < len(order) and usable_planes is None:
            ev = order[cursor]
            if ev.state is _GOOD and ev.in_active and ev.ev_id != exclude:
                self._cursor = cursor + 1
                ev.packets_sent += 1
                ev.bytes_sent += nbytes
                return ev
        if usable_planes is not None and not self._serves(usable_planes):
            return None
        good, skip = _GOOD, _SKIP
        restored: Ev | None = None
        for _ in range(self._scan_limit):
            if self._cursor >= len(self._order):
                self._start_rotation()
                if not self._order:
                    break
            ev = self._order[self._cursor]
            self._cursor += 1
            state = ev.state
            if state is not good and state is not skip:
                continue
            if (not ev.in_active or ev.ev_id == exclude
                    or (usable_planes is not None and ev.plane not in usable_planes)):
                continue
            if state is good:
                return self._count_send(ev, nbytes)
            if restored is None and self._rotation >= ev.skip_until_rotation:
                # Spec guidance: restore it, but this packet goes on the next GOOD EV.
                self._set_state(ev, good, EvReason.SKIP_EXPIRED)
                restored = ev
        if restored is not None:
            return self._count_send(restored, nbytes)  # nothing else was GOOD: better than None
        return None

    def _serves(self, planes: set[int]) -> bool:
        """Whether any of `planes` is up with an active EV: else no slot of the rotation can
        serve, and the scan would spin through rotations (reshuffling each) to find nothing.
        That happened whenever only a dead plane's port had room (a plane whose paths all
        failed sends nothing, so its port always has room): a quarter of the endpoint
        loop's time in plane_failure went to those scans."""
        active, up = self._active, self._planes_up
        for plane in planes:
            if plane in up and active.get(plane):
                return True
        return False

    @staticmethod
    def _count_send(ev: Ev, nbytes: int) -> Ev:
        ev.packets_sent += 1
        ev.bytes_sent += nbytes
        return ev

    def _start_rotation(self) -> None:
        self._rotation += 1
        self._cursor = 0
        if self._order_stale or self.config.reshuffle_each_rotation:
            order = self._plane_balanced_order()
            self._rng.shuffle(order)
            for slot, ev in enumerate(order):
                ev.rotation_slot = slot
            self._order = order
            self._order_stale = False

    def _plane_balanced_order(self) -> list[Ev]:
        """Every up plane gets as many slots as the fullest one. A plane that lost active EVs
        with no backup left to replace them reuses the ones it has, so each port keeps an
        equal share of the packets (GetSendParams(free_ports): equal ports, equal load),
        instead of the other planes' ports queueing while its own idles."""
        sets = [self._active[p] for p in self._planes
                if p in self._planes_up and self._active[p]]
        if not sets:
            return []
        longest = max(len(evs) for evs in sets)
        order: list[Ev] = []
        for evs in sets:
            order += evs * (longest // len(evs))
            order += self._rng.sample(evs, longest % len(evs))
        return order

    def _restart_rotation(self) -> None:
        """Rebuild the order at the next selection (a new rotation starts there)."""
        self._order_stale = True
        self._cursor = len(self._order)

    # ----------------------------------------------------------------------------- feedback

    def on_ack(self, ev_id: int, rtt_s: float | None = None, now: float | None = None) -> bool:
        """A SACK with verdict NONE reflected this EV. Never changes state (resurrection is by
        probes only); clears a floor hold."""
        # _feedback_target(), inlined: this runs for nearly every SACK.
        if now is not None and now > self._now:
            self._now = now
        ev = self._by_id.get(ev_id)
        if ev is None:
            self.unknown_feedback += 1
            return False
        ev.packets_acked += 1
        if rtt_s is not None:                 # the EV's last RTT and its EWMA
            ev.last_rtt_s = rtt_s
            if ev.rtt_ewma_s is None:
                ev.rtt_ewma_s = rtt_s
            else:
                ev.rtt_ewma_s += self.config.rtt_ewma_gain * (rtt_s - ev.rtt_ewma_s)
        if ev.suspect:
            ev.suspect = False
            self._held.pop(ev.ev_id, None)
        return False

    def on_skip_once(self, ev_id: int, now: float | None = None) -> bool:
        """SACK verdict SKIP_ONCE (forward path ECN-marked) or NACK TRIMMED: GOOD -> SKIP."""
        ev = self._feedback_target(ev_id, now)
        if ev is None:
            return False
        ev.skips += 1
        until = self._rotation + self.config.skip_rotations
        if ev.state is EvState.SKIP:
            ev.skip_until_rotation = max(ev.skip_until_rotation, until)
            return False
        if ev.state is EvState.GOOD and ev.in_active:
            ev.skip_until_rotation = until
            return self._set_state(ev, EvState.SKIP, EvReason.SKIP_ONCE)
        return False

    def on_always_skip(self, ev_id: int, now: float | None = None) -> bool:
        """SACK verdict ALWAYS_SKIP (responder judges the path bad): -> ASSUMED_BAD."""
        ev = self._feedback_target(ev_id, now)
        if ev is None:
            return False
        ev.always_skips += 1
        if ev.state not in _USABLE_STATES:
            return False
        return self._demote(ev, EvReason.ALWAYS_SKIP)

    def on_loss(self, ev_id: int, now: float | None = None, whole_path: bool = True) -> int:
        """Per-packet timeout with no SACK and no trim (silent loss): -> ASSUMED_BAD, with
        the other usable EVs of the same path where `demote_same_path` and `whole_path`
        (False: a loss inferred from SACK holes, which may be reordering, takes only its
        own EV out). Returns how many EVs were demoted."""
        ev = self._feedback_target(ev_id, now)
        if ev is None:
            return 0
        ev.losses += 1
        if ev.state not in _USABLE_STATES or self._port_explains_loss(ev):
            return 0
        if not self._demote(ev, EvReason.TIMEOUT):
            return 0
        demoted = 1
        if whole_path and self.config.demote_same_path:
            for other in self._by_id.values():      # demotion never changes _by_id
                if other.path == ev.path and other.plane == ev.plane \
                        and other.state in _USABLE_STATES:
                    demoted += self._demote(other, EvReason.TIMEOUT)
        return demoted

    def _port_explains_loss(self, ev: Ev) -> bool:
        return self.config.ignore_losses_on_down_plane and ev.plane not in self._planes_up

    def _feedback_target(self, ev_id: int, now: float | None) -> Ev | None:
        # Reflected EVs come off the wire: an unknown one is counted and ignored, not raised.
        if now is not None:
            self._observe(now)
        ev = self._by_id.get(ev_id)
        if ev is None:
            self.unknown_feedback += 1
        return ev

    # ----------------------------------------------------------------------------- probing

    def probes_due(self, now: float) -> list[Ev]:
        """ASSUMED_BAD EVs to probe now (on up planes); schedules each one's next probe."""
        self._observe(now)
        due = [ev for ev in self._probing.values()
               if ev.next_probe_s is not None and ev.next_probe_s <= now
               and ev.plane in self._planes_up]
        due.sort(key=lambda ev: (ev.next_probe_s, ev.ev_id))
        for ev in due:
            ev.next_probe_s = now + self.config.probe_interval_s
            ev.probes_sent += 1
        return due

    def next_probe_due(self) -> float | None:
        """When probes_due() will next return something (None: nothing to probe).

        Lets a sans-IO caller sleep until then instead of polling; O(EVs being probed)."""
        if not self._probing:
            return None                       # the usual case, asked after every event
        times = [ev.next_probe_s for ev in self._probing.values()
                 if ev.next_probe_s is not None and ev.plane in self._planes_up]
        return min(times) if times else None

    def on_probe_result(self, ev_id: int, ok: bool, verdict_skip: bool = False,
                        now: float | None = None) -> bool:
        """Result of a probe on this EV (ok=False also for a probe that timed out)."""
        ev = self._feedback_target(ev_id, now)
        if ev is None:
            return False
        if not ok:
            ev.probe_failures += 1
        if ev.state is EvState.ASSUMED_BAD:
            return self._count_probe(ev, ok, verdict_skip)
        if ev.state in _USABLE_STATES and not ok and not self._port_explains_loss(ev):
            return self._demote(ev, EvReason.PROBE_FAILED)
        return False

    def _count_probe(self, ev: Ev, ok: bool, verdict_skip: bool) -> bool:
        if not ok:
            ev.probe_successes_in_a_row = 0
            return False
        if verdict_skip and not self.config.probe_skip_verdict_counts:
            return False
        ev.probe_successes_in_a_row += 1
        if ev.probe_successes_in_a_row < self.config.probes_to_resurrect:
            return False
        self._resurrect(ev, verdict_skip)
        return True

    def _resurrect(self, ev: Ev, verdict_skip: bool) -> None:
        self._probing.pop(ev.ev_id, None)
        ev.next_probe_s = None
        into_active = self._place_recovered(ev)
        if verdict_skip and into_active:
            ev.skip_until_rotation = self._rotation + self.config.skip_rotations
            self._set_state(ev, EvState.SKIP, EvReason.PROBES_SUCCEEDED)
        else:
            self._set_state(ev, EvState.GOOD, EvReason.PROBES_SUCCEEDED)
        self._settle_held()

    # ----------------------------------------------------------------------------- controller

    def set_denied(self, ev_id: int, denied: bool, now: float | None = None) -> bool:
        """Controller MODIFY_EV_STATE: any -> DENIED, or DENIED -> GOOD. Not limited by the floor.

        Raises KeyError for an unknown ev_id (a controller bug, unlike stale wire feedback)."""
        if now is not None:
            self._observe(now)
        ev = self._by_id[ev_id]
        return self._deny(ev) if denied else self._allow(ev)

    def _deny(self, ev: Ev) -> bool:
        if ev.state is EvState.DENIED:
            return False
        self._leave_pools(ev)
        self._probing.pop(ev.ev_id, None)
        self._held.pop(ev.ev_id, None)
        ev.next_probe_s = None
        ev.suspect = False
        return self._set_state(ev, EvState.DENIED, EvReason.CONTROLLER_DENY)

    def _allow(self, ev: Ev) -> bool:
        if ev.state is not EvState.DENIED:
            return False
        self._place_recovered(ev)
        self._set_state(ev, EvState.GOOD, EvReason.CONTROLLER_ALLOW)
        self._settle_held()
        return True

    def plane_down(self, plane: int, now: float | None = None) -> bool:
        """Port status: the NIC port of `plane` failed; stop using its EVs from the next packet."""
        return self._set_plane(plane, up=False, now=now)

    def plane_up(self, plane: int, now: float | None = None) -> bool:
        """Port status: the port is back; its EVs (in whatever state they are) return."""
        changed = self._set_plane(plane, up=True, now=now)
        if changed:
            self._settle_held()
        return changed

    def _set_plane(self, plane: int, up: bool, now: float | None) -> bool:
        if plane not in self._active:
            raise ValueError(f"unknown plane {plane}; planes are {self._planes}")
        if now is not None:
            self._observe(now)
        if (plane in self._planes_up) == up:
            return False
        if up:
            self._planes_up.add(plane)
        else:
            self._planes_up.discard(plane)
        self._restart_rotation()
        return True

    # ----------------------------------------------------------------------------- set changes

    def _demote(self, ev: Ev, reason: EvReason) -> bool:
        """GOOD/SKIP -> ASSUMED_BAD unless the ev_min_active floor forbids it (then hold it)."""
        if not self._may_demote(ev):
            self._hold_at_floor(ev)
            return False
        ev.suspect = False
        self._held.pop(ev.ev_id, None)
        self._leave_pools(ev)
        ev.probe_successes_in_a_row = 0
        ev.next_probe_s = self._now + self.config.first_probe_delay
        self._probing[ev.ev_id] = ev
        return self._set_state(ev, EvState.ASSUMED_BAD, reason)

    def _may_demote(self, ev: Ev) -> bool:
        if not ev.in_active or ev.plane not in self._planes_up or self._backup[ev.plane]:
            return True  # the count of usable active EVs does not drop
        return self._usable_active_count() - 1 >= self.config.ev_min_active

    def _hold_at_floor(self, ev: Ev) -> None:
        ev.suspect = True
        ev.floor_holds += 1
        self.floor_holds += 1
        if self.config.demote_held_when_possible:
            self._held[ev.ev_id] = ev

    def _settle_held(self) -> None:
        """Demote suspect EVs whose demotion the floor now allows."""
        for ev in list(self._held.values()):
            if ev.state not in _USABLE_STATES or not ev.suspect:
                self._held.pop(ev.ev_id, None)
            elif self._may_demote(ev):
                self._demote(ev, EvReason.DEFERRED_DEMOTION)

    def _usable_active_count(self) -> int:
        return sum(len(self._active[p]) for p in self._planes_up)

    def _leave_pools(self, ev: Ev) -> None:
        """Take `ev` out of the active set (refilling from a same-plane backup) or backup pool."""
        if ev.in_active:
            self._withdraw_from_active(ev)
        elif ev in self._backup[ev.plane]:
            self._backup[ev.plane].remove(ev)

    def _withdraw_from_active(self, ev: Ev) -> None:
        self._active[ev.plane].remove(ev)
        ev.in_active = False
        replacement = self._take_backup(ev.plane, failed_path=ev.path)
        if replacement is None:
            self._order_stale = True  # leaves a hole, stepped over until the next rebuild
            return
        replacement.in_active = True
        self._active[ev.plane].append(replacement)
        self._take_rotation_slot(ev, replacement)

    def _take_rotation_slot(self, old: Ev, new: Ev) -> None:
        # The replacement inherits the slot so the plane keeps its turn in this rotation.
        slot = old.rotation_slot
        if 0 <= slot < len(self._order) and self._order[slot] is old:
            self._order[slot] = new
            new.rotation_slot = slot
        else:
            self._order_stale = True

    def _take_backup(self, plane: int, failed_path: Path) -> Ev | None:
        pool = self._backup[plane]
        candidates = [i for i, ev in enumerate(pool)
                      if not self.config.prefer_distinct_path_backup or ev.path != failed_path]
        if not candidates:
            candidates = list(range(len(pool)))
        if not candidates:
            return None
        pick = candidates[0] if self.config.backup_promotion == "fifo" else self._rng.choice(candidates)
        return pool.pop(pick)

    def _place_recovered(self, ev: Ev) -> bool:
        """Put a recovered EV back: fill its plane's active share if short, else the backups.
        Returns True if it went into the active set."""
        if len(self._active[ev.plane]) < self._share:
            ev.in_active = True
            self._active[ev.plane].append(ev)
            self._order_stale = True  # joins the rotation at the next rebuild
            return True
        ev.in_active = False
        self._backup[ev.plane].append(ev)
        return False

    # ----------------------------------------------------------------------------- events

    def _set_state(self, ev: Ev, new: EvState, reason: EvReason) -> bool:
        old = ev.state
        if old is new:
            return False
        ev.state = new
        ev.state_changes += 1
        self._transitions[(old, new)] += 1
        if self._reportable(old, new):
            self._push_event(EvEvent(self._now, ev.ev_id, ev.plane, ev.path, old, new, reason))
        return True

    def _reportable(self, old: EvState, new: EvState) -> bool:
        if not self.config.report_skip_transitions and {old, new} == {EvState.GOOD, EvState.SKIP}:
            return False
        mask = self.config.event_mask
        return old in mask or new in mask

    def _push_event(self, event: EvEvent) -> None:
        if len(self._events) >= self.config.event_queue_capacity:
            self._pending_drops += 1
            self._events_dropped += 1
            return
        if self._pending_drops:
            event = EvEvent(event.time, event.ev_id, event.plane, event.path, event.old_state,
                            event.new_state, event.reason, drop_count=self._pending_drops)
            self._pending_drops = 0
        self._events.append(event)

    def poll_events(self, max_n: int | None = None) -> list[EvEvent]:
        """Take up to `max_n` (default: all) queued events, oldest first."""
        n = len(self._events) if max_n is None else min(max_n, len(self._events))
        return [self._events.popleft() for _ in range(n)]

    @property
    def events_dropped(self) -> int:
        """Events lost to overflow since the table was built."""
        return self._events_dropped

    @property
    def pending_drop_count(self) -> int:
        """Drops not yet reported by a delivered event."""
        return self._pending_drops

    def transition_counts(self) -> dict[tuple[EvState, EvState], int]:
        """Cumulative count of every (old, new) transition, reported or not."""
        return dict(self._transitions)

    def _observe(self, now: float) -> None:
        # Event times never go backwards even if callers report slightly stale times.
        if now > self._now:
            self._now = now

    # ----------------------------------------------------------------------------- queries

    def ev(self, ev_id: int) -> Ev:
        return self._by_id[ev_id]

    def evs(self) -> list[Ev]:
        return list(self._by_id.values())

    def __len__(self) -> int:
        return len(self._by_id)

    @property
    def planes(self) -> tuple[int, ...]:
        return self._planes

    @property
    def planes_up(self) -> frozenset[int]:
        return frozenset(self._planes_up)

    @property
    def per_plane_share(self) -> int:
        """Active EVs per plane (active_count rounded down to a multiple of the plane count)."""
        return self._share

    @property
    def rotation(self) -> int:
        return self._rotation

    def active_evs(self, plane: int | None = None) -> list[Ev]:
        planes = self._planes if plane is None else (plane,)
        return [ev for p in planes for ev in self._active[p]]

    def backup_evs(self, plane: int | None = None) -> list[Ev]:
        planes = self._planes if plane is None else (plane,)
        return [ev for p in planes for ev in self._backup[p]]

    def usable_active_count(self) -> int:
        """GOOD+SKIP active EVs on up planes: the quantity ev_min_active bounds."""
        return self._usable_active_count()

    def snapshot(self) -> list[dict[str, Any]]:
        """Per-EV state and counters, JSON-serialisable, ordered by ev_id."""
        return [ev.to_dict() for ev in sorted(self._by_id.values(), key=lambda e: e.ev_id)]

    def counts_by_state(self) -> dict[EvState, int]:
        counts = dict.fromkeys(EvState, 0)
        for ev in self._by_id.values():
            counts[ev.state] += 1
        return counts

    def active_by_plane(self) -> dict[int, int]:
        """Active-set size per plane (down planes included; see planes_up)."""
        return {p: len(self._active[p]) for p in self._planes}

    def stats(self) -> dict[str, Any]:
        """Table-level counters, JSON-serialisable."""
        return {
            "rotation": self._rotation,
            "planes_up": sorted(self._planes_up),
            "per_plane_share": self._share,
            "active_by_plane": {str(p): n for p, n in self.active_by_plane().items()},
            "backup_by_plane": {str(p): len(self._backup[p]) for p in self._planes},
            "counts_by_state": {str(s): n for s, n in self.counts_by_state().items()},
            "usable_active": self._usable_active_count(),
            "floor_holds": self.floor_holds,
            "events_dropped": self._events_dropped,
            "unknown_feedback": self.unknown_feedback,
            "transitions": {f"{o}->{n}": c for (o, n), c in sorted(self._transitions.items())},
        }


def _validated_planes(paths_by_plane: Mapping[int, Sequence[Path]]) -> tuple[int, ...]:
    if not paths_by_plane:
        raise ValueError("paths_by_plane is empty: at least one plane is needed")
    planes = tuple(sorted(paths_by_plane))
    for plane in planes:
        if not isinstance(plane, int) or isinstance(plane, bool) or plane < 1:
            raise ValueError(f"planes are 1-based NIC port numbers; got {plane!r}")
        if len(paths_by_plane[plane]) == 0:
            raise ValueError(f"plane {plane} has no paths")
    return planes
