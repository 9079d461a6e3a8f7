"""Workload generation: phases, flows, sizes, partners."""
from __future__ import annotations

import random
from collections import Counter
from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.fabric.topo_spec import parse_topo_spec
from testbed.fabric.usid_plan import FabricPlan
from testbed.workload import workloads
from testbed.workload.model import Victim, WorkloadSpec
from testbed.workload.workloads import (
    Workload, build_workload, derangement, locality_groups, split_bytes)

FATTREE = 'fattree,k=4,planes=2'
LEAFSPINE = 'leafspine,leaves=4,spines=2,hosts=2,planes=2'


@lru_cache(maxsize=None)
def plan_of(spec: str) -> FabricPlan:
    return FabricPlan.from_topo(parse_topo_spec(spec).build())


def pod(host: str) -> str:
    """Fat-tree pod of a host, read from its edge switch name p<p>e<pod>x<i>."""
    return plan_of(FATTREE).host_ports[(host, 1)].switch.split('e')[1][0]


def build(spec: WorkloadSpec, topo: str = FATTREE, seed: int = 1) -> Workload:
    plan = plan_of(topo)
    return build_workload(spec, plan.hosts, plan, random.Random(seed))


def ids_are_sequential(workload: Workload) -> bool:
    return [f.id for f in workload.flows] == list(
        range(1, len(workload.flows) + 1))


# -- permutation -----------------------------------------------------------------

def check_derangement(pairs, members) -> None:
    srcs = [s for s, _ in pairs]
    dsts = [d for _, d in pairs]
    assert sorted(srcs) == sorted(members)
    assert sorted(dsts) == sorted(members)
    assert all(s != d for s, d in pairs)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), size=st.integers(2, 16),
       topo=st.sampled_from([FATTREE, LEAFSPINE, None]))
def test_permutation_is_a_derangement(seed, size, topo):
    plan = plan_of(topo) if topo else None
    hosts = list(plan.hosts if plan else ['h%d' % i for i in range(1, 17)])
    members = random.Random(seed).sample(hosts, min(size, len(hosts)))
    pairs = derangement(members, plan, random.Random(seed))
    check_derangement(pairs, members)


def test_permutation_is_deterministic_per_seed():
    spec = WorkloadSpec('permutation', size_mb=1)
    first = build(spec, seed=7)
    assert build(spec, seed=7) == first
    others = {tuple((f.src, f.dst) for f in build(spec, seed=s).flows)
              for s in range(20)}
    assert len(others) > 1, 'different seeds give different permutations'


def test_permutation_on_a_full_fattree_is_all_cross_pod():
    for seed in range(30):
        workload = build(WorkloadSpec('permutation', size_mb=2), seed=seed)
        flows = workload.flows
        assert len(flows) == 16 and len(workload.phases) == 1
        check_derangement([(f.src, f.dst) for f in flows],
                          plan_of(FATTREE).hosts)
        assert all(pod(f.src) != pod(f.dst) for f in flows)
        assert all(f.size_bytes == 2_000_000 for f in flows)
        assert ids_are_sequential(workload)


def test_permutation_within_one_pod_crosses_edges():
    members = ('h1', 'h2', 'h3', 'h4')
    plan = plan_of(FATTREE)
    for seed in range(10):
        pairs = derangement(members, plan, random.Random(seed))
        check_derangement(pairs, members)
        assert all(plan.host_ports[(s, 1)].switch !=
                   plan.host_ports[(d, 1)].switch for s, d in pairs)


def test_permutation_on_leafspine_crosses_leaves():
    plan = plan_of(LEAFSPINE)
    for seed in range(10):
        pairs = derangement(plan.hosts, plan, random.Random(seed))
        assert all(plan.host_ports[(s, 1)].switch !=
                   plan.host_ports[(d, 1)].switch for s, d in pairs)


