"""Section 1, load balance: permutation traffic on a fat-tree, achieved
goodput as a fraction of the ideal, per transport.

The 8 hosts of pods 0 and 2 at 7 Mbit/s per link with 3,500-byte packets
(the packets per second of 3 Mbit/s with 1,500-byte ones: 16 hosts put the
one-thread endpoint loop past the health gate's limit even then; larger
packets carry the payload with the share of headers and SACKs nearer the
hardware's 4 KB ones):
- one plane: a single-path transport loses only to hash collisions (two
  flows on one core link), the effect behind the announced "about 60% to
  92%" utilisation;
- two planes: a single-path QP also uses only one of its host's two NIC
  ports;
- two planes, 4 of those hosts (one per edge switch), MRC only: the links
  past the edge switches half loaded, to show where MRC lands when not
  every link is full;
- one plane, ECMP and RC under DCQCN as NICs ship it (`dcqcn-nic`), beside
  the DCQCN paper's parameters they run by default.
Every flow crosses the core; the fat-tree is non-blocking, so the ideal is
every sender at its NIC's full rate (planes x link rate).
"""
from __future__ import annotations

from dataclasses import dataclass

from testbed.bench import charts
from testbed.bench.harness import (BenchContext, SectionResult, Trial, md_table,
                           rejected_note, retried_note, run_trial, scenario,
                           side_by_side, spread)
from testbed.bench.hash_draws import links_taken, switch_egress
from testbed.bench.maxmin import Flow, completion_times
from testbed.fabric.net import FabricNet
from testbed.fabric.topo_spec import parse_topo_spec
from testbed.workload.congestion_metrics import queueing_summary
from testbed.fabric.signals import default_thresholds
from testbed.nic.emulated_timescale import (SACK_FRAME_BYTES, base_rtt_s,
                                            data_frame_bytes, packet_time_s)
from testbed.nic.wire import max_payload
from testbed.nic.transport_config import TransportConfig
from testbed.workload.runner import fabric_spec

KEY = 'load_balance'
RATE_MBIT = 7.0
MTU = 3500
SIZE_MB = 5.0               # 2.9 s of ideal on two planes
TRANSPORTS = ('mrc', 'ecmp', 'rc', 'tcp', 'mptcp')
# Every host sends one flow and receives another, so each link carries one
# flow's data and another's SACKs (one per ack_every packets) the same way.
ACK_EVERY = TransportConfig().ack_every
SACKED_CEILING = max_payload(MTU) / (
    data_frame_bytes(MTU) + SACK_FRAME_BYTES / ACK_EVERY)
PODS_0_AND_2 = ('h1', 'h2', 'h3', 'h4', 'h9', 'h10', 'h11', 'h12')
ONE_PER_EDGE = ('h1', 'h3', 'h9', 'h11')   # half the core's capacity


@dataclass(frozen=True)
class Variant:
    label: str
    topology: str
    hosts: tuple[str, ...]
    transports: tuple[str, ...] = TRANSPORTS
    cc: tuple[tuple[str, str], ...] = ()      # a scenario's cc: overrides
    qps: tuple[tuple[str, int], ...] = ()     # ... and qps_per_connection:

    def keys(self) -> dict:
        """The scenario keys the variant sets."""
        return {**({'cc': dict(self.cc)} if self.cc else {}),
                **({'qps_per_connection': dict(self.qps)} if self.qps else {})}

    @property
    def planes(self) -> int:
        return int(parse_topo_spec(self.topology).kwargs()['planes'])


