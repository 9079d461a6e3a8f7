"""Tests of the u32 microsecond timestamps (testbed/nic/wire/timestamps.py)."""

from __future__ import annotations

from testbed.nic import wire


def test_timestamp_helpers_wrap_at_32_bits() -> None:
    assert wire.timestamp_us(5_000_123) == 5000
    assert wire.timestamp_us((1 << 32) * 1000 + 7000) == 7
    assert wire.timestamp_elapsed_us(3, 0xFFFFFFFE) == 5
