"""Section 3, random loss: 0.1% and 1% of the frames dropped at random,
in both directions, on the sender's link of every plane (so every data
packet and every acknowledgement crosses exactly one lossy link), during a
transfer h1 -> h16 on a 2-plane k=4 fat-tree. Throughput as a fraction of
the same transport's loss-free throughput, measured in the same run.
"""
from __future__ import annotations

from testbed.bench import charts
from testbed.bench.harness import (BenchContext, SectionResult, Trial,
                           md_table, rejected_note, retried_note, run_trial,
                           scenario, side_by_side, spread, throughput_mbps)
from testbed.fabric.net import FabricNet
from testbed.workload.runner import fabric_spec

KEY = 'random_loss'
TOPOLOGY = 'fattree,k=4,planes=2'
RATE_MBIT = 10.0
SRC, DST = 'h1', 'h16'
TRANSPORTS = ('mrc', 'rc', 'tcp')
CAP_S = 20.0                      # 8 in the quick form
LOSSES = (0.0, 0.1, 1.0)          # percent


def faults(loss_pct: float, plan) -> list[dict]:
    if not loss_pct:
        return []
    return [{'type': 'gray_failure', 'at': 0,
             'link': [SRC, plan.host_ports[(SRC, p)].switch],
             'loss_pct': loss_pct} for p in plan.planes]

# Read after the section's figures in BENCHMARKS.md.
LIMITS = '''**What limits these figures.** MRC acknowledges selectively and resends
only what was lost, on other entropy values; NSCC takes one packet off the
window per loss. With about 25 packets in flight here (10 Mbit/s, a few ms
of RTT) a hole is refilled within an RTT, so MRC keeps most of its
throughput; the paper's "about a third at 1%" is at hardware rates, where
the window is thousands of packets and losses come far more often per RTT.
RC resends go-back-N from every lost packet (see *retransmitted*), which is
what makes RoCE unusable on hardware; with a small window here it costs a
fifth at 1%. Kernel TCP (SACK, CUBIC) on a single 10 Mbit/s path with a tiny
bandwidth-delay product loses almost nothing.'''


def run(ctx: BenchContext) -> SectionResult:
    size_mb = 0.5 if ctx.quick else 4.0
    losses = (0.0, 1.0) if ctx.quick else LOSSES
    transports = ('mrc', 'rc') if ctx.quick else TRANSPORTS
    trials: list[Trial] = []
    with FabricNet(fabric_spec(TOPOLOGY, RATE_MBIT)) as fab:
        for rep in range(ctx.reps):
            for loss in losses:
                sc = scenario('bench-random-loss', TOPOLOGY, RATE_MBIT, {
                    'type': 'point_to_point', 'src': SRC, 'dst': DST,
                    'size_mb': size_mb}, duration_s=8 if ctx.quick else CAP_S,
                    faults=faults(loss, fab.plan), seed=200 + rep)
                for transport in transports:
                    trial = run_trial(ctx, KEY, fab, sc, transport,
                                      '%g%%' % loss, rep)
                    trial.values.update(
                        loss_pct=loss, mbps=throughput_mbps(trial.run),
                        completed=trial.run.flows[0].status == 'done',
                        retransmitted_bytes=trial.run.retransmitted_bytes)
                    trials.append(trial)
                    ctx.say(KEY, '%g%% loss, %s rep %d: %.1f Mbit/s' % (
                        loss, transport, rep + 1, trial.values['mbps']))
    relative(trials)
    return SectionResult(KEY, 'Random loss', report(ctx, trials, size_mb),
                         {'trials': [{'transport': t.transport, 'rep': t.rep,
                                      'trusted': t.trusted, 'health': t.health,
                                      **t.values} for t in trials]})


def relative(trials: list[Trial]) -> None:
    """Each lossy trial over the loss-free one of its transport and rep."""
    free = {(t.transport, t.rep): t.values['mbps'] for t in trials
            if t.values['loss_pct'] == 0 and t.trusted}
    for t in trials:
        base = free.get((t.transport, t.rep))
        t.values['fraction'] = t.values['mbps'] / base if base else None


def report(ctx: BenchContext, trials: list[Trial], size_mb: float) -> str:
    rows, groups = [], {}
    losses = list(dict.fromkeys(t.values['loss_pct'] for t in trials))
    for loss in losses:
        label = '%g%% loss' % loss
        groups[label] = {}
        at = [t for t in trials if t.values['loss_pct'] == loss]
        for transport in dict.fromkeys(t.transport for t in at):
            mine = [t for t in at if t.transport == transport]
            groups[label][transport] = spread(mine, 'fraction')
            rows.append([label, transport,
                         spread(mine, 'mbps').text('%.1f', unit=' Mbit/s'),
                         spread(mine, 'fraction').text('%.0f', 100, '%'),
                         spread(mine, 'retransmitted_bytes').text(
                             '%.2f', 1e-6, ' MB'),
                         '%d/%d' % (sum(t.values['completed'] for t in mine),
                                    len(mine))])
    lossy = [x for x in losses if x]
    image = charts.grouped_bars(
        ctx.images / 'bench_random_loss.png',
        {k: v for k, v in groups.items() if k != '0% loss'},
        '% of loss-free throughput', 'Random loss on every plane, '
        '%s -> %s' % (SRC, DST), scale=100)
    return '\n\n'.join([
        '```sh\nmrc-testbed bench --sections %s\n```' % KEY,
        'A %g MB transfer %s -> %s on `%s` at %g Mbit/s per link, %d '
        'repetitions; loss applied with a `tc` classifier on %s\'s link to '
        'each plane (both directions) from the start. Throughput: payload '
        'over the time to completion (or the %g s cap). %s%s.' % (
            size_mb, SRC, DST, TOPOLOGY, RATE_MBIT, ctx.reps, SRC,
            8 if ctx.quick else CAP_S, rejected_note(trials),
            retried_note(trials)),
        md_table(['loss', 'transport', 'throughput', 'of loss-free',
                  'retransmitted', 'completed'], rows),
        'Side by side (fraction of loss-free, per repetition): ' + '; '.join(
            '%g%%: %s' % (x, side_by_side(
                [t for t in trials if t.values['loss_pct'] == x], 'fraction'))
            for x in lossy) + '.',
        '![random loss](%s)' % ctx.link(image)])

