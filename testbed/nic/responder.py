"""The receive side of a QP: placement, PSN tracking, WRITE_WITH_IMM ordering, feedback.

MRC and ECMP QPs accept any PSN inside the MPR window and place it at once (selective mode);
RC QPs accept only the expected PSN and answer the first out-of-sequence packet with one
sequence-error NAK, like a RoCEv2 RC responder (in-order mode). Feedback leaves on the reverse
EV set, round-robin across planes (routes.ReverseRoutes).

SACK policy (TransportConfig): one SACK per `ack_every` in-order packets, at once for an
out-of-order arrival, a filled hole, a duplicate, an ACK_REQUEST, the end of a WRITE, a
non-NONE verdict or a probe; a coalesced SACK never waits longer than `ack_delay_s`.

When the QP's congestion control reads CNPs (DCQCN: `CcProfile.cnp_interval_s`), the
responder is its notification point: a CE-marked data packet brings a CNP, at most one
per `cnp_interval_s`.

WRITE_WITH_IMM completions are released when the cumulative PSN passes the packet that
carried the immediate: all earlier PSNs, hence all earlier messages, have then been placed, so
completions come out in MSN order however the last packets were reordered [3P:ns3].
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import Any

from testbed.nic.completion import CompletionQueue, WcOpcode, WcStatus, WorkCompletion
from testbed.nic.memory import PlacementResult, ReorderFreePlacement
from testbed.nic.outgoing import Outgoing
from testbed.nic.qp_counters import QpCounters
from testbed.nic.qp_state import RtrAttrs
from testbed.nic.receive_window import Arrival, ReceiveWindow
from testbed.nic.reliability_probes import ACK_REFRESH_PROBE_BIT
from testbed.nic.routes import FixedRoute, ReverseRoutes
from testbed.nic.transport_config import TransportConfig
from testbed.nic.wire import (
    IMM_OPCODES,
    MAX_RCV_CWND_PEN,
    PSN_MASK,
    TIMESTAMP_MASK,
    AnyData,
    Cnp,
    Nack,
    NackReason,
    Opcode,
    ReliabilityProbe,
    Trim,
    Verdict,
    encode_sack,
)

MESSAGE_END_OPCODES = frozenset({Opcode.WRITE_LAST, Opcode.WRITE_LAST_WITH_IMM,
                                 Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_WITH_IMM})
_U16 = 0xFFFF
_U32 = 0xFFFFFFFF
_U64 = (1 << 64) - 1
_SACK, _NACK, _CNP = 0, 1, 2
_NONE, _SKIP_ONCE, _ALWAYS_SKIP = Verdict.NONE, Verdict.SKIP_ONCE, Verdict.ALWAYS_SKIP
PENALTY_SCALE = 128        # rcv_cwnd_pen 128 would take a whole acknowledged window
# The QP-wide share of marked packets is an EWMA over about this many packets' worth.
MARKED_SHARE_GAIN = 1 / 32
# Enum members read through the class cost an attribute lookup each; per-packet code uses these.
_NEW, _DUPLICATE = Arrival.NEW, Arrival.DUPLICATE
_TRIM_NONE = Trim.NONE
_PLACED = PlacementResult.OK
_SACK_ROUTE_MEMORY = 4096     # SACK triggers whose reverse route is remembered
# Outgoing(...) goes through the NamedTuple's Python-level __new__; building the tuple directly
# gives the very same object for about half the cost, once per SACK.
_new_tuple = tuple.__new__
_PLACEMENT_TEXT = {
    PlacementResult.UNKNOWN_RKEY: "WRITE to an unknown rkey",
    PlacementResult.NO_WRITE_ACCESS: "WRITE to a region without remote write access",
    PlacementResult.OUT_OF_BOUNDS: "WRITE outside the registered region",
}

Fail = Callable[[WcStatus, str], None]


class Responder:
    """Receive half of one QP (see module docstring)."""

    def __init__(self, *, qpn: int, rtr: RtrAttrs, config: TransportConfig,
                 placement: ReorderFreePlacement, recv_queue: deque[int],
                 recv_cq: CompletionQueue, counters: QpCounters, reverse: ReverseRoutes,
                 in_order: bool, fail: Fail, cnp_interval_s: float | None = None) -> None:
        self._qpn = qpn
        self._peer_qp = rtr.dest_qp
        self._peer_addr = rtr.dest_addr
        self._config = config
        self._sack_on_end = config.sack_on_message_end      # read per packet; config is frozen
        self._ack_every = config.ack_every
        self._placement = placement
        self._recv_queue = recv_queue
        self._recv_cq = recv_cq
        self._counters = counters
        self._reverse = reverse
        self._in_order = in_order
        self._fail = fail
        self.window = ReceiveWindow(rtr.rq_psn, rtr.mpr_dest)
        self._mpr_dest = rtr.mpr_dest
        self._dynamic_mpr = rtr.dynamic_mpr_dest
        self._max_wimm_dest = rtr.max_wimm_dest
        self.received_bytes = 0
        self._feedback: deque[tuple] = deque()
        self._pending = 0                       # in-order packets not yet covered by a SACK
        self._ack_due: float | None = None
        self._last_trigger: tuple | None = None
        self._nak_sent = False                  # in-order mode: one NAK per gap
        self._stash: list[tuple[int, int, int]] = []   # (index, imm, length) awaiting release
        self._rq_released = 0                   # RQMSN of the next immediate to release
        self._min_age_us: int | None = None
        self._skip_streaks: dict[int, int] = {}
        self._marked_share = 0.0                # of recent packets, on every EV
        # Responder host backpressure: data packets, and those trimmed at the
        # last hop into this host, since the last SACK.
        self._arrived = 0
        self._trimmed_here = 0
        self._hold_s = config.backpressure_hold_s if config.host_backpressure else None
        self._hold_until = 0.0                  # SACKs before this carry at least pen 1
        self._sacked_on: dict[int, FixedRoute] = {}    # trigger index -> its SACK's route
        self._last_sack_route: FixedRoute | None = None  # of the latest data SACK
        target = config.skip_queueing_target_s
        self._target_us = None if target is None else int(target * 1e6)
        # DCQCN notification point: None when the peer's controller reads no CNPs.
        self._cnp_interval = cnp_interval_s
        self._next_cnp_at = 0.0

    # ------------------------------------------------------------------------- arrivals

    def on_data(self, now: float, pkt: AnyData, ev_id: int, ecn: bool) -> None:
        self._counters.packets_received += 1
        if ecn and self._cnp_interval is not None and now >= self._next_cnp_at:
            self._notify_congestion(now)
        window = self.window
        index = window.to_index(pkt.psn)
        if self._in_order:
            self._on_data_in_order(now, pkt, index, ev_id, ecn)
            return
        arrival = window.classify(index)
        if arrival is _NEW:
            self._accept(now, pkt, index, ev_id, ecn)
        elif arrival is _DUPLICATE:
            self._counters.duplicates_received += 1
            self._replace_reverse_of(index)
            self._sack_now(now, pkt, index, ev_id, self._verdict(now, pkt.tx_timestamp, ev_id, ecn))
        else:
            self._nack(pkt, NackReason.PSN_OOR_WINDOW, ev_id)

    def _on_data_in_order(self, now: float, pkt: AnyData, index: int, ev_id: int,
                          ecn: bool) -> None:
        offset = index - self.window.expected
        if offset == 0:
            self._accept(now, pkt, index, ev_id, ecn)
            return
        if offset < 0:
            self._counters.duplicates_received += 1
            self._sack_now(now, pkt, index, ev_id, _NONE)
            return
        # RoCE RC: drop, and NAK the sequence error once until the expected PSN arrives. The
        # RC responder has no bitmap, so the NAK reason is NO_BITMAP and its PSN the expected one.
        self._counters.out_of_order_received += 1
        if not self._nak_sent:
            self._nak_sent = True
            expected = self.window.wire_psn(self.window.expected)
            self._queue_nack(expected, NackReason.NO_BITMAP, ev_id, pkt.tx_timestamp)

    def _accept(self, now: float, pkt: AnyData, index: int, ev_id: int, ecn: bool) -> None:
        self._arrived += 1
        if pkt.trim is not _TRIM_NONE:
            self._counters.trimmed_received += 1
            last_hop = pkt.trim is Trim.TRIMMED_LASTHOP
            self._trimmed_here += last_hop
            if last_hop and self._hold_s is not None:
                self._hold_until = now + self._hold_s
            if not self._config.trim_nacks:
                return                         # no TRIM_NACK capability: the packet is lost
            self._nack(pkt, NackReason.TRIMMED_LASTHOP if last_hop else NackReason.TRIMMED, ev_id)
            return
        opcode, payload, counters = pkt.opcode, pkt.payload, self._counters
        with_imm = opcode in IMM_OPCODES
        if with_imm and not self._admit_immediate(pkt, ev_id):
            return
        placed = self._placement.place(pkt.rkey, pkt.remote_offset, payload)
        if placed is not _PLACED:
            self._refuse(pkt, ev_id, WcStatus.LOC_QP_OP_ERR, _PLACEMENT_TEXT[placed])
            return
        if with_imm:
            imm = pkt.imm
            assert imm is not None             # WRITE_WITH_IMM opcodes carry ImmDt
            heapq.heappush(self._stash, (index, imm, pkt.total_length))
        window = self.window
        expected = window.expected
        in_sequence = index == expected and not window.ooo
        if index != expected:
            counters.out_of_order_received += 1
        if window.mark(index):
            self._nak_sent = False
            if self._stash:
                self._release_immediates(now)
        nbytes = len(payload)
        self.received_bytes += nbytes
        counters.bytes_received += nbytes
        verdict = self._verdict(now, pkt.tx_timestamp, ev_id, ecn)
        if (not in_sequence or verdict or pkt.ack_request
                or (self._sack_on_end and opcode in MESSAGE_END_OPCODES)):
            self._sack_now(now, pkt, index, ev_id, verdict)
        else:
            self._coalesce(now, pkt, index, ev_id)

    def _admit_immediate(self, pkt: AnyData, ev_id: int) -> bool:
        # max_wimm_dest bounds the WriteIMMs in flight at the responder (mrc.h): an RQMSN that
        # far beyond the next one to release means the requester overran it.
        if (pkt.rqmsn - self._rq_released) & _U16 >= self._max_wimm_dest:
            self._refuse(pkt, ev_id, WcStatus.REM_INV_REQ_ERR,
                         f"WriteIMM RQMSN {pkt.rqmsn} exceeds max_wimm_dest {self._max_wimm_dest}")
            return False
        if len(self._stash) >= len(self._recv_queue):
            # MRC has no RNR: an immediate without a pre-posted receive is fatal.
            self._refuse(pkt, ev_id, WcStatus.LOC_QP_OP_ERR, "WriteIMM without a posted receive")
            return False
        return True

    def _refuse(self, pkt: AnyData, ev_id: int, status: WcStatus, why: str) -> None:
        self._nack(pkt, NackReason.UNEXP_EVENT, ev_id)
        self._fail(status, why)

    def _release_immediates(self, now: float) -> None:
        stash, expected = self._stash, self.window.expected
        while stash and stash[0][0] < expected:
            _index, imm, length = heapq.heappop(stash)
            wr_id = self._recv_queue.popleft()
            self._rq_released = (self._rq_released + 1) & _U16
            self._counters.responder_completions += 1
            self._recv_cq.push(WorkCompletion(wr_id, WcStatus.SUCCESS, WcOpcode.RECV_RDMA_WITH_IMM,
                                              self._qpn, length, imm, now))

    def on_probe(self, now: float, probe: ReliabilityProbe, ev_id: int, ecn: bool) -> None:
        """A reliability probe consumes no PSN and is answered by a SACK at once. An ACK
        refresh says the requester heard nothing since before our last SACK: that SACK's
        reverse path is likely dead, so it is swapped (the answer takes the next one)."""
        if probe.probe_id & ACK_REFRESH_PROBE_BIT and self._last_sack_route is not None:
            if self._reverse.replace(self._last_sack_route):
                self._counters.reverse_routes_replaced += 1
            self._last_sack_route = None
        verdict = self._verdict(now, probe.tx_timestamp, ev_id, ecn)
        self._queue_sack((None, probe.probe_id, ev_id, probe.tx_timestamp, now, verdict, True))

    def _notify_congestion(self, now: float) -> None:
        """A CE-marked packet: one CNP to the requester, then none for this QP until the
        CNP interval has passed (DCQCN's notification point, Zhu et al. §3.1)."""
        assert self._cnp_interval is not None  # on_data asks only with an interval
        self._next_cnp_at = now + self._cnp_interval
        self._feedback.append((_CNP, None))

    # ------------------------------------------------------------------------- verdicts

    def _verdict(self, now: float, tx_timestamp: int | None, ev_id: int, ecn: bool) -> Verdict:
        marked = ecn
        if self._target_us is not None and tx_timestamp is not None:
            # Hosts share one clock in emulation, so a packet's age is its one-way delay;
            # the smallest age seen stands for the unloaded path.
            age = (int(now * 1e6) - tx_timestamp) & TIMESTAMP_MASK
            floor = self._min_age_us
            if floor is None or age < floor:
                self._min_age_us = floor = age
            marked = marked or age - floor > self._target_us
        share = self._marked_share
        self._marked_share = share + MARKED_SHARE_GAIN * (marked - share)
        streaks = self._skip_streaks
        if not marked:
            if streaks:
                streaks.pop(ev_id, None)
            return _NONE
        streak = streaks.get(ev_id, 0) + 1
        if streak >= self._config.always_skip_after:
            del streaks[ev_id]
            # A path is persistently bad only if it stands out: when most of
            # the QP's packets are marked, on every EV, the congestion sits
            # where all its paths meet (an incast's last hops), and demoting
            # EVs would only thin the set that carries the QP.
            if share < self._config.always_skip_max_marked_share:
                return _ALWAYS_SKIP
        else:
            streaks[ev_id] = streak
        return _SKIP_ONCE

    # ------------------------------------------------------------------------- feedback queue

    def _sack_now(self, now: float, pkt: AnyData, index: int, ev_id: int,
                  verdict: Verdict) -> None:
        self._pending = 0
        self._ack_due = None
        self._feedback.append((_SACK, (index, pkt.psn, ev_id, pkt.tx_timestamp, now, verdict,
                                       False)))

    def _coalesce(self, now: float, pkt: AnyData, index: int, ev_id: int) -> None:
        self._last_trigger = trigger = (index, pkt.psn, ev_id, pkt.tx_timestamp, now, _NONE, False)
        self._pending += 1
        if self._pending >= self._ack_every:
            self._pending = 0
            self._ack_due = None
            self._feedback.append((_SACK, trigger))
        elif self._ack_due is None:
            self._ack_due = now + self._config.ack_delay_s

    def _queue_sack(self, trigger: tuple) -> None:
        self._feedback.append((_SACK, trigger))

    def _nack(self, pkt: AnyData, reason: NackReason, ev_id: int) -> None:
        self._queue_nack(pkt.psn, reason, ev_id, pkt.tx_timestamp)

    def _queue_nack(self, psn: int, reason: NackReason, ev_id: int, ts: int | None) -> None:
        self._feedback.append((_NACK, (psn, reason, ev_id, ts)))

    # ------------------------------------------------------------------------- timers, output

    def next_deadline(self) -> float | None:
        return self._ack_due

    def on_timer(self, now: float) -> None:
        if self._ack_due is not None and now >= self._ack_due:
            self._ack_due = None
            self._pending = 0
            if self._last_trigger is not None:
                self._queue_sack(self._last_trigger)

    @property
    def reverse_routes(self) -> ReverseRoutes:
        return self._reverse

    def reverse_route(self) -> FixedRoute:
        """The next reverse EV, for answers that are not SACK/NACK (EV probe replies)."""
        return self._reverse.next()

    @property
    def has_feedback(self) -> bool:
        return bool(self._feedback)

    def poll_tx(self, now: float, budget: int, out: list[Outgoing]) -> int:
        sent = 0
        feedback, next_route, peer = self._feedback, self._reverse.next, self._peer_addr
        while feedback and sent < budget:
            kind, fields = feedback.popleft()
            route = next_route()
            if kind == _SACK:
                data = self._encode_sack(now, fields)
                self._remember_sack_route(fields[0], route)
            elif kind == _NACK:
                data = self._encode_nack(fields)
            else:
                self._counters.cnps_sent += 1
                data = Cnp(self._peer_qp).encode()
            out.append(_new_tuple(Outgoing, (route.path, route.plane, route.ev_id, data, peer)))
            sent += 1
        return sent

    def _remember_sack_route(self, index: int | None, route: FixedRoute) -> None:
        if index is None:                      # a probe's SACK: no PSN to duplicate later
            return
        self._last_sack_route = route
        sacked_on = self._sacked_on
        sacked_on[index] = route
        if len(sacked_on) > _SACK_ROUTE_MEMORY:
            del sacked_on[next(iter(sacked_on))]

    def _replace_reverse_of(self, index: int) -> None:
        """A duplicate of a PSN whose SACK we sent: the requester timed it out, so that SACK
        never arrived in time; its reverse path is likely dead (or badly queued): swap it."""
        route = self._sacked_on.pop(index, None)
        if route is not None and self._reverse.replace(route):
            self._counters.reverse_routes_replaced += 1

    def _encode_sack(self, now: float, trigger: tuple) -> bytes:
        index, trigger_psn, ev_id, ts, arrived, verdict, probe_reply = trigger
        window, counters = self.window, self._counters
        offset, bitmap = window.sack_fields(index)
        service_ns = int((now - arrived) * 1e9)
        if service_ns > _U32:
            service_ns = _U32
        ooo = window.ooo
        counters.sacks_sent += 1
        counters.sack_verdicts_sent[verdict] += 1
        cack_psn = (window.initial_psn + window.expected - 1) & PSN_MASK    # window.cack_psn
        return encode_sack(self._peer_qp, cack_psn, ev_id, offset, bitmap, verdict,
                           self._mpr_dest if self._dynamic_mpr else 0, trigger_psn, probe_reply,
                           ts, service_ns, ooo if ooo < _U16 else _U16, self._penalty(now),
                           self.received_bytes & _U64)

    def _penalty(self, now: float) -> int:
        """rcv_cwnd_pen for the next SACK: the share of packets trimmed at the last hop into
        this host since the previous SACK, on NSCC's 0..127 scale (a share s cuts the
        sender's window by s of what the SACK acknowledges), and at least 1 for
        `backpressure_hold_s` after such a trim (the sender then holds its window). A
        last-hop trim says this host's own port is the bottleneck, which no ECN mark
        reports (the last hop does not mark): MRC's responder host backpressure
        [P2 §II-D], [UEC §3.6.13.2]."""
        arrived, trimmed = self._arrived, self._trimmed_here
        self._arrived = self._trimmed_here = 0
        if not self._config.host_backpressure:
            return 0
        if not trimmed:
            return 1 if now < self._hold_until else 0
        return min(MAX_RCV_CWND_PEN, max(1, round(PENALTY_SCALE * trimmed / arrived)))

    def _encode_nack(self, fields: tuple) -> bytes:
        psn, reason, ev_id, ts = fields
        self._counters.nacks_sent += 1
        self._counters.nacks_sent_by_reason[reason.name] += 1
        return Nack(self._peer_qp, psn, reason, ev_id, self.window.cack_psn, ts).encode()

    # ------------------------------------------------------------------------- control

    def set_mpr_dest(self, mpr_units: int) -> None:
        """Dynamic MPR: resize the tracker; SACKs advertise the new size when enabled."""
        self._mpr_dest = mpr_units
        self.window.resize(mpr_units)

    def stats(self) -> dict[str, Any]:
        return {"cack_psn": self.window.cack_psn, "ooo": self.window.ooo,
                "received_bytes": self.received_bytes, "stashed_immediates": len(self._stash),
                "mpr_dest": self._mpr_dest}
