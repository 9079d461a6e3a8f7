"""The hosts' SRv6 eBPF programs on crafted frames, by BPF_PROG_TEST_RUN: the decapsulation
(testbed/fabric/host_decap.c) and the kernel flows' encapsulation
(testbed/kernel/seg6_encap.c), each the real object, built and loaded as a fabric does.
What End.DT6 and seg6 encap would do with each frame is the expectation (docs/host-decap.md).
"""
from __future__ import annotations

import ipaddress
import json
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

from testbed.fabric import host_decap
from testbed.fabric import switch_port as sp
from testbed.kernel import seg6_encap
from testbed.kernel.seg6_encap import Seg6Encap, flow_key, flow_path
from tests.unit.switch_port_harness import machine  # noqa: F401 (a fixture)

if os.geteuid() != 0:
    pytest.skip('BPF_PROG_TEST_RUN and pinning need root', allow_module_level=True)
if sp.clang() is None or not sp.headers_present() or sp.bpftool() is None:
    pytest.skip('no clang, headers or bpftool (scripts/setup.sh installs them)',
                allow_module_level=True)

TC_ACT_OK, TC_ACT_SHOT = 0, 2
ETH = b'\x02\x00\x00\x00\x00\x02' + b'\x02\x00\x00\x00\x00\x01' + b'\x86\xdd'
ETH_IPV4 = ETH[:12] + b'\x08\x00'
A, B = 'fd00:0:0:1::1', 'fd00:0:0:1::2'
SPENT = 'fcbb:bb01:8002::'                       # block, the host's uSID, zeros
UNSPENT = 'fcbb:bb01:1000:8002::'                # a switch's uSID still in it
CARRIER = 'fcbb:bb01:1000:2001:1001:8002::'
ECT0, CE = 0x02, 0x03
TCP, UDP, IPV6_IN_IPV6, ROUTING = 6, 17, 41, 43


def ipv6(src: str, dst: str, nexthdr: int, payload: bytes, tclass: int = 0,
         flow: int = 0) -> bytes:
    return struct.pack('!IHBB', 6 << 28 | tclass << 20 | flow, len(payload), nexthdr, 64) + \
        ipaddress.IPv6Address(src).packed + ipaddress.IPv6Address(dst).packed + payload


def srh(segment: str, segments_left: int = 0, nexthdr: int = IPV6_IN_IPV6) -> bytes:
    return struct.pack('!BBBBBBH', nexthdr, 2, 4, segments_left, 0, 0, 0) + \
        ipaddress.IPv6Address(segment).packed


def tcp(sport: int, dport: int, data: bytes = b'x' * 100) -> bytes:
    return struct.pack('!HHIIBBHHH', sport, dport, 1, 0, 5 << 4, 0x10, 1000, 0, 0) + data


def udp(sport: int, dport: int, data: bytes = b'y' * 64) -> bytes:
    return struct.pack('!HHHH', sport, dport, 8 + len(data), 0) + data


def run(prog_pin: Path, frame: bytes) -> tuple[int, bytes]:
    """BPF_PROG_TEST_RUN: the verdict and the frame as the program left it."""
    with tempfile.TemporaryDirectory(prefix='mrc-host-srv6-') as tmp:
        d = Path(tmp)
        (d / 'in').write_bytes(frame)
        done = subprocess.run(
            [sp.bpftool(), '-j', 'prog', 'run', 'pinned', str(prog_pin), 'data_in',
             str(d / 'in'), 'data_out', str(d / 'out'), 'data_size_out', str(len(frame) + 128)],
            capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)['retval'], (d / 'out').read_bytes()


@pytest.fixture(scope='module')
def decap(machine):
    pin_dir = sp.BPFFS / ('%sunit-decap-%d' % (sp.PIN_PREFIX, os.getpid()))
    sp.ensure_bpffs()
    pin_dir.mkdir(mode=0o700)
    try:
        subprocess.run([sp.bpftool(), 'prog', 'load', str(host_decap.build()),
                        str(pin_dir / 'prog'), 'type', 'classifier'], check=True,
                       capture_output=True)
        yield pin_dir / 'prog'
    finally:
        shutil.rmtree(pin_dir, ignore_errors=True)


@pytest.fixture(scope='module')
def encap(machine):
    program = Seg6Encap({})          # loaded and pinned; attached to no port
    try:
        yield program
    finally:
        program.close()
    assert not program.pin_dir.exists()


# -- decapsulation -------------------------------------------------------------


def test_decapsulates_ipv6_in_ipv6_to_a_spent_carrier(decap):
    inner = ipv6(A, B, UDP, udp(5000, 4791), tclass=ECT0, flow=0x12345)
    verdict, out = run(decap, ETH + ipv6(A, SPENT, IPV6_IN_IPV6, inner))
    assert verdict == TC_ACT_OK and out == ETH + inner


def test_decapsulates_behind_a_visited_srh(decap):
    inner = ipv6(A, B, TCP, tcp(40000, 5001))
    outer = ipv6(A, SPENT, ROUTING, srh(CARRIER) + inner)
    assert run(decap, ETH + outer) == (TC_ACT_OK, ETH + inner)


