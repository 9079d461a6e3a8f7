"""Section 3, failover on the routed fabric: the baselines as RoCE is
deployed. RC and kernel TCP run on flow-hashed ECMP that the controller
repairs a convergence delay after the switches report a dead link
(docs/routed-fabric.md); MRC runs on its static SRv6 routes beside them.

Two questions, one transfer h1 -> h16 as in the failover section:

- *Anywhere*: one link failure drawn uniformly over every switch-to-switch
  link of the fabric (the same link for every transport of a draw), at the
  default convergence delay. How often does it hit what each transport
  uses, and what does a hit cost?
- *Convergence sweep*: a link failure aimed at what the transfer uses, at
  the emulated equivalents of 50 ms, 500 ms and 5 s of hardware
  convergence. An RC QP, its ACK timer standing for NCCL's deployed one
  (testbed/nic/deployed_ack_timer.py), stalls until the repair and
  resumes, each stall one deployed timeout of hardware time; it would error
  only after the deployed budget, minutes here. MRC does not wait for the
  repair at all.

What a transfer "uses" is read from the fabric, never from its hash: the
switch ports' transmit counters since the trial started (a link that
carried a tenth of the busiest link's packets, data or acknowledgements,
carried the transfer). Failed links stay down until the trial ends.
"""
from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from testbed.bench import charts
from testbed.bench.failover import (RATE_MBIT, SIZE_MB, SRC, DST, TOPOLOGY,
                                    rec_text)
from testbed.bench.harness import (BenchContext, RECOVERY_HOLD_S, tx_packets,
                                   SectionResult, Trial, goodput_kept,
                                   goodput_mbps, md_table, rejected_note,
                                   retried_note, run_trial, scenario,
                                   spread)
from testbed.fabric.baseline import REVALIDATE_S
from testbed.fabric.convergence import (DEFAULT_CONVERGENCE_DELAY_S,
                                        HARDWARE_CONVERGENCE_S, emulated_delay)
from testbed.fabric.faults.injector import FaultInjector
from testbed.fabric.net import FabricNet
from testbed.nic.deployed_ack_timer import DEPLOYED_RC
from testbed.nic.emulated_timescale import fabric_qp_profile
from testbed.nic.retry_timer import time_to_error
from testbed.workload.base_rtt import measure_base_rtt
from testbed.workload.metrics import percentile, recovery_time
from testbed.workload.results import routes_moved
from testbed.workload.runner import BIN_S, fabric_spec

KEY = 'routed_failover'
TRANSPORTS = ('rc', 'tcp', 'mrc')    # MRC last: its trial covers the settling
FABRIC = {'mrc': 'srv6', 'rc': 'routed', 'tcp': 'routed'}
SWEEP_TRANSPORTS = ('rc', 'tcp')     # the ones that wait for the repair
SWEEP_HARDWARE_S = (0.05, HARDWARE_CONVERGENCE_S, 5.0)
QUICK_SWEEP_HARDWARE_S = (0.05,)
ANYWHERE_DRAWS = (8, 1)              # (full run, quick run)
AIMED_DRAWS = (3, 1)
USED_FRACTION = 0.1                  # of the busiest link's packets
AT_S = (1.5, 2.5)                    # the failure, drawn in this window
MEASURE_AFTER_S = 1.5                # recovery needs ~1 s of goodput seen
MRC_TRIAL_S = 6.0                    # its bypass takes well under a second
LONGEST_TRIAL_S = 17.0
REBUILD_S = 10.0                     # more than a k=4 2-plane fabric's teardown
                                     # and build (BENCHMARKS.md: ~4 s)
PLACEHOLDER_LINK = ['p1e0x0', 'p1a0x0']   # replaced when the failure happens


def link_key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)


class LinkCounters:
    """Packets sent on both ends of every switch-to-switch link, read from
    the switch ports (root namespace) at call time."""

    def __init__(self, fab: FabricNet) -> None:
        self.intfs = {link_key(l.a, l.b): (fab.net[l.a].intfs[l.a_port].name,
                                           fab.net[l.b].intfs[l.b_port].name)
                      for l in fab.plan.links}

    def read(self) -> dict[tuple[str, str], int]:
        return {k: sum(tx_packets(i) for i in names)
                for k, names in self.intfs.items()}


