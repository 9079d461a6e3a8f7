"""Unit tests for testbed.nic.ev_table: active and backup sets equal per plane, every EV state
transition, same-plane backup promotion, probe resurrection, DENIED only by the controller, the
ev_min_active floor, EV events (mask, drop_count), a plane's port down and up again."""

from __future__ import annotations

import json
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.nic.ev_table import (
    Ev,
    EvEvent,
    EvReason,
    EvState,
    EvTable,
    EvTableConfig,
)

GOOD, SKIP, BAD, DENIED = EvState.GOOD, EvState.SKIP, EvState.ASSUMED_BAD, EvState.DENIED


def srv6_paths(planes: int, paths_per_plane: int) -> dict[int, list[str]]:
    return {p: [f"fc00:{p}:{i:x}::" for i in range(paths_per_plane)] for p in range(1, planes + 1)}


def make_table(seed: int = 1, planes: int = 4, paths_per_plane: int = 16, **config) -> EvTable:
    defaults = dict(active_count=32, backup_per_plane=2, ev_min_active=0)
    defaults.update(config)
    return EvTable(srv6_paths(planes, paths_per_plane), EvTableConfig(**defaults),
                   random.Random(seed))


def plane_counts(table: EvTable, n: int, **kwargs) -> Counter[int]:
    counts: Counter[int] = Counter()
    for _ in range(n):
        ev = table.next_ev(**kwargs)
        assert ev is not None and ev.state is GOOD
        counts[ev.plane] += 1
    return counts


def assert_balanced(counts: Counter[int], planes: set[int], tolerance: float = 0.01) -> None:
    assert set(counts) == planes
    mean = sum(counts.values()) / len(planes)
    for plane, n in counts.items():
        assert abs(n - mean) <= tolerance * mean, (plane, n, mean, counts)


def check_invariants(table: EvTable) -> None:
    """Structural invariants that must hold after any sequence of calls."""
    active = table.active_evs()
    backup = table.backup_evs()
    assert len({ev.ev_id for ev in active + backup}) == len(active) + len(backup)
    for ev in active:
        assert ev.in_active and ev.state in (GOOD, SKIP)
    for ev in backup:
        assert not ev.in_active and ev.state is GOOD
    pooled = {id(ev) for ev in active + backup}
    for ev in table.evs():
        if ev.state in (BAD, DENIED):
            assert id(ev) not in pooled and not ev.in_active
        else:
            assert id(ev) in pooled
    for plane, n in table.active_by_plane().items():
        assert n <= table.per_plane_share, plane


# ------------------------------------------------------------------------------- config, build


