"""Section 4, random loss: 0.1% and 1% of the frames dropped at random,
in both directions, on the sender's link of every plane (so every data
packet and every acknowledgement crosses exactly one lossy link), during a
transfer h1 -> h16 on a 2-plane k=4 fat-tree. Throughput as a fraction of
the same transport's loss-free throughput, measured in the same run, on
two timescales side by side: the fabric's own (a few packets in flight)
and the paper's hardware profile (its packets in flight, by the endpoints'
delay stage; testbed/nic/hardware_profile.py), and RC once more under the
profiles of the NICs RoCE is deployed on (one 400G or 800G port, 4 and 8
times the packets in flight).
"""
from __future__ import annotations

from testbed.bench import charts
from testbed.bench.harness import (BenchContext, SectionResult, Trial,
                           md_table, rejected_note, retried_note, run_trial,
                           scenario, side_by_side, spread, throughput_mbps)
from testbed.fabric.net import FabricNet
from testbed.nic.hardware_profile import PAPER_FABRIC, ROCE_FABRICS
from testbed.workload.runner import fabric_spec
from testbed.workload.scenario import sized_for

KEY = 'random_loss'
TOPOLOGY = 'fattree,k=4,planes=2'
RATE_MBIT = 10.0
SRC, DST = 'h1', 'h16'
TRANSPORTS = ('mrc', 'rc', 'tcp')
CAP_S = 20.0                      # 8 in the quick form
LOSSES = (0.0, 0.1, 1.0)          # percent
# (None: the fabric's own timescale, or a hardware profile; its transports).
# RC runs on one 100G port of the MRC NIC and again on the one-port NICs
# RoCE is deployed on, where go-back-N has 4 and 8 times as much in flight
# to resend per loss.
TIMESCALES = ((None, TRANSPORTS), (PAPER_FABRIC.name, ('mrc', 'rc')),
              *((p.name, ('rc',)) for p in ROCE_FABRICS))


def faults(loss_pct: float, plan) -> list[dict]:
    if not loss_pct:
        return []
    return [{'type': 'gray_failure', 'at': 0,
             'link': [SRC, plan.host_ports[(SRC, p)].switch],
             'loss_pct': loss_pct} for p in plan.planes]

# Read after the section's figures in BENCHMARKS.md (analysis: the figures
# are the table's; the hardware profile's numbers are hardware_profile.py's).
LIMITS = '''**What limits these figures (analysis).** MRC acknowledges selectively and resends
only what was lost, on other entropy values; NSCC takes one packet off the
window per loss, so MRC keeps nearly all its throughput on every timescale.
RC resends go-back-N from every lost packet (see *retransmitted*): each loss
costs about the packets in flight, so RC keeps about 1 / (1 + loss x window)
of its throughput, less where a lost NAK or a lost resend leaves it to its
ACK timer. On the fabric's own timescale (an idle RTT of a few ms, a
handful of packets per port) a resent window is small. Under `mrc-8x100g`
an RC QP has one 100G port of the MRC NIC, 40 packets in flight (the
paper's 100G ports with 4 KB packets and a 13 us RTT). Under `roce-400g`
and `roce-800g`, the NICs RoCE is deployed on, it has one 400G or 800G
port: 160 or 320 packets in flight over the same RTT (a lower bound: such
a fabric has more tiers), and at 1% loss it resends more than it delivers,
the mechanism behind the paper's "RoCE unusable at 1%". Kernel TCP (SACK,
CUBIC) has no delay stage, so it runs on the fabric's own small
bandwidth-delay product under every profile (in 4 KB segments), and loses
almost nothing.'''


def run(ctx: BenchContext) -> SectionResult:
    size_mb = 0.5 if ctx.quick else 4.0
    losses = (1.0,) if ctx.smoke else (0.0, 1.0) if ctx.quick else LOSSES
    trials: list[Trial] = []
    for hardware, every in TIMESCALES[:2] if ctx.smoke else TIMESCALES:
        transports = [t for t in every if not ctx.quick or t != 'tcp']
        # A profile's rows run on links of its MTU (4 KB packets), the
        # fabric's own on 1,500 bytes: one fabric each, in the same run.
        spec = fabric_spec(sized_for(TOPOLOGY, hardware), RATE_MBIT)
        with FabricNet(spec) as fab:
            for rep in range(ctx.reps):
                for loss in losses:
                    sc = scenario(
                        'bench-random-loss', TOPOLOGY, RATE_MBIT, {
                            'type': 'point_to_point', 'src': SRC, 'dst': DST,
                            'size_mb': size_mb},
                        duration_s=8 if ctx.quick else CAP_S,
                        faults=faults(loss, fab.plan), seed=200 + rep,
                        hardware=hardware or 'none')
                    trials += [_trial(ctx, fab, sc, t, loss, rep, hardware)
                               for t in transports]
    relative(trials)
    return SectionResult(KEY, 'Random loss', report(ctx, trials, size_mb),
                         {'trials': [{'transport': t.transport, 'rep': t.rep,
                                      'trusted': t.trusted, 'health': t.health,
                                      **t.values} for t in trials]})


