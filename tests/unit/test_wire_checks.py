"""Tests of the field checks both directions share (testbed/nic/wire/checks.py)."""

from __future__ import annotations

import pytest

from testbed.nic.wire import Opcode, Trim, WireError
from testbed.nic.wire.checks import check_24bit, check_data_lengths, check_dest_qp


def test_check_24bit_names_the_value_that_does_not_fit() -> None:
    check_24bit("psn", 0, 0xFFFFFF)
    with pytest.raises(WireError, match="0x1000000 does not fit 24 bits"):
        check_24bit("psn", 1, 1 << 24)
    with pytest.raises(WireError, match="does not fit 24 bits"):
        check_24bit("psn", -1)


def test_check_dest_qp_keeps_qp_2_for_endpoint_operations() -> None:
    check_dest_qp(0x10)
    with pytest.raises(WireError, match="reserved for endpoint operations"):
        check_dest_qp(0x2)


@pytest.mark.parametrize(
    "opcode, trim, payload_len, total_length, message",
    [
        (Opcode.WRITE_MIDDLE, Trim.TRIMMED, 1, 3000, "trimmed packet still carries payload"),
        (Opcode.WRITE_ONLY, Trim.NONE, 4, 5, "ONLY packet carries 4 of 5 bytes"),
        (Opcode.WRITE_FIRST, Trim.NONE, 0, 5, "multi-packet WRITE piece of 0 bytes"),
        (Opcode.WRITE_LAST, Trim.NONE, 5, 5, "multi-packet WRITE piece of 5 bytes"),
    ],
)
def test_check_data_lengths_refuses_inconsistent_payloads(
    opcode: Opcode, trim: Trim, payload_len: int, total_length: int, message: str
) -> None:
    with pytest.raises(WireError, match=message):
        check_data_lengths(opcode, trim, payload_len, total_length)


def test_check_data_lengths_accepts_consistent_payloads() -> None:
    check_data_lengths(Opcode.WRITE_ONLY, Trim.NONE, 5, 5)
    check_data_lengths(Opcode.WRITE_MIDDLE, Trim.NONE, 1368, 3000)
    check_data_lengths(Opcode.WRITE_MIDDLE, Trim.TRIMMED_LASTHOP, 0, 3000)
