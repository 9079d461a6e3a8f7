"""What every benchmark section shares: trials on a running fabric, the
emulator-health gate, repetitions and their spread.

A *trial* is one transport running one scenario once, through the same
`TransportRunner` that `mrc-testbed run` uses, on a fabric the section built
once and reuses (faults are undone after every trial). A trial taken while
the emulator was saturated (CPU, lost upcalls) is run again, up to
`MAX_ATTEMPTS` times; one that never ran clean is kept as *rejected* and
reported as such, never as a number.
"""
from __future__ import annotations

import re
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.fabric.faults.injector import FaultInjector
from testbed.workload.runner import BIN_S, TransportRun, TransportRunner, marks_last_hop
from testbed.workload.model import Scenario
from testbed.workload.scenario import parse_scenario
from testbed.workload.workloads import build_workload

MAX_ATTEMPTS = 3
SETTLE_S = 0.5          # queues drain between trials on a reused fabric
# A failover's goodput counts as recovered once back for this long: longer
# than a full window in flight at the sections' 10 Mbit/s (256 PSNs of
# 1,368 bytes, 0.28 s), which a receiver still gets after its sender's
# acknowledgements stopped arriving, before the stall shows.
RECOVERY_HOLD_S = 0.5
Progress = Callable[[str], None]
InjectorFactory = Callable[[Any, Callable, TransportRunner], Any]


@dataclass
class BenchContext:
    """Where a bench run writes, how hard it tries, how it talks."""
    quick: bool
    report_dir: Path             # where BENCHMARKS.md goes
    images: Path                 # plots, linked from the report
    progress: Progress = print
    started: float = field(default_factory=time.monotonic)
    # The quick form cut to one trial of each kind a section reports (the
    # test suite's check that no section rots): a smoke run implies quick.
    smoke: bool = False

    def link(self, image: Path) -> str:
        return str(Path(image).resolve().relative_to(self.report_dir.resolve()))

    @property
    def reps(self) -> int:
        return 1 if self.quick else 3

    def say(self, section: str, message: str) -> None:
        self.progress('[%5.0f s] %-12s %s' % (
            time.monotonic() - self.started, section, message))


@dataclass
class Trial:
    """One transport, one condition, one repetition: what it measured."""
    transport: str
    condition: str
    rep: int
    run: TransportRun
    attempts: int
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def health(self) -> dict:
        return self.run.health

    @property
    def trusted(self) -> bool:
        return bool(self.run.health.get('trusted'))

    @property
    def rejected(self) -> str | None:
        if self.trusted:
            return None
        return '; '.join(self.run.health.get('reasons', [])) or 'untrusted'


def scenario(name: str, topology: str, rate_mbit: float, workload: dict,
             duration_s: float, faults: Sequence[dict] = (),
             seed: int = 1, **keys: Any) -> Scenario:
    """A scenario built in code, validated exactly like a YAML file;
    `keys`: further top-level keys (e.g. hardware)."""
    return parse_scenario({
        'name': name, 'topology': topology, 'link_rate_mbit': rate_mbit,
        'transports': ['mrc'], 'workload': workload, 'faults': list(faults),
        'duration_s': duration_s, 'seed': seed, **keys}, '.',
        source='bench:' + name)


def run_trial(ctx: BenchContext, section: str, fab, sc: Scenario,
              transport: str, condition: str, rep: int,
              injector: InjectorFactory | None = None) -> Trial:
    """Run until the emulator kept up (or MAX_ATTEMPTS; once in a smoke
    run, whose figures are not read: a saturated trial is reported rejected),
    on `fab`."""
    if fab.signals is not None:       # the marks its CC's fabric would have
        fab.signals.mark_last_hop(marks_last_hop(sc.cc_of(transport)))
    for attempt in range(1, (1 if ctx.smoke else MAX_ATTEMPTS) + 1):
        runner = TransportRunner(sc, transport, rep, lambda _m: None)
        make = (lambda f, log: injector(f, log, runner)) if injector else \
            (lambda f, log: FaultInjector(f, log))
        run = runner.execute(
            lambda plan, rng: build_workload(sc.workload, plan.hosts, plan,
                                             rng), make, fab)
        time.sleep(SETTLE_S)
        trial = Trial(transport, condition, rep, run, attempt)
        if trial.trusted or not run.health.get('saturated'):
            return trial
        ctx.say(section, '%s %s rep %d: emulator saturated (%s), again' % (
            transport, condition, rep + 1, trial.rejected))
    return trial


def tx_packets(intf: str) -> int:
    """Packets a root-namespace interface (a switch port) has transmitted."""
    with open('/sys/class/net/%s/statistics/tx_packets' % intf) as f:
        return int(f.read())


def goodput_mbps(run: TransportRun) -> list[float]:
    return [b * 8 / BIN_S / 1e6 for b in run.goodput_bins]


def goodput_kept(goodput: list[float], at: float,
                 end: float | None = None) -> float | None:
    """Mean goodput from 0.5 s after `at` until `end` (default: the last
    bin) over the second before `at`: what a fault left, in one ratio that
    the goodput's own short dips barely move."""
    def mean(a: float, b: float) -> float:
        part = goodput[int(a / BIN_S):int(b / BIN_S)]
        return sum(part) / len(part) if part else 0.0
    before = mean(at - 1, at)
    return mean(at + 0.5, len(goodput) * BIN_S if end is None else end) / \
        before if before else None


