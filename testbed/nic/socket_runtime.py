"""Drive MRC endpoints over real sockets inside emulated hosts.

Each NIC has a raw IPv6-in-IPv6 socket to send on (the endpoint writes the
inner IPv6 + UDP headers itself, with the EV in the UDP source port and flow
label; the kernel adds the outer header addressed to the path's uSID carrier,
whose block picks the plane's port) and one UDP socket on port 4791 to
receive what the kernel decapsulated at the port's End.DT6 SID. A path that
is a host port's own address is a route, not a carrier (the routed fabric
mode): that packet leaves as written, plain IPv6 without an outer header, on
a raw socket that includes its header, and the switches route it by its
destination. Sockets keep
the network namespace they were created in, so one process can run the NICs
of several hosts (tests, benchmarks) or just its own (an agent).

A NIC given its ports' interface indexes also hears their link state from the kernel
(`port_events.PortWatch`: RTM_NEWLINK over netlink): a port that loses its carrier takes its
plane out of the endpoint's EV tables at once (`Endpoint.port_down`), and its return puts the
plane back, instead of the sender finding the dead port EV by EV through packet timeouts.
The endpoint then queues a Port Status Update for each of its peers (an endpoint operation
to QP 0x2, docs/wire-format.md §6.4), which leaves in the same turn's send like any packet
poll_tx returns; one received is handed to the endpoint like any other, and what it changed
is in `Endpoint.peer_port_events`. So both ends stop using the dead port's plane.

The receive side reads the EV back from both halves the sender wrote: the UDP
source port comes with the datagram's address, the flow label (and the traffic
class, whose ECN bits tell a CE mark) with an IPV6_FLOWINFO control message
per packet.
"""
from __future__ import annotations

import errno
import select
import socket
import struct
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from testbed.nic.emulated_timescale import MTU, packet_time_s
from testbed.nic.endpoint import Endpoint
from testbed.nic.outgoing import Outgoing
from testbed.nic.port_events import PortWatch
from testbed.nic.wire import UDP_PORT, build_inner, sport_flowlabel_to_ev

IPPROTO_IPV6_IN_IPV6 = 41
IPPROTO_RAW = 255          # an IPv6 raw socket that sends the header we wrote
UDP_NO_CHECK6_RX = 102     # MRC carries its own CRC; the inner UDP sum is zero
SO_SNDBUFFORCE = 32        # SO_SNDBUF beyond net.core.wmem_max (CAP_NET_ADMIN)
TX_BUFFER_BYTES = 16 << 20
IPV6_FLOWINFO = 11         # linux/in6.h: a cmsg with each packet's traffic class + flow label
FLOWINFO_CMSG_SPACE = socket.CMSG_SPACE(4)
FLOWINFO = struct.Struct('!I')   # ip6_flowinfo(): network order, version bits already zero
FLOW_LABEL_MASK = 0xFFFFF
ECN_MASK = 0b11
ECN_CE = 0b11              # RFC 3168: congestion experienced
ECT0 = 0b10                # ... and ECN-capable transport (0)
TX_BUDGET = 256            # packets taken from an endpoint per loop turn
ETHERNET_BYTES = 14
OUTER_BYTES = 40 + ETHERNET_BYTES   # what the kernel adds: outer IPv6, Ethernet
HEADROOM_PACKETS = 2       # a pacing port holds this much beyond what is leaving...
MIN_HEADROOM_S = 0.003     # ...and at least this: the loop wakes every IDLE_WAIT_S
RX_BUDGET = 512
IDLE_WAIT_S = 0.001


class AddressBook:
    """Host name <-> per-plane port address, the same for every NIC."""

    def __init__(self, ports: Mapping[tuple[str, int], str]) -> None:
        self._address = dict(ports)
        self.planes = tuple(sorted({plane for _, plane in ports}))
        # Per packet, both ways: the 16 bytes an inner header carries, and the owner of
        # a source address as recvmsg() spells it (the canonical text).
        self._packed = {key: socket.inet_pton(socket.AF_INET6, addr)
                        for key, addr in ports.items()}
        self._owner = {packed: key for key, packed in self._packed.items()}
        self._owner_text = {socket.inet_ntop(socket.AF_INET6, packed): key
                            for key, packed in self._packed.items()}

    def address(self, host: str, plane: int) -> str:
        return self._address[(host, plane)]

    def packed(self, host: str, plane: int) -> bytes:
        """address(), as the 16 bytes of an IPv6 header."""
        return self._packed[(host, plane)]

    def addresses(self) -> frozenset[str]:
        return frozenset(self._address.values())

    def owner(self, address: str) -> tuple[str, int] | None:
        key = self._owner_text.get(address)
        if key is None:                   # not spelled canonically, or not ours
            key = self._owner.get(socket.inet_pton(socket.AF_INET6, address))
        return key