NO_SIGNALS = ',mark=0,trim=0'
ONE_PLANE = 'fattree,k=4,planes=1,mtu=%d' % MTU
TWO_PLANES = 'fattree,k=4,planes=2,mtu=%d' % MTU
VARIANTS = (
    Variant('1 plane', ONE_PLANE, PODS_0_AND_2),
    Variant('2 planes', TWO_PLANES, PODS_0_AND_2),
    # The same two with switch ports that neither mark nor trim.
    Variant('1 plane, no signals', ONE_PLANE + NO_SIGNALS,
            PODS_0_AND_2, ('mrc', 'ecmp')),
    Variant('2 planes, no signals', TWO_PLANES + NO_SIGNALS,
            PODS_0_AND_2, ('mrc', 'ecmp')),
    # Where MRC lands when the links past the NICs are not all full.
    Variant('2 planes, 4 hosts', TWO_PLANES, ONE_PER_EDGE, ('mrc',)),
    # The RoCE baselines under DCQCN as NICs ship it, beside the paper's
    # parameters they run by default (testbed/nic/cc/dcqcn.py).
    Variant('1 plane, DCQCN as NICs ship it', ONE_PLANE, PODS_0_AND_2, ('ecmp', 'rc'),
            (('ecmp', 'dcqcn-nic'), ('rc', 'dcqcn-nic'))),
    # The MRC paper's RoCE comparison: 16 QPs per connection, each flow
    # split over them (Araujo et al., arXiv:2605.04333 §5.2.7: one MRC QP
    # over 256 paths beats 16 RoCE QPs; NCCL ships 1).
    Variant('1 plane, 16 QPs per connection', ONE_PLANE, PODS_0_AND_2, ('ecmp', 'rc'),
            qps=(('ecmp', 16), ('rc', 16))),
)
# The fat-tree's paths: 6 links (host, edge, agg, core, agg, edge, host).
PATH_LINKS = 6
BASE_RTT_S = base_rtt_s(RATE_MBIT * 1e6, PATH_LINKS, MTU)
# A trial stops at CAP_IDEALS x its ideal + CAP_SLACK_S (a run must end); a
# trial with a flow still running then did not finish, and says so: its
# goodput is never computed at the cap, where every flow still running
# would score what the cap allowed it.
CAP_IDEALS, CAP_SLACK_S = 4, 8.0
DID_NOT_FINISH = 'did not finish'
PACKET_S = packet_time_s(RATE_MBIT * 1e6, MTU)
MARK_PACKETS = default_thresholds(RATE_MBIT * 1e6, PATH_LINKS, MTU)[0] / \
    data_frame_bytes(MTU)

# Read after the section's figures in BENCHMARKS.md (analysis: the figures
# are the table's, the reasoning is not measured by the run).
LIMITS = '''**What limits these figures (analysis).** A single-path transport (RC,
ECMP, TCP) puts each flow on one path: on two planes it can use one of its
host's two NIC ports, so it cannot pass 50% of ideal, and on either fabric
two flows hashed onto one core link share it while the permutation lasts
until its slowest flow is done (*last flow done*, *slowest / fastest*):
those hash collisions are what the announced "about 60%" describes. RC adds
go-back-N; a trial that hits its cap did not finish and scores nothing.
MPTCP opens one subflow per plane (one on one plane). MRC sprays every flow
over every path of every plane, so its flows finish together. Its ceiling
here is the dashed line, not the {alone:.1%} of one QP alone: every host sends
one flow and receives another, so each of its links carries one flow's data
and, the same way, another flow's SACKs ({sack:d} bytes on the wire for every
{every} {frame}-byte data packet); *of MRC's ceiling* is goodput over that line.
With 8 hosts every link on the way is loaded to the NIC rate and sprayed
packets of different flows meet in queues at every hop: a port loaded to
90 % by random arrivals holds about 4 packets with no congestion at all,
on any timescale, while a packet time here is 1/{rtt_packets:.0f} of the base RTT
({rtt_ms:.0f} ms), where on hardware it is about a hundredth; the switch ports mark
above a whole NSCC target of queue (R × T, {mark:.1f} packets here) so that this
natural queue is not read as congestion (at R × T / 2, with 1,500-byte packets at
3 Mbit/s, MRC reached 72-74 % of line rate: `testbed/fabric/signals.py`). The *4 hosts* row
leaves the links past the edge switches half loaded, and MRC gets close to
its ceiling. The *no signals* rows show what the switch ports' marks and
trims change: NSCC's queueing falls to a quarter of its target or less, the
goodput moves by a few points.'''.format(
    sack=SACK_FRAME_BYTES, alone=max_payload(MTU) / data_frame_bytes(MTU), every={1: '', 2: 'second'}.get(ACK_EVERY, '%dth' % ACK_EVERY),
    frame=format(data_frame_bytes(MTU), ','), rtt_packets=BASE_RTT_S / PACKET_S,
    rtt_ms=BASE_RTT_S * 1e3, mark=MARK_PACKETS)


