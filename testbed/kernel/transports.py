"""Kernel TCP and MPTCP baselines over the multi-plane SRv6 fabric.

Real transports nobody here wrote: the host kernels' TCP and MPTCP, driven
from this process. Sockets are created inside the host namespaces
(`inside(pid)`), are non-blocking and are advanced by `poll()`; nothing runs
as a separate process, so nothing can outlive the fabric.

Routing. The switches only forward uSID carriers, so every transport packet
leaves its host through a kernel `seg6` encap route (mode `encap`: outer
IPv6 header + SRH holding the carrier, or `encap.red`: no SRH; the switches
match the outer destination only, and the peer's End.DT6 SID decapsulates).
Each route sits alone in a per-flow, per-plane table, selected by a policy
rule, in both namespaces:

- TCP uses ONE path, like RoCE RC or an ECMP fabric: the path is picked by
  hashing the flow's 5-tuple (the hosts' lowest-plane addresses stand for
  the hosts, a multi-plane NIC hashes before it picks its port) over every
  plane's paths, or given by the caller. The rule matches the exact 5-tuple
  (`to <dst> ipproto tcp sport <c> dport <s>`), so two TCP flows between the
  same hosts can take different paths, as ECMP would give them. The reverse
  direction mirrors the path (same switches, reversed).
- MPTCP uses one subflow per plane: the in-kernel path manager has a
  `subflow` endpoint (address + device) per plane, so the sender opens one
  subflow from each plane's address to the receiver's initial address, and
  a rule on (source address, server port) sends each subflow over its own
  plane (the receiver's End.DT6 SID on that plane decapsulates; the inner
  destination is any local address). The kernel picks each subflow's source
  port itself, so the path inside a plane is hashed from (addresses, server
  port, plane) or given by the caller.

Counters: bytes delivered are what the receiving application has read;
per-plane bytes are the kernel's per-subflow `bytes_acked` on the sender
(TCP_INFO, or MPTCP_TCPINFO + MPTCP_SUBFLOW_ADDRS), kept at their highest
value so a subflow that dies keeps what it carried. See
docs/kernel-baselines.md.
"""
from __future__ import annotations

import errno
import os
import selectors
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal, Protocol

from testbed.fabric import host_decap
from testbed.fabric.netns import inside
from testbed.fabric.usid_plan import FabricPlan, Path
from testbed.kernel.mptcp import _MptcpHost
from testbed.kernel.routes import (SEG6_MODES, TABLE_BASE, TABLES_PER_FLOW,
                                   KernelTransportError, _add_routes,
                                   _del_routes, _RouteEntry, _selector,
                                   mirror)
from testbed.kernel.seg6_encap import Seg6Encap
from testbed.kernel.congestion import DEFAULT_KERNEL_CC
from testbed.kernel.sockinfo import (IPPROTO_MPTCP, TCP_CONGESTION,
                                     SubflowStats, mptcp_counters,
                                     mptcp_subflows, tcp_info)
from testbed.kernel.streams import _Receiver, _Sender
from testbed.nic.routes import five_tuple_hash

Transport = Literal['tcp', 'mptcp']
TRANSPORTS: tuple[str, ...] = ('tcp', 'mptcp')

COUNTER_INTERVAL_S = 0.005          # sender counters are read at most this often
ROUTE_LINGER_S = 2.0                # keep a finished flow's routes for its FINs


class Fabric(Protocol):
    """What we need of a FabricNet."""
    plan: FabricPlan
    net: object | None
    decap: str          # testbed.fabric.host_decap: who does SRv6 at the hosts
    mtu: int

    def host_pid(self, host: str) -> int: ...


@dataclass(frozen=True)
class FlowProgress:
    flow_id: int
    delivered_bytes: int
    completed: bool
    error: str | None


