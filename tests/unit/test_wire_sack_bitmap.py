"""Tests of the SACK bitmap helpers (testbed/nic/wire/sack_bitmap.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from testbed.nic import wire

from tests.unit.wire_examples import u24


def test_sack_worked_example_from_reference() -> None:
    # PSNs 0-11 sent, 5 and 8 lost: cack 4, bitmap base 5, bits 0,1,1,0,1,1,1.
    received = set(range(12)) - {5, 8}
    bitmap = wire.sack_bitmap(4, received)
    assert [bitmap >> i & 1 for i in range(7)] == [0, 1, 1, 0, 1, 1, 1]
    assert bitmap == 0b1110110
    assert wire.sack_holes(4, 1, bitmap) == [5, 8]
    assert wire.sack_received_psns(4, 1, bitmap) == [6, 7, 9, 10, 11]


def test_sack_helpers_across_the_psn_wrap() -> None:
    cack = 0xFFFFFC
    received = {0xFFFFFE, 0xFFFFFF, 1, 3}
    bitmap = wire.sack_bitmap(cack, received)
    assert bitmap == 1 << 1 | 1 << 2 | 1 << 4 | 1 << 6
    assert wire.sack_holes(cack, 1, bitmap) == [0xFFFFFD, 0, 2]
    assert wire.sack_received_psns(cack, 1, bitmap) == [0xFFFFFE, 0xFFFFFF, 1, 3]


def test_sack_bitmap_ignores_psns_outside_the_window() -> None:
    assert wire.sack_bitmap(100, {50, 100, 101 + 64, 0xFFFFFF}) == 0
    assert wire.sack_bitmap(100, {101 + 63}) == 1 << 63


def test_sack_holes_with_offset_beyond_one_reports_only_known_holes() -> None:
    # Bitmap slid forward: PSNs 12..19 are unreported, only 11 is known missing.
    bitmap = wire.sack_bitmap(10, {21, 23}, sack_offset=10)
    assert bitmap == 0b1010
    assert wire.sack_holes(10, 10, bitmap) == [11, 20, 22]
    assert wire.sack_holes(10, 1, 0) == []


@given(u24, st.sets(st.integers(1, 64), max_size=64))
def test_sack_bitmap_round_trips_received_set(cack: int, distances: set[int]) -> None:
    received = {wire.psn_add(cack, d) for d in distances}
    bitmap = wire.sack_bitmap(cack, received)
    listed = wire.sack_received_psns(cack, 1, bitmap)
    assert set(listed) == received
    holes = wire.sack_holes(cack, 1, bitmap)
    top = max(distances, default=0)
    assert set(holes) == {wire.psn_add(cack, d) for d in range(1, top)} - received
