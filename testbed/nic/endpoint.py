"""An emulated NIC endpoint: QPs, registered memory, profiles, one CQ, and the sans-IO loop API.

The runtime of an emulated host (or the in-process loopback) drives an Endpoint with four
calls and nothing else:

    poll_tx(now, budget) -> list[Outgoing]       packets to transmit now
    on_packet(now, data, ev_id, plane, src_addr)  one received MRC packet (bytes after UDP)
    next_deadline() -> float | None               when on_timer must run at the latest
    on_timer(now)                                 timers due

Scripts use the verbs-like side: register_mr, create_qp, QueuePair.modify / post_write /
post_recv, poll_cq, stats. `bring_up` does the INIT -> RTR -> RTS dance from the peer's
`local_info()` dict, exchanged out of band, with a `QpProfile` (qp_profile.py).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from testbed.nic.cc import CcProfile
from testbed.nic.completion import CompletionQueue, WorkCompletion
from testbed.nic.ev_table import EvTableConfig
from testbed.nic.memory import MemoryRegion, ReorderFreePlacement
from testbed.nic.outgoing import Outgoing
from testbed.nic.qp import QueuePair
from testbed.nic.qp_profile import QpProfile
from testbed.nic.qp_state import QpError, QpState
from testbed.nic.transport_config import Transport, TransportConfig
from testbed.nic.wire import (
    EP_OP_QP,
    MAX_PORTS,
    PSN_MASK,
    REQ_ID_MASK,
    EvProbe,
    EvProbeReply,
    PortStatusUpdate,
    WireError,
    decode_received,
    encode_port_status_update,
)

FIRST_QPN = 0x100          # QPNs below are left alone (0x2 is the endpoint-operation QP)
DEFAULT_QP_PROFILE = QpProfile()
# EV ids of Port Status Updates (opaque on the wire, docs/wire-format.md §1.3): apart from
# the EV tables' (from 0) and the reverse routes' (REVERSE_EV_BASE, 0x8000_0000).
PORT_STATUS_EV_BASE = 0x4000_0000
# Copies of each Port Status Update per live plane, on distinct paths of it (see
# _announce_ports for why two).
PORT_STATUS_COPIES_PER_PLANE = 2
_REQ_ID_HALF = (REQ_ID_MASK + 1) >> 1

class Endpoint:
    """One host's MRC NIC, addressable by `addr` (see module docstring)."""

    def __init__(self, addr: Any, *, seed: int = 0, config: TransportConfig | None = None) -> None:
        self.addr = addr
        self.config = config or TransportConfig()
        self._rng = random.Random(seed)
        self.placement = ReorderFreePlacement()
        self.cq = CompletionQueue()
        self._qps: dict[int, QueuePair] = {}
        self._qp_list: list[QueuePair] = []
        self._rr = 0
        self._next_qpn = FIRST_QPN
        self._ev_profiles: dict[int, EvTableConfig] = {}
        self._cc_profiles: dict[int, CcProfile] = {}
        self._endpoint_tx: deque[Outgoing] = deque()
        self.malformed = 0
        self.unknown_qp = 0
        self.wrong_source = 0
        self.ev_probes_answered = 0
        self.ev_probes_unanswerable = 0
        # Port status (port_down / port_up, Port Status Update, docs/wire-format.md §6.4).
        self.local_planes_down: set[int] = set()
        self.port_status_sent = 0          # update packets sent (every copy)
        self.port_status_received = 0      # updates accepted (a fresh req_id from a peer)
        self.port_status_stale = 0         # copies and updates older than one accepted
        self.port_status_unknown_peer = 0  # from an endpoint no QP talks to
        self._port_status_req_id = 0
        # Per peer: the req_id of the last update accepted, and the planes it said down.
        self._peer_req_id: dict[Any, int] = {}
        self.peer_planes_down: dict[Any, set[int]] = {}
        # Every change a peer's update made, as (now, peer, plane, up): the runtime logs them.
        self.peer_port_events: list[tuple[float, Any, int, bool]] = []

    # ------------------------------------------------------------------------- resources

    def register_mr(self, buf: bytearray, rkey: int | None = None, *,
                    remote_write: bool = True) -> MemoryRegion:
        if rkey is None:
            rkey = self._rng.getrandbits(32)
            while rkey in self.placement:
                rkey = self._rng.getrandbits(32)
        return self.placement.register(MemoryRegion(rkey, buf, remote_write))

    def register_ev_profile(self, profile_id: int, profile: EvTableConfig) -> None:
        self._ev_profiles[profile_id] = profile

    def register_cc_profile(self, profile_id: int, profile: CcProfile) -> None:
        self._cc_profiles[profile_id] = profile

    def _resolve_profile(self, kind: str, value: Any) -> Any:
        """INIT takes its EV-table and CC configurations as objects, or by the id of an
        EV / CC profile the control plane registered on this endpoint."""
        wanted, registry, field = ((EvTableConfig, self._ev_profiles, "ev_table") if kind == "ev"
                                   else (CcProfile, self._cc_profiles, "cc_profile"))
        if isinstance(value, wanted):
            return value
        if isinstance(value, int) and value in registry:
            return registry[value]
        raise QpError(f"{field} {value!r} is neither a {wanted.__name__} nor a "
                      "registered profile id", field=field)

    def create_qp(self, transport: Transport = "mrc", *, config: TransportConfig | None = None,
                  send_cq: CompletionQueue | None = None,
                  recv_cq: CompletionQueue | None = None) -> QueuePair:
        qpn = self._next_qpn
        self._next_qpn += 1
        qp = QueuePair(qpn=qpn, local_addr=self.addr, transport=transport,
                       config=config or self.config, initial_psn=self._rng.getrandbits(24),
                       seed=self._rng.getrandbits(64), placement=self.placement,
                       send_cq=send_cq or self.cq, recv_cq=recv_cq or self.cq,
                       resolve_profile=self._resolve_profile)
        qp.local_planes_down.update(self.local_planes_down)   # the NIC's ports as they are
        self._qps[qpn] = qp
        self._qp_list.append(qp)
        return qp

    def qp(self, qpn: int) -> QueuePair:
        return self._qps[qpn]

    @property
    def qps(self) -> list[QueuePair]:
        return list(self._qp_list)

    def poll_cq(self, max_n: int | None = None) -> list[WorkCompletion]:
        return self.cq.poll(max_n)

    # ------------------------------------------------------------------------- sans-IO

    def poll_tx(self, now: float, budget: int = 64,
                free_planes: set[int] | None = None) -> list[Outgoing]:
        """Up to `budget` packets to send now; QPs take turns to go first. Data only on
        `free_planes`, the NIC ports that can take a packet now (None: every port)."""
        out: list[Outgoing] = []
        if self._endpoint_tx:
            while self._endpoint_tx and len(out) < budget:
                out.append(self._endpoint_tx.popleft())
        qps = self._qp_list
        count = len(qps)
        if count == 1:                        # the common host: one QP, no turn to rotate
            room = budget - len(out)
            if room > 0:
                qps[0].poll_tx(now, room, out, free_planes)
            self._rr = 0
            return out
        start = self._rr
        for i in range(count):
            if len(out) >= budget:
                break
            qps[(start + i) % count].poll_tx(now, budget - len(out), out, free_planes)
        if count:
            self._rr = (start + 1) % count
        return out

    def on_packet(self, now: float, data: bytes, ev_id: int, plane: int,
                  src_addr: Any = None, ecn: bool = False) -> None:
        """One received packet: `data` is the MRC bytes, `ev_id` from sport/flow label,
        `plane` the port it arrived on, `ecn` whether it carried a CE mark."""
        try:
            pkt = decode_received(data)
        except WireError:
            self.malformed += 1
            return
        dest_qp = getattr(pkt, "dest_qp", EP_OP_QP)
        if dest_qp == EP_OP_QP:
            self._on_endpoint_op(now, pkt, plane, src_addr)
            return
        qp = self._qps.get(dest_qp)
        if qp is None:
            self.unknown_qp += 1
        elif src_addr is not None and qp.rtr is not None and src_addr != qp.rtr.dest_addr:
            self.wrong_source += 1       # a QP talks to exactly one peer
        else:
            qp.on_packet(now, pkt, ev_id, ecn)

    def _on_endpoint_op(self, now: float, pkt: Any, plane: int, src_addr: Any) -> None:
        if isinstance(pkt, PortStatusUpdate):
            self._on_port_status(now, pkt, src_addr)
            return
        # EV probes are connectionless; answer on a reverse route of any QP to the prober.
        if not isinstance(pkt, EvProbe):
            return
        responder = next((q.responder for q in self._qp_list if q.responder is not None
                          and q.rtr is not None and q.rtr.dest_addr == src_addr), None)
        if responder is None:
            self.ev_probes_unanswerable += 1
            return
        reply = EvProbeReply(pkt.req_id, pkt.ev, pkt.port, plane, pkt.tx_timestamp).encode()
        route = responder.reverse_route()
        self._endpoint_tx.append(Outgoing(route.path, route.plane, route.ev_id, reply, src_addr))
        self.ev_probes_answered += 1

    def _on_port_status(self, now: float, pkt: PortStatusUpdate, src_addr: Any) -> None:
        """A peer's Port Status Update: every QP with that peer takes the planes the mask
        says down out (QueuePair.peer_port_status: the requester's EVs there, resending
        what was in flight on them; the responder's SACKs and NACKs) and puts back those
        it says up. Updates are not retransmitted and travel in copies, on several planes:
        one whose req_id is not newer than the last accepted (serial-number order, RFC
        1982, u16) is a copy or overtaken, and ignored."""
        qps = [q for q in self._qp_list if q.rtr is not None and q.rtr.dest_addr == src_addr]
        if not qps:
            self.port_status_unknown_peer += 1
            return
        last = self._peer_req_id.get(src_addr)
        if last is not None and not 0 < (pkt.req_id - last) & REQ_ID_MASK < _REQ_ID_HALF:
            self.port_status_stale += 1
            return
        self._peer_req_id[src_addr] = pkt.req_id
        self.port_status_received += 1
        down = self.peer_planes_down.setdefault(src_addr, set())
        for bit in range(pkt.port_count):
            plane, up = bit + 1, bool(pkt.port_status >> bit & 1)
            if (plane not in down) == up:
                continue
            if up:
                down.discard(plane)
            else:
                down.add(plane)
            self.peer_port_events.append((now, src_addr, plane, up))
            for qp in qps:
                qp.peer_port_status(now, plane, up)

    def _port_count(self) -> int:
        """The NIC's ports as the mask counts them: planes 1..the highest any QP uses or
        that is down, at most MAX_PORTS."""
        highest = max((plane for q in self._qp_list if q.rtr is not None
                       for plane in q.rtr.paths_by_plane), default=1)
        highest = max(highest, max(self.local_planes_down, default=1))
        return max(1, min(MAX_PORTS, highest))

    def _announce_ports(self, now: float, changed_plane: int) -> int:
        """Send every peer a Port Status Update with the ports' state now [R:ctl.h: the
        `port_status` mask "sent to peers so they stop using EVs on a failed local port
        immediately"]. An endpoint operation consumes no PSN and is never retransmitted
        [3P:ns3], so one lost copy would leave the peer to find the port by its timeouts:
        each update goes on every live plane (neither our port nor, as last heard, the
        peer's is down), and on each on PORT_STATUS_COPIES_PER_PLANE distinct paths of it,
        so no single lost packet or broken link silences it; with one live plane left (a
        2-plane NIC with a port down) that is still two copies. The copies are 68 bytes
        each, per port event: nothing next to the data. Returns the packets queued.
        (Source tags as in docs/wire-format.md's list of sources.)"""
        peers: dict[Any, QueuePair] = {}
        for qp in self._qp_list:
            if qp.rtr is not None and qp.state is not QpState.RESET:
                peers.setdefault(qp.rtr.dest_addr, qp)
        if not peers:
            return 0
        count = self._port_count()
        mask = 0
        for plane in range(1, count + 1):
            if plane not in self.local_planes_down:
                mask |= 1 << (plane - 1)
        changed = 1 << (changed_plane - 1) if 1 <= changed_plane <= count else 0
        self._port_status_req_id = req_id = (self._port_status_req_id + 1) & REQ_ID_MASK
        data = encode_port_status_update(req_id, mask, changed, count)
        queued = 0
        for peer, qp in peers.items():
            peer_down = self.peer_planes_down.get(peer, set())
            for plane, path, ev_id in _routes_to(qp):
                if plane not in self.local_planes_down and plane not in peer_down:
                    self._endpoint_tx.append(Outgoing(path, plane, ev_id, data, peer))
                    queued += 1
        self.port_status_sent += queued
        return queued

    def next_deadline(self) -> float | None:
        qps = self._qp_list
        if len(qps) == 1:                     # asked after every event: skip the scan
            return qps[0].next_deadline()
        deadline = None
        for qp in qps:
            candidate = qp.next_deadline()
            if candidate is not None and (deadline is None or candidate < deadline):
                deadline = candidate
        return deadline

    def on_timer(self, now: float) -> None:
        for qp in self._qp_list:
            deadline = qp.next_deadline()
            if deadline is not None and deadline <= now:
                qp.on_timer(now)

    def port_down(self, plane: int, now: float) -> int:
        """The NIC's port on `plane` lost its link (a port event, heard by the runtime):
        every QP with an EV table stops using the plane from its next packet. RC and ECMP
        QPs are pinned to one path: they are left alone (QueuePair.port_status). The peers
        learn it from a Port Status Update sent at once on the live planes
        (_announce_ports), instead of by their own timeouts. Returns how many QPs changed."""
        if plane in self.local_planes_down:
            return 0
        self.local_planes_down.add(plane)
        changed = sum(qp.port_status(now, plane, False) for qp in self._qp_list)
        self._announce_ports(now, plane)
        return changed

    def port_up(self, plane: int, now: float) -> int:
        """The port on `plane` is back: the QPs' EVs there return, and the peers hear it
        (see port_down)."""
        if plane not in self.local_planes_down:
            return 0
        self.local_planes_down.discard(plane)
        changed = sum(qp.port_status(now, plane, True) for qp in self._qp_list)
        self._announce_ports(now, plane)
        return changed

    # ------------------------------------------------------------------------- stats

    def stats(self) -> dict[str, Any]:
        return {
            "addr": str(self.addr),
            "malformed": self.malformed, "unknown_qp": self.unknown_qp,
            "wrong_source": self.wrong_source, "ev_probes_answered": self.ev_probes_answered,
            "port_status_sent": self.port_status_sent,
            "port_status_received": self.port_status_received,
            "port_status_stale": self.port_status_stale,
            "port_status_unknown_peer": self.port_status_unknown_peer,
            "local_planes_down": sorted(self.local_planes_down),
            "peer_planes_down": {str(peer): sorted(planes)
                                 for peer, planes in self.peer_planes_down.items() if planes},
            "completions_queued": len(self.cq),
            "qps": {f"{qp.qpn:#x}": qp.stats() for qp in self._qp_list},
        }


