"""Was the emulator keeping up? Read over a run from the kernel's and
OVS's own counters; a result taken on a saturated emulator is flagged."""
from __future__ import annotations

import json
import os
import re
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

from testbed.fabric.cpu_placement import PMD_THREADS, threads
from testbed.fabric.vswitchd_sockets import vswitchd_pid
from testbed.nic.emulated_timescale import PROCESSING_RTT_S
from testbed.workload.run_queue_waits import RunQueueWaits, RunQueueWaitsError, WaitHistogram
from testbed.workload.unread_backlog import BacklogReading

BUSY_LIMIT = 0.95          # of all cores, machine-wide
PROCESS_LIMIT = 0.8        # of one core: past it the endpoint loop's own
                           # delay drives MRC goodput down (bench section emulator_scale)
DROP_LIMIT = 0.001         # of the datapath's packets, dropped unread
# Of the run's wall time, spent runnable but waiting for a CPU, by the endpoint
# loop or by ovs-vswitchd's forwarding threads, in waits long enough to move a
# packet's timing: LONG_WAIT_RTT of the fabric's base RTT or more. Losing the
# CPU to another process for a scheduler slice is such a wait (2-4 ms here:
# the kernel's slice), and past this share the packets' timing is the
# scheduler's. Waking up is not: a thread that sleeps between packets waits
# microseconds each time it wakes (on this machine 13,000 wake-ups a second of
# the PMD thread beside a busy core summed to 5-13 % of the run, each 1-5 us),
# which delays no packet by a measurable part of the RTT. Each wait is seen
# by an eBPF program on the scheduler (run_queue_waits.py); where it cannot
# run, the sum of all waits (schedstat) is gated instead, which counts the
# harmless ones too. Quiet, the default scenario waits ~2 % in all; beside a
# process that keeps one of two cores busy, 39 % with `system` switch ports;
# with AF_XDP ones placed on their own cores, 1.3-2.3 % in long waits
# (docs/endpoint-core.md).
WAIT_LIMIT = 0.1
LONG_WAIT_RTT = 0.01
# What a packet and its acknowledgement waited unread in the datapath's
# sockets, summed over a round trip's switch ports (unread_backlog.py): a
# queue the fabric does not model. The base RTT the transports are sized on
# allows PROCESSING_RTT_S (10 ms) for the endpoints and the datapath
# together; a datapath that alone takes more has made the fabric's RTT
# longer than that one, and NSCC reads the difference as queueing.
UNREAD_WAIT_LIMIT_S = PROCESSING_RTT_S
# The load this 2-core machine emulates faithfully, in data packet-hops/s
# offered: senders x planes x link rate / 1,510-byte frame x switches per
# path. It is BENCHMARKS.md section 6's "Where fidelity stops" figure: the
# highest rate of MRC's permutation sweep on `system` switch ports whose
# trial the gate above still trusted, and at which MRC kept its share of
# ideal (5 Mbit/s: 8 senders x 2 planes x 5 Mbit/s through 5 switches); at
# the next rate (10 Mbit/s, twice this) packets waited 20 ms a round trip
# unread in the datapath's sockets and the gate rejected the trial (with
# `afxdp=1` switch ports, their AF_XDP rings read the same way, it also trusted
# 5 Mbit/s and rejected 10, at 12.5 ms; with 3,500-byte packets on them it
# trusted 10 Mbit/s, 28,490 data packet-hops/s). Shipped scenarios stay
# within it (tests/unit/test_scenario.py also checks BENCHMARKS.md still
# says this number: re-run the bench, then update it here).
FAITHFUL_DATA_PACKET_HOPS_S = 33_113


def _cpu_ticks() -> tuple[int, int]:
    with open('/proc/stat') as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]          # idle + iowait
    return sum(fields), idle


def _datapath_counters() -> tuple[int, int]:
    """(packets looked up, upcalls lost) over every datapath."""
    out = subprocess.run(['ovs-appctl', 'dpctl/show'], capture_output=True,
                         text=True).stdout
    looked_up = sum(int(a) + int(b) for a, b in
                    re.findall(r'hit:(\d+) missed:(\d+)', out))
    return looked_up, sum(int(x) for x in re.findall(r'lost:(\d+)', out))


