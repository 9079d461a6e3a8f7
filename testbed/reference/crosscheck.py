"""A scenario run here and in htsim, side by side, in figures that do not
depend on either fabric's speed.

The scenario's one-plane form (htsim has one plane) runs MRC on a fresh
fabric; the same flows (the same seed picks the same senders) run in
htsim_uec with every size scaled to the same number of bandwidth-delay
products and every start to the same number of base RTTs. By default
htsim's links run at the speed that gives its BDP as many packets as ours
has (NSCC's window steps, its initial window and its quick-adapt gate are
counted in packets and BDPs; at htsim's 100 Gbit/s a BDP is ~4x as many
packets as on a 10 Mbit/s fabric of 3,500-byte packets); `gbps` sets it.
htsim takes whole Gbit/s only, and its hops' store-and-forward alone makes a
BDP of ~6 packets on a fat-tree path: the report shows both sides' counts.

Figures, each side its own (docs/crosscheck.md):
- makespan: first start to last finish, in base RTTs;
- ideal / FCT per flow (ideal: its bytes at the NIC's line rate), mean and
  lowest;
- victim kept: the incast victim's ideal / FCT (its share of line rate
  beside the incast);
- incast spread: first to last incast flow's finish, in base RTTs;
- resent: what was sent again over what was sent new (packets in htsim,
  bytes here).
"""
from __future__ import annotations

import json
import random
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from testbed.fabric.topo_spec import TopoSpec
from testbed.nic.emulated_timescale import MTU
from testbed.reference import htsim
from testbed.workload.model import Scenario, Workload
from testbed.workload.run_scenario import run_scenario
from testbed.workload.workloads import build_workload

MATCH_PROBE_GBPS = (100.0, 10.0)  # the two speeds htsim's RTT is probed at
MIN_GBPS = 1                     # htsim reads its links' speeds in whole Gbit/s
END_BDPS = 400                  # htsim's -end: this many of the largest flow's ideal
MIN_END_US = 10_000


@dataclass(frozen=True)
class FlowTimes:
    label: str
    size: int                  # bytes on this side
    start_s: float
    finish_s: float | None


@dataclass(frozen=True)
class Figures:
    flows: int
    flows_done: int
    makespan_rtts: float | None
    mean_ideal_over_fct: float | None
    min_ideal_over_fct: float | None
    victim_kept: float | None
    incast_spread_rtts: float | None
    resent: float


def figures_of(flows: list[FlowTimes], line_bps: float, rtt_s: float,
               resent: float) -> Figures:
    """The module's figures of one side's flows."""
    done = [f for f in flows if f.finish_s is not None]
    scores = [f.size * 8 / line_bps / max(f.finish_s - f.start_s, 1e-12) for f in done]
    incast = [f.finish_s for f in done if f.label == 'incast']
    victim = [x for f, x in zip(done, scores) if f.label == 'victim']
    whole = len(done) == len(flows) and flows
    return Figures(
        flows=len(flows), flows_done=len(done),
        makespan_rtts=(max(f.finish_s for f in done) - min(f.start_s for f in flows)) / rtt_s
        if whole else None,
        mean_ideal_over_fct=sum(scores) / len(done) if done else None,
        min_ideal_over_fct=min(scores) if done else None,
        victim_kept=victim[0] if victim else None,
        incast_spread_rtts=(max(incast) - min(incast)) / rtt_s if len(incast) > 1 else None,
        resent=resent)


def one_plane(sc: Scenario, last_hop_ecn: bool = True) -> Scenario:
    """The scenario on the one-plane form of its fabric, its last hop
    marking ECN or not, MRC only; refused with faults (the cross-check
    compares congestion responses, and htsim's failures are not ours)."""
    if sc.faults:
        raise ValueError('%s has faults: the cross-check compares runs without '
                         'failures (htsim models them differently)' % sc.name)
    spec = sc.topo_spec
    params = dict(spec.params, planes=1)
    params.pop('mark_last', None)
    if last_hop_ecn:
        params['mark_last'] = 1
    topology = str(TopoSpec(spec.name, tuple(sorted(params.items()))))
    # The results' copy of the file says what ran instead of it.
    note = ('# mrc-testbed crosscheck ran the one-plane form of this file: topology %s, '
            'MRC only, one repetition%s\n' % (topology, ', its quick form' if sc.is_quick else ''))
    return replace(sc, topology=topology, transports=('mrc',), repetitions=1, quick=None,
                   source_text=note + sc.source_text)


def last_hop_ecn(sc: Scenario) -> bool:
    """Whether the (one-plane) scenario's last hop marks ECN."""
    return bool(sc.topo_spec.kwargs().get('mark_last', 0))


def workload_of(sc: Scenario) -> Workload:
    """The flows the runner builds for the scenario's first repetition."""
    plan = sc.plan()
    return build_workload(sc.workload, plan.hosts, plan, random.Random(sc.seed))