class CountedLinkFailure:
    """A FaultInjector whose link failure is chosen when it happens: any
    link of the fabric (`aimed` False) or one the transfer used since the
    trial began (`aimed` True), by the switch ports' counters. Records the
    links the transfer used and whether the failure hit one."""

    def __init__(self, inner: FaultInjector, counters: LinkCounters,
                 rng: random.Random, aimed: bool) -> None:
        self.inner, self.counters, self.rng = inner, counters, rng
        self.aimed = aimed
        self.plan = inner.plan
        self.start = counters.read()
        self.used: list[tuple[str, str]] = []
        self.target: tuple[str, str] | None = None

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def apply(self, kind: str, **_placeholder) -> dict | list:
        now = self.counters.read()
        sent = {k: now[k] - self.start[k] for k in now}
        busiest = max(sent.values())
        self.used = sorted(k for k, n in sent.items()
                           if busiest and n >= USED_FRACTION * busiest)
        pool = self.used if self.aimed else sorted(sent)
        self.target = self.rng.choice(pool)
        return self.inner.apply(kind, a=self.target[0], b=self.target[1])

    @property
    def hit(self) -> bool:
        return self.target in self.used


@dataclass(frozen=True)
class Draw:
    """One failure: aimed or anywhere, its time, its seed."""
    aimed: bool
    index: int
    at: float

    @property
    def condition(self) -> str:
        return 'aimed' if self.aimed else 'anywhere'

    def rng(self) -> random.Random:
        # anywhere: the same link for every transport of this draw
        return random.Random('%s/%d' % (self.condition, self.index))


def plan_draws(aimed: bool, count: int) -> list[Draw]:
    rng = random.Random('routed-failover-%s' % aimed)
    return [Draw(aimed, i, round(rng.uniform(*AT_S), 3)) for i in range(count)]


def rc_budget_s(plan) -> float:
    """An RC QP's time from last progress to its QP error on this fabric:
    the deployed budget on the timers' clock (deployed_ack_timer), or its
    verbs retry count at the ACK timeout where it runs its own timer."""
    profile = fabric_qp_profile('rc', RATE_MBIT * 1e6, len(plan.planes),
                                plan.longest_path_links)
    return profile.transport_config.retry_give_up_s or time_to_error(
        profile.timeout_s or profile.transport_config.packet_timeout_s,
        profile.retry)


def trial_s(transport: str, delay: float, budget: float) -> float:
    """Long enough to see the outcome the mechanism gives. RC: the repair
    (delay + OVS revalidation) or its QP error, whichever comes first. TCP:
    its first retransmission after the repair, which its doubling timeout
    puts at most about twice the outage after the failure. Capped: a
    repair beyond the cap is reported as not seen by the end."""
    repair = delay + REVALIDATE_S
    after = {'mrc': MRC_TRIAL_S - AT_S[1],
             'rc': min(repair, budget) + MEASURE_AFTER_S,
             'tcp': 2 * repair + MEASURE_AFTER_S}[transport]
    return min(LONGEST_TRIAL_S, max(MRC_TRIAL_S, AT_S[1] + after))


class RoutedFabric:
    """One fabric at one convergence delay, and when its controller's view
    next agrees with the links again (a restored link is re-added one delay
    after its port-status). A routed trial starts on a settled view: it
    waits for it, or, when that takes longer than building a fabric, gets
    a fresh one."""

    def __init__(self, ctx: BenchContext, delay: float) -> None:
        self.ctx, self.delay = ctx, delay
        self.fab = self._build()
        self.settled_at = 0.0

    def _build(self) -> FabricNet:
        return FabricNet(fabric_spec(TOPOLOGY, RATE_MBIT),
                         convergence_delay_s=self.delay)

    def __enter__(self) -> 'RoutedFabric':
        self.fab.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.fab.__exit__(*exc)

    def _settle(self) -> None:
        wait = self.settled_at - time.monotonic()
        if wait > REBUILD_S:
            self.fab.__exit__(None, None, None)
            self.fab = self._build()
            self.fab.__enter__()
        elif wait > 0:
            time.sleep(wait)

    def trial(self, draw: Draw, transport: str, budget: float) -> Trial:
        if FABRIC[transport] == 'routed':
            self._settle()
        duration = trial_s(transport, self.delay, budget)
        sc = scenario('bench-routed-failover', TOPOLOGY, RATE_MBIT, {
            'type': 'point_to_point', 'src': SRC, 'dst': DST,
            'size_mb': SIZE_MB}, duration_s=duration,
            faults=[{'type': 'link_down', 'at': draw.at,
                     'link': PLACEHOLDER_LINK}],
            seed=7, transports=[transport],
            fabric_modes={transport: FABRIC[transport]})
        made: list[CountedLinkFailure] = []

        def injector(f, log, _runner) -> CountedLinkFailure:
            # a fresh draw.rng(): a re-run attempt draws what the first did
            made.append(CountedLinkFailure(FaultInjector(f, log),
                                           LinkCounters(f), draw.rng(),
                                           draw.aimed))
            return made[-1]
        trial = run_trial(self.ctx, KEY, self.fab, sc, transport,
                          draw.condition, draw.index, injector)
        self.settled_at = time.monotonic() + self.delay + REVALIDATE_S
        measure(trial, draw, made[-1], self.delay, duration)
        return trial


