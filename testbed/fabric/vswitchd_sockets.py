"""ovs-vswitchd's sockets as the kernel lists them: its pid, its socket
descriptors by inode, and this namespace's packet sockets (one per `system`
switch port, which the datapath reads, and one that only sends). Light: no
Mininet, so the health gate and its sampler can use it."""
from __future__ import annotations

import ctypes
import mmap
import os
import socket
import struct
from collections.abc import Iterable
from typing import NamedTuple

from testbed.fabric.sockopt import getsockopt_into

VSWITCHD_PIDFILE = '/var/run/openvswitch/ovs-vswitchd.pid'


def vswitchd_pid() -> int | None:
    try:
        with open(VSWITCHD_PIDFILE) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def socket_fds(pid: int) -> dict[str, int]:
    """The process's sockets: inode -> its descriptor."""
    fd_dir = '/proc/%d/fd' % pid
    sockets = {}
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        if target.startswith('socket:['):
            sockets[target[8:-1]] = int(fd)
    return sockets


class PacketSocket(NamedTuple):
    inode: str
    protocol: int          # 0: receives nothing
    ifindex: int           # 0: bound to no interface
    unread: int            # bytes waiting in its receive buffer


def packet_sockets() -> list[PacketSocket]:
    """This namespace's AF_PACKET sockets (/proc/net/packet)."""
    with open('/proc/net/packet') as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return [PacketSocket(row[8], int(row[3], 16), int(row[4]), int(row[6]))
            for row in rows if len(row) >= 9]


# AF_XDP (linux/if_xdp.h): ovs-vswitchd reads each `afxdp` switch port from the
# receive ring of an AF_XDP socket, memory the kernel and the process share.
AF_XDP = 44
SOL_XDP = 283
XDP_MMAP_OFFSETS = 1
XDP_PGOFF_RX_RING = 0
MMAP_OFFSETS = struct.Struct('=16Q')   # rx, tx, fill, completion: producer, consumer, desc, flags
SYS_PIDFD_GETFD = 438                  # the same number on x86_64 and arm64
RING_HEAD_BYTES = 4096                 # the ring's counters sit before its descriptors
LIBC = ctypes.CDLL(None, use_errno=True)


class XskRxRing:
    """The receive ring of one of ovs-vswitchd's AF_XDP sockets, mapped read-only
    into this process from a copy of its descriptor: `waiting()` is how many
    frames the kernel has put there that the PMD thread has not taken yet."""

    def __init__(self, fd: int) -> None:
        try:
            raw = ctypes.create_string_buffer(MMAP_OFFSETS.size)
            getsockopt_into(fd, SOL_XDP, XDP_MMAP_OFFSETS, raw)
            offsets = MMAP_OFFSETS.unpack(raw.raw)
            self.ring = mmap.mmap(fd, RING_HEAD_BYTES, mmap.MAP_SHARED, mmap.PROT_READ,
                                  offset=XDP_PGOFF_RX_RING)
        finally:
            os.close(fd)        # the mapping keeps the ring
        self.producer, self.consumer = offsets[0], offsets[1]

    def waiting(self) -> int:
        # The consumer counter first: the PMD thread moves it on while this reads, and a
        # producer read before it could then lie behind it (seen in a bench trial, the
        # sampler likely preempted between its two reads: one such reading, taken modulo
        # 2**32, made the round trip's wait 2,179 s). Read in this order the difference
        # is never negative (consumed <= produced at any time, and produced only grows);
        # the counters are free-running u32s, hence the modulo.
        consumed = self.counter(self.consumer)
        produced = self.counter(self.producer)
        return (produced - consumed) & 0xFFFFFFFF

    def counter(self, offset: int) -> int:
        return struct.unpack_from('=I', self.ring, offset)[0]

    def close(self) -> None:
        self.ring.close()


def xsk_rx_rings(pid: int) -> list[XskRxRing]:
    """The receive rings of every AF_XDP socket of process `pid` (one per
    `afxdp` switch port)."""
    rings = []
    for fd in copied_fds(pid, socket_fds(pid).values()):
        if not _is_xsk(fd):
            os.close(fd)
            continue
        try:
            rings.append(XskRxRing(fd))
        except OSError:               # no receive ring (a socket only sending)
            continue
    return rings


def copied_fds(pid: int, fds: Iterable[int]) -> list[int]:
    """This process's copies of process `pid`'s descriptors `fds`
    (pidfd_getfd(2), as root), for the caller to close; one closed meanwhile
    is left out."""
    pidfd = os.pidfd_open(pid)
    try:
        copies = [LIBC.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0) for fd in fds]
    finally:
        os.close(pidfd)
    return [fd for fd in copies if fd >= 0]


def _is_xsk(fd: int) -> bool:
    domain = ctypes.create_string_buffer(4)
    try:
        getsockopt_into(fd, socket.SOL_SOCKET, socket.SO_DOMAIN, domain)
    except OSError:
        return False
    return struct.unpack('=i', domain.raw)[0] == AF_XDP
