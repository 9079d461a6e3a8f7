"""Tests of the 24-bit PSN arithmetic (testbed/nic/wire/psn.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from testbed.nic import wire

from tests.unit.wire_examples import u24


def test_psn_add_wraps_at_24_bits() -> None:
    assert wire.psn_add(0xFFFFFF, 1) == 0
    assert wire.psn_add(0xFFFFFE, 5) == 3
    assert wire.psn_add(0, -1) == 0xFFFFFF


def test_psn_diff_is_signed_across_the_wrap() -> None:
    assert wire.psn_diff(0, 0xFFFFFF) == 1
    assert wire.psn_diff(0xFFFFFF, 0) == -1
    assert wire.psn_diff(3, 0xFFFFFE) == 5
    assert wire.psn_diff(0x7FFFFF, 0) == 0x7FFFFF
    assert wire.psn_diff(0x800000, 0) == -0x800000


def test_psn_lt_across_the_wrap() -> None:
    assert wire.psn_lt(0xFFFFFF, 0)
    assert not wire.psn_lt(0, 0xFFFFFF)
    assert not wire.psn_lt(5, 5) and wire.psn_le(5, 5)
    assert wire.psn_lt(0xFFFFF0, 0x10)


@given(u24, st.integers(-(1 << 23), (1 << 23) - 1))
def test_psn_diff_inverts_psn_add(psn: int, delta: int) -> None:
    assert wire.psn_diff(wire.psn_add(psn, delta), psn) == delta
