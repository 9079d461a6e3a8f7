"""Section 5, incast: seven senders write to h1 at once while a victim flow
runs next to it, towards h2 on h1's leaf (edge) switch: the victim shares
the links into that switch with the incast but not h1's congested ports.
The victim's throughput alone and with the incast, measured in the same
run, and how far apart the incast's flows finish; each on a fabric whose
switch ports signal congestion (ECN marks, trims) and on one whose ports do
not, side by side.

Two fabrics. The leaf-spine is the paper's shape: a T0 has as many uplinks
as hosts (256 and 256, Araujo et al., arXiv:2605.04333 §2), so an incast
from two busy hosts' worth of senders leaves its uplinks room for a victim.
The k=4 fat-tree is the tight case kept for comparison: h1's edge switch
has two uplinks per plane, and the incast's and the victim's fair shares
fill them exactly, so whatever the incast overshoots is the victim's loss.
"""
from __future__ import annotations

from dataclasses import dataclass

from testbed.bench import charts
from testbed.bench.harness import (BenchContext, SectionResult, Trial, md_table,
                           rejected_note, retried_note, run_trial, scenario,
                           side_by_side, spread, throughput_mbps)
from testbed.fabric.net import FabricNet
from testbed.workload.transports import transport as transport_info
from testbed.workload.congestion_metrics import (false_demotions,
                                                 signals_summary)
from testbed.workload.runner import fabric_spec

KEY = 'incast'
RATE_MBIT = 5.0
TRANSPORTS = ('mrc', 'rc', 'tcp')
ALONE, LOADED = 'victim alone', 'victim + 7->1 incast'
NO_SIGNALS = ',mark=0,trim=0'
LEAF_SPINE = 'leafspine,leaves=4,spines=4,hosts=4,planes=2'
FAT_TREE = 'fattree,k=4,planes=2'


@dataclass(frozen=True)
class Fabric:
    """A fabric of the section and its victim flow, which ends at h2 on h1's
    leaf and starts off it (on the leaf-spine h3 is on h1's leaf too)."""
    label: str
    topology: str
    victim_src: str

    @property
    def victim(self) -> dict[str, str]:
        return {'src': self.victim_src, 'dst': 'h2'}


FABRICS = (Fabric('leaf-spine', LEAF_SPINE, 'h5'),
           Fabric('leaf-spine, no signals', LEAF_SPINE + NO_SIGNALS, 'h5'),
           Fabric('fat-tree', FAT_TREE, 'h3'))


def workloads(fabric: Fabric, size_mb: float) -> dict[str, dict]:
    return {ALONE: {'type': 'point_to_point', 'size_mb': size_mb,
                    **fabric.victim},
            LOADED: {'type': 'incast', 'fan_in': 7, 'receiver': 'h1',
                     'size_mb': size_mb, 'victim': fabric.victim}}

# Read after the section's figures in BENCHMARKS.md (analysis: the figures
# are the table's, the reasoning is not measured).
LIMITS = '''**What limits these figures (analysis).** Alone, the victim runs at line
rate less headers: both planes for MRC, one path for the others. With the
incast it shares the links into h1's leaf (edge) switch with seven flows
converging on h1, whose two ports are the bottleneck. There the last hop
does not mark (as in MRC deployments), so the incast's only signals are
trims at h1's ports, answered by NACKs and by the responder's window
penalty, and the marks and trims on the links into h1's leaf it shares
with the victim. Every packet trimmed at h1's port has already crossed
those shared links whole, so an incast that overshoots costs the victim
capacity even when nothing is lost. On the leaf-spine those links have
room for the overshoot (four spines per plane for two busy hosts' worth
of traffic, as a T0's 256 uplinks have); on the fat-tree two
aggregation-to-edge links per plane carry exactly the incast's and the
victim's fair shares, and the *rtx* and *trims* columns show what the
victim pays there. MRC's retransmissions are its trims, one for one. Seven
QPs start at once, each at NSCC's initial window, MaxWnd = 1.5 BDP (UEC):
7 × 38.8 kB in the first RTT, of which h1's two ports carry one BDP
(25.9 kB) and queue two trim thresholds (2 × 19.4 kB); the other ~207 kB,
~140 packets, are trimmed whatever happens next, 2.6 % of the 8 MB a trial
delivers (in a throwaway count of the switch counters, ~200 of a trial's
~300 trims fell in its first half second). The rest are trimmed in the
steady state: with no mark on the
last hop NSCC sees its delay above target without ECN and increases
(UEC's quadrant for a queue it did not cause), the queue at h1's ports
stays at the trim threshold (NSCC's queueing p50 about 4 targets), and
each trim takes back about a packet of window, plus the responder's
penalty. Quick adapt, which would cut a sender to what it delivered,
fires only below MaxWnd / 8 delivered per period (4.8 kB), under a 7 -> 1
incast's fair share (6.5 kB per period): it hits the senders already below
their share, and the incast's flows finish seconds apart (*incast
spread*). Without signals the same queues grow until NSCC's delay reacts,
and what overflows is lost and found by timeouts. RC runs DCQCN on a RoCE
fabric (its last hop into a host marks too, where the incast's bottleneck
is), its rate cut by CNPs: the paper reports DCQCN's victim losing 25-75%.'''


