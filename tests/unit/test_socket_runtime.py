"""Tests of the socket runtime's pure parts (testbed/nic/socket_runtime.py); the sockets
themselves are exercised in tests/integration/test_mrc_transfer.py."""

from __future__ import annotations

import socket

from testbed.nic.socket_runtime import IPV6_FLOWINFO, flowinfo_of


def test_flowinfo_is_read_from_its_control_message() -> None:
    flowinfo = (0x23 << 20 | 0xABCDE).to_bytes(4, "big")
    assert flowinfo_of([(socket.IPPROTO_IPV6, IPV6_FLOWINFO, flowinfo)]) == 0x23 << 20 | 0xABCDE
    other = (socket.IPPROTO_IPV6, socket.IPV6_RECVPKTINFO, b"\x01" * 20)
    assert flowinfo_of([other, (socket.IPPROTO_IPV6, IPV6_FLOWINFO, flowinfo)]) >> 20 == 0x23


def test_without_a_flowinfo_message_the_flow_label_and_class_are_zero() -> None:
    assert flowinfo_of([]) == 0
    assert flowinfo_of([(socket.IPPROTO_IPV6, IPV6_FLOWINFO, b"\x00\x01")]) == 0   # truncated
