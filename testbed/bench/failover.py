"""Section 2, failover: a long transfer h1 -> h16 across the core of a
2-plane k=4 fat-tree; during it, at a random time, one failure on a path
the transfer is using. How long until its goodput is back, and how many
bytes were sent twice: MRC vs RC vs kernel TCP, on the fabric's own
timescale, and MRC and RC again under the paper's hardware profile (its
packets in flight and 4 KB packets, every timer in its base RTTs;
testbed/nic/hardware_profile.py), where recovery in base RTTs compares
with the hardware's.

The failed element is drawn when the failure happens, from what that
transport's transfer runs on: any link of any of MRC's paths (it sprays
over all of them), the one path an RC QP or a TCP connection is pinned to.
A failure that misses a single-path transfer measures nothing, so none is
drawn that way. Links and core switches come back after `OUTAGE_S` (a
flap, a reboot); a lost NIC port stays lost.
"""
from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass

from testbed.bench import charts
from testbed.bench.harness import (BenchContext, RECOVERY_HOLD_S, SectionResult,
                           Trial, goodput_kept, goodput_mbps, md_table, rejected_note, retried_note, run_trial,
                           scenario, spread)
from testbed.fabric.net import FabricNet
from testbed.nic.emulated_timescale import fabric_time
from testbed.nic.hardware_profile import HARDWARE_PROFILES, PAPER_FABRIC
from testbed.workload.base_rtt import measure_base_rtt
from testbed.fabric.faults.catalogue import FAULT_KINDS
from testbed.fabric.faults.injector import FaultInjector
from testbed.workload.metrics import RECOVERED_FRACTION, percentile, recovery_time
from testbed.workload.runner import BIN_S, fabric_spec
from testbed.workload.scenario import sized_for

KEY = 'failover'
TOPOLOGY = 'fattree,k=4,planes=2'
RATE_MBIT = 10.0
SRC, DST = 'h1', 'h16'
TRANSPORTS = ('mrc', 'rc', 'tcp')
OWN = 'own timescale'
# (hardware profile or None for the fabric's own timescale, its transports).
# Kernel TCP has no delay stage, so under a profile it would only repeat its
# own-timescale rows in larger segments.
TIMESCALES = ((None, TRANSPORTS), (PAPER_FABRIC.name, ('mrc', 'rc')))
OUTAGE_S = 2.0
TRIAL_S = 8.0
SIZE_MB = 25                 # more than any transport moves in TRIAL_S
# (kind, its undo or None, how many in a full run, in a quick one)
FAILURES = (('link_down', 'link_up', 20, 2),
            ('switch_down', 'switch_up', 2, 0),
            ('nic_port_down', None, 2, 1))
NAMES = {'link_down': 'link failure', 'switch_down': 'core switch reboot',
         'nic_port_down': 'NIC port loss'}
# Any valid target: the scenario parser wants one; PathTargetedFaults
# replaces it with one on the transfer's own paths.
PLACEHOLDER = {'link_down': {'link': ['p1e0x0', 'p1a0x0']},
               'switch_down': {'switch': 'p1c0'},
               'nic_port_down': {'host': SRC, 'plane': 1}}


class PathTargetedFaults:
    """A FaultInjector whose failures hit what the transfer is using, drawn
    when they happen; their undo restores the same element."""

    def __init__(self, inner: FaultInjector, runner, rng: random.Random) -> None:
        self.inner, self.runner, self.rng = inner, runner, rng
        self.plan = inner.plan
        self.target: dict = {}

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def apply(self, kind: str, **_placeholder) -> dict | list:
        if FAULT_KINDS[kind].undoes:      # restores what it took down
            return self.inner.apply(kind, **self.target)
        paths = self.used_paths()
        if kind == 'link_down':
            links = sorted({tuple(sorted(h)) for p in paths for h in p.hops()})
            a, b = self.rng.choice(links)
            self.target = {'a': a, 'b': b}
        elif kind == 'switch_down':
            cores = sorted({s for p in paths for s in p.switches
                            if self.plan.switches[s].tier == 'core'})
            self.target = {'name': self.rng.choice(cores)}
        else:
            self.target = {'host': SRC, 'plane': self.rng.choice(
                sorted({p.plane for p in paths}))}
        return self.inner.apply(kind, **self.target)

    def used_paths(self):
        start = next(e for e in self.runner.run.events
                     if e.get('event') == 'flow_start')
        every = self.plan.all_paths(SRC, DST)
        pinned = start.get('pinned_path')
        if pinned:
            return [p for p in every if p.carrier == pinned['path']]
        carriers = set((start.get('paths') or {}).values())
        return [p for p in every if p.carrier in carriers] if carriers \
            else every


