"""Section 6, scale of the emulator: what this machine can emulate, and
where the emulation stops being faithful.

- build / ready / teardown time and memory of fat-trees vs switch count
  (testbed/bench/fabric_build.py's `measure`);
- the fabric's packet capacity: MTU-sized SRv6 packets between two hosts of
  an unshaped fabric at increasing rates, counted at the hosts' ports, on a
  small leaf-spine and on the fat-tree of the fidelity sweep;
- packets/s of the endpoint core on one core (testbed/bench/endpoint_core.py);
- MRC permutation traffic at increasing link rates: goodput, and the
  emulator-health verdict of every trial.
"""
from __future__ import annotations

import json
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

from testbed import native_core  # noqa: E402
from testbed.bench import charts, endpoint_core  # noqa: E402
from testbed.bench.fabric_build import (measure as measure_build,  # noqa: E402
                                vswitchd_pid)
from testbed.bench.port_builds import measure_port_builds, port_builds_text  # noqa: E402
from testbed.bench.harness import (BenchContext, SectionResult, md_table,  # noqa: E402
                           run_trial, scenario, tx_packets)
from testbed.fabric import ovs  # noqa: E402
from testbed.fabric.features import ovs_datapath  # noqa: E402
from testbed.fabric.net import FabricNet  # noqa: E402
from testbed.fabric.netns import inside  # noqa: E402
from testbed.fabric.run_lock import RunLock  # noqa: E402
from testbed.fabric.topo_spec import parse_topo_spec  # noqa: E402
from testbed.nic.emulated_timescale import (  # noqa: E402
    DATA_FRAME_BYTES, DATA_PAYLOAD_BYTES, SACK_FRAME_BYTES, base_rtt_s, data_frame_bytes,
    max_payload)
from testbed.nic.socket_runtime import (IPPROTO_IPV6_IN_IPV6,  # noqa: E402
                                        UDP_NO_CHECK6_RX)
from testbed.nic.wire import (IPV6_HEADER_LEN, UDP_HEADER_LEN,  # noqa: E402
                              UDP_PORT, build_inner)
from testbed.workload.emulation_health import (  # noqa: E402
    BUSY_LIMIT, DROP_LIMIT, PROCESS_LIMIT, UNREAD_WAIT_LIMIT_S, HealthSample,
    health_between)
from testbed.workload.runner import fabric_spec  # noqa: E402

KEY = 'emulator_scale'
COMMAND = '```sh\nmrc-testbed bench --sections %s\n```' % KEY

BUILD_GRID = {4: (1, 2, 4, 8), 6: (1, 2), 8: (1, 2, 4)}    # k: planes
MAX_READY_S = 90.0          # a bigger fabric is predicted, not built

FIDELITY_TOPOLOGY = 'fattree,k=4,planes=2'
# Unshaped (no bw=: plain veths); sender, receiver. The fat-tree is the
# fidelity sweep's: the datapath's capacity depends on how many ports it has.
# Each with `system` switch ports; the fat-tree again with AF_XDP ports,
# where this OVS offers them (ovs.PORT_TYPES).
CAPACITY_FABRICS = (('leafspine,leaves=2,spines=2,hosts=1,planes=1', 'h1', 'h2'),
                    (FIDELITY_TOPOLOGY, 'h1', 'h9'))
AFXDP = 'afxdp-nonpmd'
# afxdp=1 fabrics: AF_XDP ports a PMD thread polls, behind a stage that
# queues what they send (testbed.fabric.port_stage); the spec builds them.
STAGED = 'afxdp'
STAGED_FIDELITY_RATES = (5.0, 10.0, 20.0)
# ... and the default scenario's fabric: those ports with its 3,500-byte MTU
# (scenarios/link_failure_allreduce.yaml), where each packet carries 2.5 times
# the payload for the same work per packet of the endpoint loop and the PMD thread.
DEFAULT_MTU = 3500
DEFAULT_FABRIC_RATES = (10.0, 20.0, 40.0)
# A shaped fabric, to see whether the switch ports' qdiscs see what OVS
# sends through each port type (ovs.PORT_TYPES' comment).
BYPASS_FABRIC = ('leafspine,leaves=2,spines=2,hosts=1,planes=1,bw=10', 'h1', 'h2')
BYPASS_PPS, BYPASS_S = 300, 1.0   # 3.6 Mbit/s: under the links' rate, nothing queued
CAPACITY_RATES = (5_000, 10_000, 20_000, 40_000, 80_000, 160_000, None)
CAPACITY_STEP_S = 2.0
# Every capacity fabric is measured this many times, one round of all fabrics after the
# other, and read by the median: on this shared 2-core machine one knee search's loss-free
# rate moved by a third from run to run (the afxdp=1 fat-tree: ~225k and ~350k packet-hops/s
# in two runs), and a ratio between two fabrics is only side by side within a round.
CAPACITY_ROUNDS = 3
KNEE_STEPS = 3              # 40k..80k pkt/s: to within 5k
DRAIN_S = 0.3               # packets still queued in the fabric arrive
SEND_BATCH = 64
PACE_SLEEP_S = 0.0002
MTU = 1500
PROBE_FRAME_BYTES = MTU + 14            # the MTU plus the Ethernet header
PROBE_MRC_BYTES = MTU - 2 * IPV6_HEADER_LEN - UDP_HEADER_LEN
PROBE_EVS = 128             # distinct UDP source ports, like MRC's entropy values
LOSSLESS = 0.01
MRC_PAYLOAD = DATA_PAYLOAD_BYTES        # 1,368 bytes per full data packet
MRC_FRAME_BYTES = DATA_FRAME_BYTES    # a full data packet on the wire

FIDELITY_PLANES = 2
FIDELITY_RATES = (2.5, 5.0, 10.0, 20.0, 40.0)
FIDELITY_HOSTS = ['h1', 'h2', 'h3', 'h4', 'h9', 'h10', 'h11', 'h12']
TRIAL_IDEAL_S = 3.0         # each trial moves this long at line rate
KEPT_UP = 0.9               # of the lowest rate's goodput / ideal


def run(ctx: BenchContext) -> SectionResult:
    builds, skipped = measure_builds(ctx)
    data = {'machine': machine_facts(), 'builds': builds, 'skipped': skipped,
            'port_builds': measure_port_builds(ctx),
            'capacity': measure_capacity(ctx),
            'bypass': measure_qdisc_bypass(ctx),
            'endpoint': measure_endpoint(ctx),
            'fidelity': measure_fidelity(ctx)}
    return SectionResult(KEY, 'Scale of the emulator', markdown(ctx, data),
                         data)


def markdown(ctx: BenchContext, data: dict) -> str:
    """The section's text and plots from its measurements (also from the
    raw JSON of an earlier run)."""
    return '\n\n'.join(part for part in [
        machine_text(data['machine']),
        builds_text(ctx, data['builds'], data['skipped'], data['machine']),
        port_builds_text(data.get('port_builds', [])),
        capacity_text(ctx, data['capacity'], data.get('bypass', [])),
        endpoint_text(data['endpoint']),
        fidelity_text(data['fidelity'], data['capacity'], data['endpoint'])] if part)


def machine_facts() -> dict:
    version = subprocess.run(['ovs-vswitchd', '--version'], capture_output=True,
                             text=True).stdout.split('\n')[0]
    with open('/proc/meminfo') as f:
        total_kb = int(f.readline().split()[1])
    return {'cores': os.cpu_count(), 'memory_gb': round(total_kb / 2**20),
            'kernel': platform.release(), 'ovs': version.split()[-1],
            'datapath': ovs_datapath()}