def _run_queue_wait_ns(pid: int | str, tasks: list[str] | None = None) -> int:
    """How long the threads `tasks` of `pid` (all by default) have waited, runnable,
    for a CPU (the kernel's schedstat run_delay): the time another process
    took from them. 0 for a process that is gone."""
    total = 0
    for task in threads(pid) if tasks is None else tasks:
        try:
            with open('/proc/%s/task/%s/schedstat' % (pid, task)) as f:
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue                  # a thread that ended meanwhile
    return total


def _forwarding_threads(pid: int | str) -> list[str]:
    """The ovs-vswitchd threads that carry the fabric's packets: its PMD
    threads where it has any (AF_XDP ports: the main thread then only serves
    the control plane, such as our own counter reads and a fault's port
    change, and its wait delays no packet); every thread where it has none
    (the main thread reads `system` ports)."""
    return threads(pid, PMD_THREADS) or threads(pid)


def _vswitchd_forwarding_wait_ns(pid: int | str) -> int:
    """The run-queue wait of ovs-vswitchd's _forwarding_threads()."""
    return _run_queue_wait_ns(pid, _forwarding_threads(pid))


# Counters of a host's network namespace (/proc/<pid>/net/snmp6) that count a
# packet lost inside the emulated host: its receive socket was full (the
# endpoint loop read too late) or the kernel had no memory for it. A NIC
# loses neither, so both are loss outside the model; the gate counts them.
HOST_RECEIVE_LOSSES = ('Udp6RcvbufErrors', 'Udp6MemErrors')
# ... and discards of the hosts' IPv6 stacks: reported, not gated (a fault
# that takes a NIC port down makes some, as a real NIC would drop them).
HOST_DISCARDS = ('Ip6InDiscards', 'Ip6OutDiscards')


def _host_counters(host_pids: Mapping[str, int]) -> dict[str, int]:
    """HOST_RECEIVE_LOSSES and HOST_DISCARDS, summed over the hosts."""
    total = dict.fromkeys(HOST_RECEIVE_LOSSES + HOST_DISCARDS, 0)
    for pid in host_pids.values():
        try:
            with open('/proc/%d/net/snmp6' % pid) as f:
                for line in f:
                    name, _, value = line.partition(' ')
                    if name in total:
                        total[name] += int(value)
        except OSError:
            continue            # a host that is gone counts nothing more
    return total


def _unread_drops() -> int:
    """Packets the kernel dropped because nobody read them in time from a
    packet socket: the userspace datapath reads every switch port through
    one, so when its thread falls behind, this is where the fabric loses
    packets (no upcall is lost, and the machine may still look idle)."""
    out = subprocess.run(['ss', '-0', '-a', '-m', '-H'], capture_output=True,
                         text=True).stdout
    return sum(int(x) for x in re.findall(r',d(\d+)\)', out)) + _xdp_ring_drops()


# The link group of our root-namespace links (testbed.fabric.ovs.LINK_GROUP;
# not imported: that module loads Mininet, this one stays light).
LINK_GROUP = 0x6D7263


def _xdp_ring_drops() -> int:
    """What AF_XDP switch ports (afxdp=1) dropped unread: a frame the XDP
    program could not put in the port's AF_XDP ring, full because the PMD
    thread fell behind, counts as a receive drop of that veth (its
    rx_queue_N_drops). Only ports with an XDP program count."""
    out = subprocess.run(['ip', '-j', '-s', 'link', 'show', 'group', str(LINK_GROUP)],
                         capture_output=True, text=True).stdout
    try:
        links = json.loads(out or '[]')
    except ValueError:
        return 0
    return sum(link.get('stats64', {}).get('rx', {}).get('dropped', 0)
               for link in links if 'xdp' in link)


