"""Everything that speaks htsim lives here: our topology as its `.topo`, our
workload as its `.cm` scaled to its fabric, its command line, and what its
output says.

htsim is the Ultra Ethernet Consortium's packet-level simulator
(github.com/ultraethernet/uet-htsim, BSD-2-Clause); its `htsim_uec` runs
UET with the reference NSCC, trimming and EV spraying on one plane. We run
it from a path the user gives and read its printed results; none of its code
is here. Facts its source states, used below:

- `.topo`: ``Nodes``, ``Tiers``, ``Podsize``, then per tier (0 = the hosts'
  switches) ``Downlink_speed_Gbps``, ``Radix_Down``, ``Radix_Up`` (not on
  the top tier), ``Downlink_Latency_ns``, ``Switch_Latency_ns``
  (datacenter/topologies/*.topo, fat_tree_topology.cpp);
- hosts are numbered switch by switch, pod by pod, as ours are
  (docs/scenarios.md), so node i is host h<i+1>;
- a flow prints ``Flow Uec_<src>_<dst> flowId <id> uecSrc <n> starting at <us>``
  and ``... finished at <us>`` (uec.cpp), the run's last line ``New: <n>
  Rtx: <n> ...`` counts the data packets sent new and resent
  (main_uec.cpp);
- ``-end`` defaults to 1,000 us and cuts longer runs short without a word;
  ``-o`` must name a real file (with /dev/null it aborts at exit);
  ``-planes`` other than 1 asserts; ``-linkspeed`` (the hosts' NICs) is in
  Mbit/s, ``-mtu`` in bytes (default 4,150); a `.topo`'s
  ``Downlink_speed_Gbps`` is read as a whole number (fat_tree_topology.cpp:
  ``stoi``: 7.2 would be 7 Gbit/s, 0.5 an error), so every speed here is;
- its ToR downlinks (the last hop) mark ECN exactly when no receiver-based
  CC runs (main_uec.cpp: ``set_ecn_parameters(true, !receiver_driven, ..)``):
  with its default sender-based NSCC they mark; with ``-receiver_cc`` added
  they do not, and its receiver-based CC shapes the last hop instead.
"""
from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from testbed.fabric.topo_spec import TopoSpec
from testbed.workload.connection_matrix import (ConnectionMatrix, host_node, workload_to_matrix,
                                                write_cm)
from testbed.workload.model import CmConnection, Workload

DEFAULT_MTU = 4150                 # htsim_uec's packet size unless -mtu
HEADER_BYTES = 64                  # of each packet (uec.cpp: _hdr_size); payload = mtu - it
LATENCY_NS = 1000                  # per link, as its example topologies
TIMEOUT_S = 600                    # one htsim run; ours finish in seconds
# What a run writes in its directory: topology, matrix, htsim's -o log, what it printed.
RUN_FILES = ('htsim.topo', 'htsim.cm', 'htsim.log', 'htsim.out')
# Its flags for a last hop that marks ECN or not (the module's header).
LAST_HOP_ECN_FLAGS = {True: (), False: ('-sender_cc', '-receiver_cc')}
HELP = ('htsim is not here: build UEC\'s simulator (github.com/ultraethernet/'
        'uet-htsim) with `cmake -S htsim/sim -B build -DCMAKE_BUILD_TYPE=Release '
        '&& cmake --build build`, then pass --htsim build/datacenter/htsim_uec')


class HtsimError(RuntimeError):
    """htsim is missing, refused its input or did not finish every flow."""


# -- topology -------------------------------------------------------------------

@dataclass(frozen=True)
class Tier:
    radix_down: int
    radix_up: int | None           # None on the top tier

    @property
    def oversubscribed(self) -> int:
        """htsim's `Oversubscribed`: down over up links, a whole number
        (fat_tree_topology.cpp checks radix_down / radix_up against it in
        integer arithmetic and counts the uplinks from it)."""
        return 1 if self.radix_up is None else self.radix_down // self.radix_up