def machine_text(m: dict) -> str:
    datapath = {'user': 'userspace (netdev)', 'kernel': 'kernel'}[m['datapath']]
    return (f"Machine: {m['cores']} cores, {m['memory_gb']} GB, kernel "
            f"{m['kernel']}, Open vSwitch {m['ovs']} with the {datapath} "
            f"datapath. Every figure below is this machine on this day: read "
            f"magnitudes, not thresholds.")


# -- 1. build, teardown and memory vs switch count --------------------------

def build_specs(quick: bool) -> list[str]:
    if quick:
        return ['fattree,k=4,planes=1']
    return ['fattree,k=%d,planes=%d' % (k, p)
            for k, planes in BUILD_GRID.items() for p in planes]


def measure_builds(ctx: BenchContext) -> tuple[list[dict], list[dict]]:
    rows: list[dict] = []
    skipped: list[dict] = []
    for spec in build_specs(ctx.quick):
        links = len(parse_topo_spec(spec).build().links())
        guess = predicted_ready_s(rows, links)
        if guess > MAX_READY_S:
            skipped.append({'spec': spec, 'links': links,
                            'predicted_ready_s': guess})
            ctx.say(KEY, '%s: skipped, predicted ready in %.0f s' % (spec, guess))
            continue
        row = dict(measure_build(spec), spec=spec)
        rows.append(row)
        ctx.say(KEY, '%s: %d switches ready in %.1f s, torn down in %.1f s, '
                '+%.0f MB (ovs-vswitchd +%.0f MB)%s' % (
                    spec, row['switches'], row['ready_s'], row['teardown_s'],
                    row['memory_mb'], row['vswitchd_mb'],
                    ', LEAKED %s' % row['leftovers'] if row['leftovers'] else ''))
    return rows, skipped


def predicted_ready_s(rows: Sequence[dict], links: int) -> float:
    """Ready time grows with links (one veth pair and two ports each):
    scaled from the biggest fabric built so far."""
    if not rows:
        return 0.0
    biggest = max(rows, key=lambda r: r['links'])
    return biggest['ready_s'] * links / biggest['links']


def builds_text(ctx: BenchContext, rows: list[dict], skipped: list[dict],
                machine: dict) -> str:
    table = md_table(
        ['fabric', 'switches', 'hosts', 'links', 'build', 'flows', 'plumbing',
         'ready', 'teardown', 'memory', 'per switch', 'ovs-vswitchd RSS',
         'per switch', 'left behind'],
        [(r['spec'], r['switches'], r['hosts'], r['links'],
          f"{r['build_s']:.2f} s", f"{r['flows_s']:.2f} s",
          f"{r['plumbing_s']:.2f} s", f"{r['ready_s']:.2f} s",
          f"{r['teardown_s']:.2f} s", f"{r['memory_mb']:.0f} MB",
          f"{r['memory_mb'] / r['switches']:.1f} MB",
          f"+{r['vswitchd_mb']:.0f} MB",
          f"{r['vswitchd_mb'] / r['switches']:.1f} MB",
          ', '.join(f'{len(v)} {k}' for k, v in r['leftovers'].items())
          or 'nothing') for r in rows])
    biggest = max(rows, key=lambda r: r['links'])
    per_link_ms = 1000 * (biggest['ready_s'] + biggest['teardown_s']) / \
        biggest['links']
    vswitchd = vswitchd_growth(rows)
    skip = ''.join(f" {s['spec']} was not built: scaled from the fabrics "
                   f"above, it would need ~{s['predicted_ready_s']:.0f} s to be "
                   f"ready (limit {MAX_READY_S:.0f} s)." for s in skipped)
    image = plot_builds(ctx.images / 'bench_scale_build.png', rows)
    return '\n\n'.join([
        '### Build, teardown and memory vs switch count',
        COMMAND,
        "One build of each fabric (unshaped links), timed by FabricNet; memory "
        "is the machine's in-use memory (MemTotal − MemAvailable, less the "
        "free pages parked in per-CPU lists, which swing by tens of MB on "
        "their own) and ovs-vswitchd's resident set, from just before the "
        "build (once the previous fabric is freed) to once the fabric is "
        "ready. After every teardown the section checks that nothing of "
        "ours is left on the machine." + skip,
        table,
        f"- Time is serial work: Mininet starts one shell per node and creates "
        f"one veth pair per link, one after another in one process, and "
        f"teardown waits for the kernel to close one AF_PACKET socket per "
        f"switch port (an RCU grace period each). Both grow with links — "
        f"{per_link_ms:.0f} ms per link, ready plus teardown, for "
        f"{biggest['spec']} — and more cores do not shorten them.",
        f"- Memory does not limit the fabric size, time does: "
        f"{biggest['spec']} added {biggest['memory_mb']:,.0f} MB on a "
        f"{machine['memory_gb']} GB machine. ovs-vswitchd runs with "
        f"`--mlockall` (Debian's default), so what it allocates is resident: "
        f"{vswitchd}. The rest is a shell per node, the namespaces and veths, "
        f"the controller and this process's Mininet objects; the machine-wide "
        f"figure also moves with whatever else runs on the machine meanwhile.",
        f"![build, teardown and memory vs switch count]({ctx.link(image)})"])


def vswitchd_growth(rows: list[dict]) -> str:
    """ovs-vswitchd's growth as a fixed part and a part per switch."""
    if len({r['switches'] for r in rows}) < 2:
        return f"+{rows[0]['vswitchd_mb']:.0f} MB for {rows[0]['switches']} switches"
    fit = statistics.linear_regression([r['switches'] for r in rows],
                                       [r['vswitchd_mb'] for r in rows])
    return (f"about {fit.intercept:.0f} MB once there is a bridge, then "
            f"{fit.slope:.2f} MB per switch (least squares over the table)")


def plot_builds(path: Path, rows: list[dict]) -> Path:
    fig, (times, memory) = plt.subplots(1, 2, figsize=(10, 4))
    by_k: dict[int, list[dict]] = {}
    for r in rows:
        by_k.setdefault(parse_topo_spec(r['spec']).kwargs()['k'], []).append(r)
    for i, (k, mine) in enumerate(by_k.items()):
        xs = [r['switches'] for r in mine]
        colour = 'C%d' % i       # one colour per k, one line style per measure
        times.plot(xs, [r['ready_s'] for r in mine], 'o-', color=colour,
                   label='ready, k=%d' % k)
        times.plot(xs, [r['teardown_s'] for r in mine], 's--', color=colour,
                   label='teardown, k=%d' % k)
        memory.plot(xs, [r['memory_mb'] for r in mine], 'o-', color=colour,
                    label='machine, k=%d' % k)
        memory.plot(xs, [r['vswitchd_mb'] for r in mine], 's--', color=colour,
                    label='ovs-vswitchd RSS, k=%d' % k)
    for ax, ylabel, title in ((times, 'seconds', 'Ready and teardown time'),
                              (memory, 'MB added', 'Memory of a running fabric')):
        ax.set_xlabel('switches')
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return charts.save(fig, path)


# -- 2. the fabric's packet capacity ----------------------------------------

@dataclass
class Probe:
    """A raw send socket on `src` and a receive socket on `dst`, plane 1."""
    fab: FabricNet
    src: str
    dst: str
    tx: socket.socket
    packets: list[bytes]
    carriers: list[str]
    hops: int

    def port_counts(self, host: str) -> tuple[int, int]:
        """(rx, tx) packets of the host's plane-1 port, from its own netns."""
        intf = self.fab.plan.host_ports[(host, 1)].intf
        with open('/proc/%d/net/dev' % self.fab.host_pid(host)) as f:
            for line in f:
                name, _, counters = line.partition(':')
                if name.strip() == intf:
                    fields = counters.split()
                    return int(fields[1]), int(fields[9])
        raise RuntimeError('%s has no port %s' % (host, intf))