def measure(trial: Trial, draw: Draw, faults: CountedLinkFailure,
            delay: float, duration: float) -> None:
    run = trial.run
    flow = run.flows[0]
    disruptive = [e for e in run.events if e.get('fault') == 'link_down']
    moved = routes_moved(run, disruptive)
    trial.values.update(
        delay_s=delay, at_s=draw.at, horizon_s=duration - draw.at,
        fabric=run.fabric_mode, target=list(faults.target or ()),
        used_links=len(faults.used), hit=faults.hit,
        recovery_s=recovery_time(goodput_mbps(run), BIN_S, draw.at,
                                 hold_s=RECOVERY_HOLD_S),
        kept=goodput_kept(goodput_mbps(run), draw.at),
        qp_error=flow.error if flow.status == 'failed' else None,
        error_after_s=None if flow.finished is None or flow.status != 'failed'
        else flow.finished - draw.at,
        routes_moved_after_s=moved[0]['after_s'] if moved else None,
        retransmitted_bytes=run.retransmitted_bytes,
        ack_timer_stalls=run.transport_counters.get('ack_timer_stalls'),
        delivered_mb=flow.delivered / 1e6)


def run(ctx: BenchContext) -> SectionResult:
    quick = 1 if ctx.quick else 0
    anywhere = [] if ctx.smoke else plan_draws(False, ANYWHERE_DRAWS[quick])
    aimed = plan_draws(True, AIMED_DRAWS[quick])
    hardware = QUICK_SWEEP_HARDWARE_S if ctx.quick else SWEEP_HARDWARE_S
    # the anywhere draws on the default delay's fabric (a quick run: the one)
    first = HARDWARE_CONVERGENCE_S if HARDWARE_CONVERGENCE_S in hardware \
        else hardware[0]
    trials: list[Trial] = []
    rtt = budget = 0.0
    for hw in sorted(hardware, key=lambda h: h != first):
        with RoutedFabric(ctx, emulated_delay(hw)) as routed:
            if not rtt:
                rtt = measure_base_rtt(routed.fab, samples=30, pair=(SRC, DST))
                budget = rc_budget_s(routed.fab.plan)
                ctx.say(KEY, 'base RTT %.1f ms; RC retry budget %.2f s (%.0f '
                        'RTT)' % (rtt * 1e3, budget, budget / rtt))
            todo = [(d, t) for d in aimed for t in SWEEP_TRANSPORTS]
            if hw == first:
                todo = [(d, t) for d in anywhere for t in TRANSPORTS] + todo
            for draw, transport in todo:
                trials.append(routed.trial(draw, transport, budget))
                ctx.say(KEY, 'convergence %.2f s, %s #%d, %s: %s' % (
                    routed.delay, draw.condition, draw.index + 1, transport,
                    outcome_text(trials[-1], rtt)))
    return SectionResult(KEY, 'Failover on the routed fabric',
                         report(ctx, trials, rtt, budget),
                         {'base_rtt_s': rtt, 'rc_retry_budget_s': budget,
                          'trials': [summary(t) for t in trials]})


def outcome_text(t: Trial, rtt: float) -> str:
    v = t.values
    parts = ['%s-%s %s' % (*v['target'], 'hit' if v['hit'] else 'missed')]
    if v['qp_error']:
        parts.append('QP error +%s' % rec_text(v['error_after_s'], rtt))
    else:
        parts.append('recovery %s' % rec_text(v['recovery_s'], rtt))
    return ', '.join(parts) + ('' if t.trusted else ' (NOT TRUSTED)')