def delivered(run: TransportRun, label: str | None = None) -> int:
    return sum(f.delivered for f in run.flows
               if label is None or f.label == label)


def throughput_mbps(run: TransportRun, label: str | None = None) -> float:
    """Payload bits over the time the flows were running (until the last
    one finished, or the trial ended)."""
    flows = [f for f in run.flows if label is None or f.label == label]
    starts = [f.started for f in flows if f.started is not None]
    if not starts:
        return 0.0
    ends = [f.finished if f.finished is not None else run.elapsed_s
            for f in flows]
    span = max(ends) - min(starts)
    return delivered(run, label) * 8 / max(span, 1e-9) / 1e6


# -- repetitions and their spread ------------------------------------------

@dataclass(frozen=True)
class Spread:
    values: tuple[float, ...]

    @property
    def median(self) -> float | None:
        return statistics.median(self.values) if self.values else None

    def text(self, fmt: str = '%.1f', scale: float = 1.0,
             unit: str = '') -> str:
        """`median (min–max)`, or `—` without trusted values."""
        if not self.values:
            return '—'
        lo, hi = min(self.values), max(self.values)
        mid = fmt % (self.median * scale) + unit
        if len(self.values) == 1 or fmt % (lo * scale) == fmt % (hi * scale):
            return mid
        return '%s (%s–%s)' % (mid, fmt % (lo * scale), fmt % (hi * scale))


def spread(trials: Iterable[Trial], key: str) -> Spread:
    """A value over the trusted trials that have it."""
    return Spread(tuple(t.values[key] for t in trials
                        if t.trusted and t.values.get(key) is not None))


def side_by_side(trials: Sequence[Trial], key: str, of: str = 'mrc') -> str:
    """`of` over every other transport, repetition by repetition (the same
    permutation, seed and fault times), as `median (min–max)`."""
    mine = {t.rep: t.values.get(key) for t in trials
            if t.transport == of and t.trusted}
    parts = []
    for base in dict.fromkeys(t.transport for t in trials if t.transport != of):
        pairs = tuple(mine[t.rep] / t.values[key] for t in trials
                      if t.transport == base and t.trusted and
                      mine.get(t.rep) is not None and t.values.get(key))
        if pairs:
            parts.append('%s / %s = %s' % (of.upper(), base.upper(),
                                           Spread(pairs).text('%.2f', unit='×')))
    return ', '.join(parts) or 'no trusted pair'


_NUMBER = re.compile(r'\d+(?:\.\d+)?')    # a figure in a health reason
_FIGURE = '\0'                              # where one was, in a kind of reason


def rejected_note(trials: Sequence[Trial]) -> str:
    """How many trials were rejected and why, each reason once with the
    range of its figures over the trials that gave it (a run that rejected
    half of its trials listed 26 reasons that differed only in a number)."""
    bad = [t for t in trials if not t.trusted]
    if not bad:
        return 'Every trial ran on an emulator that kept up'
    kinds: dict[str, list[list[str]]] = {}
    for trial in bad:
        for reason in trial.health.get('reasons') or ['untrusted']:
            kinds.setdefault(_NUMBER.sub(_FIGURE, reason), []).append(
                _NUMBER.findall(reason))
    by_count = sorted(kinds.items(), key=lambda kind: (-len(kind[1]), kind[0]))
    return '%d of %d trials rejected as saturated (%s)' % (
        len(bad), len(trials), '; '.join(
            'in %d: %s' % (len(figures), _with_ranges(kind, figures))
            for kind, figures in by_count))


def _with_ranges(kind: str, figures: Sequence[Sequence[str]]) -> str:
    """`kind` with each of its figures put back: the one all gave there, or
    the range of them (min-max)."""
    parts = kind.split(_FIGURE)
    out = [parts[0]]
    for i, rest in enumerate(parts[1:]):
        seen = sorted({f[i] for f in figures}, key=float)
        out.append(seen[0] if len(seen) == 1 else '%s–%s' % (seen[0], seen[-1]))
        out.append(rest)
    return ''.join(out)


def retried_note(trials: Sequence[Trial]) -> str:
    again = sum(t.attempts - 1 for t in trials)
    return '' if not again else ' (%d trial%s re-run after a saturated ' \
        'attempt)' % (again, 's' if again > 1 else '')


def md_table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    lines = ['| ' + ' | '.join(header) + ' |',
             '|' + '---|' * len(header)]
    lines += ['| ' + ' | '.join(str(c) for c in row) + ' |' for row in rows]
    return '\n'.join(lines)


@dataclass
class SectionResult:
    """What one section hands the report: markdown and raw data."""
    key: str
    title: str
    markdown: str
    data: dict
    seconds: float = 0.0
    # The code it was measured with (`cli.code_version`: the commit, -dirty
    # with uncommitted changes); None outside a git checkout or for a
    # section kept before this was recorded.
    commit: str | None = None