def tiers_of(spec: TopoSpec) -> tuple[int, int, tuple[Tier, ...]]:
    """(hosts, hosts per pod, tiers) of a one-plane leaf-spine or fat-tree."""
    p = spec.kwargs()
    if int(p.get('planes', 1)) != 1:
        raise HtsimError('%s: htsim has one plane (it asserts on -planes != 1): '
                         'cross-check the planes=1 form' % spec)
    if spec.name == 'leafspine':
        leaves, spines, hosts = (int(p.get(k, d)) for k, d in
                                 (('leaves', 2), ('spines', 2), ('hosts', 1)))
        if hosts % spines:
            raise HtsimError('%s: htsim takes a leaf\'s hosts as a whole multiple of its '
                             'uplinks (its Oversubscribed is a whole number): %d hosts, '
                             '%d spines' % (spec, hosts, spines))
        return leaves * hosts, leaves * hosts, (Tier(hosts, spines), Tier(leaves, None))
    if spec.name == 'fattree':
        k = int(p.get('k', 4))
        half = k // 2
        return k ** 3 // 4, half * half, (Tier(half, half), Tier(half, half), Tier(k, None))
    raise HtsimError('htsim has no %s topology' % spec.name)


def topo_text(spec: TopoSpec, gbps: int) -> str:
    """The `.topo` of the one-plane fabric `spec`, every link at `gbps`."""
    if int(gbps) != gbps or gbps < 1:
        raise HtsimError('htsim reads link speeds in whole Gbit/s, got %s' % gbps)
    nodes, podsize, tiers = tiers_of(spec)
    lines = ['Nodes %d' % nodes, 'Tiers %d' % len(tiers), 'Podsize %d' % podsize]
    for i, tier in enumerate(tiers):
        lines += ['', 'Tier %d' % i, 'Downlink_speed_Gbps %d' % gbps,
                  'Radix_Down %d' % tier.radix_down]
        if tier.radix_up is not None:
            lines.append('Radix_Up %d' % tier.radix_up)
        if tier.oversubscribed > 1:
            lines.append('Oversubscribed %d' % tier.oversubscribed)
        lines += ['Downlink_Latency_ns %d' % LATENCY_NS, 'Switch_Latency_ns 0']
    return '\n'.join(lines) + '\n'


# -- workload -------------------------------------------------------------------

def scaled_matrix(workload: Workload, nodes: int, scale: float,
                  time_scale: float) -> ConnectionMatrix:
    """`workload` as htsim's matrix with every size times `scale` (the same
    number of BDPs on htsim's fabric) and every start time times
    `time_scale` (the same number of base RTTs)."""
    matrix = workload_to_matrix(workload, nodes)
    return ConnectionMatrix(matrix.nodes, tuple(
        _scaled(c, scale, time_scale) for c in matrix.connections), matrix.triggers)


def _scaled(conn: CmConnection, scale: float, time_scale: float) -> CmConnection:
    start = None if conn.start_us is None else round(conn.start_us * time_scale, 3)
    return replace(conn, size=max(1, round(conn.size * scale)), start_us=start)


# -- a run ----------------------------------------------------------------------

@dataclass(frozen=True)
class HtsimFlow:
    flow_id: int
    src: str
    dst: str
    start_us: float
    finish_us: float | None        # None: not finished by -end

    @property
    def fct_us(self) -> float | None:
        return None if self.finish_us is None else self.finish_us - self.start_us


@dataclass
class HtsimRun:
    flows: dict[int, HtsimFlow] = field(default_factory=dict)
    new_packets: int = 0
    resent_packets: int = 0
    command: list[str] = field(default_factory=list)

    @property
    def resent_share(self) -> float:
        return self.resent_packets / self.new_packets if self.new_packets else 0.0


