"""Workloads: what each scenario's hosts send, as phases of flows.

A `Workload` is a sequence of phases; a phase is a tuple of `Flow`s, and
phase i+1 starts when every flow of phase i has completed. Collectives are
built from that rule: a ring all-reduce is 2(n-1) phases per iteration.
`Workload.steps` says which phases make one measured step (one all-reduce,
one point-to-point message, or the whole workload).

Sizes: ``size_mb`` is in MB of 10^6 bytes, as htsim's matrices count them.
"""
from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import replace

from testbed.fabric.usid_plan import FabricPlan
from testbed.workload.connection_matrix import matrix_to_workload
from testbed.workload.model import Flow, Workload, WorkloadSpec

def build_workload(spec: WorkloadSpec, hosts: Sequence[str],
                   plan_info: FabricPlan | None = None,
                   rng: random.Random | None = None) -> Workload:
    """The flows of `spec` on a fabric whose hosts are `hosts`. `plan_info`
    (the fabric's plan) lets permutations prefer cross-pod partners and
    checks that an incast victim shares the receiver's last hop; `rng`
    (seeded by the caller) picks permutations and fan-in senders."""
    rng = rng or random.Random(1)
    builder = _BUILDERS.get(spec.type)
    if builder is None:
        raise ValueError('unknown workload type %r' % spec.type)
    workload = builder(spec, list(hosts), plan_info, rng)
    _check_hosts(workload, hosts)
    return _numbered(workload)


def _point_to_point(spec, hosts, plan, rng) -> Workload:
    phases = tuple((Flow(0, spec.src, spec.dst, spec.size_bytes,
                         'message %d' % i),) for i in range(spec.count))
    return Workload(spec.type, phases,
                    tuple(range(i, i + 1) for i in range(spec.count)))


def _permutation(spec, hosts, plan, rng) -> Workload:
    members = list(spec.hosts) or hosts
    phase = tuple(Flow(0, src, dst, spec.size_bytes, 'permutation')
                  for src, dst in derangement(members, plan, rng))
    return Workload(spec.type, (phase,), (range(1),))


def _incast(spec, hosts, plan, rng) -> Workload:
    senders = list(spec.senders) or pick_senders(spec, hosts, rng)
    flows = [Flow(0, s, spec.receiver, spec.size_bytes, 'incast')
             for s in senders]
    if spec.victim is not None:
        if plan is not None:
            check_shares_last_hop(plan, spec.receiver, spec.victim.dst)
        flows.append(Flow(0, spec.victim.src, spec.victim.dst,
                          spec.victim.size_bytes, 'victim'))
    return Workload(spec.type, (tuple(flows),), (range(1),))


def pick_senders(spec, hosts: Sequence[str], rng: random.Random) -> list[str]:
    """`fan_in` senders drawn (seeded) from the hosts that are neither the
    receiver nor part of the victim flow, listed in host order."""
    taken = {spec.receiver}
    if spec.victim is not None:
        taken |= {spec.victim.src, spec.victim.dst}
    candidates = [h for h in hosts if h not in taken]
    if spec.fan_in > len(candidates):
        raise ValueError('fan_in %d but only %d hosts can send'
                         % (spec.fan_in, len(candidates)))
    return sorted(rng.sample(candidates, spec.fan_in), key=_host_number)


def _ring_allreduce(spec, hosts, plan, rng) -> Workload:
    """Reduce-scatter then all-gather, n-1 steps each: at step s rank r sends
    chunk (r-s) mod n, then chunk (r+1-s) mod n, to rank r+1."""
    ring = list(spec.hosts) or hosts
    n = len(ring)
    chunks = split_bytes(spec.size_bytes, n)
    phases: list[tuple[Flow, ...]] = []
    for it in range(spec.iterations):
        for stage, offset in (('reduce-scatter', 0), ('all-gather', 1)):
            for s in range(n - 1):
                label = 'iter%d %s %d' % (it, stage, s)
                phases.append(tuple(
                    Flow(0, ring[r], ring[(r + 1) % n],
                         chunks[(r + offset - s) % n], label)
                    for r in range(n)))
    per_step = 2 * (n - 1)
    return Workload(spec.type, tuple(phases), tuple(
        range(i * per_step, (i + 1) * per_step)
        for i in range(spec.iterations)))


def _all_to_all(spec, hosts, plan, rng) -> Workload:
    """Every ordered pair at once; host i sends chunk j of its buffer to j."""
    members = list(spec.hosts) or hosts
    chunks = split_bytes(spec.size_bytes, len(members))
    phase = tuple(Flow(0, src, dst, chunks[j], 'all-to-all')
                  for src in members for j, dst in enumerate(members)
                  if src != dst)
    return Workload(spec.type, (phase,), (range(1),))


def _connection_matrix(spec, hosts, plan, rng) -> Workload:
    return matrix_to_workload(spec.matrix)


_BUILDERS = {
    'point_to_point': _point_to_point,
    'permutation': _permutation,
    'incast': _incast,
    'ring_allreduce': _ring_allreduce,
    'all_to_all': _all_to_all,
    'connection_matrix': _connection_matrix,
}


def split_bytes(total: int, parts: int) -> list[int]:
    """`total` bytes cut into `parts` chunks differing by at most one byte,
    so a collective moves exactly the buffer, not a rounded copy of it."""
    if parts < 1 or total < parts:
        raise ValueError('cannot split %d bytes into %d non-empty chunks'
                         % (total, parts))
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