@dataclass(frozen=True)
class Failure:
    kind: str
    undo: str | None
    index: int
    at: float

    @property
    def faults(self) -> list[dict]:
        out = [dict(type=self.kind, at=self.at, **PLACEHOLDER[self.kind])]
        if self.undo:
            out.append(dict(type=self.undo, at=self.at + OUTAGE_S,
                            **{k: v for k, v in PLACEHOLDER[self.kind].items()}))
        return out

    @property
    def capacity_left(self) -> float:
        """Of the transfer's NIC capacity, once it has moved away."""
        return 0.5 if self.kind == 'nic_port_down' else 1.0

# Read after the section's figures in BENCHMARKS.md (analysis: the figures
# are the table's, the reasoning and the timers it names are the code's, not
# measured by the run).
LIMITS = '''**What limits these figures (analysis).** MRC recovers when every entropy
value crossing the failed element is out of the rotation (the bypass
column) and NSCC has regrown the window. A dead entropy value is found from
the SACKs: a hole with a bandwidth-delay product of later PSNs
acknowledged (the reordering guard) is resent at once on another entropy
value, and two such losses on one entropy value demote it; its per-packet
timer (11 base RTTs), if it comes first, demotes every entropy value on
that path at once; a
retransmission that lands on a second dead entropy value before that one
is demoted is found the same way, by the packets sent after it. On the
fabric's own timescale the timers do not go below those of the tuned
fabric (18 ms of RTT), so in units of the idle RTT measured here they are
long. Under the hardware profile every timer is the same multiple of its
base RTT, and the recovery column in base RTTs is the one to set beside the
paper's "a few tens of microseconds" (a base RTT there stands for
13.1 us): the failure's losses are repaired from the SACKs within a few
RTTs. The outage, too, is a fixed 2 s: 15 base RTTs under the profile, so
RC's retry budget (8 ACK timeouts of 11 base RTTs) outlasts it there, where
on the own timescale it does not. RC has one path and no steering: it waits for the link (%g s) and then for
its retry timer, and resends go-back-N from the oldest unacknowledged
packet; TCP waits for the link and then for its doubling retransmission
timeout, about 1.5 s more. A lost NIC port kills the RC QP (retry counter
exceeded) and stalls TCP for good; MRC hears the port event (netlink, the
bypass column) and moves to the other plane in the same loop turn, keeping
half, the capacity left; the receiver learns of it from the sender's Port
Status Update (one one-way delay later) and stops acknowledging over that
plane.''' % OUTAGE_S


def run(ctx: BenchContext) -> SectionResult:
    failures = plan_failures(ctx)
    trials: list[Trial] = []
    rtts: dict[str, float] = {}
    for hardware, transports in TIMESCALES:
        label = hardware or OWN
        with FabricNet(fabric_spec(sized_for(TOPOLOGY, hardware),
                                   RATE_MBIT)) as fab:
            rtt = fabric_rtt(ctx, fab, hardware)
            rtts[label] = rtt
            for n, failure in enumerate(failures, 1):
                for transport in transports:
                    trials.append(one(ctx, fab, failure, transport, rtt,
                                      hardware))
                    t = trials[-1]
                    ctx.say(KEY, '%s, %d/%d %s, %s on %s: %s' % (
                        label, n, len(failures), NAMES[failure.kind],
                        transport, target_text(t),
                        rec_text(t.values['recovery_s'], rtt)))
    return SectionResult(KEY, 'Failover', report(ctx, trials, rtts),
                         {'base_rtt_s': rtts, 'trials': [summary(t) for t in trials]})


