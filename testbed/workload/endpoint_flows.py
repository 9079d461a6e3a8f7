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

A pinned transport (RC, ECMP) may keep several QPs per pair
(`qps_per_connection`, NCCL_IB_QPS_PER_CONNECTION: 1 unless told, as NCCL
ships): each flow is split into that many contiguous parts, one WRITE per
QP, as NCCL_IB_SPLIT_DATA_ON_QPS=1 splits a message; each QP has its own
UDP source port, so the switches hash each part on its own. The flow is
done when every part is.
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
from testbed.nic.deployed_ack_timer import DEPLOYED_RC
from testbed.nic.emulated_timescale import fabric_qp_profile
from testbed.nic.hardware_profile import EmulatedTime
from testbed.nic.endpoint import Endpoint, connect
from testbed.nic.memory import MemoryRegion
from testbed.nic.outgoing import Outgoing
from testbed.nic.qp import QueuePair
from testbed.nic.socket_runtime import AddressBook, Nic, SocketRuntime
from testbed.workload.transports import transport as transport_info

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
class FlowPart:
    """The part of a flow one QP of the pair carries."""
    conn: Connection
    size: int
    data: bytes
    received_before: int          # the responder's byte count at post time
    done: bool = False


@dataclass
class EndpointFlow:
    flow_id: int
    size: int
    parts: list[FlowPart]
    status: str = 'running'       # running | done | failed
    error: str | None = None
    corrupt: int = 0


def split_sizes(size: int, parts: int) -> list[int]:
    """`size` bytes in `parts` contiguous parts as even as bytes allow (the
    first ones a byte longer); none empty, so at most `size` parts."""
    count = max(1, min(parts, size))
    base, extra = divmod(size, count)
    return [base + (i < extra) for i in range(count)]