# -- the emulation's side --------------------------------------------------------

def emulation_figures(out: Path, sc: Scenario, workload: Workload) -> tuple[Figures, dict]:
    """Figures of the MRC run of `workload` in results directory `out`, and
    its summary row."""
    row = json.loads((out / 'summary.json').read_text())['transports']['mrc']
    events = [json.loads(line) for line in (out / 'events.jsonl').read_text().splitlines()]
    starts = {e['flow']: e for e in events if e.get('event') == 'flow_start'}
    finishes = {e['flow']: e['t'] for e in events if e.get('event') == 'flow_done'}
    labels = {f.id: f.label for f in workload.flows}
    flows = [FlowTimes(labels.get(i, ''), e['bytes'], e['t'], finishes.get(i))
             for i, e in starts.items()]
    rtt_s = row['base_rtt_ms'] / 1e3
    sent = sum(f.size for f in flows)
    line_bps = sc.link_rate_mbit * 1e6              # one plane: one port
    return figures_of(flows, line_bps, rtt_s, row['retransmitted_bytes'] / max(sent, 1)), row


# -- htsim's side ------------------------------------------------------------------

def matched_gbps(binary: Path, spec: TopoSpec, packets_per_bdp: float) -> tuple[int, float]:
    """(link speed, base RTT in us) at which htsim's BDP holds
    `packets_per_bdp` of its packets. Its base RTT is the path's latency L
    plus what every hop's store-and-forward of the packet and its ACK takes,
    S / speed; two probes give L and S, and BDP = speed x RTT = speed x L + S
    gives the speed, rounded to htsim's whole Gbit/s. A BDP can hold no
    fewer packets than S alone (the hops' serialization): below that the
    slowest speed is taken; the report's packets per BDP say how far off
    either leaves it."""
    fast, slow = MATCH_PROBE_GBPS
    rtt_fast, rtt_slow = (htsim.base_rtt_us(binary, spec, g) for g in (fast, slow))
    serial = (rtt_slow - rtt_fast) / (1 / slow - 1 / fast)       # us x Gbit/s
    latency_us = rtt_fast - serial / fast
    want = packets_per_bdp * htsim.DEFAULT_MTU * 8 / 1e3           # us x Gbit/s
    gbps = max(round((want - serial) / latency_us), MIN_GBPS)
    return gbps, htsim.base_rtt_us(binary, spec, gbps)


def htsim_figures(binary: Path, sc: Scenario, workload: Workload, our_rtt_s: float,
                  gbps: int | None, out: Path) -> tuple[Figures, dict]:
    """Figures of the scenario's flows run in htsim (its inputs written to
    `out`), its last hop marking ECN as the scenario's does, and what was
    run."""
    spec = sc.topo_spec
    our_mtu = int(spec.kwargs().get('mtu', MTU))
    line_bps = sc.link_rate_mbit * 1e6
    our_bdp = line_bps * our_rtt_s / 8
    if gbps is None:
        gbps, rtt_us = matched_gbps(binary, spec, our_bdp / our_mtu)
    else:
        rtt_us = htsim.base_rtt_us(binary, spec, gbps)
    their_bdp = gbps * 1e9 * rtt_us / 1e6 / 8
    nodes, _, _ = htsim.tiers_of(spec)
    matrix = htsim.scaled_matrix(workload, nodes, their_bdp / our_bdp,
                                 rtt_us / 1e6 / our_rtt_s)
    largest = max(c.size for c in matrix.connections)
    end_us = max(MIN_END_US, END_BDPS * largest * 8 / (gbps * 1e3))
    topo = htsim.topo_text(spec, gbps)
    run = htsim.run_htsim(binary, topo, matrix, end_us, sc.seed, gbps, workdir=out,
                          last_hop_ecn=last_hop_ecn(sc))
    labels = {f.id: f.label for f in workload.flows}
    sizes = {c.id: c.size for c in matrix.connections}
    flows = [FlowTimes(labels[i], sizes[i], f.start_us / 1e6,
                       None if f.finish_us is None else f.finish_us / 1e6)
             for i, f in run.flows.items()]
    figures = figures_of(flows, gbps * 1e9, rtt_us / 1e6, run.resent_share)
    return figures, {'command': ' '.join(run.command), 'last_hop_ecn': last_hop_ecn(sc),
                     'gbps': round(gbps, 3),
                     'base_rtt_us': round(rtt_us, 3),
                     'packets_per_bdp': round(their_bdp / htsim.DEFAULT_MTU, 1),
                     'our_packets_per_bdp': round(our_bdp / our_mtu, 1),
                     'size_scale': their_bdp / our_bdp}


