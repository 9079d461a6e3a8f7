"""The send side of a QP: segmentation, PSNs, windows, paths, loss recovery, completions.

One class serves the three transports; what differs is chosen at construction:

- route choice: MRC sprays over its EvTable (a fresh EV per packet, never the EV a packet was
  lost on for its retransmission); ECMP and RC use one pinned route;
- recovery: MRC and ECMP retransmit holes selectively (oldest first) with a per-packet timer;
  RC goes back N from the first missing PSN, on its QP timer or a sequence-error NAK.

Loss handling, in the EV states of P2 §II-A (GOOD, SKIP, ASSUMED_BAD, DENIED): silence is
read as a path failure [P1 §2.1: "When a packet is not trimmed but actually lost, MRC assumes
the path has failed and immediately stops using the corresponding EV"]. A per-packet timeout demotes the EV to ASSUMED_BAD at once; a hole with
`reorder_threshold` later PSNs SACKed is retransmitted at once, but may be mere reordering
across paths, so it demotes its EV only after `inferred_losses_to_fail` such losses with no
SACK reflecting the EV in between. A retransmission is judged the same way by the order of
transmissions (RACK's rule, RFC 8985: a packet is lost once packets sent after it arrived):
`reorder_threshold` transmissions sent after it SACKed while it is not declare it lost again,
so that a retransmission sprayed onto another dead EV before that EV was demoted is repaired
within an RTT, not by its timer, which would hold the MPR window shut meanwhile. Background probes resurrect demoted EVs [P1 §2.1]. Silence
with packets in flight is not yet loss: after `ack_refresh_s` of it an ACK-refresh probe asks
the responder for its ACK state [P2 §II-C], so a lost last SACK of a burst costs that wait,
not a packet timeout that would demote the healthy EV its data took. A TRIMMED NACK
only SKIPs the EV [3P:expl]. The reorder threshold adapts upwards when echoed timestamps reveal a
spurious retransmission.

Congestion-window accounting is per packet (`SentPacket.counted`): a transmission enters the
window once; its bytes leave it once, when it is acknowledged (cc.on_ack), trimmed
(cc.on_trim) or declared lost (cc.on_loss). The SACK's received-bytes counter is kept for
stats only, because duplicates and losses would make a window fed from it drift. A
rate-based controller (DCQCN, `cc.paces`) also holds each data packet until its
`next_send_time()`; `paced_until` is then when the QP must be woken to send it.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from typing import Any

from testbed.nic.cc import CongestionControl
from testbed.nic.completion import CompletionQueue, WcOpcode, WcStatus, WorkCompletion
from testbed.nic.ev_table import EvState, EvTable
from testbed.nic.outgoing import Outgoing
from testbed.nic.qp_counters import QpCounters
from testbed.nic.qp_state import RtrAttrs, RtsAttrs
from testbed.nic.reliability_probes import ACK_REFRESH_PROBE_BIT, ProbeTracker
from testbed.nic.responder import MESSAGE_END_OPCODES
from testbed.nic.retry_timer import RetryTimer
from testbed.nic.routes import FixedRoute
from testbed.nic.send_window import SendWindow, SentPacket, WriteRequest
from testbed.nic.transport_config import TransportConfig
from testbed.nic.wire import (
    IMM_OPCODES,
    MPR_UNIT_PSNS,
    PSN_MASK,
    TIMESTAMP_MASK,
    AnySack,
    Nack,
    NackReason,
    Opcode,
    ReliabilityProbe,
    Verdict,
    encode_data,
    max_payload,
)

Fail = Callable[[WcStatus, str], None]
_RESOURCE_NACKS = frozenset({NackReason.NO_BITMAP, NackReason.NO_PKT_BUFFER,
                             NackReason.NO_RESOURCE})
_TRIM_NACKS = frozenset({NackReason.TRIMMED, NackReason.TRIMMED_LASTHOP})
# Enum members read through the class cost an attribute lookup each: per-SACK code uses these.
_V_NONE, _V_SKIP_ONCE, _V_ALWAYS_SKIP = Verdict.NONE, Verdict.SKIP_ONCE, Verdict.ALWAYS_SKIP
_WRITE_MIDDLE = Opcode.WRITE_MIDDLE
# Outgoing(...) goes through the NamedTuple's Python-level __new__; building the tuple directly
# gives the very same object for about half the cost, once per packet sent.
_new_tuple = tuple.__new__


def _opcode(length: int, offset: int, nbytes: int, payload: int, imm: bool) -> Opcode:
    if length <= payload:
        return Opcode.WRITE_ONLY_WITH_IMM if imm else Opcode.WRITE_ONLY
    if offset == 0:
        return Opcode.WRITE_FIRST
    if offset + nbytes >= length:
        return Opcode.WRITE_LAST_WITH_IMM if imm else Opcode.WRITE_LAST
    return Opcode.WRITE_MIDDLE


def _timestamp(now: float) -> int:
    return int(now * 1e6) & TIMESTAMP_MASK


def _timestamp_after(a: int, b: int) -> bool:
    """u32 microsecond timestamp a is later than b (within half the wrap period)."""
    return 0 < (a - b) & TIMESTAMP_MASK < 1 << 31


class Requester:
    """Send half of one QP (see module docstring)."""

    def __init__(self, *, qpn: int, rtr: RtrAttrs, rts: RtsAttrs, config: TransportConfig,
                 cc: CongestionControl, table: EvTable | None, pinned: FixedRoute | None,
                 go_back_n: bool, send_cq: CompletionQueue, counters: QpCounters,
                 fail: Fail) -> None:
        if (table is None) == (pinned is None):
            raise ValueError("a requester sprays over an EvTable or uses one pinned route")
        self._qpn = qpn
        self._peer_qp = rtr.dest_qp
        self._peer_addr = rtr.dest_addr
        self._config = config
        self._cc = cc
        self._table = table
        self._pinned = pinned
        self._free_planes: set[int] | None = None   # of this poll_tx (see there)
        self._go_back_n = go_back_n
        self._send_cq = send_cq
        self._counters = counters
        self._fail = fail
        self.window = SendWindow(rts.sq_psn)
        self._payload = max_payload(config.mtu)
        self._mpr_units = rts.mpr
        self._mpr_psns = rts.mpr * MPR_UNIT_PSNS
        self._dynamic_mpr = rts.dynamic_mpr
        self._max_wimm = rts.max_wimm
        self.retry = RetryTimer(rts.timeout_s, rts.retry, config.retry_give_up_s)
        self._packet_timeout = config.packet_timeout_s or rts.timeout_s
        self._probe_timeout = config.probe_timeout_s or self._packet_timeout
        self._timestamps = config.timestamps
        # A controller that never limits never asks for an ACK either: the send path skips
        # those two calls when the controller says so (CongestionControl.limits_sending).
        self._cc_limits = cc.limits_sending
        self._cc_paces = cc.paces             # a rate-based controller holds packets
        self.paced_until: float | None = None  # when the rate lets the next packet go
        self._ack_request_on_end = config.ack_request_on_message_end
        self._packet_timers: deque[tuple[float, int, int]] | None = None if go_back_n else deque()
        self._rtx_heap: list[int] = []
        self._go_back_next: int | None = None
        self._go_back_end = 0
        self._unsent: deque[WriteRequest] = deque()
        self._incomplete: deque[WriteRequest] = deque()
        self._msn = 0
        self._rqmsn = 0
        self._imm_outstanding = 0
        self._tx_seq = 0
        self._probes = ProbeTracker()
        self._probe_queue: deque[Any] = deque()
        # ACK refresh (TransportConfig.ack_refresh_s): due at _refresh_at, pushed on by every
        # transmission and every SACK/NACK; MRC only (RC and ECMP have no reliability probes).
        self._ack_refresh = config.ack_refresh_s if table is not None else None
        self._refresh_at: float | None = None
        self._refresh_due = False
        self._refresh_ids = 0
        self._reorder_threshold = config.reorder_threshold
        self._loss_strikes: dict[int, int] = {}     # EV -> inferred losses since its last ACK
        # Selective retransmissions not yet judged, with their transmission's tx_seq.
        self._resent: list[tuple[SentPacket, int]] = []
        self._delivered_tx_seq = 0    # the latest first transmission known to have arrived
        self.peer_received_bytes = 0

    # ------------------------------------------------------------------------- posting

    def post(self, wr_id: int, data: memoryview, remote_offset: int, rkey: int,
             imm: int | None, signaled: bool) -> None:
        wr = WriteRequest(wr_id, data, remote_offset, rkey, imm, signaled, self._msn, self._rqmsn)
        self._msn = (self._msn + 1) & 0xFFFF
        if imm is not None:
            self._rqmsn = (self._rqmsn + 1) & 0xFFFF
        self._unsent.append(wr)
        self._incomplete.append(wr)

    @property
    def packet_timeout_s(self) -> float:
        """How long a packet's timer runs before it is declared lost."""
        return self._packet_timeout

    @property
    def idle(self) -> bool:
        return not self._incomplete

    # ------------------------------------------------------------------------- transmit

    def poll_tx(self, now: float, budget: int, out: list[Outgoing],
                free_planes: set[int] | None = None) -> int:
        """`free_planes`: the planes whose NIC port can take a data packet now
        (None: every plane); probes are small and go whatever."""
        sent = 0
        if self._refresh_due:
            sent += self._send_ack_refresh(now, out)
        if self._probe_queue:
            sent += self._send_probes(now, budget - sent, out)
        if free_planes is not None and not free_planes:
            return sent
        self._free_planes = free_planes
        if not self._cc_paces:
            return sent + self._send_data(now, budget - sent, out)
        self.paced_until = None
        while sent < budget:
            due = self._cc.next_send_time()
            if now < due:
                self.paced_until = due        # next_deadline wakes the QP then
                break
            one = self._send_data(now, 1, out)
            if not one:
                break
            sent += one
        return sent

    def _send_data(self, now: float, budget: int, out: list[Outgoing]) -> int:
        sent = 0
        if self._go_back_next is not None:
            sent += self._send_go_back(now, budget, out)
        elif self._rtx_heap:
            sent += self._send_retransmissions(now, budget, out)
        if self._unsent and self._go_back_next is None:
            sent += self._send_new(now, budget - sent, out)
        return sent

    def _send_new(self, now: float, budget: int, out: list[Outgoing]) -> int:
        unsent, window, cc, payload = self._unsent, self.window, self._cc, self._payload
        table, cc_limits, records = self._table, self._cc_limits, window.records
        sent = 0
        while sent < budget and unsent:
            wr = unsent[0]
            if window.nxt - window.una >= self._mpr_psns:
                break   # never beyond the responder's tracker: cack + MPR
            if not wr.started and wr.imm is not None and self._imm_outstanding >= self._max_wimm:
                break
            offset = wr.next_offset
            nbytes = wr.length - offset
            if nbytes > payload:
                nbytes = payload
            if cc_limits and not cc.can_send(nbytes):
                break
            route: Any                        # an Ev or the pinned FixedRoute
            if table is not None:             # _pick(), inlined for the sprayed case
                route = table.next_ev(None, self._free_planes, nbytes=nbytes, now=now)
            else:
                route = self._pick(None, nbytes, now)
            if route is None:
                break
            if not wr.started:
                wr.started = True
                if wr.imm is not None:
                    self._imm_outstanding += 1
            wr.next_offset = offset + nbytes
            wr.unacked += 1
            if wr.next_offset >= wr.length:
                wr.fully_sent = True
                unsent.popleft()
            if 0 < offset and offset + nbytes < wr.length:
                opcode = _WRITE_MIDDLE        # what _opcode() returns for any inner piece
            else:
                opcode = _opcode(wr.length, offset, nbytes, payload, wr.imm is not None)
            index = window.nxt
            record = SentPacket(index, wr, offset, nbytes, opcode, route)
            records[index] = record           # window.add(record), inlined
            window.nxt = index + 1
            self._transmit(now, record, route, False, out)
            sent += 1
        return sent

    def _send_retransmissions(self, now: float, budget: int, out: list[Outgoing]) -> int:
        heap, records = self._rtx_heap, self.window.records
        sent = 0
        blocked: list[int] = []
        while heap and sent < budget:
            record = records.get(heap[0])
            if record is None or not record.rtx_pending:
                heapq.heappop(heap)           # acknowledged meanwhile
                continue
            if record.index - self.window.una >= self._mpr_psns:
                break                         # a dynamic-MPR shrink put it out of range: wait
            if not record.counted and not self._cc.can_send(record.length):
                break
            # Never the EV the packet was lost on: retransmit "on a different path" [P1 §3];
            # the EV a NACK carries is not used for the retransmission [3P:expl, citing the spec].
            exclude = record.route.ev_id if self._table is not None else None
            route = self._pick(exclude, record.length, now)
            index = heapq.heappop(heap)
            if route is None:
                blocked.append(index)
                if self._table is None:       # a pinned QP's one port is busy: wait
                    break
                if len(blocked) >= 8 or not self._table.usable_active_count():
                    break                     # only the failed EV, or busy ports: wait
                continue
            self._transmit(now, record, route, True, out)
            self._resent.append((record, record.tx_seq))
            sent += 1
        for index in blocked:
            heapq.heappush(heap, index)
        return sent

    def _send_go_back(self, now: float, budget: int, out: list[Outgoing]) -> int:
        records, sent = self.window.records, 0
        while sent < budget:
            index = self._go_back_next
            if index is None or index >= self._go_back_end:
                self._go_back_next = None
                break
            record = records.get(index)
            if record is not None:
                if not record.counted and not self._cc.can_send(record.length):
                    break
                route = self._pick(None, record.length, now)
                if route is None:
                    break                     # its port is busy: resume from here
                self._transmit(now, record, route, True, out)
                sent += 1
            self._go_back_next = index + 1
        return sent

    def _pick(self, exclude: int | None, nbytes: int, now: float) -> Any:
        table, free = self._table, self._free_planes
        if table is not None:
            return table.next_ev(exclude, free, nbytes=nbytes, now=now)
        route = self._pinned
        assert route is not None               # a QP has an EV table or one pinned route
        if free is not None and route.plane not in free:
            return None                        # its one port is busy: wait for it
        route.packets_sent += 1
        route.bytes_sent += nbytes
        return route

    def _transmit(self, now: float, record: SentPacket, route: Any, retransmit: bool,
                  out: list[Outgoing]) -> None:
        wr, nbytes, index = record.wr, record.length, record.index
        window, cc = self.window, self._cc
        self._tx_seq = tx_seq = self._tx_seq + 1
        record.route = route
        record.sent_at = now
        record.sent_ts = ts = int(now * 1e6) & TIMESTAMP_MASK      # _timestamp(now)
        record.tx_count += 1
        record.tx_seq = tx_seq
        record.rtx_pending = False
        if not record.counted:
            cc.on_send(nbytes, now)
            record.counted = True
        if self._cc_paces:
            cc.on_transmit(nbytes, now)
        opcode = record.opcode
        ack_request = (retransmit or (self._cc_limits and cc.ack_request())
                       or index - window.una + 1 >= self._mpr_psns
                       or (self._ack_request_on_end and opcode in MESSAGE_END_OPCODES))
        offset = record.offset
        data = encode_data(
            opcode, self._peer_qp, (window.initial_psn + index) & PSN_MASK, wr.msn, wr.rqmsn,
            wr.remote_offset + offset, wr.rkey, wr.length, wr.data[offset:offset + nbytes],
            wr.imm if opcode in IMM_OPCODES else None, ts if self._timestamps else None,
            retransmit, ack_request,
        )
        if self._packet_timers is not None:
            self._packet_timers.append((now + self._packet_timeout, index, tx_seq))
        if self._ack_refresh is not None:
            self._refresh_at = now + self._ack_refresh
        retry = self.retry
        if retry.deadline is None:
            retry.arm_if_idle(now)
        counters = self._counters
        counters.packets_sent += 1
        counters.bytes_sent += nbytes
        if retransmit:
            counters.retransmitted_packets += 1
            counters.retransmitted_bytes += nbytes
        out.append(_new_tuple(Outgoing, (route.path, route.plane, route.ev_id, data,
                                         self._peer_addr)))

    def _send_probes(self, now: float, budget: int, out: list[Outgoing]) -> int:
        queue, sent = self._probe_queue, 0
        while queue and sent < budget:
            ev = queue.popleft()
            if ev.state is not EvState.ASSUMED_BAD:
                continue
            self._emit_probe(now, ev, self._probes.issue(now, ev.ev_id, self._probe_timeout),
                             out)
            self._counters.probes_sent += 1
            sent += 1
        return sent

    def _send_ack_refresh(self, now: float, out: list[Outgoing]) -> int:
        """One reliability probe on the next GOOD EV, its id marked as an ACK refresh: the
        responder answers it with a SACK of its ACK state now, on its next reverse path."""
        self._refresh_due = False
        table = self._table
        assert table is not None               # refreshes are armed only with an EV table
        ev = table.next_ev(None, None, now=now)
        if ev is None:
            return 0
        self._emit_probe(now, ev, ACK_REFRESH_PROBE_BIT | self._refresh_ids, out)
        self._refresh_ids = (self._refresh_ids + 1) & (ACK_REFRESH_PROBE_BIT - 1)
        self._counters.ack_refresh_probes += 1
        return 1

    def _emit_probe(self, now: float, ev: Any, probe_id: int, out: list[Outgoing]) -> None:
        ts = _timestamp(now) if self._timestamps else None
        data = ReliabilityProbe(self._peer_qp, probe_id, ts).encode()
        out.append(Outgoing(ev.path, ev.plane, ev.ev_id, data, self._peer_addr))

    # ------------------------------------------------------------------------- feedback

    def on_sack(self, now: float, sack: AnySack) -> None:
        counters, window = self._counters, self.window
        counters.sacks_received += 1
        if self._ack_refresh is not None:
            self._refresh_at = now + self._ack_refresh
        verdict, probe_reply, ts_echo = sack.verdict, sack.probe_reply, sack.ts_echo
        counters.sack_verdicts_received[verdict] += 1
        cack = window.to_index(sack.cack_psn)
        if cack >= window.nxt:
            counters.stale_feedback += 1      # acknowledges PSNs never sent
            return
        go_back_n = self._go_back_n
        if not probe_reply and ts_echo is not None and not go_back_n:
            trigger = window.to_index(sack.trigger_psn)
            record = window.records.get(trigger)
            if record is not None and record.fast_rtx_done:   # else nothing to judge
                self._check_spurious(trigger, record, ts_echo)
        newly: list[SentPacket] = []
        window.ack_through(cack, newly)
        bitmap = sack.bitmap
        if bitmap and not go_back_n:
            window.ack_bitmap(cack + sack.sack_offset, bitmap, newly)
        if sack.received_bytes > self.peer_received_bytes:
            self.peer_received_bytes = sack.received_bytes
        rtt = None
        if ts_echo is not None:               # (_timestamp(now) - ts_echo) mod 2**32, in s
            rtt = ((int(now * 1e6) - ts_echo) & TIMESTAMP_MASK) * 1e-6
        if probe_reply:
            self._on_probe_reply(now, sack)
        elif self._table is not None:
            self._on_verdict(now, sack.ev, verdict, rtt)
        acked_bytes = self._settle(newly)
        if newly or not probe_reply:
            # The echoed timestamp names the very transmission that triggered this SACK, so
            # the RTT sample is never ambiguous, retransmission or not.
            self._cc.on_ack(acked_bytes, None if probe_reply else rtt,
                            verdict is not _V_NONE, now,
                            service_time_s=sack.service_time_ns * 1e-9,
                            rcv_cwnd_pen=sack.rcv_cwnd_pen)
        if self._dynamic_mpr and sack.mpr:
            self._mpr_psns = min(sack.mpr, self._mpr_units) * MPR_UNIT_PSNS
        self._after_ack(now, newly)

    def _after_ack(self, now: float, newly: list[SentPacket]) -> None:
        window = self.window
        if newly:
            self.retry.on_progress(now, window.una < window.nxt)     # outstanding?
        if not self._go_back_n and window.highest_sacked >= window.una:
            for record in window.reorder_losses(self._reorder_threshold):
                record.fast_rtx_done = True
                self._counters.fast_retransmits += 1
                self._on_silent_loss(now, record, inferred=True)
        if self._resent and newly:
            self._judge_retransmissions(now, newly)
        if newly and self._incomplete and self._incomplete[0].done:
            self._complete(now)               # else nothing can complete yet

    def _judge_retransmissions(self, now: float, newly: list[SentPacket]) -> None:
        """Retransmissions still missing once `reorder_threshold` later transmissions
        arrived are lost again (module doc). Only packets sent once are evidence: which
        copy of a resent one arrived, the SACK does not say."""
        delivered = self._delivered_tx_seq
        for record in newly:
            if record.tx_count == 1 and record.tx_seq > delivered:
                delivered = record.tx_seq
        self._delivered_tx_seq = delivered
        limit = delivered - self._reorder_threshold
        waiting: list[tuple[SentPacket, int]] = []
        for entry in self._resent:
            record, tx_seq = entry
            if record.acked or record.rtx_pending or record.tx_seq != tx_seq:
                continue                      # arrived, queued again, or sent again since
            if tx_seq <= limit:
                self._counters.fast_retransmits += 1
                self._on_silent_loss(now, record, inferred=True)
            else:
                waiting.append(entry)
        self._resent = waiting

    def _check_spurious(self, index: int, record: SentPacket, ts_echo: int) -> None:
        """The SACK names the copy that arrived: if it is an earlier copy of a packet already
        fast-retransmitted (`record`, at `index`), that retransmit was spurious and the paths
        reorder more deeply."""
        if ts_echo == record.sent_ts:
            return
        self._counters.spurious_retransmits += 1
        distance = self.window.highest_sacked - index + 1
        if distance > self._reorder_threshold:
            self._reorder_threshold = min(distance, self._config.max_reorder_threshold)

    def _on_verdict(self, now: float, ev_id: int, verdict: Verdict, rtt: float | None) -> None:
        table = self._table
        assert table is not None               # verdicts are read only with an EV table
        if self._loss_strikes:
            self._loss_strikes.pop(ev_id, None)     # the EV delivered: earlier holes were noise
        if verdict is _V_NONE:
            table.on_ack(ev_id, rtt, now)
        elif verdict is _V_SKIP_ONCE:
            table.on_skip_once(ev_id, now)
        elif table.on_always_skip(ev_id, now):
            self._counters.ev_demotions += 1

    def _on_probe_reply(self, now: float, sack: AnySack) -> None:
        if sack.trigger_psn & ACK_REFRESH_PROBE_BIT:
            self._counters.ack_refresh_replies += 1     # its ACK state is all it carried
            return
        ev_id = self._probes.answered(sack.trigger_psn)
        if ev_id is None or self._table is None:
            return                                # late answer of a probe already timed out
        self._counters.probe_replies += 1
        self._table.on_probe_result(ev_id, ok=sack.verdict is not Verdict.ALWAYS_SKIP,
                                    verdict_skip=sack.verdict is Verdict.SKIP_ONCE, now=now)

    def _settle(self, newly: list[SentPacket]) -> int:
        acked = 0
        for record in newly:
            if record.counted:
                acked += record.length
                record.counted = False
            wr = record.wr
            wr.unacked -= 1
            if not wr.unacked and wr.fully_sent:
                wr.done = True
        return acked

    def _complete(self, now: float) -> None:
        # Send completions leave in posting order, as on an RC send queue.
        incomplete = self._incomplete
        while incomplete and incomplete[0].done:
            wr = incomplete.popleft()
            if wr.imm is not None:
                self._imm_outstanding -= 1
            self._counters.requester_completions += 1
            if wr.signaled:
                self._send_cq.push(WorkCompletion(wr.wr_id, WcStatus.SUCCESS, WcOpcode.RDMA_WRITE,
                                                  self._qpn, wr.length, None, now))

    def on_nack(self, now: float, nack: Nack) -> None:
        counters, window, reason = self._counters, self.window, nack.reason
        counters.nacks_received += 1
        counters.nacks_received_by_reason[reason.name] += 1
        if self._ack_refresh is not None:
            self._refresh_at = now + self._ack_refresh
        if reason is NackReason.UNEXP_EVENT:
            self._fail(WcStatus.REM_OP_ERR, "remote operation error (NACK UNEXP_EVENT)")
            return
        cack = window.to_index(nack.cack_psn)
        newly: list[SentPacket] = []
        if cack < window.nxt:
            window.ack_through(cack, newly)
        if newly:
            self._cc.on_ack(self._settle(newly), None, False, now)
            self._after_ack(now, newly)
        index = window.to_index(nack.psn)
        if self._go_back_n:
            self._on_sequence_nack(now, nack, index)
            return
        record = window.records.get(index)
        if record is None or record.rtx_pending:
            return
        if nack.ts_echo is not None and nack.ts_echo != record.sent_ts:
            counters.stale_feedback += 1          # about an earlier transmission
            return
        if reason in _TRIM_NACKS:
            self._on_trim(now, record, nack)
        elif reason in _RESOURCE_NACKS and not self.retry.charge():
            self._fail(WcStatus.RETRY_EXC_ERR, "retry counter exceeded")
            return
        self._queue_retransmit(record)            # PSN_OOR_WINDOW: resend within MPR

    def _on_trim(self, now: float, record: SentPacket, nack: Nack) -> None:
        last_hop = nack.reason is NackReason.TRIMMED_LASTHOP
        if not last_hop and self._table is not None:
            self._table.on_skip_once(record.route.ev_id, now)   # congested path: skip it
        if record.counted:
            rtt = None
            if nack.ts_echo is not None:
                rtt = ((_timestamp(now) - nack.ts_echo) & TIMESTAMP_MASK) * 1e-6
            self._cc.on_trim(record.length, now, last_hop, rtt)
            record.counted = False

    def _on_sequence_nack(self, now: float, nack: Nack, index: int) -> None:
        record = self.window.records.get(index)
        if record is None:
            return
        # A NAK provoked by a packet sent before this PSN's latest (re)transmission is stale.
        if nack.ts_echo is not None and _timestamp_after(record.sent_ts, nack.ts_echo):
            self._counters.stale_feedback += 1
            return
        if nack.reason in _RESOURCE_NACKS and not self.retry.charge():
            self._fail(WcStatus.RETRY_EXC_ERR, "retry counter exceeded")
            return
        self._start_go_back(index)

    def _start_go_back(self, index: int) -> None:
        window = self.window
        index = max(index, window.una)
        if index >= window.nxt:
            return
        self._go_back_next = index
        self._go_back_end = window.nxt
        self._counters.go_back_n_rounds += 1

    def _queue_retransmit(self, record: SentPacket) -> None:
        record.rtx_pending = True
        heapq.heappush(self._rtx_heap, record.index)

    def _on_silent_loss(self, now: float, record: SentPacket, inferred: bool = False) -> None:
        """A data packet vanished without a trim: its EV's path is presumed broken."""
        if self._table is not None and self._ev_fails(record.route.ev_id, inferred):
            self._counters.ev_demotions += self._table.on_loss(record.route.ev_id, now,
                                                               whole_path=not inferred)
        if record.counted:
            self._cc.on_loss(record.length, now)
            record.counted = False
        self._queue_retransmit(record)

    def resend_plane(self, now: float, plane: int) -> int:
        """The NIC port of `plane` went down: its unacknowledged packets are presumed lost
        with it (the port's queue is flushed on carrier loss, and what was sent between the
        failure and the port event went nowhere). Queue them for retransmission now, on the
        planes still up, rather than wait out a packet timeout each. No EV is blamed: the
        port explains the loss. A packet that did get through before the port died arrives
        twice, which the responder counts as a duplicate. Returns how many were queued."""
        queued = 0
        for record in self.window.records.values():
            if record.acked or record.rtx_pending or record.route.plane != plane:
                continue
            if record.counted:
                self._cc.on_loss(record.length, now)
                record.counted = False
            self._queue_retransmit(record)
            queued += 1
        return queued

    def _ev_fails(self, ev_id: int, inferred: bool) -> bool:
        if not inferred:
            self._loss_strikes.pop(ev_id, None)
            return True
        strikes = self._loss_strikes.get(ev_id, 0) + 1
        if strikes >= self._config.inferred_losses_to_fail:
            del self._loss_strikes[ev_id]
            return True
        self._loss_strikes[ev_id] = strikes
        return False

    def on_cnp(self, now: float) -> None:
        """A congestion notification from the peer's notification point (DCQCN)."""
        self._counters.cnps_received += 1
        self._cc.on_cnp(now)

    # ------------------------------------------------------------------------- timers

    def next_deadline(self) -> float | None:
        deadline = self.retry.deadline
        paced = self.paced_until
        if paced is not None and (deadline is None or paced < deadline):
            deadline = paced
        timers = self._packet_timers
        if timers and (deadline is None or timers[0][0] < deadline):
            deadline = timers[0][0]
        refresh = self._refresh_at
        if refresh is not None and (deadline is None or refresh < deadline):
            deadline = refresh
        if self._table is not None:           # asked after every event: no temporaries
            candidate = self._table.next_probe_due()
            if candidate is not None and (deadline is None or candidate < deadline):
                deadline = candidate
            candidate = self._probes.next_deadline()
            if candidate is not None and (deadline is None or candidate < deadline):
                deadline = candidate
        return deadline

    def on_timer(self, now: float) -> None:
        timers = self._packet_timers
        if timers and timers[0][0] <= now:
            self._expire_packet_timers(now)
        refresh = self._refresh_at
        if refresh is not None and refresh <= now:
            self._refresh_at = None               # once per silence: re-armed by traffic
            window = self.window
            self._refresh_due = window.una < window.nxt
        if self._table is not None:
            due = self._table.next_probe_due()
            if due is not None and due <= now:
                # Queued here, sent by poll_tx: the deadline moves on even if the NIC is busy.
                self._probe_queue.extend(self._table.probes_due(now))
            for ev_id in self._probes.expired(now):
                self._counters.probe_timeouts += 1
                if self._table.on_probe_result(ev_id, ok=False, now=now):
                    self._counters.ev_demotions += 1
        deadline = self.retry.deadline
        if deadline is not None and deadline <= now:
            self._expire_retry_timer(now)

    def _expire_packet_timers(self, now: float) -> None:
        timers, records = self._packet_timers, self.window.records
        while timers and timers[0][0] <= now:
            _, index, tx_seq = timers.popleft()
            record = records.get(index)
            if record is None or record.tx_seq != tx_seq or record.rtx_pending:
                continue                          # acknowledged or sent again since
            self._counters.packet_timeouts += 1
            self._count_timeout_loss(record)
            self._on_silent_loss(now, record)

    def _count_timeout_loss(self, record: SentPacket) -> None:
        by_plane = self._counters.timeout_losses_by_plane
        plane = record.route.plane
        by_plane[plane] = by_plane.get(plane, 0) + 1

    def _expire_retry_timer(self, now: float) -> None:
        window = self.window
        if window.una >= window.nxt:
            self.retry.stop()
            return
        if not self.retry.expire(now):
            self._fail(WcStatus.RETRY_EXC_ERR, "retry counter exceeded")
            return
        self._counters.retry_timeouts += 1
        if self._go_back_n:
            self._start_go_back(window.una)
            return
        record = window.records.get(window.una)
        if record is not None and not record.rtx_pending:
            # A timeout like the packet timer's, only sooner when little is in flight: the
            # oldest packet's EV is demoted too, or a dead EV keeps its GOOD state (its packet
            # timer finds the packet resent) and keeps swallowing packets.
            self._count_timeout_loss(record)
            self._on_silent_loss(now, record)

    # ------------------------------------------------------------------------- teardown, stats

    def flush(self, now: float, status: WcStatus) -> int:
        """QP went to ERROR: the oldest WR completes with `status`, the rest are flushed."""
        flushed = 0
        for wr in self._incomplete:
            wc_status = status if flushed == 0 else WcStatus.WR_FLUSH_ERR
            self._send_cq.push(WorkCompletion(wr.wr_id, wc_status, WcOpcode.RDMA_WRITE,
                                              self._qpn, 0, None, now))
            flushed += 1
        self._incomplete.clear()
        self._unsent.clear()
        self._rtx_heap.clear()
        self._probe_queue.clear()
        self._probes.clear()
        self._refresh_at = None
        self._refresh_due = False
        self._go_back_next = None
        self.paced_until = None
        if self._packet_timers is not None:
            self._packet_timers.clear()
        self.retry.stop()
        return flushed

    def stats(self) -> dict[str, Any]:
        window = self.window
        return {
            "sq_psn_next": window.wire_psn(window.nxt), "in_flight_psns": window.in_flight,
            "mpr_window_psns": self._mpr_psns, "outstanding_wrs": len(self._incomplete),
            "imm_outstanding": self._imm_outstanding, "retries": self.retry.retries,
            "stalls": list(self.retry.ended_stalls),
            "stalled_since": self.retry.waiting_since if self.retry.stalled else None,
            "reorder_threshold": self._reorder_threshold,
            "cwnd": self._cc.cwnd, "inflight_bytes": self._cc.inflight,
            "peer_received_bytes": self.peer_received_bytes,
        }