def fabric_rtt(ctx: BenchContext, fab, hardware: str | None) -> float:
    """The unit of every RTT figure: the idle fabric's measured base RTT,
    or under a profile the base RTT its delay stage makes of it (which the
    runner then uses too: it measures no second time)."""
    measured = measure_base_rtt(fab, samples=30, pair=(SRC, DST))
    ctx.say(KEY, 'base RTT h1 -> h16 (one-packet MRC write, idle, %d-byte '
            'MTU): %.1f ms' % (fab.mtu, measured * 1e3))
    if hardware is None:
        return measured
    fab.measured_base_rtt_s = measured
    timescale = fabric_time(HARDWARE_PROFILES[hardware], fab.link_rate_bps,
                            measured, fab.mtu)
    ctx.say(KEY, '%s: base RTT %.1f ms with the delay stage'
            % (hardware, timescale.base_rtt_s * 1e3))
    return timescale.base_rtt_s


def plan_failures(ctx: BenchContext) -> list[Failure]:
    rng = random.Random('failover-times')
    out = []
    for kind, undo, full, quick in FAILURES:
        for i in range(quick if ctx.quick else full):
            out.append(Failure(kind, undo, i, round(rng.uniform(1.5, 2.5), 3)))
    return out[:1] if ctx.smoke else out


def one(ctx: BenchContext, fab, failure: Failure, transport: str,
        rtt: float, hardware: str | None) -> Trial:
    # Every transport on the SRv6 fabric: a failure is aimed at the path a
    # flow is pinned to (the routed fabric, with RoCE's reconvergence, is
    # the routed_failover section's).
    sc = scenario('bench-failover', TOPOLOGY, RATE_MBIT, {
        'type': 'point_to_point', 'src': SRC, 'dst': DST, 'size_mb': SIZE_MB},
        duration_s=TRIAL_S if not ctx.quick else 5.0, faults=failure.faults,
        seed=7, transports=[transport], fabric_modes={transport: 'srv6'},
        hardware=hardware or 'none')
    # the same draw for every transport of this failure: its own paths
    rng = random.Random('%s/%d' % (failure.kind, failure.index))
    label = hardware or OWN
    trial = run_trial(ctx, KEY, fab, sc, transport, '%s, %s' % (
        NAMES[failure.kind], label), failure.index,
        lambda f, log, runner: PathTargetedFaults(
            FaultInjector(f, log), runner, random.Random(rng.random())))
    measure(trial, failure, rtt, fab.plan)
    trial.values['timescale'] = label
    return trial


def measure(trial: Trial, failure: Failure, rtt: float, plan) -> None:
    run = trial.run
    rec = recovery_time(goodput_mbps(run), BIN_S, failure.at, None,
                        RECOVERED_FRACTION * failure.capacity_left,
                        RECOVERY_HOLD_S)
    flow = run.flows[0]
    target = next(({k: e[k] for k in ('a', 'b', 'name', 'host', 'plane')
                    if k in e} for e in run.events
                   if e.get('fault') == failure.kind), None)
    trial.values.update(
        kind=failure.kind, at_s=failure.at, target=target,
        recovery_s=rec, recovery_rtts=None if rec is None else rec / rtt,
        kept=kept(goodput_mbps(run), failure),
        bypass_s=bypass(run, failure, target, plan),
        retransmitted_bytes=run.retransmitted_bytes,
        qp_error=flow.error if flow.status == 'failed' else None,
        delivered_mb=flow.delivered / 1e6)


def kept(goodput: list[float], failure: Failure) -> float | None:
    """Goodput while the failure lasts (after its first 0.5 s) over the
    second before it."""
    return goodput_kept(goodput, failure.at, failure.at + OUTAGE_S
                        if failure.undo else None)