# -- permutations --------------------------------------------------------------

def derangement(members: Sequence[str], plan: FabricPlan | None,
                rng: random.Random) -> list[tuple[str, str]]:
    """(src, dst) pairs where every member sends to exactly one other member
    and receives from exactly one, preferring partners far apart.

    Members are grouped by locality: first pods (hosts whose edge switches
    are closer than the fabric's widest distance: a fat-tree pod, a
    leaf-spine leaf), then edge switches, then single hosts. The first
    grouping in which no group holds more than half the members is used:
    groups are laid out one after another in a seeded shuffled order
    (members shuffled inside each), and position i sends to position i+shift
    (mod n) for a seeded shift in [m, n-m], m the largest group. No group
    spans more than m consecutive positions, so every partner is in another
    group: all traffic crosses the top of the fabric whenever the topology
    allows it."""
    members = list(members)
    if len(members) < 2 or len(set(members)) != len(members):
        raise ValueError('a permutation needs two or more distinct hosts')
    for groups in locality_groups(members, plan):
        largest = max(len(g) for g in groups)
        if len(groups) >= 2 and 2 * largest <= len(members):
            return _shifted(groups, largest, rng)
    raise AssertionError('single-host groups always qualify')


def _shifted(groups: list[list[str]], largest: int,
             rng: random.Random) -> list[tuple[str, str]]:
    groups = [sorted(g, key=_host_number) for g in groups]
    rng.shuffle(groups)
    for group in groups:
        rng.shuffle(group)
    order = [h for g in groups for h in g]
    n = len(order)
    shift = rng.randint(largest, n - largest)
    pairs = [(order[i], order[(i + shift) % n]) for i in range(n)]
    return sorted(pairs, key=lambda p: _host_number(p[0]))


def locality_groups(members: Sequence[str],
                    plan: FabricPlan | None) -> list[list[list[str]]]:
    """Groupings of `members`, widest first, ending with single hosts."""
    members = sorted(members, key=_host_number)
    levels: list[list[list[str]]] = []
    if plan is not None:
        distance = _attachment_distances(members, plan)
        widths = sorted({d for row in distance.values() for d in row.values()
                         if d > 0}, reverse=True)
        for width in widths:
            levels.append(_components(members, lambda a, b, w=width:
                                      distance[a][b] < w))
    levels.append([[h] for h in members])
    return levels


def _attachment_distances(members: list[str],
                          plan: FabricPlan) -> dict[str, dict[str, int]]:
    """Switch hops between the members' attachment switches on the first
    plane (planes are copies of one another)."""
    plane = plan.planes[0]
    attach = {h: plan.host_ports[(h, plane)].switch for h in members}
    hops = {sw: _bfs(plan, sw) for sw in set(attach.values())}
    return {a: {b: hops[attach[a]][attach[b]] for b in members}
            for a in members}


def _bfs(plan: FabricPlan, start: str) -> dict[str, int]:
    depth = {start: 0}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in plan.neighbours(node):
            if nxt not in depth:
                depth[nxt] = depth[node] + 1
                queue.append(nxt)
    return depth


def _components(members: list[str], near) -> list[list[str]]:
    groups: list[list[str]] = []
    for host in members:
        linked = [g for g in groups if any(near(host, o) for o in g)]
        merged = [host] + [h for g in linked for h in g]
        groups = [g for g in groups if g not in linked] + [merged]
    return [sorted(g, key=_host_number) for g in groups]


# -- checks shared with scenario validation ------------------------------------

def last_hop_switches(plan: FabricPlan, host: str) -> dict[int, str]:
    """plane -> the switch a host's port on that plane hangs off."""
    return {plane: plan.host_ports[(host, plane)].switch
            for plane in plan.planes}


def check_shares_last_hop(plan: FabricPlan, receiver: str,
                          victim_dst: str) -> None:
    ours = last_hop_switches(plan, receiver)
    theirs = last_hop_switches(plan, victim_dst)
    if victim_dst == receiver or ours != theirs:
        sharing = sorted((h for h in plan.hosts if h != receiver and
                          last_hop_switches(plan, h) == ours),
                         key=_host_number)
        raise ValueError(
            '%s hangs off %s, not off the receiver %s\'s last-hop switch %s '
            '(hosts sharing it: %s)' % (
                victim_dst, theirs[plan.planes[0]], receiver,
                ours[plan.planes[0]], ', '.join(sharing) or 'none'))


def _check_hosts(workload: Workload, hosts: Sequence[str]) -> None:
    known = set(hosts)
    for flow in workload.flows:
        for host in (flow.src, flow.dst):
            if host not in known:
                raise ValueError('flow %s -> %s: %s is not a host of this '
                                 'fabric' % (flow.src, flow.dst, host))
        if flow.src == flow.dst:
            raise ValueError('flow from %s to itself' % flow.src)


def _numbered(workload: Workload) -> Workload:
    """Flow ids 1..N in phase order, unless the matrix brought its own."""
    if workload.kind == 'connection_matrix':
        return workload
    ids = iter(range(1, len(workload.flows) + 1))
    return replace(workload, phases=tuple(
        tuple(replace(f, id=next(ids)) for f in phase)
        for phase in workload.phases))


def _host_number(host: str) -> tuple[int, str]:
    digits = host[1:]
    return (int(digits), host) if digits.isdigit() else (1 << 30, host)
