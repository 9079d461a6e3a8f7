"""Packet captures on a running fabric: tcpdump on switch ports and host NIC ports.

A capture writes one pcap per interface (link layer Ethernet, the whole SRv6 packet:
outer IPv6, any SRH, inner IPv6, UDP, MRC), readable by Wireshark/tshark with the MRC
dissector (wireshark/mrc.lua). Each tcpdump is the capture's own child and is stopped
by `stop()`, which the owner calls on every exit path (`with` does); should the owner be
killed outright, the kernel sends its tcpdumps SIGTERM (PR_SET_PDEATHSIG), and
`mrc-testbed clean` finds any left by their command line (TCPDUMP_MARK).
"""
from __future__ import annotations

import ctypes
import re
import select
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from testbed.fabric import port_stage

# The start of every capture's tcpdump command line: clean.py counts such processes as ours.
TCPDUMP_MARK = 'tcpdump -n --immediate-mode --packet-buffered -Z root'
START_TIMEOUT_S = 10.0     # tcpdump opens its interface within well under a second
STOP_TIMEOUT_S = 5.0
# The kernel's capture buffer, KiB: tcpdump's 2 MiB default lost packets
# when the machine's two cores were busy with the fabric and the endpoints.
BUFFER_KIB = 32768
DROPPED = re.compile(r'(\d+) packets? dropped by kernel')
_PR_SET_PDEATHSIG = 1


class CaptureError(RuntimeError):
    pass


@dataclass(frozen=True)
class CapturePoint:
    """One interface to capture on: `netns_pid` None for the root namespace (switches)."""
    name: str                  # the pcap's file name without .pcap
    intf: str
    netns_pid: int | None = None


def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class PacketCapture:
    """tcpdump on every point, into `directory`/<point name>.pcap, while it is open."""

    def __init__(self, points: list[CapturePoint], directory: Path, snaplen: int) -> None:
        self.points, self.directory, self.snaplen = points, Path(directory), snaplen
        self.procs: list[subprocess.Popen] = []
        # point name -> packets the kernel dropped before tcpdump read them
        # (known once stopped): a pcap with drops is not the whole traffic.
        self.dropped: dict[str, int] = {}

    def pcap(self, point: CapturePoint) -> Path:
        return self.directory / (point.name + '.pcap')

    def _command(self, point: CapturePoint) -> list[str]:
        # Immediate mode and packet-buffered output: a pcap is complete the moment
        # tcpdump stops; -Z root: the results directory need not be the tcpdump user's.
        cmd = [*TCPDUMP_MARK.split(), '-B', str(BUFFER_KIB), '-s', str(self.snaplen),
               '-i', point.intf,
               '-w', str(self.pcap(point))]
        if point.netns_pid is not None:
            cmd = ['nsenter', '--net=/proc/%d/ns/net' % point.netns_pid, *cmd]
        return cmd

    def start(self) -> 'PacketCapture':
        self.directory.mkdir(parents=True, exist_ok=True)
        try:
            for point in self.points:
                proc = subprocess.Popen(self._command(point), stdout=subprocess.DEVNULL,
                                        stderr=subprocess.PIPE, text=True,
                                        preexec_fn=_die_with_parent)
                self.procs.append(proc)
                _wait_listening(proc, point)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        procs, self.procs = self.procs, []
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for point, proc in zip(self.points, procs):
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stderr is not None:
                found = DROPPED.search(proc.stderr.read())
                self.dropped[point.name] = int(found.group(1)) if found else 0
                proc.stderr.close()

    def __enter__(self) -> 'PacketCapture':
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _wait_listening(proc: subprocess.Popen, point: CapturePoint) -> None:
    """Until tcpdump says it listens: packets sent before that would be missing."""
    assert proc.stderr is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], deadline - time.monotonic())
        if not ready:
            break
        line = proc.stderr.readline()
        if 'listening on' in line:
            return
        if not line:                   # tcpdump exited
            break
    raise CaptureError('tcpdump on %s (%s) did not start: %s' % (
        point.intf, point.name, proc.stderr.read() if proc.poll() is not None else 'timeout'))


def capture_points(fab, links: tuple[tuple[str, str], ...] = (),
                   hosts: tuple[str, ...] = ()) -> list[CapturePoint]:
    """Where to capture on a running FabricNet: each link on its first node's interface
    toward the second (what leaves it, and what arrives from the peer), each host on every
    one of its NIC ports (in its namespace)."""
    points = []
    for a, b in links:
        connections = fab.net[a].connectionsTo(fab.net[b])
        if not connections:
            raise CaptureError('no link between %s and %s' % (a, b))
        near, far = connections[0]
        pid = fab.host_pid(a) if a in fab.plan.hosts else None
        if port_stage.queue_of(near):
            # An afxdp=1 fabric: the switch ports' own frames skip the kernel's
            # capture hooks. The stage in front of b sees what a sends, after
            # a's queue, and what b sends, before b's.
            near, pid = port_stage.stage_name(far.name), None
        else:
            near = near.name
        points.append(CapturePoint('%s-%s' % (a, b), near, pid))
    for host in hosts:
        for (name, plane), port in sorted(fab.plan.host_ports.items()):
            if name == host:
                points.append(CapturePoint('%s-p%d' % (host, plane), port.intf,
                                           fab.host_pid(host)))
    return points