def bypass(run, failure: Failure, target: dict | None, plan) -> float | None:
    """MRC only: from the failure until the last EV whose path crosses the
    failed element was taken out of the rotation (ASSUMED_BAD), while the
    failure lasted: the emulated counterpart of the paper's bypass time. A
    lost NIC port takes its whole plane out at once, when the sender hears
    the port event: until then."""
    if not target:
        return None
    if 'host' in target:     # a pinned RC QP hears the port too, and stays
        return port_bypass(run, failure, target) if run.transport == 'mrc' \
            else None
    def hit(path) -> bool:
        if 'a' in target:
            return frozenset((target['a'], target['b'])) in path.hops()
        if 'name' in target:
            return target['name'] in path.switches
        return path.plane == target['plane']
    dead = {p.carrier for p in plan.all_paths(SRC, DST) if hit(p)}
    end = failure.at + OUTAGE_S if failure.undo else math.inf
    times = [e['t'] for e in run.events if e.get('event') == 'ev_state'
             and e['path'] in dead and e['new'] == 'ASSUMED_BAD'
             and failure.at <= e['t'] < end]
    return max(times) - failure.at if times else None


def port_bypass(run, failure: Failure, target: dict) -> float | None:
    heard = [e['t'] for e in run.events if e.get('event') == 'nic_port'
             and e['host'] == target['host'] and e['plane'] == target['plane']
             and e['state'] == 'down' and e['t'] >= failure.at]
    return min(heard) - failure.at if heard else None


def summary(t: Trial) -> dict:
    return {'transport': t.transport, 'failure': t.condition,
            'index': t.rep, 'trusted': t.trusted, 'attempts': t.attempts,
            'health': t.health, **t.values}


def target_text(t: Trial) -> str:
    target = t.values.get('target') or {}
    if 'a' in target:
        return '%s-%s' % (target['a'], target['b'])
    if 'name' in target:
        return target['name']
    return '%s plane %s' % (target.get('host'), target.get('plane'))


def rec_text(value: float | None, rtt: float | None = None) -> str:
    if value is None:
        return 'never'
    if rtt:
        return '%.0f ms (%.0f RTT)' % (value * 1e3, value / rtt)
    return '%.0f ms' % (value * 1e3)


def row(label: str, kind: str, transport: str, mine: list[Trial],
        rtt: float) -> list:
    never = sum(t.values['recovery_s'] is None for t in mine)
    rtx = [t.values['retransmitted_bytes'] for t in mine]
    errors = sum(t.values['qp_error'] is not None for t in mine)
    return ([NAMES[kind], label, transport, len(mine)] +
            distribution(mine, rtt) +
            ['%d' % never, spread(mine, 'kept').text('%.0f', 100, '%'),
             bypass_text(mine, rtt),
             '%.2f MB' % (statistics.median(rtx) / 1e6),
             '%.2f MB' % (max(rtx) / 1e6), errors])


def distribution(trials: list[Trial], rtt: float) -> list[str]:
    """never counts as infinitely long: it sorts last."""
    values = [t.values['recovery_s'] for t in trials]
    finite = [math.inf if v is None else v for v in values]
    cells = []
    for q in (50, 99, 100):
        v = percentile(finite, q)
        cells.append('never' if v is None or math.isinf(v) else
                     rec_text(v, rtt))
    return cells


def bypass_text(trials: list[Trial], rtt: float) -> str:
    values = [t.values['bypass_s'] for t in trials
              if t.values.get('bypass_s') is not None]
    if not values:
        return '—'
    return '%s / %s' % (rec_text(statistics.median(values), rtt),
                        rec_text(max(values), rtt))


