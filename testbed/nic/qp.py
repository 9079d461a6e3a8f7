"""The MRC queue pair: state machine, verbs-like API and the sans-IO entry points.

A QP is both requester (its WRITEs to the peer) and responder (the peer's WRITEs to it), like
an RC QP. `transport` picks the behaviour per QP, same code throughout:

    mrc   spray every packet on a fresh EV; selective retransmission; EV health (§4.5)
    ecmp  one path hashed from the 5-tuple; selective retransmission; no steering
    rc    one path (hashed, or given); in-order responder; go-back-N; no steering

Nothing here reads a clock or touches a socket: the runtime passes `now` (seconds) into
poll_tx / on_packet / on_timer and transmits what poll_tx returns.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from typing import Any

from testbed.nic.cc import CongestionControl, make_cc
from testbed.nic.completion import (
    MRC_OPCODES,
    CompletionQueue,
    WcOpcode,
    WcStatus,
    WorkCompletion,
    WrOpcode,
)
from testbed.nic.ev_table import EvTable
from testbed.nic.memory import ReorderFreePlacement
from testbed.nic.outgoing import Outgoing
from testbed.nic.qp_counters import QpCounters
from testbed.nic.qp_state import (
    RC_TIMEOUT_UNIT_S,
    TIMEOUT_UNIT_S,
    InitAttrs,
    QpError,
    QpState,
    RtrAttrs,
    RtsAttrs,
    check_transition,
    init_attrs,
    rtr_attrs,
    rts_attrs,
)
from testbed.nic.requester import Requester
from testbed.nic.responder import Responder
from testbed.nic.routes import FixedRoute, ReverseRoutes, ecmp_route, rocev2_source_port
from testbed.nic.transport_config import TRANSPORTS, Transport, TransportConfig
from testbed.nic.wire import Cnp, DataPacket, Nack, ReliabilityProbe, RxData, RxSack, Sack

MAX_MESSAGE = 1 << 31            # verbs max_msg_sz of common RoCE NICs
# Enum members read through the class cost an attribute lookup each; the per-packet entry
# points compare against these instead.
_RTR, _RTS, _ERROR = QpState.RTR, QpState.RTS, QpState.ERROR

ProfileResolver = Callable[[str, Any], Any]


class QueuePair:
    """One MRC/RC/ECMP queue pair (see module docstring). Built by Endpoint.create_qp."""

    def __init__(self, *, qpn: int, local_addr: Any, transport: Transport,
                 config: TransportConfig, initial_psn: int, seed: int,
                 placement: ReorderFreePlacement, send_cq: CompletionQueue,
                 recv_cq: CompletionQueue, resolve_profile: ProfileResolver) -> None:
        if transport not in TRANSPORTS:
            raise QpError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
        self.qpn = qpn
        self.local_addr = local_addr
        self.transport = transport
        self.config = config
        self.initial_psn = initial_psn
        self._seed = seed
        self._placement = placement
        self.send_cq = send_cq
        self.recv_cq = recv_cq
        self._resolve_profile = resolve_profile
        self.counters = QpCounters()
        self._recv_queue: deque[int] = deque()
        self._now = 0.0
        # Planes whose port is down at this end (port_status) or at the peer's
        # (peer_port_status, from its Port Status Update); a plane is out while in either.
        # Kept across RESET: they are the NICs' state, not the QP's.
        self.local_planes_down: set[int] = set()
        self.peer_planes_down: set[int] = set()
        self._reset()

    def _reset(self) -> None:
        self.state = QpState.RESET
        self.init: InitAttrs | None = None
        self.rtr: RtrAttrs | None = None
        self.rts: RtsAttrs | None = None
        self.requester: Requester | None = None
        self.responder: Responder | None = None
        self.ev_table: EvTable | None = None
        self.pinned_route: FixedRoute | None = None
        self.cc: CongestionControl | None = None
        self.error: tuple[WcStatus, str] | None = None
        self._recv_queue.clear()

    # ------------------------------------------------------------------------- verbs

    def modify(self, state: QpState | str, **attrs: Any) -> None:
        """mrc_modify_qp: move to `state` with the attributes that transition requires."""
        target = QpState(state)
        check_transition(self.state, target, attrs)
        if target is QpState.RESET:
            self._reset()
        elif target is QpState.ERROR:
            self.fail(WcStatus.WR_FLUSH_ERR, "moved to ERROR by the application")
        elif target is QpState.INIT:
            self.init = init_attrs(attrs, self._resolve_profile("ev", attrs["ev_table"]),
                                   self._resolve_profile("cc", attrs["cc_profile"]))
        elif target is QpState.RTR:
            self.rtr = rtr_attrs(attrs)
            self._build_responder()
        else:
            # An RC QP's timeout exponent counts in the IBA's 4.096 us, MRC's in mrc.h's.
            unit = RC_TIMEOUT_UNIT_S if self.transport == "rc" else TIMEOUT_UNIT_S
            self.rts = rts_attrs(attrs, default_sq_psn=self.initial_psn, timeout_unit_s=unit)
            self._build_requester()
        if target not in (QpState.RESET, QpState.ERROR):
            self.state = target

    def local_info(self) -> dict[str, Any]:
        """What the peer needs, exchanged out of band (TCP, KV store) as a plain dict."""
        return {"addr": self.local_addr, "qpn": self.qpn, "psn": self.initial_psn,
                "transport": self.transport}

    def post_write(self, data: bytes | bytearray | memoryview, remote_offset: int, rkey: int, *,
                   imm: int | None = None, wr_id: int = 0, signaled: bool = True) -> None:
        """RDMA WRITE (imm None) or WRITE_WITH_IMM of `data` to the peer's region `rkey`."""
        opcode = WrOpcode.RDMA_WRITE if imm is None else WrOpcode.RDMA_WRITE_WITH_IMM
        self.post_send(opcode, data, remote_offset, rkey, imm=imm, wr_id=wr_id, signaled=signaled)

    def post_send(self, opcode: WrOpcode | str, data: bytes | bytearray | memoryview,
                  remote_offset: int, rkey: int, *, imm: int | None = None, wr_id: int = 0,
                  signaled: bool = True) -> None:
        """mrc_post_send: only RDMA WRITE and WRITE_WITH_IMM exist; the QP must be in RTS."""
        opcode = WrOpcode(opcode)
        if opcode not in MRC_OPCODES:
            raise QpError(f"{opcode} is not supported: MRC QPs do RDMA WRITE and "
                          "WRITE_WITH_IMM only", field="opcode")
        if self.state is not QpState.RTS:
            raise QpError(f"post_send needs state RTS, QP {self.qpn:#x} is {self.state}",
                          field="state")
        with_imm = opcode is WrOpcode.RDMA_WRITE_WITH_IMM
        self._check_write(data, remote_offset, rkey, imm, with_imm)
        assert self.requester is not None      # built on the move to RTS
        self.requester.post(wr_id, memoryview(data).cast("B"), remote_offset, rkey,
                            imm if with_imm else None, signaled)

    def _check_write(self, data: Any, remote_offset: int, rkey: int, imm: int | None,
                     with_imm: bool) -> None:
        if with_imm != (imm is not None):
            raise QpError("imm must be given exactly for RDMA_WRITE_WITH_IMM", field="imm")
        if imm is not None and not 0 <= imm <= 0xFFFFFFFF:
            raise QpError(f"imm must be a u32, got {imm}", field="imm")
        assert self.rts is not None
        if with_imm and self.rts.max_wimm == 0:
            raise QpError("WRITE_WITH_IMM on a QP with max_wimm 0", field="max_wimm")
        if len(data) > MAX_MESSAGE:
            raise QpError(f"message of {len(data)} bytes exceeds {MAX_MESSAGE}", field="length")
        if not 0 <= rkey <= 0xFFFFFFFF or not 0 <= remote_offset < 1 << 64:
            raise QpError("rkey must be a u32 and remote_offset a u64", field="rkey")

    def post_recv(self, wr_id: int = 0) -> None:
        """Pre-post a receive to consume one WRITE_WITH_IMM immediate (MRC has no RNR)."""
        if self.state in (QpState.RESET, QpState.ERROR):
            raise QpError(f"post_recv needs INIT, RTR or RTS, QP is {self.state}", field="state")
        self._recv_queue.append(wr_id)

    # ------------------------------------------------------------------------- construction

    def _build_responder(self) -> None:
        rtr, init, config = self.rtr, self.init, self.config
        assert rtr is not None and init is not None   # set by the moves to RTR and INIT
        rng = random.Random(self._seed ^ 0x5EED)
        if self.transport != "mrc":
            self.pinned_route = self._pinned(rtr)
            reverse = ReverseRoutes([self.pinned_route])   # the flow's one path, both ways
        else:
            reverse = ReverseRoutes.sampled(rtr.paths_by_plane, config.reverse_paths_per_plane, rng)
        self.responder = Responder(
            qpn=self.qpn, rtr=rtr, config=config, placement=self._placement,
            recv_queue=self._recv_queue, recv_cq=self.recv_cq, counters=self.counters,
            reverse=reverse, in_order=self.transport == "rc", fail=self.fail,
            cnp_interval_s=init.cc_profile.cnp_interval_s)
        for plane in self.local_planes_down | self.peer_planes_down:
            reverse.set_plane(plane, False)

    def _pinned(self, rtr: RtrAttrs) -> FixedRoute:
        sport = rocev2_source_port(self.qpn, rtr.dest_qp)
        if self.transport == "rc" and rtr.pinned_path is not None:
            return FixedRoute(sport, rtr.pinned_path[0], rtr.pinned_path[1])
        return ecmp_route(rtr.paths_by_plane, self.local_addr, rtr.dest_addr, sport)

    def _build_requester(self) -> None:
        init, rtr, rts = self.init, self.rtr, self.rts
        assert init is not None and rtr is not None and rts is not None   # INIT, RTR, RTS
        self.cc = cc = make_cc(init.cc_profile)
        if self.transport == "mrc":
            self.ev_table = table = EvTable(rtr.paths_by_plane, init.ev_table,
                                            random.Random(self._seed))
            for plane in self.local_planes_down | self.peer_planes_down:
                if plane in table.planes:
                    table.plane_down(plane)
        self.requester = Requester(
            qpn=self.qpn, rtr=rtr, rts=rts, config=self.config, cc=cc,
            table=self.ev_table, pinned=self.pinned_route if self.ev_table is None else None,
            go_back_n=self.transport == "rc", send_cq=self.send_cq, counters=self.counters,
            fail=self.fail)

    # ------------------------------------------------------------------------- errors

    def fail(self, status: WcStatus, why: str) -> None:
        """Move to ERROR: the failing WR carries `status`, everything else is flushed."""
        if self.state is QpState.ERROR:
            return
        self.state = QpState.ERROR
        self.error = (status, why)
        self.counters.errors += 1
        flushed = self.requester.flush(self._now, status) if self.requester else 0
        while self._recv_queue:
            self.recv_cq.push(WorkCompletion(self._recv_queue.popleft(), WcStatus.WR_FLUSH_ERR,
                                             WcOpcode.RECV_RDMA_WITH_IMM, self.qpn, 0, None,
                                             self._now))
            flushed += 1
        self.counters.completion_errors += flushed

    # ------------------------------------------------------------------------- sans-IO

    def poll_tx(self, now: float, budget: int, out: list[Outgoing],
                free_planes: set[int] | None = None) -> int:
        """Append up to `budget` packets to `out`: feedback first, then probes, retransmits,
        new data (data only on `free_planes`, the ports with room; None: all). In ERROR
        only feedback still queued (the NACK that explains it) leaves."""
        self._now = now
        sent = 0
        responder = self.responder
        if responder is not None and responder.has_feedback:
            sent = responder.poll_tx(now, budget, out)
        requester = self.requester      # RTS has one (state and attributes move together)
        if self.state is _RTS and sent < budget and requester is not None:
            sent += requester.poll_tx(now, budget - sent, out, free_planes)
        return sent

    def on_packet(self, now: float, pkt: Any, ev_id: int, ecn: bool = False) -> None:
        """A decoded packet for this QP, with the EV it arrived on (from the inner headers)."""
        self._now = now
        kind = type(pkt)
        state = self.state
        # RTR and RTS have a responder, RTS a requester (state and attributes move together).
        responder, requester = self.responder, self.requester
        # Endpoint.on_packet hands in RxData / RxSack; callers may pass the public classes.
        is_data = kind is RxData or kind is DataPacket
        if is_data or kind is ReliabilityProbe:
            if (state is not _RTR and state is not _RTS) or responder is None:
                self.counters.dropped_not_ready += 1
            elif is_data:
                responder.on_data(now, pkt, ev_id, ecn)
            else:
                responder.on_probe(now, pkt, ev_id, ecn)
        elif state is not _RTS or requester is None:
            self.counters.dropped_not_ready += 1
        elif kind is RxSack or kind is Sack:
            requester.on_sack(now, pkt)
        elif kind is Nack:
            requester.on_nack(now, pkt)
        elif kind is Cnp:
            requester.on_cnp(now)

    def next_deadline(self) -> float | None:
        state = self.state
        if state is _ERROR:
            return None
        responder = self.responder
        deadline = responder.next_deadline() if responder is not None else None
        requester = self.requester
        if state is _RTS and requester is not None:
            candidate = requester.next_deadline()
            if candidate is not None and (deadline is None or candidate < deadline):
                deadline = candidate
        return deadline

    def on_timer(self, now: float) -> None:
        self._now = now
        if self.state is QpState.ERROR:
            return
        if self.responder is not None:
            self.responder.on_timer(now)
        if self.state is QpState.RTS and self.requester is not None:
            self.requester.on_timer(now)

    def port_status(self, now: float, plane: int, up: bool) -> bool:
        """The local NIC port of `plane` went down (up=False) or came back: an MRC QP takes
        the plane out of its EV table, and resends what was in flight on it, or puts it back.
        RC and ECMP QPs are pinned to one path and have no other to move to: they are left
        to their timers, as a RoCE NIC leaves them. The responder's SACKs and NACKs leave
        the plane out too (ReverseRoutes.set_plane), where it has another. Returns whether
        the QP's sending changed (its EV table)."""
        return self._plane_status(now, plane, up, self.local_planes_down)

    def peer_port_status(self, now: float, plane: int, up: bool) -> bool:
        """The peer's NIC port of `plane` went down or came back, as its Port Status Update
        said [R:ctl.h, via docs/wire-format.md's sources]: every path of the plane ends at
        that port, so the QP does what port_status does for its own port. The plane is back
        only when both ends' ports are up."""
        return self._plane_status(now, plane, up, self.peer_planes_down)

    def _plane_status(self, now: float, plane: int, up: bool, down: set[int]) -> bool:
        was_out = plane in self.local_planes_down or plane in self.peer_planes_down
        if up:
            down.discard(plane)
        else:
            down.add(plane)
        out = plane in self.local_planes_down or plane in self.peer_planes_down
        if out == was_out:
            return False
        self._now = now
        responder = self.responder
        if responder is not None:
            responder.reverse_routes.set_plane(plane, not out)
        table, requester = self.ev_table, self.requester
        if table is None or plane not in table.planes:
            return False
        if not out:
            return table.plane_up(plane, now)
        changed = table.plane_down(plane, now)
        if changed and requester is not None and self.state is _RTS:
            self.counters.port_down_resends += requester.resend_plane(now, plane)
        return changed

    # ------------------------------------------------------------------------- stats

    @property
    def dest_addr(self) -> Any:
        return self.rtr.dest_addr if self.rtr else None

    def stats(self) -> dict[str, Any]:
        """JSON-able counters and state of this QP."""
        out: dict[str, Any] = {
            "qpn": self.qpn, "transport": self.transport, "state": str(self.state),
            "error": None if self.error is None else {"status": str(self.error[0]),
                                                      "message": self.error[1]},
            "posted_receives": len(self._recv_queue),
        }
        out.update(self.counters.to_dict())
        if self.requester is not None and self.cc is not None:   # built together
            out["requester"] = _jsonable(self.requester.stats())
            out["cc"] = _jsonable(self.cc.stats())
        if self.responder is not None:
            out["responder"] = self.responder.stats()
        if self.ev_table is not None:
            out["ev_table"] = self.ev_table.stats()
        elif self.pinned_route is not None:
            out["pinned_route"] = self.pinned_route.to_dict()
        return out

    def ev_snapshot(self) -> list[dict[str, Any]]:
        """Per-EV state and counters (the pinned route alone for ECMP/RC)."""
        if self.ev_table is not None:
            return self.ev_table.snapshot()
        return [self.pinned_route.to_dict()] if self.pinned_route is not None else []


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    # JSON has no infinity: a disabled congestion window is reported as null.
    return {k: (None if isinstance(v, float) and v == float("inf") else v)
            for k, v in values.items()}