FIGURES = (('makespan_rtts', 'makespan (base RTTs)', '%.1f'),
           ('mean_ideal_over_fct', 'mean ideal / FCT', '%.2f'),
           ('min_ideal_over_fct', 'lowest ideal / FCT', '%.2f'),
           ('victim_kept', 'incast victim kept', '%.0f%%'),
           ('incast_spread_rtts', 'incast spread (base RTTs)', '%.1f'),
           ('resent', 'resent', '%.1f%%'))


# -- one seed, several seeds ---------------------------------------------------------

@dataclass(frozen=True)
class SeedResult:
    """Both sides of one seed (the same senders, the same draws)."""
    seed: int
    ours: Figures
    theirs: Figures
    row: dict                  # the emulation's summary row (health, base RTT)
    meta: dict                 # what htsim ran
    out: Path                  # the run's results, htsim's files beside them

    @property
    def trusted(self) -> bool:
        return bool(self.row['health']['trusted'])


def run_seed(binary: Path, sc: Scenario, seed: int, root: Path, gbps: int | None,
             progress: Callable[[str], None]) -> SeedResult:
    """The scenario with `seed` run here (results under `root`), then in htsim."""
    sc = replace(sc, seed=seed)
    out, _ = run_scenario(sc, root, progress=progress)
    workload = workload_of(sc)          # the runner's draws for this seed
    ours, row = emulation_figures(out, sc, workload)
    theirs, meta = htsim_figures(binary, sc, workload, row['base_rtt_ms'] / 1e3, gbps, out)
    return SeedResult(seed, ours, theirs, row, meta, out)


def cell(values: list[float | None], fmt: str) -> str:
    """One figure over the seeds: the value, or the median (lowest-highest)."""
    pct = fmt.endswith('%%')
    found = sorted(100 * v if pct else v for v in values if v is not None)
    if not found:
        return '-'
    if len(found) == 1:
        return fmt % found[0]
    return '%s (%s-%s)' % (fmt % statistics.median(found), fmt.replace('%%', '') % found[0],
                           fmt % found[-1])


def table(ours: list[Figures], theirs: list[Figures]) -> str:
    """The figures side by side (markdown), each over the seeds given."""
    lines = ['| figure | emulation (MRC) | htsim (UET, NSCC) |', '|---|---:|---:|']
    for key, name, fmt in FIGURES:
        cells = [cell([getattr(f, key) for f in side], fmt) for side in (ours, theirs)]
        if cells != ['-', '-']:
            lines.append('| %s | %s | %s |' % (name, *cells))
    return '\n'.join(lines)


def write_result(path: Path, results: list[SeedResult]) -> None:
    """crosscheck.json: per seed, both sides' figures, the gate's verdict and
    what htsim ran."""
    path.write_text(json.dumps({'seeds': [
        {'seed': r.seed, 'emulation': asdict(r.ours), 'htsim': asdict(r.theirs),
         'emulation_run': {'trusted': r.trusted, 'reasons': r.row['health']['reasons'],
                           'results': str(r.out)},
         'htsim_run': r.meta} for r in results]}, indent=1) + '\n')


LAST_HOP = {
    True: "last hop: ECN marks on both sides (htsim's sender-based NSCC has its ToR "
          'downlinks mark; ours, mark_last=1)',
    False: 'last hop: no ECN marks on either side, as MRC is deployed (ECN on all but the '
           'last hop); htsim then runs its receiver-based CC too (-sender_cc -receiver_cc, '
           'the only setting in which its ToR downlinks do not mark), where MRC has its '
           "responder's window penalty"}


def report(sc: Scenario, results: list[SeedResult]) -> str:
    """What was compared, the table over the seeds (the emulation's column
    over its trusted runs only), and what the gate said."""
    first, trusted = results[0], [r for r in results if r.trusted]
    meta = first.meta
    lines = ['%s, one plane: %s at %g Mbit/s, base RTT %.2f ms, %.1f packets a BDP'
             % (sc.name, sc.topology, sc.link_rate_mbit, first.row['base_rtt_ms'],
                meta['our_packets_per_bdp']),
             'htsim: %g Gbit/s, base RTT %.2f us, %.1f packets a BDP, sizes x %.4g: %s'
             % (meta['gbps'], meta['base_rtt_us'], meta['packets_per_bdp'],
                meta['size_scale'], meta['command']),
             LAST_HOP[last_hop_ecn(sc)],
             'seeds %s%s' % (', '.join(str(r.seed) for r in results),
                             ': median (lowest-highest)' if len(results) > 1 else ''),
             '', table([r.ours for r in trusted], [r.theirs for r in results]), '']
    for r in results:
        if not r.trusted:
            lines.append('emulation, seed %d: NOT TRUSTED (%s): left out of its column'
                         % (r.seed, '; '.join(r.row['health']['reasons'])))
    if len(trusted) == len(results):
        lines.append('emulation: trusted (health gate passed%s)'
                     % (' on every seed' if len(results) > 1 else ''))
    return '\n'.join(lines)
