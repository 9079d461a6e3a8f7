"""Responder-side PSN tracker: the cumulative point plus a bitmap of out-of-order arrivals.

The tracker is the MPR window: PSNs from the expected one (cack + 1) up to MPR x 128 - 1 beyond
it can be recorded; anything further is out of range (NACK PSN_OOR_WINDOW) [P2 §II-B: the
requestor never sends beyond the responder's tracker bitmap; R:mrc.h: MPR in units of 128
PSNs; 3P:expl: the PSN_OOR_WINDOW NACK]. As in the send window, PSNs are handled as sequence indices counted from the
QP's initial receive PSN, so the 24-bit wrap only exists at the conversion functions.
"""

from __future__ import annotations

import enum

from testbed.nic.wire import MPR_UNIT_PSNS, PSN_MASK, PSN_SPACE, SACK_BITMAP_BITS

_PSN_HALF = PSN_SPACE >> 1

_SACK_MASK = (1 << SACK_BITMAP_BITS) - 1


class Arrival(enum.IntEnum):
    NEW = 0
    DUPLICATE = 1
    BEYOND_WINDOW = 2


class ReceiveWindow:
    """bit i of `bits` = index `expected + i` has arrived; bit 0 is always clear."""

    __slots__ = ("initial_psn", "expected", "bits", "ooo", "capacity")

    def __init__(self, initial_psn: int, mpr_units: int) -> None:
        self.initial_psn = initial_psn
        self.expected = 0          # first index not yet received (cack = expected - 1)
        self.bits = 0
        self.ooo = 0               # PSNs held beyond the cumulative point
        self.capacity = mpr_units * MPR_UNIT_PSNS

    def resize(self, mpr_units: int) -> None:
        self.capacity = mpr_units * MPR_UNIT_PSNS

    def to_index(self, psn: int) -> int:
        # expected + psn_diff(psn, wire_psn(expected)), inlined: it runs for every packet.
        expected = self.expected
        d = (psn - self.initial_psn - expected) & PSN_MASK
        return expected + (d - PSN_SPACE if d >= _PSN_HALF else d)

    def wire_psn(self, index: int) -> int:
        return (self.initial_psn + index) & PSN_MASK

    @property
    def cack_psn(self) -> int:
        return (self.initial_psn + self.expected - 1) & PSN_MASK

    def classify(self, index: int) -> Arrival:
        offset = index - self.expected
        if offset < 0 or (offset and self.bits >> offset & 1):
            return Arrival.DUPLICATE
        if offset >= self.capacity:
            return Arrival.BEYOND_WINDOW
        return Arrival.NEW

    def mark(self, index: int) -> int:
        """Record a NEW arrival; returns how far the cumulative point advanced."""
        offset = index - self.expected
        if offset:
            self.bits |= 1 << offset
            self.ooo += 1
            return 0
        bits = self.bits | 1
        run = (~bits & (bits + 1)).bit_length() - 1
        self.bits = bits >> run
        self.expected += run
        self.ooo -= run - 1
        return run

    def sack_fields(self, trigger_index: int | None) -> tuple[int, int]:
        """(sack_offset, bitmap) whose 64-PSN window shows the triggering PSN.

        Normally the bitmap starts right after the cumulative PSN (offset 1). When the
        trigger lies 64 or more PSNs beyond it, the window slides so that the trigger is its
        last bit; the PSNs skipped are then unreported, not missing (docs/wire-format.md §5.1).
        """
        slide = 0
        if trigger_index is not None:
            beyond = trigger_index - self.expected - (SACK_BITMAP_BITS - 1)
            if beyond > 0:
                slide = beyond
        return 1 + slide, (self.bits >> slide) & _SACK_MASK