class FlowHandle:
    """One transfer from `src` to `dst`. Read at any time: delivered_bytes
    (read by the receiving application), completed, error, plane_bytes(),
    subflows(), started_at / finished_at / last_progress_at (in the
    caller's `now` clock)."""

    def __init__(self, flow_id: int, src: str, dst: str, size_bytes: int,
                 transport: Transport, now: float) -> None:
        self.flow_id = flow_id
        self.src, self.dst = src, dst
        self.size_bytes = size_bytes
        self.transport = transport
        self.paths: dict[int, Path] = {}          # plane -> forward path
        self.reverse_paths: dict[int, Path] = {}  # plane -> path back
        self.started_at = now
        self.finished_at: float | None = None
        self.last_progress_at = now
        self.delivered_bytes = 0
        self.completed = False
        self.error: str | None = None
        self.client_port = 0
        self.server_port = 0
        self.initial_plane: int | None = None   # plane of the first (TCP:
                                                # only) connection
        self.congestion = ''
        self.sha256_sent: str | None = None
        self.sha256_received: str | None = None
        self._stats: dict[tuple[str, int, str, int], SubflowStats] = {}

    @property
    def finished(self) -> bool:
        return self.completed or self.error is not None

    @property
    def status(self) -> str:
        """running | done | failed"""
        return 'done' if self.completed else (
            'failed' if self.error is not None else 'running')

    def progress(self) -> FlowProgress:
        return FlowProgress(self.flow_id, self.delivered_bytes,
                            self.completed, self.error)

    def subflows(self) -> list[SubflowStats]:
        """Every connection/subflow seen, with its highest counters."""
        return list(self._stats.values())

    def plane_bytes(self) -> dict[int, int]:
        """plane -> bytes acked on that plane's subflows (sender side;
        data an MPTCP sender re-injected counts on each plane it used)."""
        out = {plane: 0 for plane in self.paths}
        for s in self._stats.values():
            out[s.plane] = out.get(s.plane, 0) + s.bytes_acked
        return out

    def path_bytes(self) -> dict[str, int]:
        """carrier -> bytes acked on it (each plane's subflow has one path)."""
        return {self.paths[p].carrier: n
                for p, n in self.plane_bytes().items() if p in self.paths}

    def retransmitted_bytes(self) -> int:
        return sum(s.bytes_retrans for s in self._stats.values())

    def goodput_bps(self) -> float | None:
        """Application bytes delivered per second, start to completion."""
        if not self.completed or self.finished_at is None:
            return None
        return self.delivered_bytes * 8 / max(self.finished_at -
                                              self.started_at, 1e-9)

    def _record(self, plane: int, local: str, lport: int, remote: str,
                rport: int, info: dict[str, int]) -> None:
        key = (local, lport, remote, rport)
        old = self._stats.get(key)
        if old is not None and old.bytes_acked > info['bytes_acked']:
            return        # a closing subflow may report less: keep the best
        self._stats[key] = SubflowStats(
            plane, local, lport, remote, rport, info['bytes_acked'],
            info['bytes_sent'], info['bytes_retrans'], info['total_retrans'],
            info['rtt_us'], info['cwnd'])

    def __repr__(self) -> str:
        return ('FlowHandle(%d %s %s->%s %d/%d B%s)' % (
            self.flow_id, self.transport, self.src, self.dst,
            self.delivered_bytes, self.size_bytes,
            ' done' if self.completed else
            (' error=%s' % self.error if self.error else '')))


class _FlowIO:
    """A flow's sockets and routes, owned by KernelTransports."""

    def __init__(self, handle: FlowHandle, plane_of: dict[str, int]) -> None:
        self.handle = handle
        self.plane_of = plane_of        # sender address -> its plane
        self.listener: socket.socket | None = None
        self.sender: _Sender | None = None
        self.receiver: _Receiver | None = None
        self.routes: dict[str, list[_RouteEntry]] = {}
        self.counters_at = float('-inf')
        self.retired = False

    def sockets(self) -> Iterator[socket.socket]:
        for s in (self.listener, self.sender and self.sender.sock,
                  self.receiver and self.receiver.sock):
            if s is not None:
                yield s

    def read_counters(self, now: float) -> None:
        sender = self.sender
        if sender is None or not sender.connected or sender.sock.fileno() < 0:
            return
        self.counters_at = now
        try:
            if self.handle.transport == 'tcp':
                local, lport = sender.sock.getsockname()[:2]
                remote, rport = sender.sock.getpeername()[:2]
                subflows = [(local, lport, remote, rport,
                             tcp_info(sender.sock))]
            else:
                subflows = mptcp_subflows(sender.sock)
            for local, lport, remote, rport, info in subflows:
                self.handle._record(self.plane_of.get(local, 0), local,
                                    lport, remote, rport, info)
        except OSError:
            pass      # the connection is gone; its last counters stay