def run(ctx: BenchContext) -> SectionResult:
    size_mb = 0.75 if ctx.quick else SIZE_MB
    variants = VARIANTS[1:2] if ctx.quick else VARIANTS
    trials: dict[str, list[Trial]] = {}
    for v in variants:
        ideal_s = size_mb * 8 / (RATE_MBIT * v.planes)
        with FabricNet(fabric_spec(v.topology, RATE_MBIT)) as fab:
            for rep in range(ctx.reps):
                sc = scenario('bench-load-balance', v.topology, RATE_MBIT, {
                    'type': 'permutation', 'hosts': list(v.hosts),
                    'size_mb': size_mb}, duration_s=CAP_IDEALS * ideal_s + CAP_SLACK_S,
                    seed=100 + rep, **v.keys())
                for transport in ('mrc', 'ecmp') if ctx.quick else \
                        v.transports:
                    trial = run_trial(ctx, KEY, fab, sc, transport, v.label, rep)
                    measure(trial, v, len(v.hosts))
                    model(trial, fab, len(v.hosts), v.planes * RATE_MBIT * 1e6)
                    trials.setdefault(v.label, []).append(trial)
                    ctx.say(KEY, '%s, %s rep %d: %s' % (
                        v.label, transport, rep + 1, outcome(trial)))
    return SectionResult(KEY, 'Load balance', report(ctx, trials, size_mb),
                         {v: [summary(t) for t in ts]
                          for v, ts in trials.items()})


def measure(trial: Trial, v: Variant, senders: int) -> None:
    """The figures of a finished trial, as htsim reports a permutation: the
    makespan over its ideal (`fraction`: every sender at its NIC's line
    rate), the mean over flows of ideal / FCT, the FCT spread. A trial with
    a flow still running at its cap has none of them (DID_NOT_FINISH)."""
    run = trial.run
    line_bps = v.planes * RATE_MBIT * 1e6          # one sender's NIC
    fcts = [f.fct for f in run.flows]
    done = all(f.status == 'done' for f in run.flows) and None not in fcts
    queueing = queueing_summary(run) or {}
    trial.values.update(
        queue_p50_targets=queueing.get('p50_targets'),
        queue_p99_targets=queueing.get('p99_targets'),
        completed=done,
        flows_done=sum(f.status == 'done' for f in run.flows),
        flows=len(run.flows),
        fraction=None, mean_ideal_over_fct=None, makespan_s=None, fct_spread=None)
    if not done:
        return
    makespan = max(f.finished for f in run.flows) - min(f.started for f in run.flows)
    total = sum(f.delivered for f in run.flows)
    trial.values.update(
        fraction=total * 8 / max(makespan, 1e-9) / (senders * line_bps),
        mean_ideal_over_fct=sum(f.size * 8 / line_bps / max(f.fct, 1e-9)
                                for f in run.flows) / len(run.flows),
        makespan_s=makespan,
        fct_spread=max(fcts) / min(fcts))


def model(trial: Trial, fab: FabricNet, senders: int, line_bps: float) -> None:
    """The max-min fair fluid model (maxmin.py) of a routed single-path
    trial's flows on the paths the switches' hash gave them (hash_draws.py),
    every link at the link rate: `model_fraction` and
    `model_mean_ideal_over_fct`, beside the measured ones. None for a
    transport whose paths are not one hashed 5-tuple each (MRC, the
    kernel's) or on AF_XDP ports."""
    starts = [e for e in trial.run.events if e.get('event') == 'flow_start']
    parts = [[(q['bytes'], q['pinned_path'] or {}) for q in e['qps']] if 'qps' in e
             else [(e['bytes'], e.get('pinned_path') or {})] for e in starts]
    trial.values.update(model_fraction=None, model_mean_ideal_over_fct=None)
    if trial.run.fabric_mode != 'routed' or fab.afxdp or not starts or \
            any('sport' not in p for qps in parts for _, p in qps):
        return
    egress = switch_egress(fab)
    # One model flow per QP: a flow split over several ends with its last part.
    flows = [Flow(size, links_taken(fab, e['src'], e['dst'], p['plane'], p['sport'],
                                    egress))
             for e, qps in zip(starts, parts) for size, p in qps]
    capacity = {link: RATE_MBIT * 1e6 for f in flows for link in f.path}
    fcts = iter(completion_times(flows, capacity))
    ends = [max(next(fcts) for _ in qps) for qps in parts]
    trial.values.update(
        model_fraction=sum(e['bytes'] for e in starts) * 8 / max(ends) / (senders * line_bps),
        model_mean_ideal_over_fct=sum(e['bytes'] * 8 / line_bps / t
                                      for e, t in zip(starts, ends)) / len(starts))


def outcome(trial: Trial) -> str:
    v = trial.values
    if not v['completed']:
        return '%s (%d of %d flows done at the cap)' % (DID_NOT_FINISH, v['flows_done'],
                                                        v['flows'])
    return '%.0f%% of ideal' % (100 * v['fraction'])