@dataclass
class HealthSample:
    wall: float
    process_cpu: float
    ticks: tuple[int, int]
    lost: int
    packets: int = 0
    unread: int = 0
    endpoint_wait_ns: int = 0     # run-queue wait of this process's threads
    vswitchd_wait_ns: int = 0     # ... and of ovs-vswitchd's forwarding threads
    hosts: dict[str, int] = field(default_factory=dict)   # _host_counters
    # Each wait, by group (wait_groups()), where the eBPF program watched them.
    waits: dict[str, WaitHistogram] | None = None

    @classmethod
    def now(cls, host_pids: Mapping[str, int] | None = None,
            waits: 'RunQueueWaits | None' = None) -> 'HealthSample':
        """`host_pids`: a process in each emulated host's namespace, whose
        counters of loss inside the host are read. `waits`: the program
        watching the threads of wait_groups() (waits_watched())."""
        packets, lost = _datapath_counters()
        vswitchd = vswitchd_pid()
        return cls(time.monotonic(), time.process_time(), _cpu_ticks(),
                   lost, packets, _unread_drops(), _run_queue_wait_ns('self'),
                   _vswitchd_forwarding_wait_ns(vswitchd) if vswitchd else 0,
                   _host_counters(host_pids or {}),
                   waits.read() if waits is not None else None)


# Whose waits the gate reads: the endpoint loop (this process's threads) and
# ovs-vswitchd's forwarding threads; the names the reasons give them.
ENDPOINT, VSWITCHD = 'endpoint', 'vswitchd'
WHO = {ENDPOINT: 'endpoint loop', VSWITCHD: 'ovs-vswitchd'}


def wait_groups() -> dict[str, list[int]]:
    """The threads of each group now (threads started later are not seen:
    the fabric and its PMD threads exist before a trial starts)."""
    vswitchd = vswitchd_pid()
    forwarding = _forwarding_threads(vswitchd) if vswitchd else []
    return {ENDPOINT: [int(t) for t in threads('self')],
            VSWITCHD: [int(t) for t in forwarding]}


@contextmanager
def waits_watched() -> Iterator['RunQueueWaits | None']:
    """The run-queue wait program attached to wait_groups() for the `with`,
    or None where it cannot run here (the gate then reads schedstat's sums)."""
    try:
        watcher = RunQueueWaits(wait_groups())
    except (RunQueueWaitsError, OSError):
        yield None
        return
    with watcher:
        yield watcher


def _long_waits(start: HealthSample, end: HealthSample, wall: float,
                base_rtt_s: float | None) -> dict:
    """Each group's share of the run spent in waits of LONG_WAIT_RTT of the
    base RTT or more, and its longest wait, where the waits were watched one
    by one (None where they were not: the gate reads the sums)."""
    if start.waits is None or end.waits is None or not base_rtt_s:
        return {'long_cpu_wait_s': None, 'long_cpu_wait': None,
                'longest_cpu_wait_s': None}
    threshold = LONG_WAIT_RTT * base_rtt_s
    between = {group: end.waits[group] - start.waits[group] for group in end.waits}
    return {'long_cpu_wait_s': round(threshold, 6),
            'long_cpu_wait': {group: round(waits.at_least_ns(threshold) / 1e9 / wall, 3)
                              for group, waits in between.items()},
            'longest_cpu_wait_s': {group: waits.longest_s()
                                   for group, waits in between.items()}}