class KernelTransports:
    """Kernel TCP / MPTCP flows between fabric hosts.

        with KernelTransports(fab) as kt:
            flow = kt.start_flow('h1', 'h16', 4 << 20, 'tcp')
            while not flow.finished:
                kt.poll(timeout_s=0.01)
    """

    def __init__(self, fab: Fabric, congestion: str = DEFAULT_KERNEL_CC,
                 seg6_mode: str = 'encap', routed: bool = False) -> None:
        """`congestion`: TCP congestion control for every flow (default:
        CUBIC, as Linux ships it, whatever this machine's default is:
        testbed.kernel.congestion). `seg6_mode`: `encap` (outer IPv6 + an SRH holding
        the carrier) or `encap.red` (reduced: no SRH for one segment, plain
        IPv6-in-IPv6 like the MRC endpoint's packets, 24 bytes less).
        `routed`: TCP on the routed fabric mode, plain IPv6 with no seg6
        route; the hashed path then only names the plane (the destination
        address the flow connects to), the switches' ECMP picks the rest.
        MPTCP needs a peer address per plane for that and stays on SRv6."""
        self.routed = routed
        if seg6_mode not in SEG6_MODES:
            raise KernelTransportError('seg6_mode must be one of %s'
                                       % (SEG6_MODES,))
        self.fab = fab
        self.plan: FabricPlan = fab.plan
        self.congestion = congestion
        self.seg6_mode = seg6_mode
        self.selector = selectors.DefaultSelector()
        self.flows: list[FlowHandle] = []
        self._io: dict[int, _FlowIO] = {}
        self._mptcp_hosts: dict[str, _MptcpHost] = {}
        # Where the hosts' kernel has no seg6 routes (the fabric decapsulates
        # with eBPF for the same reason), eBPF puts the carriers on: loaded
        # with the first flow that needs one.
        self._needs_ebpf_encap = fab.decap == host_decap.EBPF and not routed
        self._encap: Seg6Encap | None = None

    def __enter__(self) -> 'KernelTransports':
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -------------------------------------------------------------- start

    def start_flow(self, src: str, dst: str, size_bytes: int,
                   transport: Transport = 'tcp', *,
                   path: Path | None = None,
                   plane_paths: Mapping[int, Path] | None = None,
                   initial_plane: int | None = None,
                   congestion: str | None = None,
                   now: float | None = None) -> FlowHandle:
        """Start sending `size_bytes` from src to dst.

        tcp: over `path` (a Path from src to dst), or the path its 5-tuple
        hashes to. mptcp: one subflow per plane, over `plane_paths[plane]`
        where given, else the plane's hashed path; the initial subflow on
        `initial_plane` (default: the lowest plane). `congestion` names a
        TCP congestion control (default: the instance's)."""
        self._check(src, dst, size_bytes, transport, path, plane_paths,
                    initial_plane)
        now = time.monotonic() if now is None else now
        handle = FlowHandle(len(self.flows), src, dst, size_bytes, transport,
                            now)
        if transport == 'mptcp':
            handle.initial_plane = initial_plane or self.plan.planes[0]
        io = _FlowIO(handle, {self.plan.host_ports[(src, p)].address: p
                              for p in self.plan.planes})
        try:
            self._open(io, congestion or self.congestion)
            self._choose_paths(handle, path, plane_paths)
            self._route(io)
            self._connect(io)
        except BaseException:
            self._teardown(io)
            raise
        self.flows.append(handle)
        self._io[handle.flow_id] = io
        return handle

    def _check(self, src: str, dst: str, size_bytes: int, transport: str,
               path: Path | None, plane_paths: Mapping[int, Path] | None,
               initial_plane: int | None) -> None:
        hosts = set(self.plan.hosts)
        if src not in hosts or dst not in hosts or src == dst:
            raise KernelTransportError('need two distinct fabric hosts, got '
                                       '%r -> %r' % (src, dst))
        if transport not in TRANSPORTS:
            raise KernelTransportError('transport must be one of %s, not %r'
                                       % (TRANSPORTS, transport))
        if size_bytes <= 0:
            raise KernelTransportError('size_bytes must be positive')
        given = [path] if path else list((plane_paths or {}).values())
        for p in given:
            if (p.src, p.dst) != (src, dst):
                raise KernelTransportError('path %s is not %s -> %s'
                                           % (p.carrier, src, dst))
        if path is not None and transport != 'tcp':
            raise KernelTransportError('path= is for tcp; mptcp takes '
                                       'plane_paths=')
        if plane_paths and any(p.plane != k for k, p in plane_paths.items()):
            raise KernelTransportError('plane_paths keys must be the '
                                       "paths' planes")
        if initial_plane is not None and initial_plane not in self.plan.planes:
            raise KernelTransportError('no plane %r' % initial_plane)

    def _seg6_encap(self) -> Seg6Encap | None:
        if self._needs_ebpf_encap and self._encap is None:
            self._encap = Seg6Encap({
                '/proc/%d/ns/net' % self._pid(host):
                [self.plan.host_ports[(host, p)].intf for p in self.plan.planes]
                for host in self.plan.hosts})
        return self._encap

    def _pid(self, host: str) -> int:
        if self.fab.net is None:
            raise KernelTransportError('the fabric is not running')
        return self.fab.host_pid(host)

    def _open(self, io: _FlowIO, congestion: str) -> None:
        """The receiver's listener, then the sender's bound socket: both
        ports are part of the 5-tuple that picks the TCP path."""
        h = io.handle
        proto = IPPROTO_MPTCP if h.transport == 'mptcp' else socket.IPPROTO_TCP
        if h.transport == 'mptcp':
            for host in (h.src, h.dst):
                self._enable_mptcp(host)
        io.listener = self._listener(h.dst, proto)
        h.server_port = io.listener.getsockname()[1]
        sock = self._sender_socket(h, proto, congestion)
        io.sender = _Sender(sock, h.size_bytes)
        h.client_port = sock.getsockname()[1]
        h.congestion = sock.getsockopt(socket.IPPROTO_TCP, TCP_CONGESTION,
                                       16).rstrip(b'\0').decode()

    def _listener(self, host: str, proto: int) -> socket.socket:
        """One listener per flow, so the accepted connection is the flow's.
        MPTCP joins arrive on it too: it stays open until the flow is
        retired."""
        with inside(self._pid(host)):
            sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM, proto)
        sock.bind(('::', 0))
        sock.listen(4)
        sock.setblocking(False)
        return sock

    def _sender_socket(self, h: FlowHandle, proto: int,
                       congestion: str) -> socket.socket:
        """A TCP sender binds no address (its hashed plane's route gives the
        source); an MPTCP sender binds its initial plane's address, which
        is what selects the initial subflow's rule."""
        with inside(self._pid(h.src)):
            sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM, proto)
        local = '::' if h.initial_plane is None else \
            self.plan.host_ports[(h.src, h.initial_plane)].address
        try:
            sock.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION,
                            congestion.encode())
        except OSError as err:
            sock.close()
            raise KernelTransportError(
                'TCP congestion control %r: %s (this kernel offers: see sysctl '
                'net.ipv4.tcp_available_congestion_control)' % (congestion, err)
            ) from None
        try:
            sock.bind((local, 0))
        except OSError as err:
            sock.close()
            raise KernelTransportError('sender socket: %s' % err) from None
        sock.setblocking(False)
        return sock

    def prepare_mptcp(self, hosts: Iterable[str]) -> None:
        """Configure the hosts' MPTCP path managers now (~20 ms per host,
        `ip` commands) rather than inside the first start_flow."""
        for host in hosts:
            self._enable_mptcp(host)

    def _enable_mptcp(self, host: str) -> None:
        if host in self._mptcp_hosts:
            return
        ports = [self.plan.host_ports[(host, p)] for p in self.plan.planes]
        config = _MptcpHost(self._pid(host), ports)
        self._mptcp_hosts[host] = config   # restore() undoes partial set-ups
        config.enable()

    def _choose_paths(self, h: FlowHandle, path: Path | None,
                      plane_paths: Mapping[int, Path] | None) -> None:
        if h.transport == 'tcp':
            chosen = path or self.hashed_tcp_path(h.src, h.dst, h.client_port,
                                                  h.server_port)
            h.paths = {chosen.plane: chosen}
            h.initial_plane = chosen.plane
        else:
            given = dict(plane_paths or {})
            h.paths = {p: given.get(p) or self._hashed_plane_path(
                h.src, h.dst, p, h.server_port) for p in self.plan.planes}
        h.reverse_paths = {p: mirror(self.plan, x) for p, x in h.paths.items()}

    def hashed_tcp_path(self, src: str, dst: str, sport: int,
                        dport: int) -> Path:
        """The path an ECMP fabric would give this TCP 5-tuple: its hash
        over every plane's paths, flattened plane by plane."""
        choices = self.plan.all_paths(src, dst)
        low = self.plan.planes[0]
        key = five_tuple_hash(self.plan.host_ports[(src, low)].address,
                              self.plan.host_ports[(dst, low)].address,
                              sport, dport, socket.IPPROTO_TCP)
        return choices[key % len(choices)]

    def _hashed_plane_path(self, src: str, dst: str, plane: int,
                           dport: int) -> Path:
        """A subflow's path inside its plane: the kernel picks the subflow's
        source port after the route exists, so the hash leaves it out."""
        choices = self.plan.paths(src, dst, plane)
        key = five_tuple_hash(self.plan.host_ports[(src, plane)].address,
                              self.plan.host_ports[(dst, plane)].address,
                              0, dport, socket.IPPROTO_TCP)
        return choices[key % len(choices)]

    def _route(self, io: _FlowIO) -> None:
        h = io.handle
        if self.routed and h.transport == 'tcp':
            return          # the hosts' plane routes and the switches do it
        entries = self._tcp_routes(h) if h.transport == 'tcp' else \
            self._mptcp_routes(h)
        for host, host_entries in entries.items():
            io.routes[host] = host_entries
            _add_routes(self._pid(host), host_entries, self.seg6_mode,
                        self._seg6_encap(), self.fab.mtu)

    def _tcp_routes(self, h: FlowHandle) -> dict[str, list[_RouteEntry]]:
        """Both directions of the exact 5-tuple, over the chosen path."""
        (plane, fwd), = h.paths.items()
        a = self.plan.host_ports[(h.src, plane)]
        b = self.plan.host_ports[(h.dst, plane)]
        table = TABLE_BASE + TABLES_PER_FLOW * h.flow_id + plane
        out_rule = _selector(dst=b.address, sport=h.client_port,
                             dport=h.server_port)
        back_rule = _selector(src=b.address, dst=a.address,
                              sport=h.server_port, dport=h.client_port)
        return {h.src: [_RouteEntry(table, a.intf, a.address, b.address,
                                    fwd.carrier, out_rule)],
                h.dst: [_RouteEntry(table, b.intf, b.address, a.address,
                                    h.reverse_paths[plane].carrier,
                                    back_rule)]}

    def _mptcp_routes(self, h: FlowHandle) -> dict[str, list[_RouteEntry]]:
        """Per plane p, the subflow from the sender's plane-p address to the
        receiver's initial address, both ways over plane p. Routed: only the
        way out needs a rule (every plane routes every address of a host,
        `routed_tables.addresses_via`); the replies to the sender's plane-p
        address take plane p by the receiver's own plane routes."""
        assert h.initial_plane is not None
        b0 = self.plan.host_ports[(h.dst, h.initial_plane)]
        out: dict[str, list[_RouteEntry]] = {h.src: [], h.dst: []}
        for plane, fwd in h.paths.items():
            a = self.plan.host_ports[(h.src, plane)]
            b = self.plan.host_ports[(h.dst, plane)]
            table = TABLE_BASE + TABLES_PER_FLOW * h.flow_id + plane
            out[h.src].append(_RouteEntry(
                table, a.intf, a.address, b0.address,
                None if self.routed else fwd.carrier,
                _selector(src=a.address, dst=b0.address,
                          dport=h.server_port)))
            if self.routed:
                continue
            out[h.dst].append(_RouteEntry(
                table, b.intf, b0.address, a.address,
                h.reverse_paths[plane].carrier,
                _selector(src=b0.address, dst=a.address,
                          sport=h.server_port)))
        return out

    def _connect(self, io: _FlowIO) -> None:
        h = io.handle
        assert h.initial_plane is not None
        address = self.plan.host_ports[(h.dst, h.initial_plane)].address
        assert io.sender is not None and io.listener is not None
        err = io.sender.sock.connect_ex((address, h.server_port))
        if err not in (0, errno.EINPROGRESS):
            raise KernelTransportError('connect %s: %s'
                                       % (address, os.strerror(err)))
        self.selector.register(io.listener, selectors.EVENT_READ,
                               lambda now: self._accept(io, now))
        self.selector.register(io.sender.sock, selectors.EVENT_WRITE,
                               lambda now: self._write(io, now))

    # --------------------------------------------------------------- poll

    def poll(self, now: float | None = None,
             timeout_s: float = 0.0) -> list[FlowProgress]:
        """Advance every flow: accept, write, read what the sockets allow,
        waiting at most `timeout_s` for any of them. Returns every flow's
        progress. `now` (default: monotonic clock after the wait) stamps
        progress, completion and counter reads."""
        if self.selector.get_map():
            ready = self.selector.select(timeout_s)
        else:                   # nothing to wait on: still honour the wait
            ready = []
            time.sleep(timeout_s)
        now = time.monotonic() if now is None else now
        for key, _events in ready:
            # an earlier callback of this round may have dropped this one
            if self.selector.get_map().get(key.fileobj) is key:
                key.data(now)
        for io in list(self._io.values()):
            if not io.retired:
                self._housekeep(io, now)
        return [f.progress() for f in self.flows]

    def run(self, until: Callable[[], bool] | None = None,
            timeout_s: float = 60.0, tick_s: float = 0.005) -> bool:
        """Poll until `until()` (default: every flow finished) or timeout;
        True if the condition was met."""
        done = until or (lambda: all(f.finished for f in self.flows))
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() >= deadline:
                return False
            self.poll(timeout_s=tick_s)
        return True

    def _accept(self, io: _FlowIO, now: float) -> None:
        assert io.listener is not None
        try:
            sock, peer = io.listener.accept()
        except BlockingIOError:
            return
        src_addresses = {self.plan.host_ports[(io.handle.src, p)].address
                         for p in self.plan.planes}
        if peer[0] not in src_addresses or io.receiver is not None:
            sock.close()          # not our sender: nothing else may connect
            return
        sock.setblocking(False)
        io.receiver = _Receiver(sock)
        self.selector.unregister(io.listener)
        self.selector.register(sock, selectors.EVENT_READ,
                               lambda now: self._read(io, now))

    def _write(self, io: _FlowIO, now: float) -> None:
        assert io.sender is not None
        try:
            io.sender.on_writable()
        except OSError as err:
            self._fail(io, now, 'send: %s' % err)
            return
        if io.sender.done:
            io.handle.sha256_sent = io.sender.digest.hexdigest()
            self.selector.unregister(io.sender.sock)

    def _read(self, io: _FlowIO, now: float) -> None:
        assert io.receiver is not None
        h = io.handle
        try:
            eof = io.receiver.on_readable()
        except OSError as err:
            self._fail(io, now, 'receive: %s' % err)
            return
        if io.receiver.received != h.delivered_bytes:
            h.delivered_bytes = io.receiver.received
            h.last_progress_at = now
        if eof:
            self.selector.unregister(io.receiver.sock)
            self._finish(io, now)

    def _finish(self, io: _FlowIO, now: float) -> None:
        h = io.handle
        assert io.receiver is not None
        h.sha256_received = io.receiver.digest.hexdigest()
        h.finished_at = now
        io.read_counters(now)
        if h.delivered_bytes != h.size_bytes:
            h.error = 'short: %d of %d bytes' % (h.delivered_bytes,
                                                 h.size_bytes)
        elif h.sha256_received != h.sha256_sent:
            h.error = 'data corrupted: SHA-256 differs'
        else:
            h.completed = True

    def _fail(self, io: _FlowIO, now: float, why: str) -> None:
        h = io.handle
        h.error = why
        h.finished_at = now
        io.read_counters(now)
        for sock in io.sockets():
            if self.selector.get_map().get(sock) is not None:
                self.selector.unregister(sock)

    def _housekeep(self, io: _FlowIO, now: float) -> None:
        """Fresh sender counters while a flow runs, and its sockets and
        routes gone a little after it finished (its FIN exchange needs
        the routes)."""
        h = io.handle
        if now - io.counters_at >= COUNTER_INTERVAL_S:
            io.read_counters(now)
        if h.finished and h.finished_at is not None and \
                now - h.finished_at >= ROUTE_LINGER_S:
            self._retire(io)

    def _retire(self, io: _FlowIO) -> None:
        io.read_counters(time.monotonic())
        self._teardown(io)
        io.retired = True

    def _teardown(self, io: _FlowIO) -> None:
        for sock in io.sockets():
            if sock.fileno() >= 0:
                if self.selector.get_map().get(sock) is not None:
                    self.selector.unregister(sock)
                sock.close()
        for host, entries in io.routes.items():
            if self.fab.net is not None:   # else the namespace died with it
                _del_routes(self.fab.host_pid(host), entries, self._encap)
        io.routes.clear()

    # ---------------------------------------------------- totals

    def plane_bytes(self) -> dict[int, int]:
        """plane -> bytes acked over every flow's subflows on it."""
        out = {p: 0 for p in self.plan.planes}
        for f in self.flows:
            for plane, n in f.plane_bytes().items():
                out[plane] += n
        return out

    def path_bytes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.flows:
            for carrier, n in f.path_bytes().items():
                out[carrier] = out.get(carrier, 0) + n
        return out

    def retransmitted_bytes(self) -> int:
        return sum(f.retransmitted_bytes() for f in self.flows)

    # ---------------------------------------------------- host counters

    def mptcp_counters(self, host: str) -> dict[str, int]:
        """The host's MPTcpExt* counters (as `nstat -a MPTcpExt*`)."""
        return mptcp_counters(self._pid(host))

    # -------------------------------------------------------------- close

    def close(self) -> None:
        """Abort unfinished flows; remove every route, rule and MPTCP
        endpoint added; restore MPTCP limits. Safe to call twice."""
        for io in self._io.values():
            if not io.retired:
                if not io.handle.finished:
                    io.handle.error = 'aborted by close()'
                self._retire(io)
        if self.fab.net is not None:
            for config in self._mptcp_hosts.values():
                config.restore()
        self._mptcp_hosts.clear()
        self.selector.close()
        self.selector = selectors.DefaultSelector()
        if self._encap is not None:
            self._encap.close()
            self._encap = None