@pytest.mark.parametrize("kwargs, message", [
    (dict(active_count=0), "active_count"),
    (dict(backup_per_plane=-1), "backup_per_plane"),
    (dict(active_count=8, ev_min_active=9), "ev_min_active"),
    (dict(ev_min_active=-1), "ev_min_active"),
    (dict(skip_rotations=-1), "skip_rotations"),
    (dict(probe_interval_s=0.0), "probe_interval_s"),
    (dict(first_probe_delay_s=-1.0), "first_probe_delay_s"),
    (dict(probes_to_resurrect=0), "probes_to_resurrect"),
    (dict(backup_promotion="lifo"), "backup_promotion"),
    (dict(event_mask=frozenset({EvState.SKIP})), "event_mask"),
    (dict(event_queue_capacity=0), "event_queue_capacity"),
    (dict(rtt_ewma_gain=0.0), "rtt_ewma_gain"),
    (dict(ev_id_base=1 << 32), "ev_id_base"),
])
def test_config_rejects_bad_values(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EvTableConfig(**kwargs)


def test_table_rejects_bad_planes() -> None:
    rng = random.Random(0)
    with pytest.raises(ValueError, match="empty"):
        EvTable({}, EvTableConfig(), rng)
    with pytest.raises(ValueError, match="no paths"):
        EvTable({1: ["a"], 2: []}, EvTableConfig(), rng)
    with pytest.raises(ValueError, match="1-based"):
        EvTable({0: ["a"]}, EvTableConfig(), rng)
    with pytest.raises(ValueError, match="smaller than the number of planes"):
        EvTable(srv6_paths(4, 2), EvTableConfig(active_count=3, ev_min_active=0), rng)
    with pytest.raises(ValueError, match="overflow 32 bits"):
        EvTable(srv6_paths(1, 2), EvTableConfig(active_count=2, ev_id_base=(1 << 32) - 3), rng)


def test_build_equal_per_plane_random_subset_and_distinct_backups() -> None:
    table = make_table(seed=3, planes=4, paths_per_plane=16, active_count=32, backup_per_plane=3)
    assert table.active_by_plane() == {1: 8, 2: 8, 3: 8, 4: 8}
    ids = sorted(ev.ev_id for ev in table.evs())
    assert ids == list(range(len(ids))) and len(ids) == 32 + 4 * 3
    for plane in table.planes:
        active_paths = [ev.path for ev in table.active_evs(plane)]
        backup_paths = [ev.path for ev in table.backup_evs(plane)]
        assert len(set(active_paths)) == 8 and len(set(backup_paths)) == 3
        assert not set(active_paths) & set(backup_paths)
        assert all(path.startswith(f"fc00:{plane}:") for path in active_paths)
    other = make_table(seed=4, planes=4, paths_per_plane=16, active_count=32, backup_per_plane=3)
    assert ({ev.path for ev in table.active_evs()} != {ev.path for ev in other.active_evs()})


def test_build_repeats_paths_with_distinct_ids_when_plane_is_narrow() -> None:
    table = EvTable({1: ["a", "b"], 2: ["c", "d", "e"]},
                    EvTableConfig(active_count=16, backup_per_plane=2, ev_min_active=0),
                    random.Random(0))
    plane1 = Counter(ev.path for ev in table.active_evs(1))
    plane2 = Counter(ev.path for ev in table.active_evs(2))
    assert plane1 == {"a": 4, "b": 4}
    assert sorted(plane2.values()) == [2, 3, 3]  # spread as evenly as possible
    assert len({ev.ev_id for ev in table.evs()}) == len(table)
    # backups must reuse paths; the least-used ones go first
    least_used = min(plane2, key=plane2.__getitem__)
    assert table.backup_evs(2)[0].path == least_used


def test_active_count_rounds_down_to_equal_shares() -> None:
    table = make_table(planes=3, active_count=32)
    assert table.per_plane_share == 10 and table.active_by_plane() == {1: 10, 2: 10, 3: 10}


def test_ev_id_base_and_snapshot_is_json() -> None:
    table = make_table(ev_id_base=0x1000)
    assert min(ev.ev_id for ev in table.evs()) == 0x1000
    ev = table.next_ev(nbytes=4096)
    table.on_ack(ev.ev_id, 20e-6)
    table.on_ack(ev.ev_id, 40e-6)
    snap = json.loads(json.dumps(table.snapshot()))
    row = next(r for r in snap if r["ev_id"] == ev.ev_id)
    assert row["packets_sent"] == 1 and row["bytes_sent"] == 4096 and row["packets_acked"] == 2
    assert row["last_rtt_s"] == 40e-6
    assert row["rtt_ewma_s"] == pytest.approx(20e-6 + 0.125 * 20e-6)
    assert row["state"] == "GOOD" and row["role"] == "active"
    json.dumps(table.stats())
    tuple_paths = EvTable({1: [(0x100, 0x201), (0x100, 0x202)]},
                          EvTableConfig(active_count=2, backup_per_plane=0), random.Random(0))
    assert json.loads(json.dumps(tuple_paths.snapshot()))[0]["path"] in ([256, 513], [256, 514])


# ------------------------------------------------------------------------------- transitions


def _good_active(t: EvTable) -> Ev:
    return t.active_evs(1)[0]


def _good_backup(t: EvTable) -> Ev:
    return t.backup_evs(1)[0]


def _skip(t: EvTable) -> Ev:
    ev = t.active_evs(1)[0]
    t.on_skip_once(ev.ev_id)
    return ev


def _assumed_bad(t: EvTable) -> Ev:
    ev = t.active_evs(1)[0]
    t.on_loss(ev.ev_id, now=1.0)
    return ev


def _denied(t: EvTable) -> Ev:
    ev = t.active_evs(1)[0]
    t.set_denied(ev.ev_id, True)
    return ev


SETUPS: dict[str, Callable[[EvTable], Ev]] = {
    "GOOD(active)": _good_active,
    "GOOD(backup)": _good_backup,
    "SKIP": _skip,
    "ASSUMED_BAD": _assumed_bad,
    "DENIED": _denied,
}

ACTIONS: dict[str, Callable[[EvTable, int], bool]] = {
    "ack": lambda t, i: t.on_ack(i, 10e-6, now=2.0),
    "skip_once": lambda t, i: t.on_skip_once(i, now=2.0),
    "always_skip": lambda t, i: t.on_always_skip(i, now=2.0),
    "loss": lambda t, i: t.on_loss(i, now=2.0),
    "probe_ok": lambda t, i: t.on_probe_result(i, ok=True, now=2.0),
    "probe_ok_skip": lambda t, i: t.on_probe_result(i, ok=True, verdict_skip=True, now=2.0),
    "probe_fail": lambda t, i: t.on_probe_result(i, ok=False, now=2.0),
    "deny": lambda t, i: t.set_denied(i, True, now=2.0),
    "allow": lambda t, i: t.set_denied(i, False, now=2.0),
}

# (start, action) -> resulting state; anything absent here keeps the start state (refused).
ALLOWED: dict[tuple[str, str], EvState] = {
    ("GOOD(active)", "skip_once"): SKIP,
    ("GOOD(active)", "always_skip"): BAD,
    ("GOOD(active)", "loss"): BAD,
    ("GOOD(active)", "probe_fail"): BAD,
    ("GOOD(active)", "deny"): DENIED,
    ("GOOD(backup)", "always_skip"): BAD,
    ("GOOD(backup)", "loss"): BAD,
    ("GOOD(backup)", "probe_fail"): BAD,
    ("GOOD(backup)", "deny"): DENIED,
    ("SKIP", "always_skip"): BAD,
    ("SKIP", "loss"): BAD,
    ("SKIP", "probe_fail"): BAD,
    ("SKIP", "deny"): DENIED,
    # probes_to_resurrect=1 here; the plane's share is full, so it returns as a GOOD backup
    ("ASSUMED_BAD", "probe_ok"): GOOD,
    ("ASSUMED_BAD", "probe_ok_skip"): GOOD,
    ("ASSUMED_BAD", "deny"): DENIED,
    ("DENIED", "allow"): GOOD,
}
START_STATE = {"GOOD(active)": GOOD, "GOOD(backup)": GOOD, "SKIP": SKIP,
               "ASSUMED_BAD": BAD, "DENIED": DENIED}
REPORTED = {(GOOD, BAD), (SKIP, BAD), (BAD, GOOD), (BAD, DENIED), (GOOD, DENIED), (DENIED, GOOD)}


@pytest.mark.parametrize("start", SETUPS)
@pytest.mark.parametrize("action", ACTIONS)
def test_transition_table(start: str, action: str) -> None:
    table = make_table(probes_to_resurrect=1)
    ev = SETUPS[start](table)
    assert ev.state is START_STATE[start]
    table.poll_events()
    before = table.transition_counts()

    changed = ACTIONS[action](table, ev.ev_id)

    expected = ALLOWED.get((start, action), START_STATE[start])
    assert ev.state is expected
    assert changed == (expected is not START_STATE[start])
    check_invariants(table)
    after = table.transition_counts()
    transition = (START_STATE[start], expected)
    assert after.get(transition, 0) - before.get(transition, 0) == (1 if changed else 0)
    events = table.poll_events()
    if changed and transition in REPORTED:
        assert [(e.ev_id, e.old_state, e.new_state, e.time) for e in events] == [
            (ev.ev_id, *transition, 2.0)]
    else:
        assert events == []


def test_resurrection_with_skip_verdict_into_a_short_plane_enters_skip() -> None:
    table = make_table(backup_per_plane=0, probes_to_resurrect=1)
    ev = table.active_evs(1)[0]
    table.on_loss(ev.ev_id, now=0.0)
    assert table.active_by_plane()[1] == table.per_plane_share - 1  # no backup: plane is short
    assert table.on_probe_result(ev.ev_id, ok=True, verdict_skip=True, now=1.0)
    assert ev.state is SKIP and ev.in_active
    assert table.active_by_plane()[1] == table.per_plane_share
    event = table.poll_events()[-1]
    assert (event.old_state, event.new_state, event.reason) == (BAD, SKIP, EvReason.PROBES_SUCCEEDED)


def test_skip_restored_at_cursor_but_packet_goes_to_next_good() -> None:
    table = make_table(planes=1, active_count=4, backup_per_plane=0)
    first = [table.next_ev().ev_id for _ in range(4)]  # rotation 1
    skipped = table.ev(first[-1])
    table.on_skip_once(skipped.ev_id)
    assert skipped.state is SKIP
    # Rest of rotation 1 is over; SKIP lasts skip_rotations=1, so in rotation 2 it is restored
    # when the cursor reaches it, and never carries the packet that restored it.
    sent = []
    while skipped.state is SKIP:
        ev = table.next_ev()
        assert ev is not skipped
        sent.append(ev.ev_id)
    assert skipped.state is GOOD and len(sent) <= 4  # restored during rotation 2
    assert SKIP not in {e.new_state for e in table.poll_events()}  # GOOD<->SKIP not reported
    assert table.transition_counts() == {(GOOD, SKIP): 1, (SKIP, GOOD): 1}


def test_skip_lasts_skip_rotations_and_extends_on_repeat() -> None:
    table = make_table(planes=1, active_count=4, backup_per_plane=0, skip_rotations=3,
                       reshuffle_each_rotation=False)
    ev = table.active_evs()[0]
    table.on_skip_once(ev.ev_id)  # rotation 0 -> expires in rotation 3
    table.on_skip_once(ev.ev_id)  # repeat: does not shorten, counts
    assert ev.skips == 2
    for _ in range(3 * 2):  # rotations 1 and 2: the other three EVs once each
        assert table.next_ev() is not ev
    assert ev.state is SKIP
    while ev.state is SKIP:
        assert table.next_ev() is not ev
    assert table.rotation in (3, 4)  # restored in rotation 3 (the packet may roll into 4)
    assert ev.skip_until_rotation == 3


def test_at_most_one_skip_restored_per_selection() -> None:
    table = make_table(planes=1, active_count=8, backup_per_plane=0, reshuffle_each_rotation=False)
    for _ in range(8):
        table.next_ev()  # end of rotation 1
    for ev in table.active_evs():
        table.on_skip_once(ev.ev_id)
    skip_to_good = 0
    for _ in range(8):
        before = table.transition_counts().get((SKIP, GOOD), 0)
        ev = table.next_ev()
        restored_now = table.transition_counts().get((SKIP, GOOD), 0) - before
        assert restored_now <= 1
        skip_to_good += restored_now
        assert ev is not None and ev.state is GOOD
    assert skip_to_good == 8 - sum(ev.state is SKIP for ev in table.active_evs())


def test_all_skip_still_sends_on_a_restored_ev() -> None:
    table = make_table(planes=2, active_count=4, backup_per_plane=0)
    for ev in table.active_evs():
        table.on_skip_once(ev.ev_id)
    ev = table.next_ev()
    assert ev is not None and ev.state is GOOD


# ------------------------------------------------------------------------------- selection


def test_no_data_on_non_good_ev_under_random_feedback() -> None:
    table = make_table(seed=7, planes=4, paths_per_plane=6, active_count=16, backup_per_plane=2,
                       ev_min_active=4, probes_to_resurrect=2)
    rng = random.Random(99)
    ids = [ev.ev_id for ev in table.evs()]
    now = 0.0
    sent = 0
    for step in range(20000):
        now += 1e-5
        ev = table.next_ev(now=now)
        if ev is not None:
            assert ev.state is GOOD and ev.in_active and ev.plane in table.planes_up
            sent += 1
        roll = rng.random()
        target = rng.choice(ids)
        if roll < 0.05:
            table.on_skip_once(target, now=now)
        elif roll < 0.06:
            table.on_loss(target, now=now)
        elif roll < 0.065:
            table.on_always_skip(target, now=now)
        for probed in table.probes_due(now):
            table.on_probe_result(probed.ev_id, ok=rng.random() < 0.8, now=now)
        if step % 5000 == 4999:
            check_invariants(table)
    assert sent > 19000


@given(seed=st.integers(0, 2**16), planes=st.integers(1, 4), paths=st.integers(1, 5),
       per_plane=st.integers(1, 4), backups=st.integers(0, 2), floor=st.integers(0, 3),
       ops=st.lists(st.tuples(st.sampled_from(["ack", "skip", "always", "loss", "probe_ok",
                                               "probe_fail", "deny", "allow", "down", "up",
                                               "send", "probes_due"]),
                              st.integers(0, 63), st.booleans()), max_size=60))
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_exclude_always_respected_after_random_feedback(seed, planes, paths, per_plane, backups,
                                                        floor, ops) -> None:
    table = EvTable(srv6_paths(planes, paths),
                    EvTableConfig(active_count=planes * per_plane, backup_per_plane=backups,
                                  ev_min_active=min(floor, planes * per_plane),
                                  probes_to_resurrect=2),
                    random.Random(seed))
    ids = sorted(ev.ev_id for ev in table.evs())
    touched_floor_bypass = False
    now = 0.0
    for op, index, flag in ops:
        now += 1e-4
        ev_id = ids[index % len(ids)]
        plane = table.planes[index % len(table.planes)]
        match op:
            case "ack": table.on_ack(ev_id, 1e-5, now=now)
            case "skip": table.on_skip_once(ev_id, now=now)
            case "always": table.on_always_skip(ev_id, now=now)
            case "loss": table.on_loss(ev_id, now=now)
            case "probe_ok": table.on_probe_result(ev_id, ok=True, verdict_skip=flag, now=now)
            case "probe_fail": table.on_probe_result(ev_id, ok=False, now=now)
            case "deny":
                touched_floor_bypass = True
                table.set_denied(ev_id, True, now=now)
            case "allow": table.set_denied(ev_id, False, now=now)
            case "down":
                touched_floor_bypass = True
                table.plane_down(plane, now=now)
            case "up": table.plane_up(plane, now=now)
            case "send": table.next_ev(usable_planes={plane} if flag else None, now=now)
            case "probes_due":
                for probed in table.probes_due(now):
                    assert probed.state is BAD and probed.plane in table.planes_up
        check_invariants(table)
        if not touched_floor_bypass:
            assert table.usable_active_count() >= table.config.ev_min_active
    for x in ids + [None]:
        usable_before = [ev for ev in table.active_evs() if ev.plane in table.planes_up
                         and ev.ev_id != x]
        chosen = table.next_ev(exclude=x)
        if chosen is None:
            assert usable_before == [], "None although a usable EV existed"
        else:
            assert chosen.ev_id != x and chosen.state is GOOD and chosen.in_active
            assert chosen.plane in table.planes_up


def test_per_plane_counts_within_one_percent_over_1e5() -> None:
    table = make_table(seed=11, planes=8, paths_per_plane=16, active_count=128)
    assert_balanced(plane_counts(table, 100_000), set(range(1, 9)))


def test_per_plane_balance_survives_retransmit_excludes_and_skips() -> None:
    table = make_table(seed=12, planes=4, paths_per_plane=16, active_count=64)
    rng = random.Random(5)
    counts: Counter[int] = Counter()
    last = None
    for i in range(100_000):
        ev = table.next_ev(exclude=last.ev_id if last is not None and i % 10 == 0 else None)
        counts[ev.plane] += 1
        if rng.random() < 0.02:
            table.on_skip_once(ev.ev_id)
        last = ev
    assert_balanced(counts, {1, 2, 3, 4})


def test_plane_short_of_evs_keeps_its_share_of_packets() -> None:
    """Half of plane 2's active EVs demoted with no backup left: the plane's port still gets
    half the packets (the survivors are reused), not a share shrunk with its EV count."""
    table = make_table(seed=13, planes=2, paths_per_plane=4, active_count=32,
                       backup_per_plane=0, demote_same_path=False)   # one entry at a time
    doomed = [ev for ev in table.active_evs() if ev.plane == 2][:12]
    for ev in doomed:
        assert table.on_loss(ev.ev_id)
    assert table.active_by_plane() == {1: 16, 2: 4}
    counts = plane_counts(table, 20_000)
    assert_balanced(counts, {1, 2})
    used = {ev.ev_id for ev in (table.next_ev() for _ in range(2_000))}
    assert not used & {ev.ev_id for ev in doomed}


def _plane_sequence(seed: int, n: int) -> list[int]:
    table = make_table(seed=seed, planes=4, paths_per_plane=16, active_count=64)
    return [table.next_ev().plane for _ in range(n)]


def test_two_qps_sequences_are_uncorrelated() -> None:
    n = 100_000
    a, b = _plane_sequence(1, n), _plane_sequence(2, n)
    assert abs(statistics.correlation(a, b)) < 0.02
    same_plane = sum(x == y for x, y in zip(a, b)) / n
    assert abs(same_plane - 0.25) < 0.01  # what independent uniform choices over 4 planes give
    assert _plane_sequence(1, 1000) == a[:1000]  # and deterministic given the rng


def test_rotations_are_reshuffled() -> None:
    table = make_table(planes=2, active_count=32)
    rotations = [[table.next_ev().ev_id for _ in range(32)] for _ in range(3)]
    assert all(sorted(r) == sorted(rotations[0]) for r in rotations)  # each EV once per rotation
    assert rotations[0] != rotations[1] != rotations[2]
    fixed = make_table(planes=2, active_count=32, reshuffle_each_rotation=False)
    fixed_rotations = [[fixed.next_ev().ev_id for _ in range(32)] for _ in range(3)]
    assert fixed_rotations[0] == fixed_rotations[1] == fixed_rotations[2]


def test_usable_planes_restricts_choice() -> None:
    table = make_table(planes=4, active_count=32)
    for _ in range(100):
        assert table.next_ev(usable_planes={2, 3}).plane in {2, 3}
    assert table.next_ev(usable_planes=set()) is None


def test_exclude_only_usable_ev_returns_none() -> None:
    table = make_table(planes=1, active_count=1, backup_per_plane=0)
    only = table.active_evs()[0]
    assert table.next_ev(exclude=only.ev_id) is None
    assert table.next_ev() is only


# ------------------------------------------------------------------------------- path failure


def test_killing_one_path_keeps_plane_balance_through_backup_promotion() -> None:
    # 4 paths per plane, 8 EVs per plane: each path carries 2 active EVs
    table = make_table(seed=21, planes=4, paths_per_plane=4, active_count=32, backup_per_plane=4)
    dead_path = table.active_evs(2)[0].path
    now = 0.0
    # sending continues; every packet on the dead path times out and its EV is replaced
    for _ in range(20_000):
        now += 1e-6
        ev = table.next_ev(now=now)
        if ev.path == dead_path:
            table.on_loss(ev.ev_id, now=now)
    assert table.active_by_plane() == {1: 8, 2: 8, 3: 8, 4: 8}
    assert all(ev.path != dead_path for ev in table.active_evs())
    assert all(ev.state is BAD for ev in table.evs() if ev.path == dead_path and ev.packets_sent)
    assert_balanced(plane_counts(table, 100_000), {1, 2, 3, 4})
    killed = [e for e in table.poll_events() if e.new_state is BAD]
    assert killed and all(e.path == dead_path and e.reason is EvReason.TIMEOUT for e in killed)


def test_backup_promotion_prefers_a_different_path() -> None:
    for prefer in (True, False):
        # two paths, two active EVs: both backups must reuse "a" and "b"
        table = EvTable({1: ["a", "b"]},
                        EvTableConfig(active_count=2, backup_per_plane=2,
                                      prefer_distinct_path_backup=prefer,
                                      demote_same_path=False),   # else "a"'s backup goes too
                        random.Random(0))
        first_backup = table.backup_evs()[0]
        victim = next(ev for ev in table.active_evs() if ev.path == first_backup.path)
        table.on_loss(victim.ev_id)
        (replacement,) = [ev for ev in table.active_evs() if ev.ev_id >= 2]
        assert (replacement.path != victim.path) is prefer


def test_a_silent_loss_demotes_every_ev_on_its_path() -> None:
    """One plane, 2 paths, 8 active EVs (each path 4 times) and 2 backups (each path once):
    a timeout on one EV takes every entry of that path out, backups included, and none of
    the other path's; the plane keeps sending, on the other path only."""
    table = EvTable({1: ["a", "b"]}, EvTableConfig(active_count=8, backup_per_plane=2),
                    random.Random(3))
    victim = table.active_evs()[0]
    dead = [ev for ev in table.evs() if ev.path == victim.path]
    assert len(dead) == 5
    assert table.on_loss(victim.ev_id, now=0.0) == 5
    assert all(ev.state is EvState.ASSUMED_BAD for ev in dead)
    assert {ev.path for ev in table.evs() if ev.state is GOOD} == {"a", "b"} - {victim.path}
    assert {table.next_ev().path for _ in range(100)} == {"a", "b"} - {victim.path}
    reasons = [e.reason for e in table.poll_events()]
    assert reasons == [EvReason.TIMEOUT] * 5
    # A loss on an EV already out changes nothing.
    assert table.on_loss(victim.ev_id, now=0.0) == 0
    # A loss inferred from SACK holes (whole_path=False) takes its own EV only, and so
    # does any loss with the option off.
    other = next(ev for ev in table.active_evs() if ev.state is GOOD)
    assert table.on_loss(other.ev_id, now=0.0, whole_path=False) == 1
    assert sum(ev.state is GOOD for ev in table.evs() if ev.path == other.path) == 4
    single = EvTable({1: ["a", "b"]}, EvTableConfig(active_count=8, backup_per_plane=2,
                                                   demote_same_path=False), random.Random(3))
    assert single.on_loss(single.active_evs()[0].ev_id, now=0.0) == 1


def test_resurrection_after_probes_to_resurrect_successes() -> None:
    interval = 1e-3
    table = make_table(probe_interval_s=interval, probes_to_resurrect=3)
    ev = table.active_evs(1)[0]
    t0 = 10.0
    assert table.on_loss(ev.ev_id, now=t0)
    assert table.probes_due(t0) == []
    assert table.probes_due(t0 + interval) == [ev]
    assert table.probes_due(t0 + interval) == []  # rescheduled one interval later
    results = [True, True, False, True, True]  # a failure resets the run
    for k, ok in enumerate(results, start=2):
        now = t0 + k * interval
        assert table.probes_due(now) == [ev]
        table.on_probe_result(ev.ev_id, ok=ok, now=now)
        assert ev.state is BAD
    now = t0 + 7 * interval
    assert table.probes_due(now) == [ev]
    assert table.on_probe_result(ev.ev_id, ok=True, now=now)
    assert ev.state is GOOD and not ev.in_active and ev in table.backup_evs(1)  # back as a backup
    assert ev.probes_sent == 7 and ev.probe_failures == 1
    assert table.probes_due(now + 10) == []
    events = table.poll_events()
    assert [(e.old_state, e.new_state, e.time) for e in events] == [(GOOD, BAD, t0), (BAD, GOOD, now)]


def test_resurrection_within_k_probe_intervals_of_path_repair() -> None:
    interval = 1e-3
    table = make_table(probe_interval_s=interval, probes_to_resurrect=3)
    ev = table.active_evs(1)[0]
    table.on_loss(ev.ev_id, now=0.0)
    now, repaired_at, step = 0.0, 0.0105, interval / 10
    while ev.state is BAD:
        now += step
        for probed in table.probes_due(now):
            table.on_probe_result(probed.ev_id, ok=now >= repaired_at, now=now)
    # k=3 probe intervals (each rounded up to the caller's polling step)
    assert now - repaired_at <= 3 * (interval + step)


def test_first_probe_delay_and_positional_now() -> None:
    table = make_table(probe_interval_s=1e-3, first_probe_delay_s=0.0)
    ev = table.active_evs(1)[0]
    table.on_loss(ev.ev_id, 5.0)
    assert table.probes_due(5.0) == [ev]  # probed at once, then every interval
    assert table.probes_due(5.0005) == []
    table.on_probe_result(ev.ev_id, True, False, 5.001)
    assert ev.probe_successes_in_a_row == 1


def test_skip_verdict_probes_can_be_made_neutral() -> None:
    table = make_table(probes_to_resurrect=2, probe_skip_verdict_counts=False)
    ev = table.active_evs(1)[0]
    table.on_loss(ev.ev_id, now=0.0)
    table.on_probe_result(ev.ev_id, ok=True, now=1.0)
    table.on_probe_result(ev.ev_id, ok=True, verdict_skip=True, now=2.0)  # neither counts nor resets
    assert ev.state is BAD and ev.probe_successes_in_a_row == 1
    table.on_probe_result(ev.ev_id, ok=True, now=3.0)
    assert ev.state is GOOD


def test_random_backup_promotion_keeps_balance() -> None:
    table = make_table(seed=5, planes=4, paths_per_plane=16, active_count=32, backup_per_plane=4,
                       backup_promotion="random")
    for plane in table.planes:
        for ev in list(table.active_evs(plane))[:3]:
            table.on_loss(ev.ev_id)
    assert table.active_by_plane() == {1: 8, 2: 8, 3: 8, 4: 8}
    assert all(len(table.backup_evs(p)) == 1 for p in table.planes)
    check_invariants(table)


def test_denied_never_auto_recovers() -> None:
    table = make_table(probes_to_resurrect=1)
    ev = table.active_evs(1)[0]
    table.on_loss(ev.ev_id, now=0.0)  # ASSUMED_BAD, probing
    assert table.set_denied(ev.ev_id, True, now=0.5)
    for k in range(1, 50):
        now = k * 1e-3
        assert ev not in table.probes_due(now)
        table.on_probe_result(ev.ev_id, ok=True, now=now)
        table.on_ack(ev.ev_id, 1e-5, now=now)
    assert ev.state is DENIED
    assert all(table.next_ev() is not ev for _ in range(10_000))
    assert table.set_denied(ev.ev_id, False, now=1.0)
    assert ev.state is GOOD
    assert not table.set_denied(ev.ev_id, False)  # GOOD -> GOOD is a no-op
    with pytest.raises(KeyError):
        table.set_denied(10**9, True)


def test_denied_active_ev_is_replaced_and_allowed_ev_refills_a_short_plane() -> None:
    table = make_table(backup_per_plane=1)
    a, b = table.active_evs(1)[:2]
    table.set_denied(a.ev_id, True)  # replaced by the only backup
    table.set_denied(b.ev_id, True)  # no backup left: plane 1 is short
    assert table.active_by_plane()[1] == table.per_plane_share - 1
    table.set_denied(a.ev_id, False)
    assert a.in_active and table.active_by_plane()[1] == table.per_plane_share
    table.set_denied(b.ev_id, False)
    assert not b.in_active and b in table.backup_evs(1)


# ------------------------------------------------------------------------------- floor


def test_ev_min_active_floor_when_a_whole_plane_fails() -> None:
    table = make_table(planes=4, paths_per_plane=8, active_count=32, backup_per_plane=2,
                       ev_min_active=28)
    dead_plane = 1
    now = 0.0
    for _ in range(10_000):
        now += 1e-6
        ev = table.next_ev(now=now)
        assert ev is not None and ev.state is GOOD
        if ev.plane == dead_plane:
            table.on_loss(ev.ev_id, now=now)
        assert table.usable_active_count() >= 28
    assert table.usable_active_count() == 28
    held = [ev for ev in table.active_evs(dead_plane) if ev.suspect]
    assert len(held) == 4 and all(ev.state is GOOD for ev in held)  # in use, flagged
    assert table.floor_holds == sum(ev.floor_holds for ev in held) > 0
    assert all(ev.losses >= ev.floor_holds for ev in held)  # the losses still count
    # a resurrected EV on the dead plane's backup pool lets one held EV go at once
    bad = next(ev for ev in table.evs() if ev.state is BAD and ev.plane == dead_plane)
    table.on_probe_result(bad.ev_id, ok=True, now=now)
    table.on_probe_result(bad.ev_id, ok=True, now=now)
    table.on_probe_result(bad.ev_id, ok=True, now=now)
    assert bad.state is GOOD
    assert sum(ev.suspect for ev in table.active_evs(dead_plane)) == 3
    assert table.transition_counts()[(GOOD, BAD)] >= 1
    assert any(e.reason is EvReason.DEFERRED_DEMOTION for e in table.poll_events())


def test_floor_hold_is_cleared_by_an_ack() -> None:
    table = make_table(planes=1, active_count=2, backup_per_plane=0, ev_min_active=2)
    ev = table.active_evs()[0]
    assert not table.on_loss(ev.ev_id)
    assert ev.state is GOOD and ev.suspect and ev.losses == 1
    table.on_ack(ev.ev_id, 1e-5)
    assert not ev.suspect
    # no deferred demotion any more once a probe-free recovery appears
    table.plane_down(1)
    table.plane_up(1)
    assert ev.state is GOOD


def test_floor_zero_lets_every_ev_go() -> None:
    table = make_table(planes=2, active_count=4, backup_per_plane=0, ev_min_active=0)
    for ev in list(table.active_evs()):
        table.on_loss(ev.ev_id)
    assert table.usable_active_count() == 0 and table.next_ev() is None


# ------------------------------------------------------------------------------- events


def test_event_queue_overflow_reports_drop_count() -> None:
    table = make_table(planes=4, active_count=32, backup_per_plane=0, event_queue_capacity=4)
    victims = table.active_evs()[:10]
    for k, ev in enumerate(victims):
        table.on_loss(ev.ev_id, now=float(k))
    assert table.pending_drop_count == 6 and table.events_dropped == 6
    first = table.poll_events(2)
    assert [e.ev_id for e in first] == [v.ev_id for v in victims[:2]]
    assert all(e.drop_count == 0 for e in first)
    assert len(table.poll_events(10)) == 2
    table.set_denied(table.active_evs()[0].ev_id, True, now=20.0)
    (event,) = table.poll_events(5)
    assert event.drop_count == 6 and event.new_state is DENIED and event.time == 20.0
    assert table.pending_drop_count == 0
    assert table.transition_counts()[(GOOD, BAD)] == 10  # counts include dropped events


def test_event_fields_and_mask() -> None:
    table = make_table(event_mask=frozenset({EvState.ASSUMED_BAD}))
    ev = table.active_evs(3)[0]
    table.on_always_skip(ev.ev_id, now=4.5)
    (event,) = table.poll_events()
    assert event == EvEvent(4.5, ev.ev_id, 3, ev.path, GOOD, BAD, EvReason.ALWAYS_SKIP, 0)
    other = table.active_evs(2)[0]
    table.set_denied(other.ev_id, True)  # GOOD -> DENIED: neither state in the mask
    assert table.poll_events() == []


def test_skip_transitions_reported_on_request() -> None:
    table = make_table(report_skip_transitions=True)
    ev = table.active_evs(1)[0]
    table.on_skip_once(ev.ev_id, now=1.0)
    assert [(e.old_state, e.new_state, e.reason) for e in table.poll_events()] == [
        (GOOD, SKIP, EvReason.SKIP_ONCE)]


def test_unknown_reflected_ev_is_counted_not_raised() -> None:
    table = make_table()
    assert not table.on_ack(123456, 1e-5)
    assert not table.on_loss(123456)
    assert table.unknown_feedback == 2


# ------------------------------------------------------------------------------- planes


def test_plane_down_spreads_load_evenly_and_plane_up_restores() -> None:
    table = make_table(seed=31, planes=4, paths_per_plane=16, active_count=64)
    table.next_ev()
    assert table.plane_down(3, now=1.0)
    assert not table.plane_down(3)
    counts = plane_counts(table, 30_000)
    assert 3 not in counts
    assert_balanced(counts, {1, 2, 4})
    assert table.counts_by_state()[GOOD] == len(table)  # port status is not an EV state change
    assert table.poll_events() == []
    assert table.plane_up(3, now=2.0)
    assert_balanced(plane_counts(table, 40_000), {1, 2, 3, 4})
    with pytest.raises(ValueError, match="unknown plane"):
        table.plane_down(9)


def test_losses_on_a_down_plane_do_not_demote_and_are_not_probed() -> None:
    table = make_table(planes=2, active_count=8)
    ev = table.active_evs(2)[0]
    table.on_loss(ev.ev_id, now=0.0)  # demoted while the plane was up
    victim = table.active_evs(2)[0]
    table.plane_down(2, now=0.1)
    assert not table.on_loss(victim.ev_id, now=0.2)
    assert victim.state is GOOD and victim.losses == 1
    assert table.probes_due(10.0) == []  # no probes out of a dead port
    table.plane_up(2, now=11.0)
    assert table.probes_due(11.0) == [ev]
    strict = make_table(planes=2, active_count=8, ignore_losses_on_down_plane=False)
    target = strict.active_evs(2)[0]
    strict.plane_down(2)
    assert strict.on_loss(target.ev_id) and target.state is BAD


def test_all_planes_down_gives_none() -> None:
    table = make_table(planes=2, active_count=8)
    table.plane_down(1)
    table.plane_down(2)
    assert table.next_ev() is None
    table.plane_up(2)
    assert table.next_ev().plane == 2


def test_counts_by_state_and_config_is_reusable() -> None:
    table = make_table()
    evs = table.active_evs()
    table.on_skip_once(evs[0].ev_id)
    table.on_loss(evs[1].ev_id)
    table.set_denied(evs[2].ev_id, True)
    counts = table.counts_by_state()
    assert counts[SKIP] == 1 and counts[BAD] == 1 and counts[DENIED] == 1
    assert counts[GOOD] == len(table) - 3
    assert replace(table.config, skip_rotations=2).skip_rotations == 2


# ------------------------------------------------------------------------------- speed


def test_next_ev_speed() -> None:
    table = make_table(seed=41, planes=8, paths_per_plane=32, active_count=256)
    n = 200_000
    next_ev = table.next_ev
    start = time.perf_counter()
    for _ in range(n):
        next_ev()
    elapsed = time.perf_counter() - start
    rate = n / elapsed
    print(f"\nEvTable.next_ev: {rate:,.0f} selections/s (256 active EVs, 8 planes)")
    assert rate > 100_000
