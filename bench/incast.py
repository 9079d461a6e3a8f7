"""Section 4, incast: seven senders write to h1 at once while a victim
flow h3 -> h2 runs next to it (h2 hangs off h1's edge switch on every
plane, so the victim shares the incast's aggregation-to-edge links but not
h1's congested ports). The victim's throughput alone and with the incast,
measured in the same run, and how far apart the incast's flows finish.
"""
from __future__ import annotations

from bench import charts
from bench.harness import (BenchContext, SectionResult, Trial, md_table,
                           rejected_note, retried_note, run_trial, scenario,
                           side_by_side, spread, throughput_mbps)
from testbed.fabric.net import FabricNet
from testbed.workload.runner import fabric_spec

KEY = 'incast'
TOPOLOGY = 'fattree,k=4,planes=2'
RATE_MBIT = 5.0
TRANSPORTS = ('mrc', 'rc', 'tcp')
VICTIM = {'src': 'h3', 'dst': 'h2'}
ALONE, LOADED = 'victim alone', 'victim + 7->1 incast'


def workloads(size_mb: float) -> dict[str, dict]:
    return {ALONE: {'type': 'point_to_point', 'size_mb': size_mb, **VICTIM},
            LOADED: {'type': 'incast', 'fan_in': 7, 'receiver': 'h1',
                     'size_mb': size_mb, 'victim': dict(VICTIM)}}

# Read after the section's figures in BENCHMARKS.md.
LIMITS = '''**What limits these figures.** Alone, the victim runs at line rate less
headers: both planes for MRC, one path for the others. With the incast it
shares the links into h1's edge switch with seven flows converging on h1.
MRC and our RC baseline run the same NSCC, delay-based here (this machine
has no ECN marking, and the fabric does not trim), and NSCC backs off only
once queueing passes its target, one base RTT (26 ms at 5 Mbit/s): the
victim's packets wait behind that much incast traffic, on every path for
MRC and on its one path for RC. The paper's "victim unharmed" relies on ECN
and trimming keeping those queues far shorter than an RTT. This testbed has
no DCQCN, so the paper's 25–75% loss for DCQCN is not reproduced as such.
Kernel TCP (CUBIC) lands near the top, with a wide spread. The incast
cannot finish before h1's two ports have taken 7 MB; *spread* is how far
apart its flows finished, tightest with MRC.'''


def run(ctx: BenchContext) -> SectionResult:
    size_mb = 0.2 if ctx.quick else 1.0
    transports = ('mrc', 'rc') if ctx.quick else TRANSPORTS
    trials: list[Trial] = []
    with FabricNet(fabric_spec(TOPOLOGY, RATE_MBIT)) as fab:
        for rep in range(ctx.reps):
            for condition, workload in workloads(size_mb).items():
                sc = scenario('bench-incast', TOPOLOGY, RATE_MBIT, workload,
                              duration_s=30, seed=300 + rep)
                for transport in transports:
                    trial = run_trial(ctx, KEY, fab, sc, transport, condition,
                                      rep)
                    measure(trial)
                    trials.append(trial)
                    ctx.say(KEY, '%s, %s rep %d: victim %.2f Mbit/s' % (
                        condition, transport, rep + 1,
                        trial.values['victim_mbps']))
    relative(trials)
    return SectionResult(KEY, 'Incast', report(ctx, trials, size_mb), {
        'trials': [{'transport': t.transport, 'condition': t.condition,
                    'rep': t.rep, 'trusted': t.trusted, 'health': t.health,
                    **t.values} for t in trials]})


def measure(trial: Trial) -> None:
    run = trial.run
    label = None if trial.condition == ALONE else 'victim'
    incast = [f.fct for f in run.flows if f.label == 'incast']
    done = [x for x in incast if x is not None]
    trial.values.update(
        victim_mbps=throughput_mbps(run, label),
        incast_first_s=min(done) if done else None,
        incast_last_s=max(done) if len(done) == len(incast) and done else None,
        incast_spread_s=max(done) - min(done) if len(done) == len(incast)
        and done else None,
        completed=all(f.status == 'done' for f in run.flows))


def relative(trials: list[Trial]) -> None:
    """The victim's throughput with the incast over without it, same rep."""
    alone = {(t.transport, t.rep): t.values['victim_mbps'] for t in trials
             if t.condition == ALONE and t.trusted}
    for t in trials:
        base = alone.get((t.transport, t.rep))
        t.values['victim_kept'] = t.values['victim_mbps'] / base \
            if base and t.condition == LOADED else None


def report(ctx: BenchContext, trials: list[Trial], size_mb: float) -> str:
    rows, groups = [], {'victim alone': {}, 'with incast': {}}
    for transport in dict.fromkeys(t.transport for t in trials):
        alone = [t for t in trials if t.transport == transport
                 and t.condition == ALONE]
        loaded = [t for t in trials if t.transport == transport
                  and t.condition == LOADED]
        groups['victim alone'][transport] = spread(alone, 'victim_mbps')
        groups['with incast'][transport] = spread(loaded, 'victim_mbps')
        rows.append([transport,
                     spread(alone, 'victim_mbps').text('%.2f', unit=' Mbit/s'),
                     spread(loaded, 'victim_mbps').text('%.2f', unit=' Mbit/s'),
                     spread(loaded, 'victim_kept').text('%.0f', 100, '%'),
                     spread(loaded, 'incast_first_s').text('%.2f', unit=' s'),
                     spread(loaded, 'incast_last_s').text('%.2f', unit=' s'),
                     spread(loaded, 'incast_spread_s').text('%.2f', unit=' s'),
                     '%d/%d' % (sum(t.values['completed'] for t in alone + loaded),
                                len(alone + loaded))])
    image = charts.grouped_bars(
        ctx.images / 'bench_incast.png', groups, 'victim throughput, Mbit/s',
        'Victim h3 -> h2 next to a 7 -> 1 incast into h1')
    ideal = 7 * size_mb * 8 / (2 * RATE_MBIT)
    return '\n\n'.join([
        '```sh\nmrc-testbed bench --sections %s\n```' % KEY,
        '`%s` at %g Mbit/s per link; seven senders (drawn with the seed) '
        'write %g MB each to h1, the victim h3 -> h2 moves %g MB; %d '
        'repetitions. h1 can take at most 2 × %g Mbit/s, so the incast '
        'cannot finish before %.1f s whatever the transport; the victim '
        'alone can reach 2 × %g Mbit/s (MRC) or %g Mbit/s (one path). %s%s.'
        % (TOPOLOGY, RATE_MBIT, size_mb, size_mb, ctx.reps, RATE_MBIT, ideal,
           RATE_MBIT, RATE_MBIT, rejected_note(trials), retried_note(trials)),
        md_table(['transport', 'victim alone', 'victim with incast',
                  'victim kept', 'first incast flow done', 'last incast '
                  'flow done', 'incast spread (last − first)',
                  'all flows done'], rows),
        'Victim kept, side by side per repetition: %s.' % side_by_side(
            [t for t in trials if t.condition == LOADED], 'victim_kept'),
        '![incast](%s)' % ctx.link(image)])