def report(ctx: BenchContext, trials: list[Trial], rtts: dict[str, float]) -> str:
    trusted = [t for t in trials if t.trusted]
    rows, curves = [], {}
    for label, rtt in rtts.items():
        for kind in dict.fromkeys(t.values['kind'] for t in trials):
            for transport in TRANSPORTS:
                mine = [t for t in trusted if t.values['kind'] == kind
                        and t.transport == transport
                        and t.values['timescale'] == label]
                if not mine:
                    continue
                rows.append(row(label, kind, transport, mine, rtt))
                if kind == 'link_down':
                    curves['%s, %s' % (transport, label)] = [
                        999.0 if t.values['recovery_s'] is None
                        else t.values['recovery_s'] / rtt for t in mine]
    image = charts.cdfs(ctx.images / 'bench_failover.png', curves,
                        'recovery time, base RTTs (never = 999)', 'Recovery '
                        'after a link failure on the transfer\'s path(s)',
                        log=True)
    return '\n\n'.join([
        '```sh\nmrc-testbed bench --sections %s\n```' % KEY,
        'Every transport here runs on the static SRv6 fabric, which never '
        'reroutes: RC and TCP stay pinned to their one path (the worst case '
        'for a single-path transport; the next section runs them on the '
        'routed fabric, as RoCE is deployed). '
        'One transfer %s -> %s (%g MB, more than any transport finishes in '
        'the %g s trial) on `%s` at %g Mbit/s per link; the failure at a '
        'random time 1.5–2.5 s in (drawn once per failure, the same for '
        'every transport), aimed at what that transport\'s transfer runs '
        'on: a link or core switch of any of MRC\'s sprayed paths, or of the '
        'one path an RC QP or a TCP connection is pinned to, or a NIC port '
        'of the sender on a plane it uses (a failure that misses a single-path '
        'transfer would measure nothing). Each transport so loses an '
        'element it uses, not the same element. Links and core switches '
        'come back after %g s; a '
        'NIC port stays lost. Base RTT on the fabric\'s own timescale: '
        '**%.1f ms** (median post-to-completion of a 1 KB MRC write on the '
        'idle fabric). MRC and RC run the same failures again under the `%s` '
        'hardware profile, on the same links carrying its %d-byte packets, '
        'its %.0f packets in flight per port made up by the endpoints\' delay '
        'stage: base RTT **%.1f ms**, every endpoint timer in those RTTs '
        '(docs/timescale.md); there a base RTT stands for the hardware\'s '
        '%.1f us. %s%s.' % (
            SRC, DST, SIZE_MB, TRIAL_S, TOPOLOGY, RATE_MBIT, OUTAGE_S,
            rtts[OWN] * 1e3, PAPER_FABRIC.name, PAPER_FABRIC.mtu,
            PAPER_FABRIC.bdp_packets, rtts.get(PAPER_FABRIC.name, 0) * 1e3,
            PAPER_FABRIC.base_rtt_s * 1e6, rejected_note(trials),
            retried_note(trials)),
        '*Recovery*: from the failure until goodput (10 ms bins, 100 ms '
        'moving average) is back to 90%% of its level in the second before, '
        'and stays there for %g s (longer than a window in flight, which '
        'still arrives after acknowledgements stop; after a NIC port loss: '
        '90%% of the half that is left); *never*: '
        'not by the end of the trial; 0 ms: goodput never fell below that '
        'level (the 100 ms average puts a floor of a few tens of ms under '
        'any dip that is seen at all). *Goodput kept*: mean goodput from '
        '0.5 s after the failure until it ends, over the second before. '
        '*MRC bypass*: from the failure until the last entropy value whose '
        'path crosses the failed element was taken out of the rotation '
        '(ASSUMED_BAD), the counterpart of the paper\'s bypass time; after '
        'a NIC port loss, until the sender heard the port event, which takes '
        'the whole plane out at once.' % RECOVERY_HOLD_S,
        md_table(['failure', 'timescale', 'transport', 'n', 'recovery p50',
                  'p99', 'max',
                  'never', 'goodput kept during the failure', 'MRC bypass '
                  'p50 / max', 'retransmitted (median)', 'retransmitted (max)',
                  'QP/conn. errors'], rows),
        '![failover](%s)' % ctx.link(image)])