def staged(spec: str) -> str:
    return spec + ',afxdp=1'


def built_spec(spec: str, port_type: str) -> str:
    """The spec a fabric with `port_type` switch ports is built from."""
    return staged(spec) if port_type == STAGED else spec


def probed_fabric(spec: str, src: str, dst: str, port_type: str,
                  stack: ExitStack) -> tuple[FabricNet, Probe]:
    """A running fabric of `spec` with its switch ports as `port_type`, and
    a probe from `src` to `dst` on it; both closed with `stack`. STAGED
    ports come from the spec (`staged(spec)`), the others are set here."""
    fab = stack.enter_context(FabricNet(parse_topo_spec(built_spec(spec, port_type))))
    if port_type == AFXDP:
        ovs.set_port_type(fab.switch_ports, port_type)
    return fab, open_probe(fab, src, dst, stack)


def open_probe(fab: FabricNet, src: str, dst: str, stack: ExitStack) -> Probe:
    plan = fab.plan
    paths = plan.paths(src, dst, 1)
    src_addr, dst_addr = (plan.host_ports[(h, 1)].address for h in (src, dst))
    with inside(fab.host_pid(src)):
        tx = stack.enter_context(socket.socket(
            socket.AF_INET6, socket.SOCK_RAW, IPPROTO_IPV6_IN_IPV6))
    with inside(fab.host_pid(dst)):
        # A bound port takes the packets in (and drops them once its buffer
        # is full) instead of answering each with an ICMPv6 error.
        rx = stack.enter_context(socket.socket(socket.AF_INET6,
                                               socket.SOCK_DGRAM))
        rx.setsockopt(socket.SOL_UDP, UDP_NO_CHECK6_RX, 1)
        rx.bind(('::', UDP_PORT))
    packets = [build_inner(src_addr, dst_addr, ev, bytes(PROBE_MRC_BYTES))
               for ev in range(PROBE_EVS)]
    return Probe(fab, src, dst, tx, packets, [p.carrier for p in paths],
                 len(paths[0].switches))


def send_paced(probe: Probe, rate: float | None,
               seconds: float) -> tuple[int, int, float]:
    """Send `rate` packets/s (None: as fast as this loop can), spraying over
    every path; returns (sent, send errors, elapsed)."""
    sent = errors = 0
    t0 = time.monotonic()
    end = t0 + seconds
    while (now := time.monotonic()) < end:
        due = SEND_BATCH if rate is None else \
            min(SEND_BATCH, int(rate * (now - t0)) - sent - errors)
        if due <= 0:
            time.sleep(PACE_SLEEP_S)
            continue
        for i in range(sent + errors, sent + errors + due):
            try:
                probe.tx.sendto(probe.packets[i % PROBE_EVS],
                                (probe.carriers[i % len(probe.carriers)], 0))
                sent += 1
            except OSError:
                errors += 1
    return sent, errors, time.monotonic() - t0


def vswitchd_cpu_s() -> float:
    """CPU time of ovs-vswitchd, all threads."""
    with open('/proc/%d/stat' % vswitchd_pid()) as f:
        fields = f.read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def datapath_threads() -> list[str]:
    """The threads that poll the userspace datapath's ports."""
    out = subprocess.run(['ovs-appctl', 'dpif-netdev/pmd-stats-show'],
                         capture_output=True, text=True).stdout
    return re.findall(r'^(main thread|pmd thread[^:]*):', out, re.M)


def capacity_point(probe: Probe, rate: float | None, seconds: float) -> dict:
    tx0 = probe.port_counts(probe.src)[1]
    rx0 = probe.port_counts(probe.dst)[0]
    health0, vswitchd0 = HealthSample.now(), vswitchd_cpu_s()
    sent, errors, elapsed = send_paced(probe, rate, seconds)
    health = health_between(health0, HealthSample.now(), [])
    vswitchd = (vswitchd_cpu_s() - vswitchd0) / elapsed
    time.sleep(DRAIN_S)
    entered = probe.port_counts(probe.src)[1] - tx0
    delivered = probe.port_counts(probe.dst)[0] - rx0
    return {'offered_pps': rate, 'sent_pps': sent / elapsed,
            'send_errors': errors, 'entered_pps': entered / elapsed,
            'delivered_pps': delivered / elapsed,
            'loss': 1 - delivered / entered if entered else 0.0,
            'packet_hops_per_s': delivered * probe.hops / elapsed,
            'machine_cpu_busy': health['machine_cpu_busy'],
            'sender_cpu': health['endpoint_process_cpu'],
            'vswitchd_cpu': vswitchd,
            'lost_upcalls': health['ovs_lost_upcalls'],
            'flagged': health['saturated']}


def measure_capacity(ctx: BenchContext) -> list[dict]:
    fabrics = [(*f, 'system') for f in CAPACITY_FABRICS]
    offered = ovs.interface_types()
    fabrics += [(*CAPACITY_FABRICS[-1], t) for t in (AFXDP, STAGED) if t in offered]
    rates = (20_000,) if ctx.quick else CAPACITY_RATES
    seconds = 1.0 if ctx.quick else CAPACITY_STEP_S
    rounds = 1 if ctx.quick else CAPACITY_ROUNDS
    return [capacity_of(ctx, spec, src, dst, rates, seconds, port_type, (n, rounds))
            for n in range(rounds)
            for spec, src, dst, port_type in (fabrics[:1] if ctx.quick else fabrics)]


def capacity_of(ctx: BenchContext, spec: str, src: str, dst: str,
                rates: Sequence[int | None], seconds: float,
                port_type: str = 'system', round_of: tuple[int, int] = (0, 1)) -> dict:
    """`round_of`: (this round, of how many), from 0 (CAPACITY_ROUNDS)."""
    points = []
    which = ' (round %d of %d)' % (round_of[0] + 1, round_of[1]) if round_of[1] > 1 else ''
    with ExitStack() as stack:
        fab, probe = probed_fabric(spec, src, dst, port_type, stack)
        threads = datapath_threads()
        plan = fab.plan
        # A datapath port per switch end of every link (bridges' own
        # internal ports not counted).
        ports = 2 * len(plan.links) + len(plan.host_ports)

        def measure(rate: int | None) -> dict:
            point = capacity_point(probe, rate, seconds)
            points.append(point)
            ctx.say(KEY, '%s, %s ports%s: offered %s pkt/s, sent %.0f, delivered '
                    '%.0f (%.1f%% lost), ovs-vswitchd %.0f%% of a core' % (
                        spec, port_type, which,
                        '%d' % rate if rate else 'max',
                        point['sent_pps'], point['delivered_pps'],
                        100 * point['loss'], 100 * point['vswitchd_cpu']))
            return point

        for rate in rates:
            measure(rate)
        find_the_knee(points, measure)
    return {'spec': built_spec(spec, port_type), 'src': src, 'dst': dst, 'hops': probe.hops,
            'port_type': port_type, 'round': round_of[0],
            'switches': len(plan.switches), 'ports': ports, 'seconds': seconds,
            'frame_bytes': PROBE_FRAME_BYTES, 'datapath_threads': threads,
            'points': sorted(points, key=lambda p: (p['offered_pps'] is None,
                                                    p['offered_pps'] or 0))}