def summary(t: Trial) -> dict:
    return {'transport': t.transport, 'rep': t.rep, 'trusted': t.trusted,
            'health': t.health, **t.values}


def finished_text(trials: list[Trial]):
    """A figure of the finished trials only; 'did not finish' where none
    of the trusted ones did."""
    if any(t.trusted and t.values['completed'] for t in trials):
        return lambda text: text
    return lambda _text: DID_NOT_FINISH if any(t.trusted for t in trials) else '—'


def report(ctx: BenchContext, trials: dict[str, list[Trial]],
           size_mb: float) -> str:
    rows, groups = [], {}
    for label, ts in trials.items():
        groups[label] = {}
        for transport in dict.fromkeys(t.transport for t in ts):
            mine = [t for t in ts if t.transport == transport]
            frac = spread(mine, 'fraction')
            groups[label][transport] = frac
            finished = finished_text(mine)
            rows.append((label, transport, finished(frac.text('%.0f', 100, '%')),
                         finished(frac.text('%.0f', 100 / SACKED_CEILING, '%'))
                         if transport == 'mrc' else '—',
                         finished(spread(mine, 'mean_ideal_over_fct').text('%.2f')),
                         spread(mine, 'model_fraction').text('%.0f', 100, '%'),
                         spread(mine, 'model_mean_ideal_over_fct').text('%.2f'),
                         spread(mine, 'queue_p50_targets').text('%.2f', unit='×'),
                         spread(mine, 'queue_p99_targets').text('%.2f', unit='×'),
                         finished(spread(mine, 'makespan_s').text('%.2f', unit=' s')),
                         finished(spread(mine, 'fct_spread').text('%.2f', unit='×')),
                         '%d/%d' % (sum(t.values['completed'] for t in mine),
                                    len(mine))))
    image = charts.grouped_bars(
        ctx.images / 'bench_load_balance.png',
        groups, '% of ideal (NIC line rate)', 'Permutation goodput, '
        'fat-tree k=4 at %g Mbit/s per link' % RATE_MBIT, scale=100,
        reference=100 * SACKED_CEILING,
        reference_label='MRC payload ceiling with SACKs (%.0f%%)'
        % (100 * SACKED_CEILING))
    every = [t for ts in trials.values() for t in ts]
    ratio = 'Side by side, per repetition: ' + '; '.join(
        '%s: %s' % (label, side_by_side(ts, 'fraction'))
        for label, ts in trials.items()
        if len({t.transport for t in ts}) > 1) + '.'
    return '\n\n'.join([
        '```sh\nmrc-testbed bench --sections %s\n```' % KEY,
        'Cross-pod permutation, %g MB per sender, %d repetitions (a new '
        'permutation each, the same for every transport). %s%s. Ideal: '
        'every sender at its NIC line rate (planes × %g Mbit/s); goodput '
        'is payload bytes over the time until the last flow finished (the '
        'makespan), *mean ideal / FCT* the mean over flows of its ideal '
        'completion time over its own, as htsim reports a permutation; a '
        'trial stops at %d × its ideal + %g s, and one with a flow still '
        'running then *did not finish*: its figures are left out, never '
        'computed at the cap. *Max-min model*: for a routed single-path '
        'transport, its flows on the very paths the switches hashed them onto '
        '(each 5-tuple sent again after the trial, the switch ports that '
        'carried it read from their counters), every link shared max-min '
        'fairly at every moment, no queue, no loss, payload at the link rate '
        '(so a little above what headers allow): what its congestion control '
        'could reach on those draws; %s-byte packets (MTU). The '
        '*no signals* fabrics are the same with switch ports that neither '
        'mark ECN nor trim; *queueing* is the delay NSCC measured over its '
        'base RTT, in units of its target (quarter-target resolution).'
        % (size_mb, ctx.reps, rejected_note(every), retried_note(every),
           RATE_MBIT, CAP_IDEALS, CAP_SLACK_S, format(MTU, ',')),
        md_table(['fabric', 'transport', 'goodput / ideal',
                  'of MRC\'s ceiling (%.0f%%)' % (100 * SACKED_CEILING),
                  'mean ideal / FCT', 'max-min model: goodput / ideal',
                  'model: mean ideal / FCT', "NSCC's queueing p50 / target",
                  'p99 / target', 'last flow done', 'slowest / '
                  'fastest flow', 'all flows done'], rows),
        ratio,
        '![load balance](%s)' % ctx.link(image)])
