"""What waits unread in the userspace datapath's sockets during a run.

Everything about that queue lives here: which sockets, how they are sampled,
and how their backlog is read as a wait. Each `system` switch port is read by
ovs-vswitchd through a packet socket, each `afxdp` one through an AF_XDP
socket's receive ring; when its thread falls behind, packets wait there
before the port's modelled queue (HTB and the switch-port program) sees
them: a queue the fabric does not model, which adds to every RTT. The kernel
drops from such a socket only once its buffer or ring is full (the health
gate counts those drops); the wait comes long before.

A process of its own samples them (`python -m testbed.workload.unread_backlog
INODE...` for packet sockets, `... --xsk` for the rings; an `UnreadSampler`):
a packet socket's unread bytes from /proc/net/packet, a ring's frames from its
producer and consumer counters, mapped from a copy of ovs-vswitchd's
descriptor (testbed.fabric.vswitchd_sockets.XskRxRing). Sampled from a
thread of the endpoint loop's process, the samples fell where that loop let
them: on the same permutation at 5 Mbit/s they read 1.8 ms a round trip,
this process 4.7 ms.
"""
from __future__ import annotations

import select
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from testbed.fabric.vswitchd_sockets import (packet_sockets, socket_fds, vswitchd_pid,
                                             xsk_rx_rings)

SAMPLE_S = 0.02               # a /proc/net/packet read costs ~0.2 ms
XSK = '--xsk'                 # the sampler's argument for AF_XDP rings
STOP_TIMEOUT_S = 2.0
# The sampler's start-up (an interpreter, its imports, and for AF_XDP a copy
# of every ring's descriptor mapped): ~0.25 s on an idle 2-core machine, past
# 1.5 s beside a flat-out sender. start() waits for it, at most this long.
READY_TIMEOUT_S = 10.0
READY = 'ready'


def frame_truesize(mtu: int) -> int:
    """The bytes a full frame of a link of `mtu` is charged in a socket's
    receive buffer: its data in the kernel's power-of-two allocation (frame,
    headroom and shared info) plus the sk_buff. Measured on this kernel
    (tests/unit/test_unread_backlog.py): 2,304 bytes for a 1,514-byte frame
    sent through a packet socket, as ovs-vswitchd sends, 4,352 for 3,514."""
    data = mtu + 14 + 32 + 320
    return (1 << (data - 1).bit_length()) + 256


def unread_bytes() -> dict[str, int]:
    """Every receiving packet socket of this namespace: inode -> bytes unread."""
    return {s.inode: s.unread for s in packet_sockets() if s.protocol}


def datapath_sockets() -> frozenset[str]:
    """The inodes of ovs-vswitchd's receiving packet sockets: one per `system`
    switch port."""
    pid = vswitchd_pid()
    try:
        return frozenset(socket_fds(pid).keys() & unread_bytes().keys()) if pid \
            else frozenset()
    except OSError:
        return frozenset()


@dataclass(frozen=True)
class BacklogReading:
    """The datapath's backlog, summed over `samples` samples: bytes unread in
    packet sockets (`system` ports), or frames in AF_XDP receive rings."""
    total: int
    samples: int
    frame_bytes: int              # what one full frame counts in `total`: 1 in a ring

    def wait_per_port_s(self, packets_per_s: float) -> float | None:
        """The mean time a packet waited unread at each switch port it
        crossed (Little's law: frames waiting over frames read a second, the
        datapath's lookups being one a packet and port). In a socket smaller
        frames are charged fewer bytes, so SACKs count for less than they
        are there: a lower bound. None where nothing was sampled."""
        if not self.samples or packets_per_s <= 0:
            return None
        return self.total / self.samples / self.frame_bytes / packets_per_s


def sample_until_stdin_closes(read: Callable[[], int]) -> tuple[int, int]:
    """(what `read` returned, summed over the samples; samples), sampled
    every SAMPLE_S until a line or end of file on stdin (the runner is done,
    or gone); READY on stdout first, once `read` exists."""
    total = samples = 0
    print(READY, flush=True)
    while True:
        total += read()
        samples += 1
        if select.select([sys.stdin], [], [], SAMPLE_S)[0]:
            return total, samples


def packet_socket_reader(sockets: frozenset[str]) -> Callable[[], int]:
    """Bytes unread in these packet sockets, now."""
    def read() -> int:
        unread = unread_bytes()
        return sum(unread.get(inode, 0) for inode in sockets)
    return read


def xsk_ring_reader() -> Callable[[], int] | None:
    """Frames waiting in the receive rings of ovs-vswitchd's AF_XDP sockets,
    now; None where it has none (nothing to sample is not a backlog of 0)."""
    pid = vswitchd_pid()
    rings = xsk_rx_rings(pid) if pid else []
    return (lambda: sum(ring.waiting() for ring in rings)) if rings else None


class UnreadSampler:
    """The sampling process of one run: `start()` as the run's window opens,
    `stop()` as it closes; `close()` ends it whatever happened between."""

    def __init__(self, mtu: int) -> None:
        self.mtu = mtu
        self.frame_bytes = frame_truesize(mtu)
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        """Samples the packet sockets of `system` ports, or where there are
        none (`afxdp` ports) the AF_XDP sockets' receive rings; returns as
        the process takes its first sample (or once it failed or is late,
        which stop() then reads as not measured), so that what the caller
        does next falls inside the sampled window."""
        sockets = datapath_sockets()
        # A ring holds frames, a socket buffer bytes charged per frame.
        self.frame_bytes = frame_truesize(self.mtu) if sockets else 1
        self.process = subprocess.Popen(
            [sys.executable, '-m', 'testbed.workload.unread_backlog',
             *(sorted(sockets) or [XSK])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready, _, _ = select.select([self.process.stdout], [], [], READY_TIMEOUT_S)
        if ready:
            self.process.stdout.readline()

    def stop(self) -> BacklogReading | None:
        """What was sampled; None if nothing could be (no process, or it
        failed): not measured."""
        if self.process is None:
            return None
        try:
            out, _ = self.process.communicate('stop\n', timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return None
        words = out.split()
        if words[:1] == [READY]:               # start() stopped waiting for it
            words = words[1:]
        if self.process.returncode or len(words) != 2 or not all(
                w.isdigit() for w in words):
            return None
        total, samples = (int(w) for w in words)
        return BacklogReading(total, samples, self.frame_bytes)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@contextmanager
def watched(mtu: int) -> Iterator[UnreadSampler]:
    """A sampler for one run, ended with the `with` (sampled between its
    start() and stop())."""
    sampler = UnreadSampler(mtu)
    try:
        yield sampler
    finally:
        sampler.close()


if __name__ == '__main__':                 # argv: the sockets' inodes, or XSK
    reader = xsk_ring_reader() if sys.argv[1:] == [XSK] else \
        packet_socket_reader(frozenset(sys.argv[1:]))
    if reader is None:
        sys.exit('no AF_XDP socket of ovs-vswitchd to sample')
    print(*sample_until_stdin_closes(reader))