def find_the_knee(points: list[dict], measure: Callable[[int], dict]) -> None:
    """Halve the gap between the highest loss-free offered rate and the
    lowest lossy one above it KNEE_STEPS times: the ladder doubles, so on its
    own it could understate the loss-free rate by up to half."""
    paced = [p for p in points if p['offered_pps']]
    fine = [p['offered_pps'] for p in paced if p['loss'] < LOSSLESS]
    lossy = [p['offered_pps'] for p in paced if p['loss'] >= LOSSLESS]
    if not fine:
        return
    low = max(fine)
    high = min((rate for rate in lossy if rate > low), default=None)
    if high is None:
        return
    for _ in range(KNEE_STEPS):
        rate = int(round((low + high) / 2, -3))
        if rate in (low, high):
            return
        if measure(rate)['loss'] < LOSSLESS:
            low = rate
        else:
            high = rate


def measure_qdisc_bypass(ctx: BenchContext) -> list[dict]:
    """Per port type: packets the switch ports of a shaped fabric sent, and
    how many of them their root qdisc (the HTB that shapes the link) saw."""
    offered = ovs.interface_types()
    if ctx.quick or AFXDP not in offered:
        return []
    spec, src, dst = BYPASS_FABRIC
    rows = []
    for port_type in [t for t in ('system', AFXDP, STAGED) if t in offered]:
        with ExitStack() as stack:
            fab, probe = probed_fabric(spec, src, dst, port_type, stack)
            queues = fab.port_queues
            before = switch_port_counts(queues)
            sent, _, _ = send_paced(probe, BYPASS_PPS, BYPASS_S)
            time.sleep(DRAIN_S)
            after = switch_port_counts(queues)
        sent_by_ports, through_qdisc = (sum(after[p][i] - before[p][i] for p in after)
                                        for i in (0, 1))
        rows.append({'port_type': port_type, 'probe_packets': sent,
                     'switch_port_tx': sent_by_ports, 'through_qdisc': through_qdisc})
        ctx.say(KEY, '%s ports on %s: the switch ports sent %d packets, their '
                'qdiscs saw %d' % (port_type, spec, sent_by_ports, through_qdisc))
    return rows


def switch_port_counts(queues: dict[str, str]) -> dict[str, tuple[int, int]]:
    """Port -> (packets it transmitted, packets the root qdisc of its
    queue device sent); `queues`: port -> queue device (FabricNet.port_queues)."""
    out = subprocess.run(['tc', '-s', '-j', 'qdisc', 'show'], capture_output=True,
                         text=True, check=True).stdout
    qdisc = {q['dev']: q.get('packets', 0) for q in json.loads(out) if q.get('root')}
    counts = {}
    for port, queue in queues.items():
        counts[port] = (tx_packets(port), qdisc.get(queue, 0))
    return counts


# How each AF_XDP row of the capacity table was built, for its note.
PORT_TYPE_TEXT = {
    AFXDP: f"`{AFXDP}` switch ports (AF_XDP in generic mode, polled by the same "
           f"main thread)",
    STAGED: f"`afxdp=1` (AF_XDP ports in native mode polled by a PMD thread that "
            f"may sleep {ovs.PMD_MAX_SLEEP_US} µs when idle, each link staged "
            f"so its queue stays in the kernel: testbed/fabric/port_stage.py)",
}


def afxdp_note(capacities: list[dict]) -> str:
    """The same fabric with system and AF_XDP switch ports, side by side."""
    fat_trees = {port_type(rounds[0]): rounds for rounds in fabric_rounds(capacities)
                 if rounds[0]['spec'] in (FIDELITY_TOPOLOGY, staged(FIDELITY_TOPOLOGY))}
    system = fat_trees.get('system')
    if system is None or not median_lossless(system):
        return ''
    return '\n\n'.join(afxdp_versus(system, fat_trees[t], t) for t in (AFXDP, STAGED)
                        if t in fat_trees and median_lossless(fat_trees[t]))


def afxdp_versus(system: list[dict], other: list[dict], kind: str) -> str:
    """`other`'s loss-free rate over `system`'s: the median of the rounds' ratios, each
    round's two fabrics measured one after the other."""
    ratios = [lossless_hops(o) / lossless_hops(s)
              for s, o in zip(system, other) if lossless_hops(s)]
    per_round = (f" (median of {len(ratios)} rounds; per round "
                 f"{', '.join('%.1f×' % r for r in ratios)})" if len(ratios) > 1 else '')
    low = [min(rounds[0]['points'], key=lambda p: p['entered_pps'])
           for rounds in (system, other)]
    return (f"- `{FIDELITY_TOPOLOGY}` with {PORT_TYPE_TEXT[kind]} against `system` "
            f"ports, side by side in this run: loss-free up to "
            f"~{median_lossless(other):,.0f} packet-hops/s against "
            f"~{median_lossless(system):,.0f}, "
            f"**{statistics.median(ratios):.1f}×**{per_round}; "
            f"ovs-vswitchd at {low[1]['vswitchd_cpu']:.0%} of a core against "
            f"{low[0]['vswitchd_cpu']:.0%} at {low[0]['entered_pps']:,.0f} pkt/s: "
            f"an idle AF_XDP port costs a look at a ring in memory, an idle "
            f"`system` port a system call on every turn of the main loop.")


def bypass_text(rows: list[dict]) -> str:
    if not rows:
        return ''
    by_type = {r['port_type']: r for r in rows}
    cells = ['%s ports: the switch ports sent %d packets and their qdiscs saw %d'
             % (t, r['switch_port_tx'], r['through_qdisc']) for t, r in by_type.items()]
    return (f"- Shaping needs the qdisc: on `{BYPASS_FABRIC[0]}` a {BYPASS_PPS} pkt/s "
            f"probe for {BYPASS_S:g} s, {'; '.join(cells)} (for `{STAGED}` ports, "
            f"the qdiscs of the link stages where they queue). AF_XDP transmits "
            f"past the port's own qdisc (and the tc egress hook of the "
            f"switch-port program); `afxdp=1` puts each link's queue, the "
            f"switch-port program and the fault filters on a stage in front of "
            f"the receiving port, which AF_XDP does not skip.")


def peak(capacity: dict) -> dict:
    return max(capacity['points'], key=lambda p: p['packet_hops_per_s'])


def lossless(capacity: dict) -> dict | None:
    fine = [p for p in capacity['points'] if p['loss'] < LOSSLESS]
    return max(fine, key=lambda p: p['packet_hops_per_s']) if fine else None


def port_type(c: dict) -> str:
    return c.get('port_type', 'system')     # raw data of a run before port types


def fabric_rounds(capacities: list[dict]) -> list[list[dict]]:
    """Each capacity fabric's rounds (CAPACITY_ROUNDS), in the order measured."""
    fabrics: dict[tuple[str, str], list[dict]] = {}
    for c in capacities:
        fabrics.setdefault((c['spec'], port_type(c)), []).append(c)
    return list(fabrics.values())


def first_round(capacities: list[dict]) -> list[dict]:
    return [c for c in capacities if c.get('round', 0) == 0]   # no 'round': one round


def lossless_hops(capacity: dict) -> float:
    clean = lossless(capacity)
    return clean['packet_hops_per_s'] if clean else 0.0


def median_lossless(rounds: list[dict]) -> float:
    """One fabric's loss-free packet-hops/s, the median of its rounds (0: none)."""
    return statistics.median(lossless_hops(c) for c in rounds)


def median_peak(rounds: list[dict]) -> float:
    return statistics.median(peak(c)['packet_hops_per_s'] for c in rounds)


def system_ports(capacities: list[dict]) -> list[list[dict]]:
    """The rounds of each fabric with `system` switch ports."""
    return [rounds for rounds in fabric_rounds(capacities)
            if port_type(rounds[0]) == 'system']


