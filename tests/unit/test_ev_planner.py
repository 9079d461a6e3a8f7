"""Explicit SRv6 EVs computed by the controller from the fabric plan (no root needed)."""
from __future__ import annotations

import errno
import random
from collections import Counter
from itertools import permutations

import pytest

from testbed.mrc_ctl.ev_planner import (
    CARRIER_FORMAT,
    EvPlannerError,
    EvPlanner,
    PairEvs,
    UnknownHostError,
    varying_bit_fields,
)
from testbed.fabric.topo_spec import parse_topo_spec
from testbed.fabric.usid_plan import FabricPlan
from testbed.mrc_ctl.ev_profiles import (
    DeviceCaps,
    EvEntry,
    EvMode,
    EvState,
    FmtMode,
    ProfileError,
    ProfileState,
    srv6_carrier,
)
from testbed.nic.ev_table import EvTable

FATTREE = 'fattree,k=4,planes=2'
LEAFSPINE = 'leafspine,leaves=4,spines=4,hosts=2,planes=4'


def plan_of(spec: str) -> FabricPlan:
    return FabricPlan.from_topo(parse_topo_spec(spec).build())


@pytest.fixture(scope='module', params=[FATTREE, LEAFSPINE])
def built(request: pytest.FixtureRequest) -> tuple[FabricPlan, EvPlanner]:
    """Every host pair of the topology built once, shared by the read-only tests."""
    plan = plan_of(request.param)
    controller = EvPlanner(plan)
    for src, dst in permutations(plan.hosts, 2):
        controller.explicit_evs(src, dst)
    return plan, controller


@pytest.fixture()
def fattree() -> EvPlanner:
    return EvPlanner(plan_of(FATTREE))


def all_pairs(plan: FabricPlan, controller: EvPlanner) -> list[PairEvs]:
    return [controller.built(s, d) for s, d in permutations(plan.hosts, 2)]


def expand(pair: PairEvs, entry: EvEntry) -> str:
    fmt = pair.fmt_profile.fmt
    assert fmt is not None
    return str(srv6_carrier(entry, fmt, pair.ev_profile.fields).da)


# ------------------------------------------------------------------ expansion is exact


def test_every_ev_expands_to_the_carrier_of_its_slot(built) -> None:
    plan, controller = built
    for pair in all_pairs(plan, controller):
        slots = [(plane, address) for plane, addresses in sorted(pair.paths_by_plane.items())
                 for address in addresses]
        array = pair.ev_profile.ev_array
        assert len(array) == len(slots) == pair.ev_count
        for entry, (plane, address) in zip(array, slots):
            assert entry.port == plane
            assert expand(pair, entry) == address


def test_every_ev_names_a_path_of_the_plan(built) -> None:
    plan, controller = built
    for pair in all_pairs(plan, controller):
        for entry in set(pair.ev_profile.ev_array):
            path = pair.path_for(entry)
            assert path in plan.paths(pair.src, pair.dst, entry.port)
            assert path.carrier == expand(pair, entry)


def test_every_path_of_the_plan_is_in_the_array_when_the_share_allows(built) -> None:
    plan, controller = built
    for pair in all_pairs(plan, controller):
        for plane in pair.paths_by_plane:
            carriers = {p.carrier for p in plan.paths(pair.src, pair.dst, plane)}
            assert len(carriers) <= pair.per_plane  # these fabrics have few paths per plane
            assert set(pair.paths_by_plane[plane]) == carriers


def test_ev_path_ev_round_trip(built) -> None:
    plan, controller = built
    for pair in all_pairs(plan, controller):
        for entry in set(pair.ev_profile.ev_array):
            path = controller.path_of(pair.src, pair.dst, entry)
            assert controller.ev_of(path) == entry
            assert pair.ev_for(path.carrier) == entry


def test_compact_evs_are_small(built) -> None:
    plan, controller = built
    # Fits the 32-bit entropy reflected in SACKs; k=4 cross-pod needs 2 plane + 4 path bits.
    assert max(pair.compact_width for pair in all_pairs(plan, controller)) <= 32
    if len(plan.hosts) == 16:
        assert controller.built('h1', 'h16').compact_width == 6


# ------------------------------------------------------------- balance and the profiles


