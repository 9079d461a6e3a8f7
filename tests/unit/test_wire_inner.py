"""Tests of the inner IPv6 + UDP headers and the EV they carry (testbed/nic/wire/inner.py)."""

from __future__ import annotations

from ipaddress import IPv6Address

import pytest
from hypothesis import given
from hypothesis import strategies as st

from testbed.nic import wire
from testbed.nic.wire import WireError

from tests.unit.wire_examples import DST, EXAMPLES, FUZZ, ONLY, SRC, u32


@pytest.mark.parametrize(
    "ev, sport, flow_label",
    [(0, 0, 0), (0x12345678, 0x5678, 0x1234), (0xFFFFFFFF, 0xFFFF, 0xFFFF), (0x10000, 0, 1)],
)
def test_ev_mapping(ev: int, sport: int, flow_label: int) -> None:
    assert wire.ev_to_sport_flowlabel(ev) == (sport, flow_label)
    assert wire.sport_flowlabel_to_ev(sport, flow_label) == ev
    assert wire.sport_flowlabel_to_ev(sport, flow_label | 0xF0000) == ev  # top 4 bits unused


def test_ev_mapping_rejects_more_than_32_bits() -> None:
    with pytest.raises(WireError):
        wire.ev_to_sport_flowlabel(1 << 32)


@given(u32, st.binary(max_size=64))
def test_build_and_parse_inner_round_trip(ev: int, mrc: bytes) -> None:
    inner = wire.build_inner(SRC, DST, ev, mrc)
    src, dst, got_ev, got_mrc = wire.parse_inner(inner)
    assert (src, dst, got_ev, got_mrc) == (
        IPv6Address(SRC).packed, IPv6Address(DST).packed, ev, mrc
    )


def test_build_inner_header_bytes() -> None:
    mrc = EXAMPLES["nack"].encode()
    inner = wire.build_inner(IPv6Address(SRC), IPv6Address(DST).packed, 0xABCD1234, mrc,
                             hop_limit=7)
    sport, flow_label = 0x1234, 0xABCD
    assert inner[:40] == wire.ipv6_header(SRC, DST, flow_label, 8 + len(mrc), hop_limit=7)
    assert inner[40:48] == wire.udp_header(sport, 8 + len(mrc))
    assert inner[0] >> 4 == 6 and inner[6] == 17 and inner[7] == 7
    assert int.from_bytes(inner[1:4], "big") & 0xFFFFF == flow_label
    assert inner[42:44] == (4791).to_bytes(2, "big") and inner[46:48] == b"\0\0"
    assert inner[48:] == mrc


def test_parse_inner_rejects_malformed_headers() -> None:
    inner = wire.build_inner(SRC, DST, 7, ONLY)
    cases = {
        "truncated": inner[:47],
        "IP version": bytes([0x40]) + inner[1:],
        "not UDP": inner[:6] + b"\x06" + inner[7:],
        "inconsistent lengths": inner + b"\0",
        "destination port": inner[:42] + (4792).to_bytes(2, "big") + inner[44:],
    }
    for message, buf in cases.items():
        with pytest.raises(WireError, match=message):
            wire.parse_inner(buf)
    udp_len_off = inner[:44] + (9).to_bytes(2, "big") + inner[46:]
    with pytest.raises(WireError, match="inconsistent lengths"):
        wire.parse_inner(udp_len_off)


def test_inner_builders_reject_bad_arguments() -> None:
    with pytest.raises(WireError):
        wire.build_inner("not-an-address", DST, 1, b"")
    with pytest.raises(WireError):
        wire.build_inner(b"\0" * 4, DST, 1, b"")
    with pytest.raises(WireError):
        wire.ipv6_header(SRC, DST, 1 << 20, 0)
    with pytest.raises(WireError):
        wire.udp_header(1 << 16, 8)
    with pytest.raises(WireError):
        wire.build_inner(SRC, DST, 1, b"\0" * 65535)


@FUZZ
@given(st.binary(max_size=120))
def test_fuzz_parse_inner(buf: bytes) -> None:
    try:
        wire.parse_inner(buf)
    except WireError:
        pass