def capacity_text(ctx: BenchContext, capacities: list[dict],
                  bypass: list[dict]) -> str:
    table = md_table(
        ['fabric', 'offered', 'sender achieved', 'entered fabric',
         'delivered', 'lost', 'packet-hops/s', 'machine CPU', 'sender CPU',
         'ovs-vswitchd CPU', 'lost upcalls', 'health gate'],
        [(f"{c['spec']} ({c['ports']} {port_type(c)} ports)",
          f"{int(p['offered_pps']):,} pkt/s" if p['offered_pps'] else 'flat out',
          f"{p['sent_pps']:,.0f}", f"{p['entered_pps']:,.0f}",
          f"{p['delivered_pps']:,.0f}", f"{p['loss']:.1%}",
          f"{p['packet_hops_per_s']:,.0f}", f"{p['machine_cpu_busy']:.0%}",
          f"{p['sender_cpu']:.0%}", f"{p['vswitchd_cpu']:.0%}",
          p['lost_upcalls'], 'saturated' if p['flagged'] else 'ok')
         for c in first_round(capacities) for p in c['points']])
    threads = ' and '.join(capacities[0]['datapath_threads']) or 'no thread'
    pmd = next((c for c in capacities if port_type(c) == STAGED), None)
    points = [p for c in capacities for p in c['points']]
    flat_out = [p['sent_pps'] for p in points if p['offered_pps'] is None]
    missed = [p for p in points if p['loss'] >= LOSSLESS and not p['flagged']]
    image = plot_capacity(ctx.images / 'bench_scale_capacity.png', capacities)
    notes = [capacity_note(rounds) for rounds in fabric_rounds(capacities)] + [
        afxdp_note(capacities), bypass_text(bypass)] + [
        f"- `ovs-appctl dpif-netdev/pmd-stats-show` lists the threads that "
        f"poll the datapath's ports: {threads}. Veth ports are `system` ports, "
        f"read through AF_PACKET sockets by the main thread, so one thread "
        f"forwards the whole fabric, and ovs-vswitchd sits near one core as "
        f"soon as traffic is steady — the more ports, the sooner. What it does "
        f"not read in time is dropped by the kernel before OVS sees it: no "
        f"upcall is lost." + (
            f" On the `afxdp=1` fabric: {' and '.join(pmd['datapath_threads'])}."
            if pmd else '')]
    if flat_out:
        notes.append(
            f"- The sender was not the limit where its achieved rate matches "
            f"the offered one: flat out, this one Python loop sends "
            f"~{max(flat_out):,.0f} pkt/s.")
    if missed:
        kinds = sorted({port_type(c) for c in capacities for p in c['points'] if p in missed})
        notes.append(
            f"- The health gate passed {len(missed)} rows of the rounds although "
            f"they lost ≥ {LOSSLESS:.0%} ({', '.join(kinds)} ports): a saturated "
            f"datapath thread shows neither as lost upcalls nor as a machine "
            f"above {BUSY_LIMIT:.0%} busy while the other core has room. The "
            f"gate counts what `system` ports' sockets and `afxdp=1` ports' "
            f"AF_XDP rings drop unread; `{AFXDP}` ports (generic XDP), which no "
            f"fabric builds, drop where it does not look.")
    return '\n\n'.join([
        '### Packet capacity of the fabric',
        COMMAND,
        f"Unshaped fabrics (plain veths; on the `afxdp=1` fabric each link "
        f"staged, nothing shaped). One process sends "
        f"{PROBE_FRAME_BYTES}-byte frames (the MTU, like a full MRC data "
        f"packet: outer IPv6, inner IPv6 + UDP to port {UDP_PORT}, "
        f"{PROBE_EVS} source ports) from one host's raw IPv6-in-IPv6 socket "
        f"to another's on plane 1, alternating over every path's uSID carrier, "
        f"paced for {capacities[0]['seconds']:g} s per row, and counts packets "
        f"at both hosts' ports. The offered rate doubles from row to row; then "
        f"up to {KNEE_STEPS} more rows halve the gap between the last loss-free "
        f"rate and the first lossy one. packet-hops/s = delivered × switches per path. "
        f"Ports: the datapath's switch ports. Machine CPU is the share of all "
        f"{os.cpu_count()} cores busy; sender and ovs-vswitchd CPU are shares "
        f"of one core. *Health gate*: the verdict the emulator-health check "
        f"would give a trial with these counters. " + rounds_caption(capacities),
        table, rounds_table(capacities), *[note for note in notes if note],
        f"![fabric packet capacity]({ctx.link(image)})"])


def round_count(capacities: list[dict]) -> int:
    return 1 + max(c.get('round', 0) for c in capacities)


def rounds_caption(capacities: list[dict]) -> str:
    rounds = round_count(capacities)
    if rounds == 1:
        return ''
    return (f"Each fabric was measured in {rounds} rounds, one round of every fabric "
            f"after the other (the loss-free rate of one knee search moves by a third "
            f"from run to run on this shared machine); the table shows the first "
            f"round, the table after it every round's loss-free rate, and the notes "
            f"below the rounds' medians.")


def rounds_table(capacities: list[dict]) -> str:
    fabrics = fabric_rounds(capacities)
    count = round_count(capacities)
    if count == 1:
        return ''
    return md_table(
        ['fabric', *['loss-free, round %d' % (n + 1) for n in range(count)],
         'loss-free, median', 'at most, median'],
        [(f"{rounds[0]['spec']} ({port_type(rounds[0])} ports)",
          *[f"{lossless_hops(c):,.0f}" for c in rounds],
          *[''] * (count - len(rounds)),
          f"{median_lossless(rounds):,.0f}", f"{median_peak(rounds):,.0f}")
         for rounds in fabrics])


def capacity_note(rounds: list[dict]) -> str:
    c = rounds[0]
    top, clean = median_peak(rounds), median_lossless(rounds)
    slowest = min(c['points'], key=lambda p: p['entered_pps'])
    return (f"- `{c['spec']}` ({c['ports']} {port_type(c)} ports), {c['src']} → "
            f"{c['dst']} "
            f"over {c['hops']} switches: at most "
            f"~{top:,.0f} packet-hops/s ({top / c['hops']:,.0f} pkt/s)" + (
                f", loss-free (< {LOSSLESS:.0%}) up to ~{clean:,.0f}" if clean else '') +
            f"; ovs-vswitchd used {slowest['vswitchd_cpu']:.0%} of a core "
            f"already at {slowest['entered_pps']:,.0f} pkt/s.")


def plot_capacity(path: Path, capacities: list[dict]) -> Path:
    fig, ax = plt.subplots(figsize=(8, 4))
    top = max(p['entered_pps'] for c in capacities for p in c['points'])
    ax.plot([0, top], [0, top], '--', color='grey', label='no loss')
    for rounds in fabric_rounds(capacities):
        color = None
        for c in rounds:
            points = sorted(c['points'], key=lambda p: p['entered_pps'])
            line, = ax.plot([p['entered_pps'] for p in points],
                            [p['delivered_pps'] for p in points], 'o-', color=color,
                            alpha=1.0 if color is None else 0.4, label=None if color else
                            '%s, %s ports, %d switch hops' % (c['spec'], port_type(c),
                                                              c['hops']))
            color = line.get_color()
    ax.set_xlabel('packets/s entering the fabric (%d-byte frames)'
                  % PROBE_FRAME_BYTES)
    ax.set_ylabel('packets/s delivered')
    ax.set_title('Unshaped fabrics: what the userspace datapath forwards'
                 + ('' if round_count(capacities) == 1 else ' (later rounds pale)'))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return charts.save(fig, path)