# A send refused because the NIC port (or its address) is down: a packet a
# NIC would not send either, part of the fault. Any other refusal (ENOBUFS,
# EAGAIN: a full socket buffer or host queue) is a packet the emulator lost,
# outside the model, and the health gate counts it.
PORT_DOWN_ERRNOS = frozenset({errno.ENETDOWN, errno.ENETUNREACH, errno.ENXIO,
                              errno.ENODEV, errno.EADDRNOTAVAIL})


@dataclass
class Nic:
    """One endpoint and its sockets (created in the caller's netns)."""
    endpoint: Endpoint
    tx: socket.socket = field(init=False)
    plain: socket.socket = field(init=False)   # routed paths
    rx: socket.socket = field(init=False)
    rx_fd: int = field(init=False)
    tx_errors: int = 0              # sends the kernel refused
    tx_unmodelled: int = 0          # ... for a reason a NIC would not have
    rx_unknown_source: int = 0
    # When each plane's port is free again (time.monotonic()), if ports pace.
    port_free: dict[int, float] = field(default_factory=dict)
    # The delay stage: received packets not yet seen by the endpoint, as
    # (release time, on_packet arguments), in arrival order.
    held: deque[tuple[float, tuple]] = field(default_factory=deque)
    # The NIC's port interfaces in its netns, ifindex -> plane: with them, `ports`
    # watches their link state, and every change the endpoint was told of is kept in
    # `port_events` as (time.monotonic(), plane, up).
    port_planes: dict[int, int] = field(default_factory=dict)
    ports: PortWatch | None = field(init=False)
    port_events: list[tuple[float, int, bool]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.tx = socket.socket(socket.AF_INET6, socket.SOCK_RAW,
                                IPPROTO_IPV6_IN_IPV6)
        # MRC packets are ECN-capable (ECT(0)), in the outer header the
        # kernel writes and in the inner one we write: a switch marks the
        # outer, and End.DT6 hands the receiver the inner without copying
        # CE inward, so the switch ports mark both (docs/switch-port.md).
        self.tx.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_TCLASS, ECT0)
        # A packet waiting in the NIC port's queue (the host side of a shaped
        # link) still counts against this socket's send buffer; with the
        # default 208 KiB a busy host filled it, and sendto() then blocked
        # the whole loop, every endpoint of it, until the port drained
        # (hundreds of spurious packet timeouts in a 7->1 incast). A real
        # NIC's queues hold the QPs' windows: so does this buffer.
        try:
            self.tx.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, TX_BUFFER_BYTES)
        except PermissionError:         # not root: the most an unprivileged socket gets
            self.tx.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, TX_BUFFER_BYTES)
        self.plain = socket.socket(socket.AF_INET6, socket.SOCK_RAW, IPPROTO_RAW)
        self.plain.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, TX_BUFFER_BYTES)
        self.rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        self.rx.setsockopt(socket.SOL_UDP, UDP_NO_CHECK6_RX, 1)
        self.rx.setsockopt(socket.IPPROTO_IPV6, IPV6_FLOWINFO, 1)
        self.rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        self.rx.setblocking(False)
        self.rx.bind(('::', UDP_PORT))
        self.rx_fd = self.rx.fileno()
        # Set here, not as the field's default: a compiled dataclass leaves an
        # init=False field's default unset (AttributeError on first read).
        self.ports = None
        if self.port_planes:
            try:
                self.ports = PortWatch(self.port_planes)
            except OSError:
                self.close()              # the sockets made so far: nothing leaks
                raise

    def on_port_changes(self, now: float) -> None:
        """Tell the endpoint of every port that went down or came back since last asked."""
        ports = self.ports
        if ports is None:
            return
        for plane, up in ports.read():
            if up:
                self.endpoint.port_up(plane, now)
            else:
                self.endpoint.port_down(plane, now)
            self.port_events.append((now, plane, up))

    def close(self) -> None:
        self.tx.close()
        self.plain.close()
        self.rx.close()
        if self.ports is not None:
            self.ports.close()


