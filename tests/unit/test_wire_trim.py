"""Tests of packet trimming (testbed/nic/wire/trim.py)."""

from __future__ import annotations

import pytest

from testbed.nic import wire
from testbed.nic.wire import Trim, WireError

from tests.unit.wire_examples import EXAMPLES, SACK


@pytest.mark.parametrize("last_hop, trim", [(False, Trim.TRIMMED), (True, Trim.TRIMMED_LASTHOP)])
def test_trim_keeps_headers_and_drops_payload(last_hop: bool, trim: Trim) -> None:
    original = EXAMPLES["write_last_imm"]
    trimmed = wire.decode(wire.trim_data_packet(original.encode(), last_hop=last_hop))
    assert trimmed.trim is trim and trimmed.payload == b""
    assert (trimmed.psn, trimmed.imm, trimmed.remote_offset) == (
        original.psn, original.imm, original.remote_offset
    )


def test_trim_refuses_non_data_packets() -> None:
    with pytest.raises(WireError, match="only data packets"):
        wire.trim_data_packet(SACK)