# -- 3. the endpoint core's packets/s ---------------------------------------

def measure_endpoint(ctx: BenchContext) -> dict:
    """Median of endpoint_core runs, while no fabric runs: the machine's run
    lock keeps other fabrics (and their datapath thread) off the cores."""
    size_mib, repeat = (2, 1) if ctx.quick else (32, 3)
    lock = RunLock()
    lock.acquire()
    try:
        result: dict = {'size_mib': size_mib, 'runs': repeat,
                        'core': native_core.status()}
        for cc in ('none', 'nscc'):
            result[cc] = _medians(endpoint_core.measure(size_mib, repeat, cc))
            ctx.say(KEY, 'endpoint core (%s), CC %s: %.0f pkt/s (best %.0f)' % (
                result['core'], cc, result[cc]['total_pps'],
                result[cc]['best_pps']))
        if result['core'] == 'compiled':     # the sources, side by side
            result['python'] = {cc: _medians(_python_core_runs(
                size_mib, repeat, cc)) for cc in ('none', 'nscc')}
            ctx.say(KEY, 'endpoint core (python), CC nscc: %.0f pkt/s'
                    % result['python']['nscc']['total_pps'])
    finally:
        lock.release()
    return result


def _medians(runs: list[dict]) -> dict:
    out = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    out['best_pps'] = max(r['total_pps'] for r in runs)
    return out


def _python_core_runs(size_mib: int, repeat: int, cc: str) -> list[dict]:
    """endpoint_core's runs with the Python sources (another process: this
    one has the compiled core loaded)."""
    done = subprocess.run(
        [sys.executable, '-m', 'testbed.bench.endpoint_core', '--json',
         '--size', str(size_mib), '--repeat', str(repeat), '--cc', cc],
        capture_output=True, text=True, check=True,
        env={**os.environ, native_core.ENV: 'python'})
    return json.loads(done.stdout)['runs']


def endpoint_text(endpoint: dict) -> str:
    cores = [(endpoint.get('core', 'python'), endpoint)]
    if 'python' in endpoint:
        cores.append(('python (the sources)', endpoint['python']))
    table = md_table(
        ['core', 'congestion control', 'data pkt/s', 'SACK/s', 'packets/s',
         'best run', 'payload'],
        [(core, label, f"{r['data_pps']:,.0f}", f"{r['sack_pps']:,.0f}",
          f"{r['total_pps']:,.0f}", f"{r['best_pps']:,.0f} pkt/s",
          f"{r['mib_s']:.0f} MiB/s")
         for core, figures in cores
         for label, r in (('none', figures['none']),
                          ('NSCC', figures['nscc']))])
    ratio = ('' if 'python' not in endpoint else
             f"- The compiled core (`docs/endpoint-core.md`) moves "
             f"{endpoint['nscc']['total_pps'] / endpoint['python']['nscc']['total_pps']:.1f}× "
             f"the packets of the Python sources per core with NSCC "
             f"({endpoint['none']['total_pps'] / endpoint['python']['none']['total_pps']:.1f}× "
             f"without CC), measured one after the other in this run.")
    return '\n\n'.join([
        '### Endpoint packets/s per core',
        COMMAND,
        f"The sans-IO endpoint core (`testbed/bench/endpoint_core.py`): one "
        f"{endpoint['size_mib']} MiB WRITE between two QPs in one process over "
        f"the in-process loopback, 2 planes × 4 paths, no loss; every packet "
        f"encoded, CRC-checked, decoded, placed and acknowledged. Median (and "
        f"best) of {endpoint['runs']} run(s) after a warm-up, taken while "
        f"holding the testbed's run lock, so no fabric ran meanwhile; other "
        f"work on the machine still shows in the spread.",
        table,
        "- Both ends of the protocol share one Python thread, so this is one "
        "core's worth, bounded by Python's per-call overhead. An emulated run "
        "drives all its hosts' endpoints from one such thread, which also "
        "makes every socket system call: this is its ceiling, whatever the "
        "number of cores.", *([ratio] if ratio else [])])


# -- 4. where fidelity stops ------------------------------------------------

def measure_fidelity(ctx: BenchContext) -> list[dict]:
    sweeps = [('system', (10.0,) if ctx.quick else FIDELITY_RATES, MTU)]
    if not ctx.quick and STAGED in ovs.interface_types():
        sweeps += [(STAGED, STAGED_FIDELITY_RATES, MTU),
                   (STAGED, DEFAULT_FABRIC_RATES, DEFAULT_MTU)]
    rows = []
    for ports, rates, mtu in sweeps:
        for rate in rates:
            size_mb = 0.3 if ctx.quick else \
                TRIAL_IDEAL_S * FIDELITY_PLANES * rate / 8
            rows.append(fidelity_trial(ctx, rate, size_mb, ports, mtu))
            say_fidelity(ctx, rows[-1])
    return rows


def say_fidelity(ctx: BenchContext, row: dict) -> None:
    ctx.say(KEY, 'fidelity %g Mbit/s, %s ports, mtu %d: %.0f%% of ideal, machine %.0f%% '
                'busy, endpoint %.0f%% and ovs-vswitchd %.0f%% of a core, %s '
                'after %d attempt%s' % (
                    row['rate_mbit'], fidelity_ports(row), fidelity_mtu(row),
                    100 * row['fraction'],
                    100 * row['health']['machine_cpu_busy'],
                    100 * row['health']['endpoint_process_cpu'],
                    100 * row['vswitchd_cpu'],
                    'trusted' if row['trusted'] else 'NOT trusted',
                    row['attempts'], 's' if row['attempts'] > 1 else ''))


def unread_wait(row: dict) -> str:
    """The round-trip wait in the datapath's unread sockets, in ms and base
    RTTs of the trial's fabric; '—' where it was not measured (a run before
    it was)."""
    wait = row['health'].get('datapath_unread_wait_s')
    if wait is None:
        return '—'
    rtt = base_rtt_s(row['rate_mbit'] * 1e6, row['hops'] + 1, fidelity_mtu(row))
    return f"{1e3 * wait:.1f} ms ({wait / rtt:.2f} RTT)"


def fidelity_ports(row: dict) -> str:
    return row.get('ports', 'system')       # raw data of a run before afxdp=1


def fidelity_mtu(row: dict) -> int:
    return row.get('mtu', MTU)              # ... or before the default fabric's sweep


def fidelity_trial(ctx: BenchContext, rate: float, size_mb: float,
                   ports: str = 'system', mtu: int = MTU) -> dict:
    """One MRC permutation; run_trial re-runs saturated attempts, and the
    last attempt's health is what this sweep is after. ovs-vswitchd's CPU
    is averaged over every attempt."""
    ideal_s = size_mb * 8 / (FIDELITY_PLANES * rate)
    topology = built_spec(FIDELITY_TOPOLOGY, ports) + (
        ',mtu=%d' % mtu if mtu != MTU else '')
    with FabricNet(fabric_spec(topology, rate)) as fab:
        sc = scenario('bench-emulator-scale', topology, rate, {
            'type': 'permutation', 'hosts': FIDELITY_HOSTS,
            'size_mb': size_mb}, duration_s=3 * ideal_s + 2, seed=500)
        cpu0, t0 = vswitchd_cpu_s(), time.monotonic()
        trial = run_trial(ctx, KEY, fab, sc, 'mrc', '%g Mbit/s' % rate, 0)
        vswitchd = (vswitchd_cpu_s() - cpu0) / (time.monotonic() - t0)
        flows = trial.run.flows
        hops = statistics.mean(len(fab.plan.paths(f.src, f.dst, 1)[0].switches)
                               for f in flows)
    ends = [f.finished if f.finished is not None else trial.run.elapsed_s
            for f in flows]
    makespan = max(max(ends) - min(f.started for f in flows), 1e-9)
    delivered = sum(f.delivered for f in flows)
    sent_packets = (delivered + trial.run.retransmitted_bytes) / max_payload(mtu)
    ideal_bps = len(FIDELITY_HOSTS) * FIDELITY_PLANES * rate * 1e6
    return {'rate_mbit': rate, 'size_mb': size_mb, 'hops': hops, 'ports': ports,
            'mtu': mtu, 'ideal_mbit': ideal_bps / 1e6,
            'offered_packet_hops': ideal_bps / (data_frame_bytes(mtu) * 8) * hops,
            'fraction': delivered * 8 / makespan / ideal_bps,
            'data_packet_hops': sent_packets / makespan * hops,
            'makespan_s': makespan,
            'completed': all(f.status == 'done' for f in flows),
            'vswitchd_cpu': vswitchd, 'attempts': trial.attempts,
            'trusted': trial.trusted, 'health': trial.health}