class SocketRuntime:
    """A single-threaded event loop over any number of NICs."""

    def __init__(self, book: AddressBook,
                 tap: Callable[[float, Nic, Outgoing], None] | None = None,
                 port_rate_bps: float | None = None,
                 rx_delay_s: float = 0.0,
                 mtu: int = MTU,
                 rx_tap: Callable[[float, Nic, bytes, int, int, str, bool], None]
                 | None = None) -> None:
        """`rx_delay_s`: the delay stage (`hardware_profile`): every packet
        received is held this long before its endpoint sees it, the
        propagation delay the links lack. One constant delay keeps arrival
        order, so a FIFO per NIC is the whole timer wheel. It deviates from
        a delay on the links in one way: a packet already past a link when
        the link fails still arrives.

        `port_rate_bps`: the NIC ports' line rate. With it, a port takes a
        data packet only when what it already holds leaves within a few
        packet times (HEADROOM_PACKETS, at least MIN_HEADROOM_S), as a NIC
        transmits at its line rate (packets of the links' `mtu`): the packets a QP
        may send wait in the NIC, not in the kernel's queue, where they would
        count as in flight and read as network queueing (NSCC's delay)."""
        self.book = book
        self.routed = book.addresses()   # paths that are routes (module doc)
        self.nics: list[Nic] = []
        self.tap = tap           # sees every packet sent (tests, tracing)
        # ... and every packet received, as its endpoint will be handed it:
        # (now, nic, MRC bytes, EV id, plane, source host, CE).
        self.rx_tap = rx_tap
        self.port_rate_bps = port_rate_bps
        self.rx_delay_s = rx_delay_s
        if port_rate_bps:
            packet_s = packet_time_s(port_rate_bps, mtu)
            self._headroom_s = max(HEADROOM_PACKETS * packet_s, MIN_HEADROOM_S)
            self._packet_s = packet_s
        # Every NIC's receive socket and netlink socket: one poll() a turn finds those
        # with news, so a turn reads only those (reading every socket cost each idle NIC
        # a failed recvmsg, an exception raised and caught, per turn: with 4-16 NICs that,
        # not the packets, was most of the loop's CPU at the shipped scenarios' rates),
        # and an idle loop waits on the same poller. poll, not select: a long-lived
        # process may hold descriptors numbered above select's limit of 1024.
        self.poller = select.poll()
        self._watched: dict[int, Nic] = {}      # netlink socket -> its NIC

    def add(self, endpoint: Endpoint,
            port_ifindex: Mapping[int, int] | None = None) -> Nic:
        """Create the NIC's sockets in the calling thread's netns. `port_ifindex`: the
        host's port interfaces there, plane -> ifindex (`socket.if_nametoindex` inside
        the netns), whose link state the NIC then watches (module doc)."""
        nic = Nic(endpoint, port_planes={index: plane for plane, index
                                          in (port_ifindex or {}).items()})
        self.nics.append(nic)
        self.poller.register(nic.rx_fd, select.POLLIN)
        if nic.ports is not None:
            fd = nic.ports.fileno()
            self._watched[fd] = nic
            self.poller.register(fd, select.POLLIN)
        return nic

    def close(self) -> None:
        for nic in self.nics:
            self.poller.unregister(nic.rx_fd)
            if nic.ports is not None:
                self.poller.unregister(nic.ports.fileno())
            nic.close()
        self.nics.clear()
        self._watched.clear()

    def run(self, stop: Callable[[], bool], timeout_s: float) -> bool:
        """Loop until stop() is true (returns True) or timeout (False)."""
        deadline = time.monotonic() + timeout_s
        while not stop():
            if time.monotonic() > deadline:
                return False
            self.turn()
        return True

    def run_until(self, deadline: float) -> None:
        """Turn until time.monotonic() reaches `deadline`, or sooner once an endpoint has a
        completion to poll. A caller whose own work comes every few milliseconds (the
        workload runner: fault times, flow starts, timeline bins) makes one call for
        many turns: measured on an 8-host permutation at 10 Mbit/s, the loop turned
        ~11,500 times a second, and the caller's interpreted bookkeeping around each
        turn was a sizeable part of the loop's CPU."""
        nics = self.nics
        while True:
            self.turn()
            if time.monotonic() >= deadline:
                return
            for nic in nics:
                if len(nic.endpoint.cq):
                    return

    def turn(self) -> None:
        now = time.monotonic()
        busy = False
        wait = IDLE_WAIT_S
        readable = self._readable(now)
        for nic in self.nics:
            due = nic.endpoint.next_deadline()
            if due is not None and due <= now:
                nic.endpoint.on_timer(now)
                due = nic.endpoint.next_deadline()
            if due is not None:
                wait = min(wait, max(0.0, due - now))
            busy |= self._send(nic, now) > 0
            if nic.rx_fd in readable:
                busy |= self._receive(nic, now) > 0
            if nic.held:
                busy |= self._release(nic, now) > 0
                if nic.held:
                    wait = min(wait, max(0.0, nic.held[0][0] - now))
        if not busy:
            self.poller.poll(wait * 1000)

    def _readable(self, now: float) -> set[int]:
        """The receive sockets with packets. Port events are handed over first in a
        turn: no packet of this turn goes to a dead port."""
        readable = set()
        watched = self._watched
        for fd, _events in self.poller.poll(0):
            nic = watched.get(fd)
            if nic is None:
                readable.add(fd)
            else:
                nic.on_port_changes(now)
        return readable

    def _send(self, nic: Nic, now: float) -> int:
        free, budget = self._free_planes(nic, now)
        out = nic.endpoint.poll_tx(now, budget, free)
        me = nic.endpoint.addr
        rate = self.port_rate_bps
        for pkt in out:
            inner = build_inner(self.book.packed(me, pkt.plane),
                                self.book.packed(pkt.dst_addr, pkt.plane),
                                pkt.ev_id, pkt.data, traffic_class=ECT0)
            routed = pkt.path in self.routed
            try:
                (nic.plain if routed else nic.tx).sendto(inner, (pkt.path, 0))
            except OSError as err:
                nic.tx_errors += 1
                if err.errno not in PORT_DOWN_ERRNOS:
                    nic.tx_unmodelled += 1
            if rate:
                start = max(nic.port_free.get(pkt.plane, now), now)
                nic.port_free[pkt.plane] = start + (len(inner) + (
                    ETHERNET_BYTES if routed else OUTER_BYTES)) * 8 / rate
            if self.tap:
                self.tap(now, nic, pkt)
        return len(out)

    def _free_planes(self, nic: Nic, now: float) -> tuple[set[int] | None, int]:
        """The planes whose port can take a data packet, and how many packets
        fit in all of them (every plane and TX_BUDGET without a port rate)."""
        if not self.port_rate_bps:
            return None, TX_BUDGET
        room = 0.0
        free = set()
        for plane in self.book.planes:
            left = self._headroom_s - max(0.0, nic.port_free.get(plane, now) - now)
            if left > 0:
                free.add(plane)
                room += left
        return free, max(1, min(TX_BUDGET, int(room / self._packet_s) + 1))

    def _receive(self, nic: Nic, now: float) -> int:
        count = 0
        recvmsg, owner_of = nic.rx.recvmsg, self.book.owner
        on_packet, unpack_flowinfo = nic.endpoint.on_packet, FLOWINFO.unpack
        delay, held, rx_tap = self.rx_delay_s, nic.held, self.rx_tap
        while count < RX_BUDGET:
            try:
                data, ancdata, _flags, (src, sport, _flow, _scope) = recvmsg(
                    65535, FLOWINFO_CMSG_SPACE)
            except BlockingIOError:
                break
            count += 1
            owner = owner_of(src)
            if owner is None:
                nic.rx_unknown_source += 1
                continue
            # The EV's low 16 bits ride in the source port, its high 16 in
            # the flow label (wire.ev_to_sport_flowlabel).
            if ancdata and ancdata[0][1] == IPV6_FLOWINFO:   # the one cmsg asked for
                flowinfo = unpack_flowinfo(ancdata[0][2])[0]
            else:
                flowinfo = flowinfo_of(ancdata)
            ce = (flowinfo >> 20) & ECN_MASK == ECN_CE
            args = (data, sport_flowlabel_to_ev(sport, flowinfo & FLOW_LABEL_MASK),
                    owner[1], owner[0], ce)
            if rx_tap is not None:
                rx_tap(now, nic, *args)
            if delay:
                held.append((now + delay, args))
            else:
                on_packet(now, *args)
        return count

    def _release(self, nic: Nic, now: float) -> int:
        """Hand the endpoint the held packets whose delay is over."""
        held, on_packet = nic.held, nic.endpoint.on_packet
        count = 0
        while held and held[0][0] <= now:
            on_packet(now, *held.popleft()[1])
            count += 1
        return count


def flowinfo_of(ancdata: list[tuple[int, int, bytes]]) -> int:
    """Traffic class << 20 | flow label from recvmsg's control messages; 0 without one."""
    for level, kind, cdata in ancdata:
        if level == socket.IPPROTO_IPV6 and kind == IPV6_FLOWINFO and len(cdata) >= 4:
            return FLOWINFO.unpack_from(cdata)[0]
    return 0
