"""Run a scenario: for each transport, build the fabric, run the workload,
inject the faults at their times, and record what happened.

Transports run one after another on identical fresh fabrics with the same
workload, seed and fault timeline, so they are compared side by side
without sharing the emulator's two cores.
"""
from __future__ import annotations

import random
import time
from contextlib import contextmanager, nullcontext
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from testbed.fabric.cpu_placement import endpoint_loop
from testbed.fabric.faults.catalogue import call_args
from testbed.fabric.net import FabricNet
from testbed.fabric.packet_capture import PacketCapture, capture_points
from testbed.fabric.topo_spec import parse_topo_spec
from testbed.nic.cc import cc_algorithm, registered_cc_algorithms
from testbed.nic.emulated_timescale import base_rtt_s, fabric_time
from testbed.nic.hardware_profile import HARDWARE_PROFILES, EmulatedTime
from testbed.workload import unread_backlog
from testbed.workload.base_rtt import measure_base_rtt
from testbed.workload.emulation_health import HealthSample, health_between, waits_watched
from testbed.workload.switch_counters import SwitchCounters
from testbed.workload.transports import transport

BIN_S = 0.01                 # timeline resolution: goodput per 10 ms
Progress = Callable[[str], None]


@dataclass
class FlowRecord:
    flow_id: int
    phase: int
    src: str
    dst: str
    size: int
    label: str = ''
    started: float | None = None
    finished: float | None = None
    status: str = 'pending'          # pending | running | done | failed
    error: str | None = None
    corrupt_bytes: int = 0
    delivered: int = 0
    start_offset: float = 0.0        # after its phase begins
    due: float | None = None         # run time at which it starts

    @property
    def fct(self) -> float | None:
        if self.finished is None or self.started is None:
            return None
        return self.finished - self.started


@dataclass
class TransportRun:
    transport: str
    repetition: int
    cc: str | None = None        # the congestion control it runs (Scenario.cc_of)
    qps_per_connection: int = 1  # Scenario.qps_of
    # The fabric's base RTT (with the hardware profile's delay, where its
    # transport applies it), and the profile's mapping: time figures in RTTs
    # and hardware us.
    base_rtt_s: float | None = None
    timescale: dict | None = None
    flows: list[FlowRecord] = field(default_factory=list)
    goodput_bins: list[float] = field(default_factory=list)      # bytes/bin
    plane_bins: dict[int, list[float]] = field(default_factory=dict)
    path_bytes: dict[str, int] = field(default_factory=dict)
    events: list[dict] = field(default_factory=list)
    fault_times: list[tuple[float, str]] = field(default_factory=list)
    phase_times: list[tuple[float, float]] = field(default_factory=list)
    steps: tuple[range, ...] = ()     # phase indexes of each measured step
    retransmitted_bytes: int = 0
    elapsed_s: float = 0.0
    aborted: str | None = None
    aborted_at: float | None = None
    health: dict = field(default_factory=dict)
    # The fabric's congestion signals (switch_counters), when it signals.
    signals: dict = field(default_factory=dict)        # settings
    switch_ports: dict[str, dict[str, int]] = field(default_factory=dict)
    switch_series: list = field(default_factory=list)  # (t, port -> (CE, trims))
    port_links: dict[str, tuple[str, str]] = field(default_factory=dict)
    port_planes: dict[str, int] = field(default_factory=dict)
    # NSCC's queueing-delay samples in quarters of its target (endpoints).
    delay_histogram: list[int] = field(default_factory=list)
    delay_target_s: float | None = None
    transport_counters: dict[str, int] = field(default_factory=dict)
    deployed_ack_timer: dict | None = None   # Driver.deployed_ack_timer
    # The fabric mode it ran on and that fabric's convergence delay (which
    # only the routed mode meets); the controller's port-status and group
    # changes are in `events` (source 'controller').
    fabric_mode: str = 'srv6'
    convergence_delay_s: float | None = None


def marks_last_hop(cc: str | None) -> bool:
    """Whether `cc` runs on a RoCE fabric's marks: its switches mark every
    port, the last hop into a host included (signals.SignalSettings); a
    property of the registered algorithm (testbed.nic.cc), none of the
    kernel's."""
    return cc in registered_cc_algorithms() and cc_algorithm(cc).marks_last_hop


