"""Requester-side PSN bookkeeping: what was sent, what the SACKs say arrived, what is lost.

PSNs are 24 bits on the wire; inside, every PSN is an unbounded *sequence index* counted from
the QP's initial PSN, so nothing here ever compares across a wrap. `wire_psn()` and
`to_index()` are the only conversions.

Per-packet work is O(1) amortised: cumulative ACKs pop each record once, a SACK bitmap is
merged as one integer and only its *new* bits are walked, and loss detection scans each PSN
once (a cursor that only moves forward).
"""

from __future__ import annotations

from typing import Any

from testbed.nic.wire import PSN_MASK, PSN_SPACE

_PSN_HALF = PSN_SPACE >> 1

SACK_BITMAP_MASK = (1 << 64) - 1


class WriteRequest:
    """One posted RDMA WRITE (with or without immediate) on the send queue."""

    __slots__ = ("wr_id", "data", "remote_offset", "rkey", "length", "imm", "signaled", "msn",
                 "rqmsn", "next_offset", "unacked", "fully_sent", "started", "done")

    def __init__(self, wr_id: int, data: memoryview, remote_offset: int, rkey: int,
                 imm: int | None, signaled: bool, msn: int, rqmsn: int) -> None:
        self.wr_id = wr_id
        self.data = data
        self.remote_offset = remote_offset
        self.rkey = rkey
        self.length = len(data)
        self.imm = imm
        self.signaled = signaled
        self.msn = msn
        self.rqmsn = rqmsn
        self.next_offset = 0      # segmentation cursor
        self.unacked = 0          # packets generated and not yet acknowledged
        self.fully_sent = False
        self.started = False
        self.done = False


class SentPacket:
    """One data PSN in flight: enough to rebuild the packet and to judge feedback about it."""

    __slots__ = ("index", "wr", "offset", "length", "opcode", "route", "sent_at", "sent_ts",
                 "tx_count", "tx_seq", "counted", "acked", "rtx_pending", "fast_rtx_done")

    def __init__(self, index: int, wr: WriteRequest, offset: int, length: int, opcode: int,
                 route: Any) -> None:
        self.index = index
        self.wr = wr
        self.offset = offset
        self.length = length
        self.opcode = opcode
        self.route = route            # the EV (or fixed route) of the latest transmission
        self.sent_at = 0.0
        self.sent_ts = 0              # TSETH value of the latest transmission (u32 us)
        self.tx_count = 0
        self.tx_seq = 0               # identifies the latest transmission for its timer
        self.counted = False          # bytes currently in the congestion window's inflight
        self.acked = False
        self.rtx_pending = False
        self.fast_rtx_done = False    # at most one SACK-inferred retransmit per hole


class SendWindow:
    """Sent-but-unacknowledged PSNs of one QP (see module docstring)."""

    __slots__ = ("initial_psn", "una", "nxt", "records", "sacked_bits", "highest_sacked",
                 "_scan_from")

    def __init__(self, initial_psn: int) -> None:
        self.initial_psn = initial_psn
        self.una = 0                  # lowest unacknowledged index; all below are acked
        self.nxt = 0                  # index the next new packet gets
        self.records: dict[int, SentPacket] = {}
        self.sacked_bits = 0          # bit i: index una + i selectively acknowledged
        self.highest_sacked = -1
        self._scan_from = 0

    # --- conversions ------------------------------------------------------------------

    def wire_psn(self, index: int) -> int:
        return (self.initial_psn + index) & PSN_MASK

    def to_index(self, psn: int) -> int:
        """Index of a 24-bit PSN from feedback, taken within +-2^23 of `una`."""
        # una + psn_diff(psn, wire_psn(una)), inlined: it runs several times per SACK.
        una = self.una
        d = (psn - self.initial_psn - una) & PSN_MASK
        return una + (d - PSN_SPACE if d >= _PSN_HALF else d)

    # --- sending ----------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return self.nxt - self.una

    def add(self, record: SentPacket) -> None:
        self.records[record.index] = record
        self.nxt = record.index + 1

    # --- acknowledgements -------------------------------------------------------------

    def ack_through(self, last_index: int, newly: list[SentPacket]) -> None:
        """Cumulative ACK of every index <= last_index; appends newly acknowledged records."""
        una = self.una
        if last_index < una:
            return
        if last_index >= self.nxt:
            last_index = self.nxt - 1
        pop = self.records.pop
        for index in range(una, last_index + 1):
            record = pop(index, None)
            if record is not None and not record.acked:
                record.acked = True
                newly.append(record)
        self.sacked_bits >>= last_index + 1 - una
        self.una = last_index + 1
        if self.sacked_bits & 1:              # _normalise() has nothing to do otherwise
            self._normalise()

    def ack_bitmap(self, base_index: int, bitmap: int, newly: list[SentPacket]) -> None:
        """Selective ACK: bit i of `bitmap` = index base_index + i received."""
        bitmap &= SACK_BITMAP_MASK
        if not bitmap:
            return
        if base_index < self.una:
            bitmap >>= self.una - base_index
            base_index = self.una
        limit = (1 << (self.nxt - self.una)) - 1      # never trust bits beyond what was sent
        shifted = (bitmap << (base_index - self.una)) & limit
        new = shifted & ~self.sacked_bits
        if not new:
            return
        self.sacked_bits |= shifted
        pop = self.records.pop
        una = self.una
        while new:
            low = new & -new
            new ^= low
            record = pop(una + low.bit_length() - 1, None)
            if record is not None and not record.acked:
                record.acked = True
                newly.append(record)
        top = una + self.sacked_bits.bit_length() - 1
        if top > self.highest_sacked:
            self.highest_sacked = top
        self._normalise()

    def _normalise(self) -> None:
        # Selectively acked PSNs right at `una` make the cumulative point jump over them.
        bits = self.sacked_bits
        if bits & 1:
            run = (~bits & (bits + 1)).bit_length() - 1
            self.sacked_bits = bits >> run
            self.una += run

    def reorder_losses(self, threshold: int) -> list[SentPacket]:
        """Holes with a PSN at least `threshold` above them SACKed, each reported once."""
        limit = self.highest_sacked - threshold
        start = max(self._scan_from, self.una)
        if limit < start:
            return []
        self._scan_from = limit + 1
        lost = []
        get = self.records.get
        for index in range(start, limit + 1):
            record = get(index)
            if (record is not None and not record.acked and not record.rtx_pending
                    and not record.fast_rtx_done):
                lost.append(record)
        return lost
