"""Turn transport runs into the metrics of summary.json, the timeline, the
event log, the report and its plots, in a results directory that is never
overwritten."""
from __future__ import annotations

import csv
import json
import statistics
import time
from pathlib import Path

from testbed.fabric.faults.catalogue import disruptive as is_disruptive
from testbed.fabric.usid_plan import FabricPlan
from testbed.workload.congestion_metrics import (capacity_left, false_demotions,
                                                queueing_summary, signals_summary,
                                                victim_summary)
from testbed.workload.metrics import (RECOVERED_FRACTION, jain_index, percentile,
                                      recovery_time)
from testbed.workload.runner import BIN_S, TransportRun
from testbed.workload.transports import transport as transport_info



def new_results_dir(root: Path, scenario_name: str) -> Path:
    """results/<scenario>/<UTC timestamp>[-n]/, never an existing one."""
    base = root / scenario_name
    stamp = time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())
    for n in range(1000):
        path = base / (stamp if n == 0 else '%s-%d' % (stamp, n))
        try:
            path.mkdir(parents=True)
            return path
        except FileExistsError:
            continue
    raise RuntimeError('no free results directory under %s' % base)


def run_metrics(run: TransportRun, candidate_paths: set[str],
                planes: tuple[int, ...], plan: FabricPlan | None = None,
                reach_mbps: float = 0.0) -> dict:
    """`plan`: the fabric's, to tell false demotions (without it they are
    not counted); `reach_mbps`: what one flow of this transport could reach
    alone, for the incast victim's share."""
    delivered = sum(f.delivered for f in run.flows)
    fcts = [f.fct for f in run.flows if f.status == 'done']
    failed = [f for f in run.flows if f.status == 'failed']
    steps = step_times(run)
    goodput = [b * 8 / BIN_S / 1e6 for b in run.goodput_bins]
    # Recovery is measured after faults that take capacity away, back to
    # 90% of what the fault leaves of the paths (a core switch takes an
    # eighth of a 2-plane k=4 fat-tree's: 90% of the level before it would
    # be more than the fabric can carry).
    disruptive = [e for e in run.events if is_disruptive(e.get('fault', ''))]
    paths = [p for pair in {(f.src, f.dst) for f in run.flows}
             for p in plan.all_paths(*pair)] if plan else []
    tail = _tail_start(run)
    recoveries = []
    for i, event in enumerate(disruptive):
        at = event['t']
        end = disruptive[i + 1]['t'] if i + 1 < len(disruptive) else None
        if tail is not None and tail > at:
            # Once the last phase's flows start finishing, goodput falls for
            # good whatever the fault did: the window ends there.
            end = tail if end is None else min(end, tail)
        died = run.aborted_at is not None and run.aborted_at >= at
        left = capacity_left(event, paths)
        # A job that died after the fault never recovered, whatever its
        # goodput did before it died.
        took = None if died else recovery_time(
            goodput, BIN_S, at, end, RECOVERED_FRACTION * left)
        # How long the load lasted after the fault, in which a recovery could be
        # seen: a null recovery_s in a short window says the load ended first,
        # not that the transport never came back.
        load_end = len(goodput) * BIN_S if end is None else min(end, len(goodput) * BIN_S)
        observed = max(0.0, load_end - at)
        recoveries.append({
            'fault': event['fault'], 'at_s': at, 'capacity_left': round(left, 3),
            'recovery_s': took, **time_figures('recovery', took, run),
            'observed_s': round(observed, 3)})
    plane_totals = [sum(run.plane_bins.get(p, [])) for p in planes]
    # On the routed mode a flow's path is the switches' choice, not a
    # carrier the host names: there is no per-path count to judge.
    path_totals = [run.path_bytes.get(p, 0) for p in sorted(candidate_paths)] \
        if run.fabric_mode != 'routed' else []
    return {
        'congestion_control': run.cc or transport_info(run.transport).default_cc,
        'qps_per_connection': run.qps_per_connection
        if transport_info(run.transport).family == 'endpoint' else None,
        'bytes_delivered': delivered,
        'bytes_corrupted': sum(f.corrupt_bytes for f in run.flows),
        'flows': len(run.flows),
        'flows_done': sum(f.status == 'done' for f in run.flows),
        'flows_failed': len(failed),
        'completed': all(f.status == 'done' for f in run.flows),
        'qp_errors': sorted({f.error or 'failed' for f in failed}),
        'aborted': run.aborted,
        'elapsed_s': round(run.elapsed_s, 3),
        'goodput_mbps': round(delivered * 8 / max(run.elapsed_s, 1e-9) / 1e6, 3),
        'fct_p50_s': _round(percentile(fcts, 50)),
        'fct_p99_s': _round(percentile(fcts, 99)),
        'step_p50_s': _round(percentile(steps, 50)),
        'step_p99_s': _round(percentile(steps, 99)),
        'retransmitted_bytes': run.retransmitted_bytes,
        'recovery': recoveries,
        'jain_planes': _round(jain_index(plane_totals)),
        'jain_paths': _round(jain_index(path_totals)) if run.path_bytes
        and path_totals else None,
        'fabric': run.fabric_mode,
        'convergence_delay_s': run.convergence_delay_s
        if run.fabric_mode == 'routed' else None,
        'routes_moved': routes_moved(run, disruptive)
        if run.fabric_mode == 'routed' else [],
        'health': run.health,
        'signals': signals_summary(run),
        'queueing_delay': queueing_summary(run),
        'false_demotions': false_demotions(run, plan) if plan else None,
        'victim': victim_summary(run, reach_mbps),
        'transport_counters': run.transport_counters,
        'deployed_ack_timer': run.deployed_ack_timer,
        'base_rtt_ms': None if run.base_rtt_s is None
        else round(run.base_rtt_s * 1e3, 2),
        'timescale': run.timescale,
    }