_FLOW = re.compile(r'^Flow Uec_(\d+)_(\d+) flowId (\d+) .*?(starting|finished) at ([0-9.e+-]+)')
_TOTALS = re.compile(r'^New: (\d+) Rtx: (\d+)')


def parse_output(text: str) -> HtsimRun:
    """The flows and packet totals htsim_uec printed."""
    run = HtsimRun()
    starts: dict[int, tuple[str, str, float]] = {}
    finishes: dict[int, float] = {}
    for line in text.splitlines():
        if m := _FLOW.match(line):
            src, dst, flow_id, what, at = m.groups()
            pair = ('h%d' % (int(src) + 1), 'h%d' % (int(dst) + 1))
            if what == 'starting':
                starts[int(flow_id)] = (*pair, float(at))
            else:
                finishes[int(flow_id)] = float(at)
        elif m := _TOTALS.match(line):
            run.new_packets, run.resent_packets = int(m.group(1)), int(m.group(2))
    for flow_id, (src, dst, at) in starts.items():
        run.flows[flow_id] = HtsimFlow(flow_id, src, dst, at, finishes.get(flow_id))
    return run


def run_htsim(binary: Path, topo: str, matrix: ConnectionMatrix, end_us: float,
              seed: int, gbps: int, mtu: int = DEFAULT_MTU,
              workdir: Path | None = None, last_hop_ecn: bool = True) -> HtsimRun:
    """Run htsim_uec on `topo` and `matrix` until `end_us`, in `workdir`
    (its inputs, log and printed output are kept there: RUN_FILES) or in a
    scratch directory, its last hop marking ECN or not. Every flow must
    finish: one that did not means -end was too short, an error and not a
    figure."""
    if not binary.is_file():
        raise HtsimError('%s: no such file. %s' % (binary, HELP))
    with tempfile.TemporaryDirectory(prefix='mrc-htsim-') as scratch:
        d = workdir or Path(scratch)
        topo_file, cm_file, log_file, printed = RUN_FILES
        (d / topo_file).write_text(topo)
        (d / cm_file).write_text(write_cm(matrix))
        command = [str(binary.resolve()), '-topo', topo_file, '-tm', cm_file,
                   '-end', '%d' % max(1, round(end_us)), '-seed', str(seed),
                   '-linkspeed', '%d' % round(gbps * 1000), '-mtu', str(mtu),
                   '-o', log_file, *LAST_HOP_ECN_FLAGS[last_hop_ecn]]
        try:
            done = subprocess.run(command, cwd=d, capture_output=True, text=True,
                                  timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise HtsimError('htsim ran past %d s' % TIMEOUT_S) from None
        (d / printed).write_text(done.stdout)
    run = parse_output(done.stdout)
    run.command = command
    if done.returncode != 0 and not run.new_packets:
        raise HtsimError('htsim exited %d: %s' % (done.returncode,
                                                  (done.stderr or done.stdout)[-1500:]))
    missing = sorted(c.id for c in matrix.connections
                     if c.id not in run.flows or run.flows[c.id].finish_us is None)
    if missing:
        raise HtsimError('htsim: flows %s did not finish by -end %d us' % (
            missing[:10], round(end_us)))
    return run


def base_rtt_us(binary: Path, spec: TopoSpec, gbps: int, mtu: int = DEFAULT_MTU) -> float:
    """htsim's own base RTT on the fabric's longest path: how long one
    packet from the first host to the last takes to be acknowledged (the
    same definition as ours: one full packet there, its SACK back)."""
    nodes, _, _ = tiers_of(spec)
    one_packet = CmConnection(0, host_node('h%d' % nodes), mtu - HEADER_BYTES, 1, start_us=0)
    probe = ConnectionMatrix(nodes, (one_packet,))
    run = run_htsim(binary, topo_text(spec, gbps), probe, 1000, 1, gbps, mtu)
    fct = run.flows[1].fct_us
    assert fct is not None
    return fct