def test_permutation_falls_back_when_one_pod_holds_most_hosts():
    members = ('h1', 'h2', 'h3', 'h4', 'h5')     # pod 0 is 4 of 5
    pairs = derangement(members, plan_of(FATTREE), random.Random(3))
    check_derangement(pairs, members)


def test_locality_groups_of_a_fattree():
    levels = locality_groups(plan_of(FATTREE).hosts, plan_of(FATTREE))
    assert [len(level) for level in levels] == [4, 8, 16]
    assert levels[0][0] == ['h1', 'h2', 'h3', 'h4']
    assert levels[1][0] == ['h1', 'h2']


def test_permutation_refuses_fewer_than_two_hosts():
    with pytest.raises(ValueError):
        derangement(['h1'], None, random.Random(1))


# -- ring all-reduce -------------------------------------------------------------

@pytest.mark.parametrize('n,iterations', [(2, 1), (4, 3), (5, 2), (16, 1)])
def test_ring_allreduce_phases_flows_and_sizes(n, iterations):
    hosts = tuple(plan_of(FATTREE).hosts[:n])
    size = 1_000_003                  # not a multiple of n
    workload = build(WorkloadSpec('ring_allreduce', size_mb=size / 1e6,
                                  hosts=hosts, iterations=iterations))
    per_step = 2 * (n - 1)
    assert len(workload.phases) == iterations * per_step
    assert workload.steps == tuple(range(i * per_step, (i + 1) * per_step)
                                   for i in range(iterations))
    for phase in workload.phases:
        assert len(phase) == n
        assert {(f.src, f.dst) for f in phase} == {
            (hosts[r], hosts[(r + 1) % n]) for r in range(n)}
        # every chunk of the buffer moves exactly once per phase
        assert sum(f.size_bytes for f in phase) == size
        assert max(f.size_bytes for f in phase) - \
            min(f.size_bytes for f in phase) <= 1
    assert workload.total_bytes == iterations * per_step * size
    assert ids_are_sequential(workload)