def health_between(start: HealthSample, end: HealthSample,
                   missing_features: list[str], endpoint_loop: bool = True,
                   send_losses: int = 0, base_rtt_s: float | None = None,
                   backlog: BacklogReading | None = None,
                   round_trip_ports: int = 0) -> dict:
    """`endpoint_loop`: this process ran the transport's endpoints (MRC, RC,
    ECMP), so its CPU and its wait for one are the NICs'; for the kernel's
    TCP and MPTCP it only watches, and they are reported, not gated.
    `send_losses`: packets the endpoints' sockets refused for a reason
    outside the model (a full buffer), loss the gate counts. `base_rtt_s`:
    the fabric's, which sets what wait is long (LONG_WAIT_RTT). `backlog`:
    the datapath's unread sockets sampled over the window, read as a wait
    at each of the `round_trip_ports` switch ports a packet and its
    acknowledgement cross."""
    wall = max(end.wall - start.wall, 1e-9)
    total = end.ticks[0] - start.ticks[0]
    idle = end.ticks[1] - start.ticks[1]
    machine_busy = 1 - idle / total if total else 0.0
    process = (end.process_cpu - start.process_cpu) / wall
    lost = end.lost - start.lost
    unread = end.unread - start.unread
    packets = end.packets - start.packets
    hosts = {k: end.hosts.get(k, 0) - start.hosts.get(k, 0) for k in end.hosts}
    received_lost = sum(hosts.get(k, 0) for k in HOST_RECEIVE_LOSSES)
    endpoint_wait = (end.endpoint_wait_ns - start.endpoint_wait_ns) / 1e9 / wall
    vswitchd_wait = (end.vswitchd_wait_ns - start.vswitchd_wait_ns) / 1e9 / wall
    saturation = []
    if machine_busy > BUSY_LIMIT:
        saturation.append('machine CPU %.0f%% busy' % (100 * machine_busy))
    if endpoint_loop and process > PROCESS_LIMIT:
        saturation.append('endpoint loop used %.0f%% of a core'
                          % (100 * process))
    long_waits = _long_waits(start, end, wall, base_rtt_s)
    gated, which = {ENDPOINT: endpoint_wait, VSWITCHD: vswitchd_wait}, ''
    if long_waits['long_cpu_wait_s'] is not None:
        gated = long_waits['long_cpu_wait']
        which = ' in waits of %.2f ms or more' % (1e3 * long_waits['long_cpu_wait_s'])
    for group, waited in gated.items():
        if waited > WAIT_LIMIT and (endpoint_loop or group != ENDPOINT):
            saturation.append('%s waited %.0f%% of the run for a CPU%s (the cores '
                              'were busy: the fabric\'s own forwarding or other '
                              'work)' % (WHO[group], 100 * waited, which))
    if lost:
        saturation.append('OVS datapath lost %d upcalls' % lost)
    if received_lost > DROP_LIMIT * max(1, packets):
        saturation.append('the hosts lost %d received packets (%s: a receive '
                          'socket full or out of memory)' % (received_lost, ', '.join(
                              '%s %d' % (k, hosts[k]) for k in HOST_RECEIVE_LOSSES
                              if hosts.get(k))))
    if send_losses > DROP_LIMIT * max(1, packets):
        saturation.append('the endpoints could not send %d packets (a full '
                          'socket buffer or host queue)' % send_losses)
    if unread > DROP_LIMIT * max(1, packets + unread):
        saturation.append('OVS datapath left %d of %d packets unread (kernel '
                          'dropped them)' % (unread, packets + unread))
    per_port = backlog.wait_per_port_s(packets / wall) if backlog else None
    unread_wait = per_port * round_trip_ports if per_port is not None else None
    if unread_wait is not None and unread_wait > UNREAD_WAIT_LIMIT_S:
        saturation.append('packets waited %.1f ms a round trip unread in the '
                          'datapath\'s sockets (a queue the fabric does not '
                          'model; limit %.1f ms)' % (1e3 * unread_wait,
                                                     1e3 * UNREAD_WAIT_LIMIT_S))
    reasons = saturation + ['kernel lacks %s' % f for f in missing_features]
    return {'window_s': round(wall, 3),
            'machine_cpu_busy': round(machine_busy, 3),
            'endpoint_process_cpu': round(process, 3),
            'endpoint_cpu_wait': round(endpoint_wait, 3),
            'vswitchd_cpu_wait': round(vswitchd_wait, 3),
            **long_waits,
            'ovs_lost_upcalls': lost, 'datapath_packets': packets,
            'datapath_unread_drops': unread,
            'datapath_unread_wait_s': None if unread_wait is None
            else round(unread_wait, 6),
            'host_receive_losses': received_lost,
            'endpoint_send_losses': send_losses,
            'host_discards': {k: hosts.get(k, 0) for k in HOST_DISCARDS},
            'missing_features': missing_features,
            'saturated': bool(saturation), 'trusted': not reasons,
            'reasons': reasons}