def _routes_to(qp: QueuePair) -> list[tuple[int, Any, int]]:
    """(plane, path, EV id) for a Port Status Update to `qp`'s peer: up to
    PORT_STATUS_COPIES_PER_PLANE distinct paths per plane, the responder's reverse routes
    first — the paths its SACKs take, which a responder replaces when its SACKs stop
    arriving (ReverseRoutes.replace), so the ones most likely to reach the peer now — then
    the QP's other paths to the peer (rtr.paths_by_plane)."""
    rtr = qp.rtr
    assert rtr is not None                             # the caller picked it for one
    picked: dict[int, list[tuple[Any, int]]] = {plane: [] for plane in rtr.paths_by_plane}
    responder = qp.responder
    candidates: list[tuple[int, Any, int]] = [
        (route.plane, route.path, route.ev_id)
        for route in (responder.reverse_routes.routes if responder is not None else ())]
    for plane in sorted(rtr.paths_by_plane):
        for k, path in enumerate(rtr.paths_by_plane[plane]):
            candidates.append((plane, path, PORT_STATUS_EV_BASE | plane << 16 | k & 0xFFFF))
    for plane, path, ev_id in candidates:
        chosen = picked.setdefault(plane, [])
        if len(chosen) < PORT_STATUS_COPIES_PER_PLANE and all(p != path for p, _ in chosen):
            chosen.append((path, ev_id))
    return [(plane, path, ev_id) for plane in sorted(picked)
            for path, ev_id in picked[plane]]


