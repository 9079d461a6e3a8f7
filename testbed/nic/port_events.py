"""NIC port events: a host's ports going down and up, heard from the kernel over netlink.

A real MRC NIC knows at once when one of its ports loses its link; an emulated host's ports
are veths, and the kernel tells of a change in their state with an RTM_NEWLINK message to
every NETLINK_ROUTE socket bound to the RTMGRP_LINK group of that network namespace. The
messages are parsed here by hand with `struct` (no netlink library on the packet path):

    nlmsghdr   u32 length, u16 type, u16 flags, u32 seq, u32 pid     16 bytes
    ifinfomsg  u8 family, u8 pad, u16 type, i32 index, u32 flags, u32 change

A port is up when the interface is administratively up (IFF_UP) and has carrier
(IFF_LOWER_UP). The `nic_port_down` fault takes the *switch* end of the host's link
admin-down (testbed/fabric/faults/outages.py); the veth then drops the carrier of its host
end, which keeps IFF_UP and loses IFF_LOWER_UP, so carrier is the bit that matters here.

`PortWatch` owns one such socket for one NIC, created in the netns it is built in (like the
NIC's other sockets), and maps the NIC's port ifindexes to planes.
"""

from __future__ import annotations

import errno
import socket
import struct
from collections.abc import Mapping

NETLINK_ROUTE = 0
RTMGRP_LINK = 0x1
RTM_NEWLINK = 16
RTM_DELLINK = 17
RTM_GETLINK = 18
NLM_F_REQUEST = 0x1
NLMSG_ERROR = 2
IFF_UP = 0x1
IFF_LOWER_UP = 0x10000
NLMSG_HDR = struct.Struct('=IHHII')      # host byte order, as netlink is
IFINFOMSG = struct.Struct('=BBHiII')
NLMSG_HDR_LEN = NLMSG_HDR.size           # 16
IFINFOMSG_LEN = IFINFOMSG.size           # 16
RECV_BYTES = 65536
# RTM_NEWLINK carries every attribute of the link (~1-2 KiB each): room for a burst.
RCVBUF_BYTES = 1 << 20


def link_states(data: bytes) -> list[tuple[int, bool]]:
    """(ifindex, up) for each RTM_NEWLINK / RTM_DELLINK in one netlink datagram, in order;
    other messages are skipped. A deleted link is down. Stops at a malformed header."""
    out: list[tuple[int, bool]] = []
    offset, end = 0, len(data)
    while offset + NLMSG_HDR_LEN <= end:
        length, kind, _flags, _seq, _pid = NLMSG_HDR.unpack_from(data, offset)
        if length < NLMSG_HDR_LEN or offset + length > end:
            break
        if (kind == RTM_NEWLINK or kind == RTM_DELLINK) and \
                length >= NLMSG_HDR_LEN + IFINFOMSG_LEN:
            _family, _pad, _type, index, flags, _change = IFINFOMSG.unpack_from(
                data, offset + NLMSG_HDR_LEN)
            up = kind == RTM_NEWLINK and flags & (IFF_UP | IFF_LOWER_UP) == \
                IFF_UP | IFF_LOWER_UP
            out.append((index, up))
        offset += (length + 3) & ~3       # NLMSG_ALIGN
    return out


def getlink_request(index: int, seq: int) -> bytes:
    """RTM_GETLINK for one interface: the kernel answers with its RTM_NEWLINK."""
    return NLMSG_HDR.pack(NLMSG_HDR_LEN + IFINFOMSG_LEN, RTM_GETLINK, NLM_F_REQUEST, seq,
                          0) + IFINFOMSG.pack(socket.AF_UNSPEC, 0, 0, index, 0, 0)


class PortWatch:
    """One NIC's link-event socket and its ports' last known states."""

    def __init__(self, plane_of: Mapping[int, int]) -> None:
        """`plane_of`: the NIC's port ifindexes (in this netns) -> plane. Every port is
        taken to be up; `refresh()` asks the kernel, and a port found down then reads
        as an event like any other."""
        self.plane_of: dict[int, int] = dict(plane_of)
        self.up: dict[int, bool] = {plane: True for plane in self.plane_of.values()}
        self.overruns = 0                 # ENOBUFS: events lost, states asked again
        self._seq = 0
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_ROUTE)
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF_BYTES)
            self.sock.bind((0, RTMGRP_LINK))
            self.sock.setblocking(False)
        except OSError:
            self.sock.close()
            raise
        self.refresh()

    def refresh(self) -> None:
        """Ask for every port's state now (answers arrive as RTM_NEWLINK, read by `read`)."""
        for index in self.plane_of:
            self._seq += 1
            self.sock.send(getlink_request(index, self._seq))

    def read(self) -> list[tuple[int, bool]]:
        """Every state change since the last call, as (plane, up), without blocking."""
        changes: list[tuple[int, bool]] = []
        while True:
            try:
                data = self.sock.recv(RECV_BYTES)
            except BlockingIOError:
                return changes
            except OSError as exc:
                if exc.errno != errno.ENOBUFS:
                    raise
                # The socket overflowed and events were lost: ask for the states again.
                self.overruns += 1
                self.refresh()
                continue
            changes += self.apply(link_states(data))

    def apply(self, states: list[tuple[int, bool]]) -> list[tuple[int, bool]]:
        """The (plane, up) changes that link states (ifindex, up) make to the ports'; other
        interfaces and states already known are no change."""
        changes: list[tuple[int, bool]] = []
        for index, up in states:
            plane = self.plane_of.get(index)
            if plane is not None and self.up[plane] != up:
                self.up[plane] = up
                changes.append((plane, up))
        return changes

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()
