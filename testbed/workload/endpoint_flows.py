"""Flows over the project's own endpoints (MRC, and the RC and ECMP
baselines built from the same code), all hosts' NICs driven by one event
loop in this process.

Like a collective library, each (src, dst) pair keeps one connected QP for
the whole run and posts every flow between them as a WRITE on it: what a QP
learned about its paths (dead EVs, an RC path's fate) carries over from one
step to the next, as it does in a real job.

The QPs' EVs come from the control plane, as in the OCP model: the EV
planner (`testbed.mrc_ctl.ev_planner`) computes an explicit EV profile per
pair from the fabric's plan, and each QP's EV table is that profile's array,
expanded. The profiles, and every EV event the NICs report back through the
planner, go to the event log, and so does every NIC port event (a host
port losing its link or getting it back, heard over netlink: the QPs of
that host take the plane out at once). On the routed fabric (`fabric_mode='routed'`,
RC's and ECMP's default) a QP has no EVs: its one "path" per plane is the
peer's address there, the socket runtime sends it as plain IPv6, and the
switches' ECMP hashes its 5-tuple, whose UDP source port is the QP's flow
entropy as in RoCEv2 (`testbed.nic.routes.rocev2_source_port`).
"""
from __future__ import annotations

import os
import random
import socket
import time
from collections import Counter
from dataclasses import dataclass, replace

from testbed.fabric.net import FabricNet
from testbed.fabric.netns import inside
from testbed.mrc_ctl.ev_planner import EvPlanner, PairEvs
from testbed.nic.emulated_timescale import fabric_qp_profile
from testbed.nic.hardware_profile import EmulatedTime
from testbed.nic.endpoint import Endpoint, connect
from testbed.nic.memory import MemoryRegion
from testbed.nic.outgoing import Outgoing
from testbed.nic.qp import QueuePair
from testbed.nic.socket_runtime import AddressBook, Nic, SocketRuntime

DATA_OPCODES = range(0x06, 0x0C)
REQUESTER_COUNTERS = ('packets_sent', 'retransmitted_packets', 'packet_timeouts',
                      'retry_timeouts', 'nacks_received', 'ev_demotions',
                      'probes_sent', 'probe_timeouts', 'ack_refresh_probes',
                      'cnps_received')
RESPONDER_COUNTERS = ('packets_received', 'trimmed_received', 'nacks_sent',
                      'reverse_routes_replaced', 'cnps_sent')
# What a rate-based controller counts (DCQCN's reaction point), where it runs.
CC_COUNTERS = ('rate_cuts', 'fast_recovery_steps', 'additive_increases',
               'hyper_increases')


@dataclass
class Connection:
    requester: QueuePair
    responder: QueuePair
    region: MemoryRegion
    evs: PairEvs | None           # the requester's EV profile (SRv6 only)
    # Random bytes, as many as the region, drawn before the clock starts: each
    # flow's payload is a rotation of them (`payload`).
    pattern: bytes
    rotations: random.Random

    def payload(self, size: int) -> bytes:
        """`size` bytes for the next flow: the pattern's first `size` bytes, rotated by
        a random offset, so that consecutive flows of the pair differ (the region they
        share is checked against each one) at the cost of a copy, not of drawing new
        random bytes inside the measured run (60 MB cost ~0.13 s of the loop's CPU)."""
        shift = self.rotations.randrange(size) if size else 0
        head = self.pattern[:size]
        return head[shift:] + head[:shift]


@dataclass
class EndpointFlow:
    flow_id: int
    size: int
    data: bytes
    conn: Connection
    received_before: int          # the responder's byte count at post time
    status: str = 'running'       # running | done | failed
    error: str | None = None
    corrupt: int = 0