def run(ctx: BenchContext) -> SectionResult:
    size_mb = 0.2 if ctx.quick else 1.0
    transports = ('mrc', 'rc') if ctx.quick else TRANSPORTS
    trials: list[Trial] = []
    for fabric in FABRICS[:1] if ctx.smoke else FABRICS:
        # Each transport on the fabric its congestion control runs on (a
        # DCQCN transport's marks its last hop too: runner.fabric_spec).
        for transport in transports:
            spec = fabric_spec(fabric.topology, RATE_MBIT,
                               transport_info(transport).default_cc)
            with FabricNet(spec) as fab:
                trials += [_trial(ctx, fab, fabric, transport, condition,
                                  workload, rep)
                           for rep in range(ctx.reps)
                           for condition, workload
                           in workloads(fabric, size_mb).items()]
    relative(trials)
    return SectionResult(KEY, 'Incast', report(ctx, trials, size_mb), {
        'trials': [{'transport': t.transport, 'condition': t.condition,
                    'rep': t.rep, 'trusted': t.trusted, 'health': t.health,
                    **t.values} for t in trials]})


def _trial(ctx: BenchContext, fab, fabric: Fabric, transport: str,
           condition: str, workload: dict, rep: int) -> Trial:
    sc = scenario('bench-incast', fabric.topology, RATE_MBIT, workload,
                  duration_s=30, seed=300 + rep)
    trial = run_trial(ctx, KEY, fab, sc, transport,
                      '%s: %s' % (fabric.label, condition), rep)
    measure(trial, fab.plan)
    ctx.say(KEY, '%s, %s, %s rep %d: victim %.2f Mbit/s' % (
        fabric.label, condition, transport, rep + 1,
        trial.values['victim_mbps']))
    return trial


def measure(trial: Trial, plan) -> None:
    run = trial.run
    label = None if trial.condition.endswith(ALONE) else 'victim'
    incast = [f.fct for f in run.flows if f.label == 'incast']
    done = [x for x in incast if x is not None]
    delivered = sum(f.delivered for f in run.flows)
    counters = run.transport_counters
    signals = signals_summary(run) or {}
    trial.values.update(
        victim_mbps=throughput_mbps(run, label),
        incast_first_s=min(done) if done else None,
        incast_last_s=max(done) if len(done) == len(incast) and done else None,
        incast_spread_s=max(done) - min(done) if len(done) == len(incast)
        and done else None,
        rtx_share=run.retransmitted_bytes / delivered if delivered else None,
        packet_timeouts=counters.get('packet_timeouts'),
        false_demotions=false_demotions(run, plan) if counters else None,
        ce_marked=signals.get('ce_marked'), trimmed=signals.get('trimmed'),
        cnps_sent=counters.get('cnps_sent'),
        cnps_received=counters.get('cnps_received'),
        rate_cuts=counters.get('rate_cuts'),
        completed=all(f.status == 'done' for f in run.flows))


def fabric_of(trial: Trial) -> str:
    """The label of the fabric a trial ran on (its condition is
    `label: workload`, as `_trial` names it)."""
    return trial.condition.split(': ')[0]


def relative(trials: list[Trial]) -> None:
    """The victim's throughput with the incast over without it, same fabric,
    same rep."""
    alone = {(fabric_of(t), t.transport, t.rep):
             t.values['victim_mbps'] for t in trials
             if t.condition.endswith(ALONE) and t.trusted}
    for t in trials:
        base = alone.get((fabric_of(t), t.transport, t.rep))
        t.values['victim_kept'] = t.values['victim_mbps'] / base \
            if base and t.condition.endswith(LOADED) else None