def test_copies_no_ecn_inwards_as_end_dt6(decap):
    inner = ipv6(A, B, UDP, udp(5000, 4791), tclass=ECT0)
    _, out = run(decap, ETH + ipv6(A, SPENT, IPV6_IN_IPV6, inner, tclass=CE))
    assert out == ETH + inner


@pytest.mark.parametrize('frame', [
    ETH + ipv6(A, UNSPENT, IPV6_IN_IPV6, ipv6(A, B, UDP, udp(1, 2))),       # misrouted
    ETH + ipv6(A, SPENT, ROUTING, srh(CARRIER, segments_left=1) + ipv6(A, B, UDP, udp(1, 2))),
    ETH + ipv6(A, SPENT, ROUTING, srh(CARRIER, nexthdr=UDP) + udp(1, 2)),
    ETH + ipv6(A, B, UDP, udp(1, 2)),                                      # plain IPv6
    ETH_IPV4 + bytes(60),
], ids=['unspent carrier', 'segments left', 'srh not to ipv6', 'plain ipv6', 'ipv4'])
def test_leaves_everything_else_alone(decap, frame):
    assert run(decap, frame) == (TC_ACT_OK, frame)


# -- encapsulation -------------------------------------------------------------


def test_encap_mode_adds_outer_header_and_srh(encap):
    key = flow_key(A, B, 40000, 5001)
    encap.add(key, flow_path(CARRIER, 'encap'))
    try:
        inner = ipv6(A, B, TCP, tcp(40000, 5001), tclass=ECT0, flow=0xABCDE)
        verdict, out = run(encap.pin_dir / 'prog', ETH + inner)
    finally:
        encap.remove(key)
    # seg6 encap: the inner traffic class and flow label, hop limit 64, one visited segment
    expected = ipv6(A, CARRIER, ROUTING, srh(CARRIER) + inner, tclass=ECT0, flow=0xABCDE)
    assert verdict == TC_ACT_OK and out == ETH + expected
    assert len(out) - len(ETH + inner) == seg6_encap.OUTER_LEN['encap']


def test_reduced_mode_adds_outer_header_only(encap):
    key = flow_key(A, B, 40000, 5001)
    encap.add(key, flow_path(CARRIER, 'encap.red'))
    try:
        inner = ipv6(A, B, TCP, tcp(40000, 5001))
        _, out = run(encap.pin_dir / 'prog', ETH + inner)
    finally:
        encap.remove(key)
    assert out == ETH + ipv6(A, CARRIER, IPV6_IN_IPV6, inner)
    assert len(out) - len(ETH + inner) == seg6_encap.OUTER_LEN['encap.red']


@pytest.mark.parametrize('selector', [
    (None, B, 40000, 5001),           # a TCP flow's way out: no source address
    (A, B, None, 5001),               # an MPTCP subflow's way out: any source port
    (A, B, 40000, None),              # an MPTCP subflow's way back: any client port
], ids=['no source', 'no source port', 'no destination port'])
def test_rules_without_a_field_match_any(encap, selector):
    key = flow_key(*selector)
    encap.add(key, flow_path(CARRIER, 'encap.red'))
    try:
        inner = ipv6(A, B, TCP, tcp(40000, 5001))
        other = ipv6(A, B, TCP, tcp(40001, 5002))     # differs in both ports
        assert run(encap.pin_dir / 'prog', ETH + inner)[1] == \
            ETH + ipv6(A, CARRIER, IPV6_IN_IPV6, inner)
        assert run(encap.pin_dir / 'prog', ETH + other) == (TC_ACT_OK, ETH + other)
    finally:
        encap.remove(key)


def test_encap_leaves_unknown_flows_and_other_protocols_alone(encap):
    key = flow_key(A, B, 40000, 5001)
    encap.add(key, flow_path(CARRIER, 'encap'))
    try:
        for frame in (ETH + ipv6(A, B, TCP, tcp(40000, 5002)),
                      ETH + ipv6(A, B, UDP, udp(40000, 5001)),   # same ports, not TCP
                      ETH + ipv6(A, CARRIER, IPV6_IN_IPV6, ipv6(A, B, UDP, udp(1, 2)))):
            assert run(encap.pin_dir / 'prog', frame) == (TC_ACT_OK, frame)
    finally:
        encap.remove(key)


def test_what_encap_puts_on_decap_takes_off(encap, decap):
    """At the receiving host the carrier is spent: the switches shifted it."""
    key = flow_key(A, B, 40000, 5001)
    encap.add(key, flow_path(SPENT, 'encap'))
    try:
        frame = ETH + ipv6(A, B, TCP, tcp(40000, 5001), tclass=ECT0)
        _, carried = run(encap.pin_dir / 'prog', frame)
    finally:
        encap.remove(key)
    assert carried != frame and run(decap, carried) == (TC_ACT_OK, frame)


def test_map_entries_go_as_they_came(encap):
    key = flow_key(A, B, 1, 2)
    encap.add(key, flow_path(CARRIER, 'encap'))
    encap.remove(key)
    frame = ETH + ipv6(A, B, TCP, tcp(1, 2))
    assert run(encap.pin_dir / 'prog', frame) == (TC_ACT_OK, frame)