class EndpointFlows:
    """Start flows, advance the loop, read progress at any time."""

    def __init__(self, fab: FabricNet, transport: str, seed: int,
                 fabric_mode: str = 'srv6', cc: str | None = None,
                 timescale: EmulatedTime | None = None) -> None:
        """`cc`: the QPs' congestion control (None: the transport's);
        `timescale`: the hardware profile the fabric stands for (its delay
        stage and base RTT), None for the fabric's own RTT."""
        self.fab = fab
        self.transport = transport
        self.routed = fabric_mode == 'routed'
        plan = fab.plan
        self.book = AddressBook({k: p.address for k, p in plan.host_ports.items()})
        self.runtime = SocketRuntime(
            self.book, tap=self._count, port_rate_bps=fab.link_rate_bps,
            rx_delay_s=timescale.rx_delay_s if timescale else 0.0, mtu=fab.mtu)
        self.profile = fabric_qp_profile(
            transport, fab.link_rate_bps, len(plan.planes),
            plan.longest_path_links, fab.congestion_signals, cc,
            base_rtt_override_s=timescale.base_rtt_s if timescale else None,
            mtu=fab.mtu)
        self.endpoints: dict[str, Endpoint] = {}
        self.connections: dict[tuple[str, str], Connection] = {}
        self.flows: dict[int, EndpointFlow] = {}
        self.seed = seed
        self.planner = EvPlanner(plan, seed=seed)
        self.plane_bytes: Counter[int] = Counter()
        self.path_bytes: Counter[str] = Counter()
        self._profile_events: list[dict] = []
        self._ports_logged: Counter[str] = Counter()   # host -> port events logged
        self._peer_ports_logged: Counter[str] = Counter()   # host -> peers' events logged

    def _endpoint(self, host: str) -> Endpoint:
        if host not in self.endpoints:
            ep = Endpoint(host, seed=self.seed * 1000 + len(self.endpoints))
            with inside(self.fab.host_pid(host)):
                self.runtime.add(ep, self._port_ifindex(host))
            self.endpoints[host] = ep
        return self.endpoints[host]

    def _port_ifindex(self, host: str) -> dict[int, int]:
        """The host's port interfaces, plane -> ifindex (call inside its netns)."""
        plan = self.fab.plan
        return {plane: socket.if_nametoindex(plan.host_ports[(host, plane)].intf)
                for plane in plan.planes}

    def _count(self, now: float, nic: Nic, pkt: Outgoing) -> None:
        if pkt.data[0] in DATA_OPCODES:
            self.plane_bytes[pkt.plane] += len(pkt.data)
            self.path_bytes[pkt.path] += len(pkt.data)

    def _profile(self, src: str, dst: str) -> PairEvs:
        """The pair's explicit EV profile: per plane, the QP's active share
        and its backups (what the emulator's timescale allows: see
        emulated_timescale.ACTIVE_EVS)."""
        table = self.profile.ev_table
        share = table.active_count // len(self.fab.plan.planes)
        pair = self.planner.explicit_evs(
            src, dst, per_plane=share + table.backup_per_plane)
        self._profile_events.append({
            'time': time.monotonic(), 'event': 'ev_profile', 'src': src,
            'dst': dst, **pair.describe()})
        return pair

    def prepare(self, flows: list[tuple[str, str, int]]) -> None:
        """Connect every (src, dst) pair before the clock starts, with a
        region as large as the pair's largest flow."""
        largest: dict[tuple[str, str], int] = {}
        for src, dst, size in flows:
            largest[(src, dst)] = max(size, largest.get((src, dst), 0))
        for (src, dst), size in largest.items():
            a, b = self._endpoint(src), self._endpoint(dst)
            if self.routed:
                forward = None
                qa, qb = connect(a, b, self._routes_to(dst), self._routes_to(src),
                                 self.transport, self.profile)
            else:
                forward, reverse = self._profile(src, dst), self._profile(dst, src)
                table = forward.table_config(self.profile.ev_table,
                                             self.profile.ev_table.active_count)
                qa, qb = connect(a, b, forward.ev_array_by_plane(),
                                 reverse.ev_array_by_plane(), self.transport,
                                 replace(self.profile, ev_table=table))
            self.connections[(src, dst)] = Connection(
                qa, qb, b.register_mr(bytearray(size)), forward, os.urandom(size),
                random.Random(self.seed * 1000 + len(self.connections)))

    def _routes_to(self, host: str) -> dict[int, list[str]]:
        """The routed fabric's one route per plane: the host's address."""
        return {plane: [self.book.address(host, plane)]
                for plane in self.fab.plan.planes}

    def start(self, flow_id: int, src: str, dst: str, size: int) -> dict:
        """Returns what the flow runs on (for the event log)."""
        conn = self.connections[(src, dst)]
        data = conn.payload(size)
        responder = conn.responder.responder
        self.flows[flow_id] = EndpointFlow(
            flow_id, size, data, conn,
            responder.received_bytes if responder else 0)
        if conn.requester.error is not None:   # the QP died earlier
            self._finish(self.flows[flow_id], False, conn.requester.error[1])
        else:
            conn.requester.post_write(data, 0, conn.region.rkey,
                                      wr_id=flow_id)
        route = conn.requester.pinned_route
        # A pinned route's UDP source port is its ECMP entropy (FixedRoute.ev_id).
        return {'qpn': conn.requester.qpn, 'pinned_path': None if route is None
                else {'plane': route.plane, 'path': route.path, 'sport': route.ev_id}}

    def poll(self, until: float | None = None) -> None:
        """The endpoints' loop until `until` (time.monotonic()) or a
        completion; one turn without `until`."""
        if until is None:
            self.runtime.turn()
        else:
            self.runtime.run_until(until)
        for host, ep in self.endpoints.items():
            for wc in ep.poll_cq():
                flow = self.flows.get(wc.wr_id)
                if flow is not None and ep.qp(wc.qp_num) is flow.conn.requester:
                    self._finish(flow, wc.ok, None if wc.ok else wc.status_text)

    def _finish(self, flow: EndpointFlow, ok: bool, error: str | None) -> None:
        flow.status, flow.error = ('done' if ok else 'failed'), error
        if ok:   # check now: the next flow of this pair reuses the region
            got = flow.conn.region.buf[:flow.size]
            flow.corrupt = 0 if got == flow.data else sum(
                1 for x, y in zip(got, flow.data) if x != y)

    def delivered(self, flow_id: int) -> int:
        flow = self.flows[flow_id]
        if flow.status == 'done':
            return flow.size
        responder = flow.conn.responder.responder
        got = (responder.received_bytes if responder else 0) - \
            flow.received_before
        return max(0, min(flow.size, got))

    def status(self, flow_id: int) -> str:
        return self.flows[flow_id].status

    def error(self, flow_id: int) -> str | None:
        return self.flows[flow_id].error

    def corrupt_bytes(self, flow_id: int) -> int:
        """Bytes of a completed write that differed from what was sent."""
        return self.flows[flow_id].corrupt

    def retransmitted_bytes(self) -> int:
        return sum(c.requester.counters.retransmitted_bytes
                   for c in self.connections.values())

    def ev_events(self) -> list[dict]:
        """The EV profiles made at `prepare`, then every EV event the QPs
        reported since the last call, as the planner hears them."""
        out, self._profile_events = self._profile_events, []
        out += self._port_events()
        for (src, dst), conn in self.connections.items():
            table = conn.requester.ev_table
            for e in table.poll_events() if table and conn.evs else ():
                out.append({'time': e.time, 'event': 'ev_state', 'src': src,
                            'dst': dst, 'ev_id': e.ev_id, 'plane': e.plane,
                            'path': str(e.path), 'old': str(e.old_state),
                            'new': str(e.new_state), 'reason': str(e.reason),
                            **conn.evs.on_nic_event(e.ev_id, str(e.path),
                                                    e.new_state)})
        return out

    def _port_events(self) -> list[dict]:
        """The NIC port events heard since the last call: a host's own ports
        ('nic_port', from netlink) and its peers' as their Port Status Updates told
        it ('nic_port_peer': `host` heard that `peer`'s port on `plane` is `state`)."""
        out = []
        for nic in self.runtime.nics:
            host = nic.endpoint.addr
            out += [{'time': t, 'event': 'nic_port', 'host': host, 'plane': plane,
                     'state': 'up' if up else 'down'}
                    for t, plane, up in nic.port_events[self._ports_logged[host]:]]
            self._ports_logged[host] = len(nic.port_events)
            heard = nic.endpoint.peer_port_events
            out += [{'time': t, 'event': 'nic_port_peer', 'host': host, 'peer': peer,
                     'plane': plane, 'state': 'up' if up else 'down'}
                    for t, peer, plane, up in heard[self._peer_ports_logged[host]:]]
            self._peer_ports_logged[host] = len(heard)
        return out

    def send_losses(self) -> int:
        """Packets the endpoints could not send for a reason outside the
        model (the socket runtime's `tx_unmodelled`)."""
        return sum(nic.tx_unmodelled for nic in self.runtime.nics)

    def queueing_delay(self) -> tuple[list[int], float | None]:
        """Every requester's NSCC delay histogram, summed, and the target."""
        total: list[int] = []
        target = None
        for conn in self.connections.values():
            cc = conn.requester.cc
            hist = getattr(cc, 'delay_histogram', None)
            if hist is None:
                continue
            total = [a + b for a, b in zip(total, hist)] if total else list(hist)
            target = cc.config.target_delay_s
        return total, target

    def transport_counters(self) -> dict[str, int]:
        """What every requester and responder of the run counted, summed."""
        total: Counter[str] = Counter()
        for conn in self.connections.values():
            sent = conn.requester.stats()
            total.update({k: sent[k] for k in REQUESTER_COUNTERS})
            got = conn.responder.stats()
            total.update({k: got[k] for k in RESPONDER_COUNTERS})
            cc = sent.get('cc', {})
            total.update({k: cc[k] for k in CC_COUNTERS if k in cc})
        return dict(total)

    def deny(self, src: str, dst: str, carrier: str, denied: bool = True) -> int:
        """The control plane denies (or allows again) a path of a pair: the
        profile's EV and, in the QP, every EV on that path. Returns how many
        of the QP's EVs changed."""
        conn = self.connections[(src, dst)]
        if denied:
            self.planner.deny(src, dst, carrier)
        else:
            self.planner.allow(src, dst, carrier)
        table = conn.requester.ev_table
        return sum(table.set_denied(ev.ev_id, denied) for ev in table.evs()
                   if ev.path == carrier) if table else 0

    def close(self) -> None:
        self.runtime.close()