def test_planes_are_balanced_and_paths_spread_evenly(built) -> None:
    plan, controller = built
    for pair in all_pairs(plan, controller):
        ports = Counter(entry.port for entry in pair.ev_profile.ev_array)
        assert set(ports) == set(plan.planes)
        assert set(ports.values()) == {pair.ev_count // len(plan.planes)}
        for addresses in pair.paths_by_plane.values():
            uses = Counter(addresses).values()
            assert max(uses) - min(uses) <= 1


def test_profiles_are_online_and_sized_sensibly(built) -> None:
    plan, controller = built
    planes = len(plan.planes)
    for pair in all_pairs(plan, controller):
        assert pair.fmt_profile.state is ProfileState.ONLINE
        assert pair.fmt_profile.fmt == CARRIER_FORMAT
        assert CARRIER_FORMAT.mode is FmtMode.SRV6 and CARRIER_FORMAT.total_width == 128
        profile = pair.ev_profile
        assert profile.state is ProfileState.ONLINE
        assert profile.mode is EvMode.EXP
        assert profile.fmt_profile is pair.fmt_profile
        assert profile.ev_count == 128 == pair.per_plane * planes
        assert profile.min_active == pair.per_plane // 2
        assert profile.event_mask == {EvState.GOOD, EvState.ASSUMED_BAD}
        assert set(profile.ev_states) == {EvState.GOOD}


def test_paths_by_plane_matches_the_profile_array(built) -> None:
    plan, controller = built
    fresh = EvPlanner(plan)  # same seed, nothing built: recomputed from the plan
    for pair in all_pairs(plan, controller)[:20]:
        # The profile's EV array, expanded entry by entry, names the same carriers in
        # the same order as the QP's RTR input (a built planner's paths_by_plane is
        # only a copy of pair.paths_by_plane, so it is not compared here).
        assert pair.ev_array_by_plane() == pair.paths_by_plane
        assert fresh.paths_by_plane(pair.src, pair.dst) == pair.paths_by_plane


def test_each_pair_has_its_own_profile_and_shares_the_format(built) -> None:
    plan, controller = built
    pairs = all_pairs(plan, controller)
    assert len({id(pair.ev_profile) for pair in pairs}) == len(pairs)
    assert len({pair.ev_profile.profile_id for pair in pairs}) == len(pairs)
    assert {id(pair.fmt_profile) for pair in pairs} == {id(controller.fmt_profile)}


def test_paths_by_plane_feeds_an_ev_table(fattree: EvPlanner) -> None:
    pair = fattree.explicit_evs('h1', 'h16')
    table = EvTable(pair.paths_by_plane, pair.table_config(), random.Random(1))
    assert pair.ev_array_by_plane() == pair.paths_by_plane     # the profile's own order
    assert table.active_by_plane() == {1: 64, 2: 64}


# ------------------------------------------------------------------- shares and alignment


def test_share_trims_to_a_repeatable_subset(fattree: EvPlanner) -> None:
    plan = fattree.plan
    trimmed = fattree.paths_by_plane('h1', 'h16', per_plane=2)
    again = EvPlanner(plan).paths_by_plane('h1', 'h16', per_plane=2)
    assert trimmed == again
    for plane, addresses in trimmed.items():
        assert len(set(addresses)) == 2
        assert set(addresses) <= {p.carrier for p in plan.paths('h1', 'h16', plane)}


def test_a_trimmed_array_still_expands_exactly(fattree: EvPlanner) -> None:
    pair = fattree.explicit_evs('h1', 'h16', per_plane=3)
    assert pair.ev_count == 6
    slots = [a for plane in sorted(pair.paths_by_plane) for a in pair.paths_by_plane[plane]]
    assert [expand(pair, e) for e in pair.ev_profile.ev_array] == slots
    # Paths left out of the array still have an EV (for a later REPLACE_EV).
    left_out = [p for p in fattree.plan.all_paths('h1', 'h16')
                if p.carrier not in pair.paths_by_plane[p.plane]]
    assert left_out
    for path in left_out:
        assert pair.path_for(pair.ev_for(path)) == path


def test_default_share_rounds_up_to_the_count_alignment() -> None:
    controller = EvPlanner(plan_of(FATTREE), DeviceCaps(ev_count_align=48))
    pair = controller.explicit_evs('h1', 'h16')
    assert pair.per_plane == 72 and pair.ev_count == 144  # 64 per plane -> next multiple of 24


def test_misaligned_share_is_refused_with_the_step_to_use() -> None:
    controller = EvPlanner(plan_of(FATTREE), DeviceCaps(ev_count_align=8))
    with pytest.raises(ProfileError, match='multiple of 4 per plane'):
        controller.paths_by_plane('h1', 'h16', per_plane=6)
    assert controller.explicit_evs('h1', 'h16', per_plane=8).ev_count == 16


def test_share_beyond_the_device_limit_is_e2big() -> None:
    controller = EvPlanner(plan_of(FATTREE), DeviceCaps(ev_max_count_profile=64))
    with pytest.raises(ProfileError, match='ev_max_count_profile') as caught:
        controller.explicit_evs('h1', 'h16', per_plane=64)
    assert caught.value.code == errno.E2BIG


@pytest.mark.parametrize('per_plane', [0, -1, True, 2.5])
def test_share_must_be_a_positive_count(fattree: EvPlanner, per_plane) -> None:
    with pytest.raises(ProfileError, match='positive count'):
        fattree.paths_by_plane('h1', 'h16', per_plane=per_plane)


def test_batched_replace_respects_ev_op_max_entries() -> None:
    controller = EvPlanner(plan_of(FATTREE), DeviceCaps(ev_op_max_entries=16))
    pair = controller.explicit_evs('h1', 'h16')
    assert pair.ev_profile.state is ProfileState.ONLINE
    assert [expand(pair, e) for e in pair.ev_profile.ev_array] == \
        [a for plane in (1, 2) for a in pair.paths_by_plane[plane]]


def test_rebuilding_with_another_share_needs_a_release(fattree: EvPlanner) -> None:
    first = fattree.explicit_evs('h1', 'h3')
    assert fattree.explicit_evs('h1', 'h3') is first
    with pytest.raises(EvPlannerError, match='release it first'):
        fattree.explicit_evs('h1', 'h3', per_plane=4)
    fattree.release('h1', 'h3')
    assert first.ev_profile.state is ProfileState.INIT
    again = fattree.explicit_evs('h1', 'h3', per_plane=4)
    assert again.ev_count == 8
    assert fattree.paths_by_plane('h1', 'h3') == again.paths_by_plane  # the built share


def test_release_is_ebusy_while_a_qp_uses_the_profile(fattree: EvPlanner) -> None:
    pair = fattree.explicit_evs('h1', 'h3')
    pair.ev_profile.attach_qp()
    with pytest.raises(ProfileError) as caught:
        fattree.release('h1', 'h3')
    assert caught.value.code == errno.EBUSY
    assert fattree.built('h1', 'h3') is pair


# ---------------------------------------------------------------------- deny and allow


def test_deny_and_allow_an_ev(fattree: EvPlanner) -> None:
    pair = fattree.explicit_evs('h1', 'h16')
    target = pair.ev_profile.ev_array[0]
    fattree.deny('h1', 'h16', target)
    assert fattree.ev_state('h1', 'h16', target) is EvState.DENIED
    states = dict(zip(pair.ev_profile.ev_array, pair.ev_profile.ev_states))
    copies = [s for e, s in zip(pair.ev_profile.ev_array, pair.ev_profile.ev_states)
              if e == target]
    assert set(copies) == {EvState.DENIED} and len(copies) == 16  # every slot of that path
    assert {s for e, s in states.items() if e != target} == {EvState.GOOD}
    fattree.allow('h1', 'h16', target)
    assert set(pair.ev_profile.ev_states) == {EvState.GOOD}


def test_deny_by_path_or_carrier(fattree: EvPlanner) -> None:
    pair = fattree.explicit_evs('h1', 'h16')
    path = fattree.plan.paths('h1', 'h16', 2)[1]
    result = fattree.deny('h1', 'h16', path)
    assert result.ok and result.results[0].state is EvState.DENIED
    assert pair.state_of(pair.ev_for(path)) is EvState.DENIED
    fattree.allow('h1', 'h16', path.carrier)
    assert pair.state_of(path) is EvState.GOOD


def test_deny_works_while_a_qp_uses_the_profile(fattree: EvPlanner) -> None:
    pair = fattree.explicit_evs('h1', 'h16')
    pair.ev_profile.attach_qp()
    fattree.deny('h1', 'h16', pair.ev_profile.ev_array[0])
    assert EvState.DENIED in pair.ev_profile.ev_states


def test_deny_a_path_trimmed_out_of_the_array_is_enoent(fattree: EvPlanner) -> None:
    pair = fattree.explicit_evs('h1', 'h16', per_plane=2)
    left_out = next(p for p in fattree.plan.paths('h1', 'h16', 1)
                    if p.carrier not in pair.paths_by_plane[1])
    with pytest.raises(ProfileError) as caught:
        fattree.deny('h1', 'h16', left_out)
    assert caught.value.code == errno.ENOENT


def test_deny_needs_a_built_pair(fattree: EvPlanner) -> None:
    with pytest.raises(EvPlannerError, match='no explicit EVs are built for h1->h2'):
        fattree.deny('h1', 'h2', EvEntry(b'\x40', 1))


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize('src,dst', [('h1', 'h99'), ('nobody', 'h2')])
def test_unknown_hosts_are_named(fattree: EvPlanner, src: str, dst: str) -> None:
    bad = dst if src == 'h1' else src
    for call in (fattree.explicit_evs, fattree.paths_by_plane, fattree.built):
        with pytest.raises(UnknownHostError, match=f"unknown host '{bad}' \\(hosts: h1..h16\\)"):
            call(src, dst)


def test_a_host_has_no_path_to_itself(fattree: EvPlanner) -> None:
    with pytest.raises(EvPlannerError, match='itself'):
        fattree.explicit_evs('h4', 'h4')


def test_an_ev_that_expands_to_no_path_is_refused(fattree: EvPlanner) -> None:
    pair = fattree.explicit_evs('h1', 'h16')
    # Bits: plane 01, agg 0, core 00, far agg 1: core 0 reaches pod 3 through agg 0x2006.
    with pytest.raises(EvPlannerError, match='expands to fcbb:bb01:1000:2000:3000:2007:'
                       '1007:8010, which is not a path from h1 to h16'):
        pair.path_for(EvEntry(b'\x44', 1))


def test_an_ev_wider_than_the_pair_profile_is_refused(fattree: EvPlanner) -> None:
    near = fattree.explicit_evs('h1', 'h2')  # same edge: only the 2 plane bits vary
    assert near.compact_width == 2
    with pytest.raises(ProfileError, match='beyond the 2 bits'):
        near.path_for(EvEntry(b'\x7c', 1))


def test_a_path_of_another_pair_has_no_ev_here(fattree: EvPlanner) -> None:
    near = fattree.explicit_evs('h1', 'h2')
    far = fattree.plan.paths('h1', 'h16', 1)[0]
    for target in (far, far.carrier):
        with pytest.raises(EvPlannerError, match='not a path from h1 to h2'):
            near.ev_for(target)


def test_an_ev_on_the_wrong_port_is_refused(fattree: EvPlanner) -> None:
    pair = fattree.explicit_evs('h1', 'h16')
    entry = pair.ev_profile.ev_array[0]
    with pytest.raises(EvPlannerError, match='port 2 but expands to .* plane 1'):
        pair.path_for(EvEntry(entry.val, 2))


def test_planes_without_a_nic_port_are_refused() -> None:
    controller = EvPlanner(plan_of(FATTREE), DeviceCaps(phy_port_mask=0b10))
    with pytest.raises(EvPlannerError, match=r'planes \[2\] have no NIC port'):
        controller.explicit_evs('h1', 'h16')


def test_varying_bit_fields_fix_the_shared_bits() -> None:
    fields = varying_bit_fields(['fcbb:bb01:1000:2000:8001::', 'fcbb:bb02:1000:2001:8001::'])
    assert [(f.init_val, f.mask) for f in fields] == [
        (0xFCBB, 0), (0xBB00, 0x3), (0x1000, 0), (0x2000, 0x1), (0x8001, 0),
        (0, 0), (0, 0), (0, 0)]
    with pytest.raises(EvPlannerError, match='no carrier'):
        varying_bit_fields([])