def cnp_text(trials: list[Trial]) -> str:
    """DCQCN's notifications, medians over the repetitions: what the
    notification points sent, what the reaction points heard and cut on."""
    if not any(t.values.get('cnps_sent') for t in trials):
        return '—'
    return '%s / %s (%s)' % tuple(spread(trials, key).text('%.0f') for key in
                                  ('cnps_sent', 'cnps_received', 'rate_cuts'))


def on_fabric(trials: list[Trial], fabric: Fabric,
              condition: str | None = None) -> list[Trial]:
    """The trials run on `fabric`, under `condition` if given."""
    return [t for t in trials if fabric_of(t) == fabric.label
            and (condition is None or t.condition.endswith(condition))]


def table_row(fabric: Fabric, transport: str, alone: list[Trial],
              loaded: list[Trial]) -> list[str]:
    return [fabric.label, transport,
            spread(alone, 'victim_mbps').text('%.2f', unit=' Mbit/s'),
            spread(loaded, 'victim_mbps').text('%.2f', unit=' Mbit/s'),
            spread(loaded, 'victim_kept').text('%.0f', 100, '%'),
            spread(loaded, 'rtx_share').text('%.1f', 100, '%'),
            spread(loaded, 'packet_timeouts').text('%.0f'),
            spread(loaded, 'false_demotions').text('%.0f'),
            spread(loaded, 'ce_marked').text('%.0f'),
            spread(loaded, 'trimmed').text('%.0f'),
            cnp_text(loaded),
            spread(loaded, 'incast_spread_s').text('%.2f', unit=' s'),
            '%d/%d' % (sum(t.values['completed'] for t in alone + loaded),
                       len(alone + loaded))]


def report(ctx: BenchContext, trials: list[Trial], size_mb: float) -> str:
    rows, groups = [], {}
    for fabric in FABRICS:
        alone = on_fabric(trials, fabric, ALONE)
        loaded = on_fabric(trials, fabric, LOADED)
        for transport in dict.fromkeys(t.transport for t in alone + loaded):
            mine = [t for t in loaded if t.transport == transport]
            groups.setdefault(fabric.label, {})[transport] = spread(
                mine, 'victim_kept')
            rows.append(table_row(fabric, transport,
                                  [t for t in alone if t.transport == transport],
                                  mine))
    image = charts.grouped_bars(
        ctx.images / 'bench_incast.png', groups, 'victim throughput kept, %',
        'Victim next to a 7 -> 1 incast into h1, switch ports signalling '
        'or not', scale=100)
    ideal = 7 * size_mb * 8 / (2 * RATE_MBIT)
    return '\n\n'.join([
        '```sh\nmrc-testbed bench --sections %s\n```' % KEY,
        '`%s` (*leaf-spine*: h1 to h4 on one leaf per plane) and `%s` at %g '
        'Mbit/s per link, their switch ports signalling congestion (ECN '
        'marks in the fabric, trims everywhere: `testbed/fabric/signals.py`) '
        'or, on the *no signals* fabric, not; seven senders (drawn with the '
        'seed) write %g MB each to h1, the victim (%s) moves %g MB; %d '
        'repetitions. h1 can take at most 2 × %g Mbit/s, so the incast '
        'cannot finish before %.1f s whatever the transport; the victim '
        'alone can reach 2 × %g Mbit/s (MRC) or %g Mbit/s (one path). *rtx* '
        'is bytes retransmitted over bytes delivered; *false demotions* are '
        'EVs demoted on a fault-free fabric. %s%s.'
        % (LEAF_SPINE, FAT_TREE, RATE_MBIT, size_mb, '; '.join(
            '%s -> h2 on the %s' % (f.victim_src, f.label)
            for f in FABRICS if NO_SIGNALS not in f.topology), size_mb,
           ctx.reps, RATE_MBIT, ideal, RATE_MBIT, RATE_MBIT,
           rejected_note(trials), retried_note(trials)),
        md_table(['fabric', 'transport', 'victim alone', 'victim with incast',
                  'victim kept', 'rtx', 'packet timeouts', 'false demotions',
                  'CE marks', 'trims', 'CNPs sent / received (rate cuts)',
                  'incast spread (last − first)',
                  'all flows done'], rows),
        'Victim kept, side by side per repetition: %s.' % '; '.join(
            '%s: %s' % (fabric.label, side_by_side(
                on_fabric(trials, fabric, LOADED), 'victim_kept'))
            for fabric in FABRICS),
        '![incast](%s)' % ctx.link(image)])
