"""`mrc-testbed verify`: build a fabric, probe every path between host
pairs, and prove plane isolation from the switches' own packet counters.
`fabric='routed'` probes the routed mode instead: as many flows per pair
and plane as it has equal-cost paths, each with its own UDP source port
(`probe.routed_choices`); with links down, after the routes converged."""
from __future__ import annotations

import re
import subprocess
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field

from testbed.fabric.baseline import REVALIDATE_S
from testbed.fabric.net import FabricNet
from testbed.fabric.probe import (PathProber, all_pairs, routed_choices,
                                  sample_pairs)
from testbed.fabric.topo_spec import TopoSpec
from testbed.fabric.usid_plan import FabricPlan, Path

ALL_PAIRS_MAX_HOSTS = 32


@dataclass
class VerifyReport:
    topo: str
    datapath: str
    pairs: int
    fabric: str
    paths_total: int
    paths_ok: int
    probes_sent: int
    isolation_ok: bool
    isolation_leaks: list[str] = field(default_factory=list)
    failed_paths: list[dict] = field(default_factory=list)
    down_links: list[list[str]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.paths_ok == self.paths_total and self.isolation_ok

    def to_dict(self) -> dict:
        return dict(asdict(self), ok=self.ok)


def host_pairs(plan: FabricPlan) -> list[tuple[str, str]]:
    if len(plan.hosts) <= ALL_PAIRS_MAX_HOSTS:
        return all_pairs(plan.hosts)
    return sample_pairs(plan.hosts)


def verify_fabric(fab: FabricNet, pairs: list[tuple[str, str]] | None = None,
                  down_links: list[tuple[str, str]] = (),
                  fabric: str = 'srv6') -> VerifyReport:
    """Probe a running fabric, one plane at a time so that every switch's
    counters can show whether another plane's packets reached it."""
    plan = fab.plan
    pairs = pairs or host_pairs(plan)
    prober = PathProber(plan, {h: fab.host_pid(h) for h in plan.hosts})
    failed: list[Path] = []
    leaks: list[str] = []
    total = sent = 0
    t0 = time.monotonic()
    try:
        for plane in plan.planes:
            choices = routed_choices if fabric == 'routed' else FabricPlan.paths
            paths = [p for a, b in pairs for p in choices(plan, a, b, plane)]
            before = wait_quiet()
            result = prober.probe(paths)
            leaks += plane_leaks(plan, plane, before, switch_rx_packets())
            failed += [p for i, p in enumerate(paths) if i not in result.ok]
            total += len(paths)
            sent += result.sent
    finally:
        prober.close()
    return VerifyReport(
        topo=str(fab.spec), datapath=fab.datapath, pairs=len(pairs),
        fabric=fabric,
        paths_total=total, paths_ok=total - len(failed), probes_sent=sent,
        isolation_ok=not leaks, isolation_leaks=leaks,
        failed_paths=[asdict(p) for p in failed],
        down_links=[list(l) for l in down_links],
        timings=dict(fab.timings, probe_s=time.monotonic() - t0))


def verify(spec: TopoSpec, down_links: list[tuple[str, str]] = (),
           fabric: str = 'srv6') -> VerifyReport:
    fab = FabricNet(spec)
    with fab:
        for a, b in down_links:
            fab.set_link(a, b, up=False)
        if down_links and fabric == 'routed':
            time.sleep(fab.convergence_delay_s + REVALIDATE_S)
        report = verify_fabric(fab, down_links=down_links, fabric=fabric)
    report.timings['teardown_s'] = fab.timings['teardown_s']
    return report


_PORT_LINE = re.compile(r'^\s+port \d+: (\S+)')
_RX_LINE = re.compile(r'^\s+RX packets:(\d+)')


def switch_rx_packets() -> dict[str, int]:
    """Packets received per bridge, from one dump of the whole datapath."""
    out = subprocess.run(['ovs-appctl', 'dpctl/show', '-s'],
                         capture_output=True, text=True, timeout=30).stdout
    rx: dict[str, int] = defaultdict(int)
    port = None
    for line in out.splitlines():
        if m := _PORT_LINE.match(line):
            port = m.group(1)
        elif (m := _RX_LINE.match(line)) and port and '-eth' in port:
            rx[port.split('-eth')[0]] += int(m.group(1))
    return rx


def wait_quiet(interval_s: float = 0.1, limit_s: float = 3.0
               ) -> dict[str, int]:
    """Counters once no switch has received anything for `interval_s`:
    hosts announce multicast groups (MLD) for a moment after plumbing, and
    that chatter must not be mistaken for a probe crossing planes."""
    last = switch_rx_packets()
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        time.sleep(interval_s)
        now = switch_rx_packets()
        if now == last:
            break
        last = now
    return last


def plane_leaks(plan: FabricPlan, plane: int, before: dict[str, int],
                after: dict[str, int]) -> list[str]:
    """Switches of other planes that received anything while only `plane`
    was probed."""
    return ['plane %d probe reached %s (plane %d): %d packets' % (
        plane, name, info.plane, after.get(name, 0) - before.get(name, 0))
        for name, info in sorted(plan.switches.items())
        if info.plane != plane and after.get(name, 0) > before.get(name, 0)]