def summary(t: Trial) -> dict:
    return {'transport': t.transport, 'condition': t.condition,
            'index': t.rep, 'trusted': t.trusted, 'attempts': t.attempts,
            'health': t.health, **t.values}


def quantiles(trials: Sequence[Trial], rtt: float) -> list[str]:
    """Recovery p50 / max, a QP error or no recovery by the end sorting last."""
    values = [math.inf if t.values['qp_error'] or t.values['recovery_s'] is None
              else t.values['recovery_s'] for t in trials]
    cells = []
    for q in (50, 100):
        v = percentile(values, q)
        cells.append('—' if v is None else 'never' if math.isinf(v)
                     else rec_text(v, rtt))
    return cells


def moved_text(trials: Sequence[Trial], rtt: float) -> str:
    values = [t.values['routes_moved_after_s'] for t in trials
              if t.values['routes_moved_after_s'] is not None]
    return rec_text(statistics.median(values), rtt) if values else \
        'not within the trial'


def anywhere_rows(trials: Sequence[Trial], rtt: float) -> list[list]:
    rows = []
    for transport in TRANSPORTS:
        mine = [t for t in trials if t.transport == transport]
        if not mine:
            continue
        hits = [t for t in mine if t.values['hit']]
        misses = [t for t in mine if not t.values['hit']]
        rows.append([transport, FABRIC[transport], len(mine),
                     '%d (%.0f%%)' % (len(hits), 100 * len(hits) / len(mine)),
                     *quantiles(hits, rtt),
                     sum(t.values['qp_error'] is not None for t in hits),
                     spread(misses, 'kept').text('%.0f', 100, '%'),
                     quantiles(misses, rtt)[1],
                     '%.1f' % statistics.median(t.values['used_links']
                                                for t in mine)])
    return rows


def sweep_rows(trials: Sequence[Trial], rtt: float) -> list[list]:
    rows = []
    hits = [t for t in trials if t.values['hit']]
    for delay in sorted({t.values['delay_s'] for t in hits
                         if t.transport != 'mrc'}):
        label = '%g ms → %s' % (delay / emulated_delay(1) * 1e3,
                                rec_text(delay, rtt))
        for transport in SWEEP_TRANSPORTS:
            mine = [t for t in hits if t.transport == transport
                    and t.values['delay_s'] == delay]
            if mine:
                rows.append(sweep_row(label, transport, mine, rtt))
    mrc = [t for t in hits if t.transport == 'mrc']
    if mrc:
        rows.append(sweep_row('any (SRv6)', 'mrc', mrc, rtt))
    return rows


def sweep_row(label: str, transport: str, mine: Sequence[Trial],
              rtt: float) -> list:
    errors = [t.values['error_after_s'] for t in mine
              if t.values['qp_error'] and t.values['error_after_s'] is not None]
    return [label, transport, len(mine), *quantiles(mine, rtt),
            '%d%s' % (sum(bool(t.values['qp_error']) for t in mine),
                      ' (after %s)' % rec_text(statistics.median(errors), rtt)
                      if errors else ''),
            moved_text(mine, rtt) if transport != 'mrc' else 'not used',
            rec_text(min(t.values['horizon_s'] for t in mine))]


def sweep_chart(path: Path, trials: Sequence[Trial]) -> Path:
    points: dict[str, list[tuple[float, float | None]]] = {}
    for t in trials:
        if not t.values['hit']:
            continue
        rec = None if t.values['qp_error'] else t.values['recovery_s']
        points.setdefault(t.transport, []).append((t.values['delay_s'], rec))
    return charts.outcomes(path, points, 'convergence delay, s (emulated)',
                           'recovery, s', 'Recovery after a failure on the '
                           'transfer\'s path vs. routing convergence')


