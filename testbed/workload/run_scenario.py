"""`mrc-testbed run`: a scenario end to end, with results on disk."""
from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import replace
from pathlib import Path

from testbed import native_core
from testbed.workload import plots
from testbed.fabric.faults.injector import FaultInjector
from testbed.workload.report import markdown, table
from testbed.workload.results import (aggregate, new_results_dir, run_metrics,
                                      step_times, write_events, write_timeline)
from testbed.workload.runner import Progress, TransportRun, TransportRunner, fabric_spec
from testbed.workload.shared_fabric import SharedFabric
from testbed.workload.model import Scenario
from testbed.workload.transports import TRANSPORTS
from testbed.workload.workloads import build_workload

SUMMARY_SCHEMA_VERSION = 1


def run_scenario(scenario: Scenario, results_root: Path,
                 transports: tuple[str, ...] | None = None,
                 quick: bool = False, seed: int | None = None,
                 progress: Progress = print,
                 shared: SharedFabric | None = None) -> tuple[Path, dict]:
    """Each transport on a fresh fabric of its own, or with `shared` one
    after another on that fabric, settled between them (the interactive
    CLI's, the test suite's: testbed.workload.shared_fabric)."""
    sc = scenario.quick_version() if quick else scenario
    if seed is not None:
        sc = replace(sc, seed=seed)
    transports = transports or sc.transports
    if shared is not None:
        shared.check_fits(fabric_spec(sc.topology, sc.link_rate_mbit),
                          sc.convergence_delay_s)
    out = new_results_dir(results_root, sc.name)
    (out / 'scenario.yaml').write_text(sc.source_text or scenario.source_text)
    started = time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())
    rebuilt = shared.rebuilt if shared else 0
    runs = [run_transport(sc, transport, rep, progress, out, shared)
            for rep in range(sc.repetitions) for transport in transports]
    summary = summarise(sc, runs, transports)
    meta = {'started_utc': started, 'quick': quick,
            'machine': '%s, %s, %d cores' % (platform.node(), platform.release(),
                                              os.cpu_count() or 0),
            'endpoint_core': native_core.status(),
            'fabrics': {'per_transport': shared is None,
                        'rebuilt': shared.rebuilt - rebuilt if shared else 0}}
    write_results(out, sc, runs, summary, meta)
    return out, summary


def run_transport(sc: Scenario, transport: str, rep: int, progress: Progress,
                  out: Path, shared: SharedFabric | None) -> TransportRun:
    """One transport's repetition, on a fresh fabric or the shared one."""
    progress('%s: %s, repetition %d/%d' % (sc.name, transport, rep + 1,
                                           sc.repetitions))
    pcaps = out / 'pcap' / ('%s-%d' % (transport, rep + 1)) if sc.capture else None
    runner = TransportRunner(sc, transport, rep, progress, pcaps)
    return runner.execute(
        lambda plan, rng: build_workload(sc.workload, plan.hosts, plan, rng),
        lambda fab, log: FaultInjector(fab, log),
        shared.for_run(runner.run.cc) if shared else None)


def summarise(sc: Scenario, runs: list[TransportRun],
              transports: tuple[str, ...]) -> dict[str, dict]:
    plan = sc.plan()
    candidates = {p.carrier for f in sc_pairs(runs)
                  for p in plan.all_paths(*f)}
    return {t: aggregate([run_metrics(r, candidates, plan.planes, plan,
                                      reach_mbps(sc, t, len(plan.planes)))
                          for r in runs if r.transport == t])
            for t in transports}


def reach_mbps(sc: Scenario, name: str, planes: int) -> float:
    """What one flow of the transport can reach alone: every plane's port
    when it sprays or splits over planes, one path when it is pinned."""
    return sc.link_rate_mbit * (1 if TRANSPORTS[name].pinned else planes)


def sc_pairs(runs: list[TransportRun]) -> set[tuple[str, str]]:
    return {(f.src, f.dst) for run in runs for f in run.flows}


def summary_document(sc: Scenario, summary: dict, meta: dict) -> dict:
    """summary.json: its fields are docs/results.md's, its JSON Schema
    docs/schemas/summary.schema.json (`SUMMARY_SCHEMA_VERSION` is its
    version: one more for a change a reader of the old fields would
    misread, such as a field removed, renamed or given a new meaning)."""
    return {'schema_version': SUMMARY_SCHEMA_VERSION,
            'scenario': sc.name, 'topology': sc.topology,
            'link_rate_mbit': sc.link_rate_mbit, 'seed': sc.seed, **meta,
            'transports': summary}


def write_results(out: Path, sc: Scenario, runs: list[TransportRun],
                  summary: dict, meta: dict) -> None:
    (out / 'summary.json').write_text(json.dumps(
        summary_document(sc, summary, meta), indent=2, default=str))
    write_timeline(out / 'timeline.csv', runs)
    write_events(out / 'events.jsonl', runs)
    title = '%s (%s)' % (sc.name, sc.topology)
    plots.goodput_plot(out / 'goodput.png', runs, title)
    plots.plane_plot(out / 'planes.png', runs)
    paths = sorted({p for run in runs for p in run.path_bytes})
    plots.path_plot(out / 'paths.png', runs, paths)
    plots.cdf_plot(out / 'completion_cdf.png', runs, {
        t: [x for r in runs if r.transport == t for x in
            (step_times(r) or [f.fct for f in r.flows if f.fct is not None])]
        for t in summary})
    plots.comparison_plot(out / 'comparison.png', summary)
    plots.signals_plot(out / 'signals.png', runs)
    pictures = [p.name for p in sorted(out.glob('*.png'))]
    (out / 'report.md').write_text(markdown(sc, summary, pictures, meta))
    (out / 'table.txt').write_text(table(summary) + '\n')
