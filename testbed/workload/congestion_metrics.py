"""How a run reports congestion: what the switch ports signalled, the
queueing NSCC saw against its target, EVs demoted although nothing on
their path was faulty, and what an incast left its victim.

Everything here reads a finished `TransportRun` (and the fabric's plan for
which paths a fault touched); summary.json and report.md carry the result.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from testbed.fabric.usid_plan import FabricPlan, Path
from testbed.nic.cc.nscc import delay_percentile
from testbed.workload.switch_counters import by_link, by_plane

SIGNAL_KEYS = ('ce_marked', 'trimmed', 'queue_drops')
TOP_LINKS = 5
# Fault events and what they make faulty (parameters as the injector logs
# them: a link's ends a and b, a switch's name, a plane, a host's port).
LINK_FAULTS = ('link_down', 'link_flap', 'gray_failure', 'link_rate')
DEMOTED = 'ASSUMED_BAD'


def signals_summary(run: Any) -> dict | None:
    """Totals, per plane and the busiest links; None on a fabric that does
    not signal."""
    if not run.signals:
        return None
    ports = run.switch_ports
    totals = {k: sum(row.get(k, 0) for row in ports.values())
              for k in SIGNAL_KEYS}
    links = by_link(ports, run.port_links)
    busiest = sorted(links.items(), key=lambda kv: -(kv[1].get('ce_marked', 0)
                                                     + kv[1].get('trimmed', 0)))
    return {**run.signals, **totals,
            'per_plane': {str(p): {k: row.get(k, 0) for k in SIGNAL_KEYS}
                          for p, row in by_plane(ports, run.port_planes).items()},
            'busiest_links': [{'link': name, **{k: row.get(k, 0)
                                                for k in SIGNAL_KEYS}}
                              for name, row in busiest[:TOP_LINKS]
                              if row.get('ce_marked') or row.get('trimmed')]}


def queueing_summary(run: Any) -> dict | None:
    """NSCC's queueing delay, p50 and p99, in ms and in targets."""
    hist, target = run.delay_histogram, run.delay_target_s
    if not hist or not target or not sum(hist):
        return None
    p50, p99 = delay_percentile(hist, 0.5), delay_percentile(hist, 0.99)
    return {'target_ms': round(target * 1e3, 3), 'samples': sum(hist),
            'p50_targets': p50, 'p99_targets': p99,
            'p50_ms': round(p50 * target * 1e3, 3) if p50 != float('inf')
            else None,
            'p99_ms': round(p99 * target * 1e3, 3) if p99 != float('inf')
            else None}


def false_demotions(run: Any, plan: FabricPlan) -> int:
    """EVs demoted to ASSUMED_BAD whose path crosses nothing that a fault of
    this run touched (a link, switch, plane or NIC port, at any time)."""
    faulty = _faulty(run.events)
    paths: dict[tuple[str, str], dict[str, Path]] = {}
    count = 0
    for event in run.events:
        if event.get('event') != 'ev_state' or event.get('new') != DEMOTED:
            continue
        pair = (event['src'], event['dst'])
        if pair not in paths:
            paths[pair] = {p.carrier: p for p in plan.all_paths(*pair)}
        path = paths[pair].get(event['path'])
        if path is not None and not _touches(path, faulty):
            count += 1
    return count


def capacity_left(event: dict, paths: Iterable[Path]) -> float:
    """The share of `paths` a fault event leaves untouched: what a transport
    that sprays over all of them can still carry after it (1.0 for a fault
    that touches none, or an event that is no fault)."""
    paths = list(paths)
    if not paths:
        return 1.0
    faulty = _faulty([event])
    return sum(not _touches(p, faulty) for p in paths) / len(paths)


def victim_summary(run: Any, reach_mbps: float) -> dict | None:
    """An incast's victim flow: its goodput, and that over what it could
    reach alone (`reach_mbps`: every plane's port for MRC, one path
    otherwise)."""
    victims = [f for f in run.flows if f.label == 'victim']
    if not victims:
        return None
    done = [f for f in victims if f.fct]
    if len(done) < len(victims):
        return {'mbps': None, 'of_reach': None, 'completed': False}
    mbps = sum(f.size for f in done) * 8 / sum(f.fct for f in done) / 1e6
    return {'mbps': round(mbps, 3), 'of_reach': round(mbps / reach_mbps, 3)
            if reach_mbps else None, 'completed': True}


def _faulty(events: Iterable[dict]) -> dict[str, set]:
    found: dict[str, set] = {'links': set(), 'switches': set(),
                             'planes': set(), 'ports': set()}
    for e in events:
        kind = e.get('fault')
        if kind in LINK_FAULTS or kind == 'link_flap_down':
            found['links'].add(frozenset((e['a'], e['b'])))
        elif kind == 'switch_down':
            found['switches'].add(e['name'])
        elif kind == 'plane_down':
            found['planes'].add(e['plane'])
        elif kind == 'nic_port_down':
            found['ports'].add((e['host'], e['plane']))
    return found


def _touches(path: Path, faulty: dict[str, set]) -> bool:
    links = path.hops() + [frozenset((path.src, path.switches[0])),
                           frozenset((path.switches[-1], path.dst))]
    return (path.plane in faulty['planes']
            or any(s in faulty['switches'] for s in path.switches)
            or any(link in faulty['links'] for link in links)
            or (path.src, path.plane) in faulty['ports']
            or (path.dst, path.plane) in faulty['ports'])