def time_figures(name: str, seconds: float | None, run: TransportRun) -> dict:
    """A duration in the fabric's base RTTs and, where the run applied a
    hardware profile, in the hardware microseconds it stands for."""
    rtt = run.base_rtt_s
    applied = run.timescale and run.timescale['applied']
    return {name + '_rtts': None if seconds is None or not rtt
            else round(seconds / rtt, 1),
            name + '_hardware_us': round(seconds / rtt * run.timescale[
                'hardware_base_rtt_us'], 1)
            if seconds is not None and applied and rtt else None}


def routes_moved(run: TransportRun, faults: list[dict]) -> list[dict]:
    """Per fault, when the controller first rewrote routed groups after it
    (its log of group changes): the time the routed flows could move."""
    changes = sorted(e['t'] for e in run.events
                     if e.get('source') == 'controller'
                     and e.get('event') == 'group_change')
    out = []
    for event in faults:
        first = next((t for t in changes if t >= event['t']), None)
        out.append({'fault': event['fault'], 'at_s': event['t'],
                    'groups_changed_at_s': first,
                    'after_s': None if first is None
                    else round(first - event['t'], 3)})
    return out


def _tail_start(run: TransportRun) -> float | None:
    """When the workload's load starts to fall for good: the first flow of
    its last phase to finish (None before any did)."""
    if not run.flows:
        return None
    last = max(f.phase for f in run.flows)
    ends = [f.finished for f in run.flows if f.phase == last
            and f.finished is not None]
    return min(ends) if ends else None


def step_times(run: TransportRun) -> list[float]:
    """Durations of the workload's measured steps (for a ring all-reduce,
    one full all-reduce = one training step), counting completed ones."""
    times = []
    for phases in run.steps:
        flows = [f for f in run.flows if f.phase in phases]
        if flows and all(f.status == 'done' for f in flows):
            times.append(max(f.finished for f in flows) -
                         min(f.started for f in flows))
    return times


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def aggregate(per_rep: list[dict]) -> dict:
    """Median over repetitions of every number, the rest from the first."""
    out = dict(per_rep[0])
    for key, value in per_rep[0].items():
        values = [r[key] for r in per_rep]
        if isinstance(value, (int, float)) and not isinstance(value, bool) \
                and all(isinstance(v, (int, float)) for v in values):
            out[key] = statistics.median(values)
    out['completed'] = all(r['completed'] for r in per_rep)
    out['bytes_corrupted'] = sum(r['bytes_corrupted'] for r in per_rep)
    out['trusted'] = all(r['health'].get('trusted') for r in per_rep)
    out['repetitions'] = len(per_rep)
    return out


def write_timeline(path: Path, runs: list[TransportRun]) -> None:
    planes = sorted({p for run in runs for p in run.plane_bins})
    with path.open('w', newline='') as f:
        out = csv.writer(f)
        out.writerow(['transport', 'repetition', 't_s', 'goodput_mbps'] +
                     ['plane%d_mbps' % p for p in planes])
        for run in runs:
            for i, b in enumerate(run.goodput_bins):
                row = [run.transport, run.repetition, round((i + 1) * BIN_S, 3),
                       round(b * 8 / BIN_S / 1e6, 3)]
                for p in planes:
                    series = run.plane_bins.get(p, [])
                    value = series[i] if i < len(series) else 0
                    row.append(round(value * 8 / BIN_S / 1e6, 3))
                out.writerow(row)


def write_events(path: Path, runs: list[TransportRun]) -> None:
    with path.open('w') as f:
        for run in runs:
            for event in sorted(run.events, key=lambda e: e.get('t', 0)):
                f.write(json.dumps(dict(event, transport=run.transport,
                                        repetition=run.repetition),
                                   default=str) + '\n')