def test_ring_allreduce_reduces_and_gathers_every_chunk(monkeypatch):
    """Replay the flows: after reduce-scatter every chunk is summed on one
    rank, after all-gather every rank holds every fully summed chunk."""
    hosts = ('h1', 'h5', 'h9', 'h13', 'h2')
    n = len(hosts)
    # chunks of distinct sizes, so each flow's size says which chunk it moves
    monkeypatch.setattr(workloads, 'split_bytes',
                        lambda total, parts: [100 * (i + 1)
                                              for i in range(parts)])
    workload = build(WorkloadSpec('ring_allreduce', size_mb=1, hosts=hosts))
    rank = {h: r for r, h in enumerate(hosts)}
    held = {r: {c: frozenset({r}) for c in range(n)} for r in range(n)}
    for k, phase in enumerate(workload.phases):
        gather = k >= n - 1
        sent = [(rank[f.src], rank[f.dst], f.size_bytes // 100 - 1)
                for f in phase]
        snapshot = {r: dict(chunks) for r, chunks in held.items()}
        for src, dst, chunk in sent:
            held[dst][chunk] = snapshot[src][chunk] if gather else \
                snapshot[dst][chunk] | snapshot[src][chunk]
        if k == n - 2:
            summed = [[c for c in range(n) if len(held[r][c]) == n]
                      for r in range(n)]
            assert sorted(c for cs in summed for c in cs) == list(range(n))
    assert all(len(held[r][c]) == n for r in range(n) for c in range(n))
    labels = [phase[0].label for phase in workload.phases]
    assert labels == ['iter0 reduce-scatter %d' % s for s in range(n - 1)] + \
        ['iter0 all-gather %d' % s for s in range(n - 1)]


def test_ring_allreduce_defaults_to_every_host_in_order():
    workload = build(WorkloadSpec('ring_allreduce', size_mb=1.6))
    assert len(workload.phases) == 30
    assert workload.phases[0][0].src == 'h1'
    assert workload.phases[0][-1].dst == 'h1'


# -- incast ----------------------------------------------------------------------

def test_incast_victim_shares_the_receivers_last_hop():
    spec = WorkloadSpec('incast', size_mb=1, receiver='h1', fan_in=7,
                        victim=Victim('h3', 'h2', 2))
    plan = plan_of(FATTREE)
    for seed in range(10):
        workload = build(spec, seed=seed)
        incast = [f for f in workload.flows if f.label == 'incast']
        victim = [f for f in workload.flows if f.label == 'victim']
        assert len(workload.phases) == 1
        assert len(incast) == 7 and len({f.src for f in incast}) == 7
        assert all(f.dst == 'h1' and f.size_bytes == 1_000_000
                   for f in incast)
        assert not {f.src for f in incast} & {'h1', 'h2', 'h3'}
        assert [(f.src, f.dst, f.size_bytes) for f in victim] == [
            ('h3', 'h2', 2_000_000)]
        for p in plan.planes:
            assert plan.host_ports[('h2', p)].switch == \
                plan.host_ports[('h1', p)].switch


def test_incast_senders_are_deterministic_per_seed():
    spec = WorkloadSpec('incast', size_mb=1, receiver='h16', fan_in=5)
    assert build(spec, seed=4) == build(spec, seed=4)


def test_incast_with_explicit_senders():
    spec = WorkloadSpec('incast', size_mb=0.5, receiver='h1',
                        senders=('h5', 'h9', 'h13'))
    flows = build(spec).flows
    assert [(f.src, f.dst) for f in flows] == [('h5', 'h1'), ('h9', 'h1'),
                                               ('h13', 'h1')]


def test_incast_refuses_a_victim_elsewhere():
    spec = WorkloadSpec('incast', size_mb=1, receiver='h1', fan_in=2,
                        victim=Victim('h5', 'h4', 1))
    with pytest.raises(ValueError, match='last-hop switch'):
        build(spec)


# -- all-to-all and point-to-point ------------------------------------------------

@pytest.mark.parametrize('n', [2, 4, 16])
def test_all_to_all_covers_every_ordered_pair_once(n):
    hosts = plan_of(FATTREE).hosts[:n]
    workload = build(WorkloadSpec('all_to_all', size_mb=1.2, hosts=hosts))
    flows = workload.flows
    assert len(workload.phases) == 1
    assert len(flows) == n * (n - 1)
    assert Counter((f.src, f.dst) for f in flows) == Counter(
        (a, b) for a in hosts for b in hosts if a != b)
    sizes = split_bytes(1_200_000, n)
    for i, src in enumerate(hosts):
        sent = sum(f.size_bytes for f in flows if f.src == src)
        assert sent == 1_200_000 - sizes[i]


def test_point_to_point_messages_are_phases_and_steps():
    spec = WorkloadSpec('point_to_point', src='h1', dst='h16', size_mb=2,
                        count=5)
    workload = build(spec)
    assert len(workload) == 5
    assert [len(p) for p in workload] == [1] * 5
    assert workload.steps == tuple(range(i, i + 1) for i in range(5))
    assert all((f.src, f.dst, f.size_bytes) == ('h1', 'h16', 2_000_000)
               for f in workload.flows)
    assert ids_are_sequential(workload)


def test_split_bytes():
    assert split_bytes(10, 3) == [4, 3, 3]
    assert split_bytes(9, 3) == [3, 3, 3]
    with pytest.raises(ValueError):
        split_bytes(2, 3)


def test_flows_name_only_hosts_of_the_fabric():
    spec = WorkloadSpec('point_to_point', src='h1', dst='h99', size_mb=1)
    with pytest.raises(ValueError, match='h99 is not a host'):
        build(spec)


def test_unknown_type_is_refused():
    with pytest.raises(ValueError, match='unknown workload type'):
        build(WorkloadSpec('gossip', size_mb=1))