def bring_up(qp: QueuePair, remote: Mapping[str, Any],
             paths_by_plane: Mapping[int, Sequence[Any]],
             profile: QpProfile = DEFAULT_QP_PROFILE) -> None:
    """RESET -> INIT -> RTR -> RTS with `profile` and the peer's local_info()."""
    if qp.state is QpState.RESET:
        qp.modify(QpState.INIT, **profile.init_attrs())
    qp.modify(QpState.RTR, **profile.rtr_attrs(), dest_addr=remote["addr"],
              dest_qp=remote["qpn"], rq_psn=remote["psn"] & PSN_MASK,
              paths_by_plane=paths_by_plane)
    qp.modify(QpState.RTS, **profile.rts_attrs())


def connect(ep_a: Endpoint, ep_b: Endpoint, paths_ab: Mapping[int, Sequence[Any]],
            paths_ba: Mapping[int, Sequence[Any]], transport: Transport = "mrc",
            profile: QpProfile = DEFAULT_QP_PROFILE, *, psn_a: int | None = None,
            psn_b: int | None = None) -> tuple[QueuePair, QueuePair]:
    """A connected QP pair between two endpoints (attribute exchange done in-process),
    both created with the profile's transport config and brought up with the profile.

    Each side's initial send PSN is the one its QP drew, and the peer learns it from
    local_info() as in a real out-of-band exchange; `psn_a` / `psn_b` pin them instead.
    """
    qp_a = ep_a.create_qp(transport, config=profile.transport_config)
    qp_b = ep_b.create_qp(transport, config=profile.transport_config)
    info_a, info_b = qp_a.local_info(), qp_b.local_info()
    if psn_a is not None:
        info_a["psn"] = psn_a
    if psn_b is not None:
        info_b["psn"] = psn_b
    bring_up(qp_a, info_b, paths_ab, _with_sq_psn(profile, psn_a))
    bring_up(qp_b, info_a, paths_ba, _with_sq_psn(profile, psn_b))
    return qp_a, qp_b


def _with_sq_psn(profile: QpProfile, psn: int | None) -> QpProfile:
    return profile if psn is None else replace(profile, sq_psn=psn)