def fidelity_text(all_rows: list[dict], capacities: list[dict],
                  endpoint: dict) -> str:
    sacks_per_data = endpoint['none']['sack_pps'] / endpoint['none']['data_pps']
    rows = [r for r in all_rows if fidelity_ports(r) == 'system']
    staged_rows = [r for r in all_rows
                   if fidelity_ports(r) == STAGED and fidelity_mtu(r) == MTU]
    default_rows = [r for r in all_rows if fidelity_mtu(r) == DEFAULT_MTU]
    table = md_table(
        ['switch ports', 'link rate',
         f"ideal ({len(FIDELITY_HOSTS)} × {FIDELITY_PLANES} × rate)",
         'offered data packet-hops/s',
         'achieved data packet-hops/s', 'goodput / ideal', 'machine CPU',
         'endpoint CPU', 'ovs-vswitchd CPU', 'unread wait / round trip',
         'lost upcalls', 'attempts', 'verdict'],
        [(fidelity_ports(r) + ('' if fidelity_mtu(r) == MTU else f", mtu {fidelity_mtu(r)}"),
          f"{r['rate_mbit']:g} Mbit/s", f"{r['ideal_mbit']:g} Mbit/s",
          f"{r['offered_packet_hops']:,.0f}", f"{r['data_packet_hops']:,.0f}",
          f"{r['fraction']:.0%}", f"{r['health']['machine_cpu_busy']:.0%}",
          f"{r['health']['endpoint_process_cpu']:.0%}",
          f"{r['vswitchd_cpu']:.0%}", unread_wait(r),
          r['health']['ovs_lost_upcalls'],
          r['attempts'], 'trusted' if r['trusted'] else
          'rejected: ' + '; '.join(r['health']['reasons']))
         for r in all_rows])
    fat_tree = [rounds for rounds in system_ports(capacities)
                if rounds[0]['spec'] == FIDELITY_TOPOLOGY]
    return '\n\n'.join(part for part in [
        '### Where fidelity stops',
        COMMAND,
        f"MRC permutation traffic among the {len(FIDELITY_HOSTS)} hosts of "
        f"pods 0 and 2 of `{FIDELITY_TOPOLOGY}` (every flow crosses the core: "
        f"{rows[0]['hops']:g} switches per path), one fabric per link rate, "
        f"each sender moving what it could move in {TRIAL_IDEAL_S:g} s at line "
        f"rate. Ideal: every sender at its NIC rate ({FIDELITY_PLANES} planes × "
        f"link rate); MRC's payload ceiling is "
        f"{MRC_PAYLOAD / (MRC_FRAME_BYTES + SACK_FRAME_BYTES):.0%} of it (each "
        f"link also carries the SACKs of a flow going the other way). "
        f"Offered packet-hops count "
        f"data packets at line rate ({MRC_FRAME_BYTES}-byte frames) × switches "
        f"per path, achieved ones what was sent (payload and retransmissions "
        f"over {MRC_PAYLOAD}-byte packets) in the time the flows ran; SACKs "
        f"add {sacks_per_data:.2f} small packets per data packet on the way "
        f"back. ovs-vswitchd CPU is over the whole trial. A trial flagged "
        f"saturated is re-run up to 3 times; the table shows the last "
        f"attempt. *system*: the switch ports every fabric has by default; "
        f"*{STAGED}*: the same fabric built with `afxdp=1`; *mtu {DEFAULT_MTU}*: "
        f"with the default scenario's MTU too ({data_frame_bytes(DEFAULT_MTU):,}-byte "
        f"frames, {max_payload(DEFAULT_MTU):,} bytes of payload).",
        table,
        verdict_paragraph(rows, fat_tree[0] if fat_tree else None, sacks_per_data),
        staged_paragraph(rows, staged_rows),
        default_fabric_paragraph(default_rows),
        bigger_machine_paragraph(capacities, endpoint, rows)] if part)


def default_fabric_paragraph(rows: list[dict]) -> str:
    """Where fidelity stops on the default scenario's fabric (AF_XDP ports, its MTU)."""
    if not rows:
        return ''
    short = past_the_limit(rows)
    kept = rows[:len(rows) - len(short)] or rows[:1]
    last = kept[-1]
    stop = (f"; at {short[0]['rate_mbit']:g} Mbit/s ("
            f"~{short[0]['offered_packet_hops']:,.0f}) it moved "
            f"{short[0]['fraction']:.0%}, " + (
                'trusted' if short[0]['trusted'] else
                'rejected: ' + '; '.join(short[0]['health']['reasons']))
            if short else ': this sweep did not reach the emulator\'s limit')
    upto = '' if last is rows[0] else (
        f" and {last['fraction']:.0%} at {last['rate_mbit']:g} Mbit/s")
    return (f"**On the default scenario's fabric** (`afxdp=1`, mtu {DEFAULT_MTU}): "
            f"MRC moved {rows[0]['fraction']:.0%} of ideal at "
            f"{rows[0]['rate_mbit']:g} Mbit/s per link{upto} "
            f"(~{last['offered_packet_hops']:,.0f} data packet-hops/s offered, "
            f"{'trusted' if last['trusted'] else 'rejected'}){stop}. Each packet "
            f"carries {max_payload(DEFAULT_MTU) / max_payload(MTU):.1f}× the payload "
            f"of a {MTU:,}-byte one for about the same work of the endpoint loop "
            f"and the PMD thread.")


def staged_paragraph(rows: list[dict], staged_rows: list[dict]) -> str:
    """The afxdp=1 sweep against the system one at the same link rates."""
    by_rate = {r['rate_mbit']: r for r in rows}
    pairs = [(by_rate[r['rate_mbit']], r) for r in staged_rows if r['rate_mbit'] in by_rate]
    if not pairs:
        return ''
    cells = '; '.join(
        f"at {s['rate_mbit']:g} Mbit/s {a['fraction']:.0%} of ideal against "
        f"{s['fraction']:.0%}, ovs-vswitchd {a['vswitchd_cpu']:.0%} of a core "
        f"against {s['vswitchd_cpu']:.0%}, machine {a['health']['machine_cpu_busy']:.0%} "
        f"busy against {s['health']['machine_cpu_busy']:.0%}, endpoint loop "
        f"{a['health']['endpoint_process_cpu']:.0%} of a core against "
        f"{s['health']['endpoint_process_cpu']:.0%} "
        f"({'trusted' if a['trusted'] else 'rejected'} against "
        f"{'trusted' if s['trusted'] else 'rejected'})" for s, a in pairs)
    rejected = [a for _, a in pairs if not a['trusted']]
    endpoint_bound = rejected and all(
        any(reason.startswith('endpoint loop used') for reason in a['health']['reasons'])
        for a in rejected)
    return (f"**With `afxdp=1`** (each pair side by side in this run, `{STAGED}` "
            f"first): {cells}." + (
                f" Every rejected `afxdp=1` trial had its endpoint loop past the "
                f"gate's {PROCESS_LIMIT:.0%} of a core: there the endpoint, not the "
                f"datapath, sets the limit (endpoint packets/s above)."
                if endpoint_bound else ''))