def _trial(ctx: BenchContext, fab, sc, transport: str, loss: float,
           rep: int, hardware: str | None) -> Trial:
    timescale = timescale_label(hardware)
    trial = run_trial(ctx, KEY, fab, sc, transport,
                      '%g%%, %s' % (loss, timescale), rep)
    trial.values.update(
        loss_pct=loss, timescale=timescale, mbps=throughput_mbps(trial.run),
        completed=trial.run.flows[0].status == 'done',
        retransmitted_bytes=trial.run.retransmitted_bytes,
        # Kernel TCP has no delay stage: under a profile it runs on the
        # fabric's own RTT, and its row says so.
        profile_applied=bool(trial.run.timescale
                             and trial.run.timescale['applied']))
    ctx.say(KEY, '%g%% loss, %s, %s rep %d: %.1f Mbit/s' % (
        loss, timescale, transport, rep + 1, trial.values['mbps']))
    return trial


def timescale_label(hardware: str | None) -> str:
    return hardware or 'own timescale'


def relative(trials: list[Trial]) -> None:
    """Each lossy trial over the loss-free one of its transport, rep and
    timescale."""
    free = {(t.transport, t.rep, t.values['timescale']): t.values['mbps']
            for t in trials if t.values['loss_pct'] == 0 and t.trusted}
    for t in trials:
        base = free.get((t.transport, t.rep, t.values['timescale']))
        t.values['fraction'] = t.values['mbps'] / base if base else None


def report(ctx: BenchContext, trials: list[Trial], size_mb: float) -> str:
    rows, groups = [], {}
    losses = list(dict.fromkeys(t.values['loss_pct'] for t in trials))
    scales = list(dict.fromkeys(t.values['timescale'] for t in trials))
    for loss in losses:
        for scale in scales:
            label = '%g%% loss\n%s' % (loss, scale.replace(' ', '\n'))
            groups[label] = {}
            at = [t for t in trials if t.values['loss_pct'] == loss
                  and t.values['timescale'] == scale]
            for transport in dict.fromkeys(t.transport for t in at):
                mine = [t for t in at if t.transport == transport]
                groups[label][transport] = spread(mine, 'fraction')
                rows.append([
                    '%g%%' % loss, scale + _not_applied(mine), transport,
                    spread(mine, 'mbps').text('%.1f', unit=' Mbit/s'),
                    spread(mine, 'fraction').text('%.0f', 100, '%'),
                    spread(mine, 'retransmitted_bytes').text(
                        '%.2f', 1e-6, ' MB'),
                    '%d/%d' % (sum(t.values['completed'] for t in mine),
                               len(mine))])
    lossy = [x for x in losses if x]
    image = charts.grouped_bars(
        ctx.images / 'bench_random_loss.png',
        {k: v for k, v in groups.items() if not k.startswith('0% loss')},
        '% of loss-free throughput', 'Random loss on every plane, '
        '%s -> %s' % (SRC, DST), scale=100)
    return '\n\n'.join([
        '```sh\nmrc-testbed bench --sections %s\n```' % KEY,
        'A %g MB transfer %s -> %s on `%s` at %g Mbit/s per link, %d '
        'repetitions; loss applied with a `tc` classifier on %s\'s link to '
        'each plane (both directions) from the start. Throughput: payload '
        'over the time to completion (or the %g s cap). Each loss runs on '
        'the fabric\'s own timescale (1,500-byte MTU) and under the `%s` '
        'hardware profile (%.0f packets in flight per port, on a fabric of '
        'the same links carrying its %d-byte packets, as on the hardware: '
        'docs/timescale.md); RC runs again under %s, the NICs RoCE is '
        'deployed on (one port each). %s%s.' % (
            size_mb, SRC, DST, TOPOLOGY, RATE_MBIT, ctx.reps, SRC,
            8 if ctx.quick else CAP_S, PAPER_FABRIC.name,
            PAPER_FABRIC.bdp_packets, PAPER_FABRIC.mtu, ' and '.join(
                '`%s` (%.0f packets in flight)' % (p.name, p.bdp_packets)
                for p in ROCE_FABRICS), rejected_note(trials),
            retried_note(trials)),
        md_table(['loss', 'timescale', 'transport', 'throughput',
                  'of loss-free', 'retransmitted', 'completed'], rows),
        'Side by side (fraction of loss-free, per repetition): ' + '; '.join(
            '%g%%, %s: %s' % (x, _pair_label(scale), side_by_side(
                _pair(trials, x, scale), 'fraction'))
            for x in lossy for scale in scales) + '.',
        '![random loss](%s)' % ctx.link(image)])


def _pair(trials: list[Trial], loss: float, scale: str) -> list[Trial]:
    """The trials at `loss` to set side by side on `scale`: its own, and
    where it has no MRC row (a RoCE NIC profile) MRC's on the MRC NIC, each
    transport on the NIC it is deployed on."""
    at = [t for t in trials if t.values['loss_pct'] == loss]
    mine = [t for t in at if t.values['timescale'] == scale]
    if any(t.transport == 'mrc' for t in mine):
        return mine
    return mine + [t for t in at if t.transport == 'mrc'
                   and t.values['timescale'] == PAPER_FABRIC.name]


def _pair_label(scale: str) -> str:
    if scale in {p.name for p in ROCE_FABRICS}:
        return '%s (MRC under %s)' % (scale, PAPER_FABRIC.name)
    return scale


def _not_applied(trials: list[Trial]) -> str:
    """A profile row of a transport that could not apply it."""
    profiled = [t for t in trials if t.values['timescale'] != timescale_label(None)]
    if profiled and not any(t.values['profile_applied'] for t in profiled):
        return ' (not applied: no delay stage in the kernel, no netem)'
    return ''