def report(ctx: BenchContext, trials: list[Trial], rtt: float,
           budget: float) -> str:
    trusted = [t for t in trials if t.trusted]
    anywhere = [t for t in trusted if t.condition == 'anywhere']
    aimed = [t for t in trusted if t.condition == 'aimed']
    # MRC ran in the anywhere draws only: its hits there stand for every delay
    sweep = aimed + [t for t in anywhere if t.transport == 'mrc']
    delay = anywhere[0].values['delay_s'] if anywhere else \
        DEFAULT_CONVERGENCE_DELAY_S
    image = sweep_chart(ctx.images / 'bench_routed_failover.png', sweep)
    return '\n\n'.join([
        '```sh\nmrc-testbed bench --sections %s\n```' % KEY,
        'RC and kernel TCP on the **routed** fabric (flow-hashed ECMP; the '
        'os-ken controller repairs the select groups a convergence delay '
        'after the switches\' OpenFlow port-status, docs/routed-fabric.md); '
        'MRC on its static SRv6 routes. One transfer %s -> %s on `%s` at %g '
        'Mbit/s per link; one link failure at a random time %g–%g s in, '
        'lasting to the end of the trial. Which links a transfer used is read '
        'from the switch ports\' transmit counters since the trial began (a '
        'link with a tenth of the busiest link\'s packets, either direction). '
        'Base RTT **%.1f ms**; an RC QP\'s ACK timer stands for NCCL\'s '
        'deployed one (NCCL_IB_TIMEOUT 20: %.2f s, retry count 7), whose '
        'budget is **%s** on this clock; the run compresses each stall to the '
        'repair plus one packet timeout, and each stands for one deployed '
        'timeout of hardware time, which the recovery figures leave out '
        '(docs/transport.md). %s%s.' % (
            SRC, DST, TOPOLOGY, RATE_MBIT, AT_S[0], AT_S[1], rtt * 1e3,
            DEPLOYED_RC.timeout_s, rec_text(budget, rtt), rejected_note(trials),
            retried_note(trials)),
        '**Anywhere.** The failed link drawn uniformly over every '
        'switch-to-switch link of both planes (the same link for every '
        'transport of a draw), convergence %s (%g ms of hardware convergence '
        'on the emulated timescale). *Hit*: the link carried the transfer. '
        '*Recovery*: until goodput (100 ms average) is back to 90%% of the '
        'second before and stays there for %g s; *never*: a QP error, or not '
        'by the end. *Goodput kept*: mean goodput from 0.5 s after the '
        'failure to the end over the second before.' % (
            rec_text(delay, rtt), delay / emulated_delay(1) * 1e3,
            RECOVERY_HOLD_S),
        md_table(['transport', 'fabric', 'draws', 'hit', 'recovery of hits '
                  'p50', 'max', 'QP errors', 'misses: goodput kept',
                  'misses: recovery max (the metric\'s noise)',
                  'links used (median)'], anywhere_rows(anywhere, rtt)),
        '**Convergence sweep.** The failed link drawn among those the '
        'transfer used, per convergence delay (hardware → emulated, scaled '
        'like the ACK timer, `testbed/fabric/convergence.py`). MRC does not '
        'wait for the routing repair, so its row is its hits of the anywhere '
        'draws, which stand for every delay. *Routes moved*: when the '
        'controller rewrote the groups, after the failure. *Seen for*: how '
        'long the trial ran after the failure (a repair after that is not '
        'seen).',
        md_table(['convergence', 'transport', 'n', 'recovery p50', 'max',
                  'QP errors', 'routes moved after', 'seen for'],
                 sweep_rows(sweep, rtt)),
        '![routed failover](%s)' % ctx.link(image),
        LIMITS % rec_text(budget)])


LIMITS = '''**What limits these figures (analysis).** An RC QP resends
go-back-N at its ACK timeout and gives up only after the deployed budget (%s
from its last progress): it resumes once the controller's repair, plus OVS
revalidating its datapath flows (up to 0.5 s), is in place, and in hardware
that resumption waits for its 4.3 s timeout, far past any repair here. TCP's
retransmission timeout doubles while the link is dead, so it resumes at its
first retransmission after the repair, up to about twice the outage after
the failure. MRC sprays over every path, so more draws hit it, and it steers
around each hit by itself in under a second whatever the routing does. A
transfer whose links all stayed up loses nothing to the failure (the misses'
goodput kept); a recovery figure for it shows only the metric's own noise:
goodput that falls below 90%% of the second before for other reasons (a
start-up ramp still in that second, TCP's sawtooth, DCQCN's rate steps,
the controller moving routed flows between buckets when it rewrites a
group) and does not then
stay above it for the whole hold. Read the hits' figures against that
floor.'''