class EndpointFlows:
    """Start flows, advance the loop, read progress at any time."""

    def __init__(self, fab: FabricNet, transport: str, seed: int,
                 fabric_mode: str = 'srv6', cc: str | None = None,
                 timescale: EmulatedTime | None = None,
                 qps_per_connection: int = 1) -> None:
        """`cc`: the QPs' congestion control (None: the transport's);
        `timescale`: the hardware profile the fabric stands for (its delay
        stage and base RTT), None for the fabric's own RTT;
        `qps_per_connection`: QPs per pair, each flow split over them
        (pinned transports only: an MRC QP spreads itself)."""
        if qps_per_connection < 1 or (qps_per_connection > 1 and
                                      not transport_info(transport).splits_over_qps):
            raise ValueError('qps_per_connection must be 1 for %s, >= 1 for a pinned '
                             'transport, got %r' % (transport, qps_per_connection))
        self.fab = fab
        self.transport = transport
        self.qps_per_connection = qps_per_connection
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
        self.connections: dict[tuple[str, str], Connection] = {}   # each pair's first QP
        self.lanes: dict[tuple[str, str], list[Connection]] = {}    # ... and all of them
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
            part = split_sizes(size, self.qps_per_connection)[0]
            self.lanes[(src, dst)] = [self._connect(src, dst, part)
                                      for _ in range(self.qps_per_connection)]
            self.connections[(src, dst)] = self.lanes[(src, dst)][0]

    def _connect(self, src: str, dst: str, size: int) -> Connection:
        """One connected QP from src to dst, its region `size` bytes."""
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
        return Connection(qa, qb, b.register_mr(bytearray(size)), forward,
                          os.urandom(size),
                          random.Random(self.seed * 1000 + len(self.all_connections())))

    def all_connections(self) -> list[Connection]:
        """Every QP of every pair."""
        return [conn for lanes in self.lanes.values() for conn in lanes]

    def _routes_to(self, host: str) -> dict[int, list[str]]:
        """The routed fabric's one route per plane: the host's address."""
        return {plane: [self.book.address(host, plane)]
                for plane in self.fab.plan.planes}

    def start(self, flow_id: int, src: str, dst: str, size: int) -> dict:
        """Returns what the flow runs on (for the event log): its first QP
        and, with several, every QP's part."""
        lanes = self.lanes[(src, dst)]
        parts = [FlowPart(conn, n, conn.payload(n), _received(conn))
                 for conn, n in zip(lanes, split_sizes(size, len(lanes)))]
        flow = self.flows[flow_id] = EndpointFlow(flow_id, size, parts)
        dead = next((p.conn.requester.error for p in parts
                     if p.conn.requester.error is not None), None)
        if dead is not None:                   # a QP died earlier
            self._finish(flow, False, dead[1])
        else:
            for part in parts:
                part.conn.requester.post_write(part.data, 0, part.conn.region.rkey,
                                               wr_id=flow_id)
        described = [_qp_described(p.conn, p.size) for p in parts]
        event = {k: v for k, v in described[0].items() if k != 'bytes'}
        if len(parts) > 1:
            event['qps'] = described
        return event

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
                if flow is None or flow.status != 'running':
                    continue
                qp = ep.qp(wc.qp_num)
                part = next((p for p in flow.parts if p.conn.requester is qp), None)
                if part is None:
                    continue
                if not wc.ok:
                    self._finish(flow, False, wc.status_text)
                    continue
                part.done = True
                if all(p.done for p in flow.parts):
                    self._finish(flow, True, None)

    def _finish(self, flow: EndpointFlow, ok: bool, error: str | None) -> None:
        flow.status, flow.error = ('done' if ok else 'failed'), error
        if ok:   # check now: the next flow of this pair reuses the regions
            flow.corrupt = sum(_corrupt(p) for p in flow.parts)

    def delivered(self, flow_id: int) -> int:
        flow = self.flows[flow_id]
        if flow.status == 'done':
            return flow.size
        return sum(max(0, min(p.size, _received(p.conn) - p.received_before))
                   for p in flow.parts)

    def status(self, flow_id: int) -> str:
        return self.flows[flow_id].status

    def error(self, flow_id: int) -> str | None:
        return self.flows[flow_id].error

    def corrupt_bytes(self, flow_id: int) -> int:
        """Bytes of a completed write that differed from what was sent."""
        return self.flows[flow_id].corrupt

    def retransmitted_bytes(self) -> int:
        return sum(c.requester.counters.retransmitted_bytes
                   for c in self.all_connections())

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
        for conn in self.all_connections():
            cc = conn.requester.cc
            hist = getattr(cc, 'delay_histogram', None)
            if hist is None:
                continue
            total = [a + b for a, b in zip(total, hist)] if total else list(hist)
            target = cc.config.target_delay_s
        return total, target

    def transport_counters(self) -> dict[str, int]:
        """What every requester and responder of the run counted, summed;
        with a deployed ACK timer (RC's), its stalls (deployed_ack_timer)."""
        total: Counter[str] = Counter()
        stalls: list[list[tuple[float, float]]] = []     # per QP: (start, length)
        running = 0
        now = time.monotonic()                  # the endpoints' clock
        for conn in self.all_connections():
            sent = conn.requester.stats()
            total.update({k: sent[k] for k in REQUESTER_COUNTERS})
            got = conn.responder.stats()
            total.update({k: got[k] for k in RESPONDER_COUNTERS})
            cc = sent.get('cc', {})
            total.update({k: cc[k] for k in CC_COUNTERS if k in cc})
            timer = sent['requester']
            since = timer['stalled_since']
            stalls.append([tuple(s) for s in timer['stalls']] +
                          ([] if since is None else [(since, now - since)]))
            running += since is not None
        give_up = self.profile.transport_config.retry_give_up_s
        if give_up is not None:
            total.update(DEPLOYED_RC.counters(stalls, running, DEPLOYED_RC.scale_of(give_up)))
        return dict(total)

    def deployed_ack_timer(self) -> dict | None:
        """The deployed ACK timer the QPs' stands for, on this fabric's clock; None if
        they run their own (deployed_ack_timer)."""
        give_up = self.profile.transport_config.retry_give_up_s
        return None if give_up is None else DEPLOYED_RC.describe(DEPLOYED_RC.scale_of(give_up))

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


def _received(conn: Connection) -> int:
    """Bytes the QP's responder has taken in so far."""
    responder = conn.responder.responder
    return responder.received_bytes if responder else 0


def _corrupt(part: FlowPart) -> int:
    """Bytes of a completed part that differ from what was sent."""
    got = part.conn.region.buf[:part.size]
    return 0 if got == part.data else sum(1 for x, y in zip(got, part.data) if x != y)


def _qp_described(conn: Connection, size: int) -> dict:
    """One QP of a flow for the event log. A pinned route's UDP source port
    is its ECMP entropy (FixedRoute.ev_id)."""
    route = conn.requester.pinned_route
    return {'qpn': conn.requester.qpn, 'bytes': size, 'pinned_path': None if route is None
            else {'plane': route.plane, 'path': route.path, 'sport': route.ev_id}}