def verdict_paragraph(rows: list[dict], fat_tree: list[dict] | None,
                      sacks_per_data: float) -> str:
    """`fat_tree`: the rounds of the capacity sweep's fat-tree with system ports."""
    base = rows[0]
    short = past_the_limit(rows)
    if not short:
        return (f"**Where the 2-core emulator stops being faithful.** MRC kept "
                f"{base['fraction']:.0%} of ideal or more up to "
                f"{rows[-1]['rate_mbit']:g} Mbit/s per link "
                f"(~{rows[-1]['offered_packet_hops']:,.0f} data packet-hops/s "
                f"offered): this sweep did not reach the emulator's limit.")
    first = short[0]
    kept = rows[:rows.index(first)]      # the lowest rate at least
    budget = kept[-1]['offered_packet_hops']
    with_sacks = 1 + sacks_per_data
    carried = max(r['data_packet_hops'] for r in rows)
    bare = (f"; the bare fat-tree forwards ~{median_lossless(fat_tree):,.0f} "
            f"packet-hops/s without loss (capacity table)"
            if fat_tree and median_lossless(fat_tree) else '')
    trusted = [r for r in short if r['trusted']]
    return ' '.join([
        f"**Where the 2-core emulator stops being faithful.** At "
        f"{base['rate_mbit']:g} Mbit/s per link MRC moved "
        f"{base['fraction']:.0%} of ideal in these short trials (the slowest "
        f"of 8 flows sets the time)"
        + (f", and about as much up to {kept[-1]['rate_mbit']:g} Mbit/s "
           f"(~{budget:,.0f} data packet-hops/s offered)"
           if len(kept) > 1 else '') +
        f"; at {first['rate_mbit']:g} Mbit/s "
        f"(~{first['offered_packet_hops']:,.0f}) "
        + (f"it fell to {first['fraction']:.0%}" if fell_short(first, base)
           else f"it still moved {first['fraction']:.0%}, but the health "
           f"gate rejected the trial") +
        f", and it fell to {rows[-1]['fraction']:.0%} at "
        f"{rows[-1]['rate_mbit']:g} Mbit/s. The emulator carried at most "
        f"~{carried:,.0f} data packet-hops/s of this traffic, "
        f"~{carried * with_sacks:,.0f} with the SACKs{bare}. The same two "
        f"cores also run the endpoint loop and the kernel's shaping and host "
        f"stacks, and ovs-vswitchd took "
        f"{min(r['vswitchd_cpu'] for r in rows):.0%}–"
        f"{max(r['vswitchd_cpu'] for r in rows):.0%} of a core at every rate.",
        f"On this machine, keep senders × planes × link rate ÷ frame size × "
        f"switches per path under ~{budget:,.0f} data packet-hops/s "
        f"(~{budget * with_sacks:,.0f} with the SACKs) and read a lower goodput above it as the "
        f"emulator's limit, not the transport's.",
        gate_sentence(trusted, short)])


def fell_short(row: dict, base: dict) -> bool:
    return row['fraction'] < KEPT_UP * base['fraction']


def past_the_limit(rows: list[dict]) -> list[dict]:
    """The rates from the first one whose goodput fell below KEPT_UP of the
    lowest rate's, or that the health gate rejected, on."""
    first = next((i for i, r in enumerate(rows[1:], 1)
                  if fell_short(r, rows[0]) or not r['trusted']), len(rows))
    return rows[first:]


def gate_sentence(trusted: list[dict], short: list[dict]) -> str:
    if not trusted:
        return ('The emulator-health gate flagged every trial past that '
                'point: those results are reported as rejected.')
    busiest = max(r['health']['machine_cpu_busy'] for r in trusted)
    endpoint = max(r['health']['endpoint_process_cpu'] for r in trusted)
    waits = [w for r in trusted
             if (w := r['health'].get('datapath_unread_wait_s')) is not None]
    unread = (f", packets at most {1e3 * max(waits):.1f} ms a round trip unread in "
              f"the datapath's sockets" if waits else '')
    return (f"The emulator-health gate trusted {len(trusted)} of those "
            f"{len(short)} trials (machine at most {busiest:.0%} busy, endpoint "
            f"at most {endpoint:.0%} of a core, no lost upcalls, at most "
            f"{DROP_LIMIT:.1%} of the packets left unread{unread}): within its "
            f"limits — {BUSY_LIMIT:.0%} of the machine, {PROCESS_LIMIT:.0%} of "
            f"one core, {1e3 * UNREAD_WAIT_LIMIT_S:g} ms of unread wait — "
            f"packets can still wait where the fabric does not model a queue "
            f"and the gate does not look (the veths' and the kernel's own "
            f"backlogs, for one), long enough for NSCC to back off. Read "
            f"those rows by the goodput column.")


def contention(short: list[dict]) -> str:
    """How busy the machine was where goodput fell, and what the two
    busiest users of it got."""
    if not short:
        return ''
    busy = [r['health']['machine_cpu_busy'] for r in short]
    share = max(max(r['health']['endpoint_process_cpu'], r['vswitchd_cpu'])
                for r in short)
    return (f": where goodput fell above, the machine was {min(busy):.0%}–"
            f"{max(busy):.0%} busy and neither the endpoint loop nor "
            f"ovs-vswitchd got more than {share:.0%} of a core")


def bigger_machine_paragraph(capacities: list[dict], endpoint: dict,
                             rows: list[dict]) -> str:
    threads = ' and '.join(capacities[0]['datapath_threads']) or 'one thread'
    by_ports = sorted(system_ports(capacities), key=lambda rounds: rounds[0]['ports'])
    trend = (f" Its ceiling also falls as the fabric grows: "
             f"~{median_peak(by_ports[0]):,.0f} packet-hops/s "
             f"with {by_ports[0][0]['ports']} ports, "
             f"~{median_peak(by_ports[-1]):,.0f} with "
             f"{by_ports[-1][0]['ports']}, consistent with one thread serving "
             f"every port."
             if len(by_ports) > 1 else '')
    nscc = endpoint['nscc']
    return (f"**What a bigger machine buys.** The datapath here is polled by "
            f"its {threads} only, so more cores do not raise the fabric's ceiling "
            f"as the testbed builds it today; a faster core raises it about in "
            f"proportion.{trend} More cores would stop the datapath thread, "
            f"the endpoint loop and the kernel (HTB shaping, SRv6 "
            f"decapsulation, the hosts' sockets) from taking turns on two "
            f"cores{contention(past_the_limit(rows))}. `afxdp=1` moves the "
            f"datapath onto a PMD thread (one per core of `pmd-cpu-mask`; "
            f"allowed to sleep when idle, so it gives a quiet core back), "
            f"with a few ports' worth of cost per packet instead of a system "
            f"call per port per turn (rows above). The "
            f"endpoint side does not scale with cores at all: one run is one "
            f"thread for all its hosts, ~{nscc['total_pps']:,.0f} "
            f"packets/s with NSCC on one core (measured above, before any "
            f"socket system call), ~{nscc['mib_s']:.0f} MiB/s of payload for "
            f"the whole run whatever the core count.")