def fabric_spec(topology: str, link_rate_mbit: float, cc: str | None = None):
    """The shaped spec a transport running `cc` gets its fabric from."""
    base = parse_topo_spec(topology)
    params = dict(base.params, bw=link_rate_mbit)
    if marks_last_hop(cc):
        params['mark_last'] = 1
    return parse_topo_spec(','.join([base.name] + ['%s=%s' % kv for kv in
                                                   sorted(params.items())]))


def apply_fault(injector, fault) -> None:
    """A scenario's Fault as the injector's call (a flap queues its steps,
    which the loop's `due()` applies)."""
    injector.apply(fault.kind, **call_args(fault.kind, fault.params))


class TransportRunner:
    """One transport, one repetition, on a fabric that lives for the run."""

    def __init__(self, scenario, transport: str, repetition: int,
                 progress: Progress, capture_dir: Path | None = None) -> None:
        """`capture_dir`: where the scenario's `capture:` pcaps go (none
        are written without it)."""
        self.sc = scenario
        self.capture_dir = capture_dir
        self.run = TransportRun(transport, repetition,
                                cc=scenario.cc_of(transport),
                                qps_per_connection=scenario.qps_of(transport))
        self.progress = progress
        self.rng = random.Random(scenario.seed + repetition)
        self.t0 = 0.0
        self._last_total = 0
        self._last_planes: dict[int, int] = {}
        self._current: list[FlowRecord] = []       # the running phase's flows
        self._waiting: deque[FlowRecord] = deque()  # ... not started yet, by start time

    def execute(self, build_workload, make_injector,
                fabric: FabricNet | None = None) -> TransportRun:
        """On a fresh fabric, or on `fabric` (running, of the scenario's
        spec: the interactive CLI's), which is then left running."""
        spec = fabric_spec(self.sc.topology, self.sc.link_rate_mbit,
                           self.run.cc)
        delay = {} if self.sc.convergence_delay_s is None else {
            'convergence_delay_s': self.sc.convergence_delay_s}
        info = transport(self.run.transport)
        self.run.fabric_mode = self.sc.fabric_mode(info.name) or info.fabric
        with nullcontext(fabric) if fabric else FabricNet(spec, **delay) as fab:
            self.run.convergence_delay_s = fab.convergence_delay_s
            phases = build_workload(fab.plan, self.rng)
            self.run.steps = tuple(getattr(phases, 'steps', ()))
            self.run.plane_bins = {p: [] for p in fab.plan.planes}
            injector = make_injector(fab, self._log)
            driver = info.driver(fab, self.sc.seed, self.run.fabric_mode,
                                 self.run.cc, self._timescale(fab),
                                 self.run.qps_per_connection)
            try:
                with self._capture(fab), endpoint_loop(fab.placement), \
                        waits_watched() as waits, \
                        unread_backlog.watched(fab.mtu) as unread:
                    self._loop(fab, driver, injector, phases, waits, unread)
            finally:
                injector.restore_all()
                self.run.retransmitted_bytes = driver.retransmitted_bytes()
                self.run.path_bytes = dict(driver.path_bytes)
                driver.close()
        return self.run

    def _capture(self, fab):
        """tcpdump on the scenario's capture points while the workload runs;
        stopped on every way out of the `with` (and killed with us)."""
        spec = self.sc.capture
        if spec is None or self.capture_dir is None:
            return nullcontext()
        capture = PacketCapture(capture_points(fab, spec.links, spec.hosts),
                                self.capture_dir, spec.snaplen)
        self._log({'event': 'capture', 'pcaps': [
            str(capture.pcap(p)) for p in capture.points]})
        return self._reporting_drops(capture)

    @contextmanager
    def _reporting_drops(self, capture: PacketCapture) -> Iterator[None]:
        """A pcap the kernel dropped packets from is not the whole traffic:
        the events say so, per capture point."""
        with capture:
            yield
        self._log({'event': 'capture_stopped',
                   'dropped_by_kernel': dict(capture.dropped)})

    def _log(self, event: dict) -> None:
        t = round(event.get('monotonic', time.monotonic()) - self.t0, 6)
        self.run.events.append(dict(event, t=t))
        if event.get('fault') not in (None, 'restore_all'):
            self.run.fault_times.append((t, event['fault']))

    def _timescale(self, fab: FabricNet) -> EmulatedTime | None:
        """The hardware profile's mapping for this run, recorded in it; None
        (and the fabric's own base RTT) without a profile, or for a
        transport that cannot apply one."""
        rate, links = fab.link_rate_bps, fab.plan.longest_path_links
        self.run.base_rtt_s = base_rtt_s(rate, links, fab.mtu)
        if not self.sc.hardware or not rate:
            return None
        if fab.measured_base_rtt_s is None:     # once per fabric, idle
            fab.measured_base_rtt_s = measure_base_rtt(fab)
        timescale = fabric_time(HARDWARE_PROFILES[self.sc.hardware], rate,
                                fab.measured_base_rtt_s, fab.mtu)
        applied = transport(self.run.transport).family == 'endpoint'
        self.run.timescale = dict(timescale.describe(), applied=applied)
        if not applied:
            self.run.timescale['why_not'] = ('the kernel stack has no delay '
                                             'stage, and netem is needed on '
                                             'the links')
            return None
        self.run.base_rtt_s = timescale.base_rtt_s
        return timescale

    def _loop(self, fab, driver, injector, phases, waits, unread) -> None:
        records = self._records(phases)
        driver.prepare([(r.src, r.dst, r.size) for r in records])
        switches = self._switch_counters(fab)
        unread.start()                  # returns as it samples: before t0
        self.t0 = time.monotonic()
        needs_gray = any(f.kind == 'gray_failure' for f in self.sc.faults)
        missing = list(fab.missing_features) + (
            list(injector.missing_features) if needs_gray else [])
        host_pids = {h: fab.host_pid(h) for h in fab.plan.hosts}
        health0 = HealthSample.now(host_pids, waits)
        faults = list(self.sc.timeline())
        phase, next_bin = 0, BIN_S
        self._start_phase(driver, records, phase)
        last_report = 0.0
        while True:
            now = time.monotonic() - self.t0
            while faults and faults[0].at <= now:
                apply_fault(injector, faults.pop(0))
            injector.due(time.monotonic())
            self._start_due(driver, now)
            driver.poll(self.t0 + self._until(now, next_bin, faults, injector))
            now = time.monotonic() - self.t0
            if now >= next_bin:
                self._sample(driver, records)
                next_bin += BIN_S
            switches.sample(now)
            phase = self._advance(driver, records, phase, now)
            if phase is None or now >= self.sc.duration_s:
                break
            if now - last_report >= 1.0:
                last_report = now
                self._report(records, now)
        self._sample(driver, records)
        self.run.elapsed_s = time.monotonic() - self.t0
        # The gate's window ends with the loop: what follows is this process's
        # bookkeeping (the switch counters' netlink dumps alone took ~0.6 s of CPU
        # after a 1.2 s permutation), not the endpoint loop's work.
        backlog = unread.stop()
        health1 = HealthSample.now(host_pids, waits)
        self.run.switch_ports = switches.finish(self.run.elapsed_s)
        self.run.switch_series = switches.series
        self.run.delay_histogram, self.run.delay_target_s = \
            driver.queueing_delay()
        self.run.transport_counters = driver.transport_counters()
        self.run.deployed_ack_timer = driver.deployed_ack_timer()
        self.run.events += [dict(e, t=round(e['time'] - self.t0, 6))
                            for e in driver.ev_events()]
        self.run.events += [dict(e, t=round(e['monotonic'] - self.t0, 6),
                                 source='controller')
                            for e in fab.routing_events()
                            if e['monotonic'] >= self.t0]   # not the build's
        for rec in records:
            rec.corrupt_bytes = driver.corrupt_bytes(rec.flow_id) \
                if rec.status == 'done' else 0
        self.run.flows = records
        self.run.health = health_between(
            health0, health1, missing,
            endpoint_loop=transport(self.run.transport).family == 'endpoint',
            send_losses=driver.send_losses(), base_rtt_s=self.run.base_rtt_s,
            backlog=backlog,
            # a packet and its acknowledgement each cross every switch of the
            # longest path, read at one port of each
            round_trip_ports=2 * (fab.plan.longest_path_links - 1))
        self.run.health['switch_ports'] = {
            'type': 'afxdp' if fab.afxdp else 'system', 'why': fab.switch_port_choice}
        self.run.health['cpu_placement'] = (fab.placement.describe()
                                            if fab.placement else None)
        self.run.health['host_decap'] = fab.decap

    def _until(self, now: float, next_bin: float, faults: list,
               injector) -> float:
        """How long the driver may go on by itself (run time): until the
        loop's next own work, a timeline bin, a fault, a flow's start or
        the end of the run; a finished flow ends the driver's poll sooner."""
        until = min(next_bin, self.sc.duration_s)
        if faults:
            until = min(until, faults[0].at)
        if self._waiting:
            until = min(until, self._waiting[0].due)
        queued = injector.next_due()
        if queued is not None:
            until = min(until, queued - self.t0)
        return max(until, now)

    def _switch_counters(self, fab) -> SwitchCounters:
        ports = fab.signals
        if ports is not None:
            self.run.signals = ports.settings.describe()
            self.run.port_links = {i: (p.switch, p.peer)
                                   for i, p in ports.ports.items()}
            self.run.port_planes = {i: fab.plan.switches[p.switch].plane
                                    for i, p in ports.ports.items()}
        recorder = SwitchCounters(ports)
        recorder.begin()
        return recorder

    def _records(self, phases) -> list[FlowRecord]:
        return [FlowRecord(f.id, i, f.src, f.dst, f.size_bytes, f.label,
                           start_offset=f.start_s)
                for i, flows in enumerate(phases) for f in flows]

    def _start_phase(self, driver, records, phase: int) -> None:
        now = time.monotonic() - self.t0
        self.run.phase_times.append((now, float('nan')))
        # The loop turns thousands of times a second: each turn looks at
        # this phase's flows only, and at the waiting ones by start time.
        self._current = [r for r in records if r.phase == phase]
        for rec in self._current:
            rec.due = now + rec.start_offset
        self._waiting = deque(sorted(self._current, key=lambda r: r.due))
        self._start_due(driver, now)

    def _start_due(self, driver, now: float) -> None:
        waiting = self._waiting
        while waiting and waiting[0].due <= now:
            rec = waiting.popleft()
            info = driver.start(rec.flow_id, rec.src, rec.dst, rec.size)
            rec.status, rec.started = 'running', now
            self._log({'event': 'flow_start', 'flow': rec.flow_id,
                       'src': rec.src, 'dst': rec.dst, 'bytes': rec.size,
                       'phase': rec.phase, **info})

    def _advance(self, driver, records, phase: int, now: float) -> int | None:
        """Next phase once this one is over; None when the job is over."""
        current = self._current
        if self._waiting:
            return phase
        for rec in current:
            if rec.status == 'running':
                status = driver.status(rec.flow_id)
                if status != 'running':
                    rec.status, rec.finished = status, now
                    rec.error = driver.error(rec.flow_id)
                    self._log({'event': 'flow_' + status, 'flow': rec.flow_id,
                               'error': rec.error})
        if any(r.status == 'running' for r in current):
            return phase
        start, _ = self.run.phase_times[-1]
        self.run.phase_times[-1] = (start, now)
        if any(r.status == 'failed' for r in current):
            self.run.aborted = 'phase %d: a flow failed (%s)' % (
                phase, next(r.error for r in current if r.status == 'failed'))
            self.run.aborted_at = now
            self._log({'event': 'job_aborted', 'reason': self.run.aborted})
            return None
        if phase + 1 >= max(r.phase for r in records) + 1:
            return None
        self._start_phase(driver, records, phase + 1)
        return phase + 1

    def _sample(self, driver, records) -> None:
        total = 0
        for rec in records:
            if rec.status != 'pending':
                rec.delivered = driver.delivered(rec.flow_id)
            total += rec.delivered
        self.run.goodput_bins.append(total - self._last_total)
        self._last_total = total
        for plane, series in self.run.plane_bins.items():
            count = driver.plane_bytes.get(plane, 0)
            series.append(count - self._last_planes.get(plane, 0))
        self._last_planes = dict(driver.plane_bytes)

    def _report(self, records, now: float) -> None:
        done = sum(r.status == 'done' for r in records)
        self.progress('  %-5s %5.1f s  %d/%d flows done, %.1f MB delivered' % (
            self.run.transport, now, done, len(records),
            sum(r.delivered for r in records) / 1e6))
