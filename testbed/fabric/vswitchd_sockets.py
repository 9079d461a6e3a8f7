"""ovs-vswitchd's sockets as the kernel lists them: its pid, its socket
descriptors by inode, and this namespace's packet sockets (one per `system`
switch port, which the datapath reads, and one that only sends). Light: no
Mininet, so the health gate and its sampler can use it."""
from __future__ import annotations

import os
from typing import NamedTuple

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
