"""The switch-port eBPF program on crafted frames, by BPF_PROG_TEST_RUN.

The program is the real object, built from testbed/fabric/switch_port.c with the wire
constants of testbed/nic/wire.py, loaded and pinned by SwitchPortProgram and attached to a
dummy port in a namespace of its own; every frame is made with wire.py, and every trimmed
frame is compared byte for byte with wire.trim_data_packet(), so a change to the wire layout
that the program does not follow fails here.

How the tests set the virtual backlog: a test run passes no time between packets worth
speaking of, so each test writes the port's state map first (SwitchPortProgram.set_state)
with the backlog it wants the packet to find and last_ns = FROZEN_NS, a time the clock never
reaches. The program drains nothing while now <= last_ns, so every packet finds exactly the
backlog written plus what the packets before it added. The drain itself is tested with
last_ns a known interval in the past.
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import replace

import pytest

from testbed.fabric import switch_port as sp
from testbed.nic import wire
from tests.unit.switch_port_harness import (
    CE, ECT0, ECT1, ETH_HLEN, ETH_P_IP, NOT_ECT, control_packets, data_packet, ecn, ethernet,
    expected_trim, inner_offset, machine, mrc_frame, routed_frame, run_program,
    traffic_class)

if os.geteuid() != 0:
    pytest.skip('BPF_PROG_TEST_RUN and pinning need root', allow_module_level=True)
if sp.clang() is None or not sp.headers_present():
    pytest.skip('no clang or no libbpf/kernel headers (scripts/setup.sh installs them)',
                allow_module_level=True)
if sp.bpftool() is None:
    pytest.skip('no working bpftool (scripts/setup.sh installs it)', allow_module_level=True)

TC_ACT_UNSPEC = -1                       # pass, and let later filters run
MARK, TRIM = 3000, 9000                  # thresholds, bytes of virtual backlog
RATE = 10_000_000_000
NETNS = 'mrcspu%d' % os.getpid()         # mrc* so that `mrc-testbed clean` knows it
PORT, OTHER = 'mrcspu0', 'mrcspu1'       # OTHER has no configuration
CONFIG = sp.PortConfig(rate_bps=RATE, mark_threshold=MARK, trim_threshold=TRIM,
                       limit_bytes=1_000_000)


def _ip(*args: str) -> None:
    subprocess.run(['ip', *args], check=True, capture_output=True)


@pytest.fixture(scope='module')
def prog(machine):
    _ip('netns', 'add', NETNS)
    program = None
    try:
        for dev in (PORT, OTHER):      # veths: this kernel has no dummy links
            _ip('-n', NETNS, 'link', 'add', dev, 'type', 'veth', 'peer', 'name', dev + 'p')
            # Nothing of the kernel's own may pass the port between set_state and counters:
            # no IPv6 on it (no ND, no MLD), and its peer stays down (no carrier).
            subprocess.run(['ip', 'netns', 'exec', NETNS, 'sysctl', '-qw',
                            'net.ipv6.conf.%s.disable_ipv6=1' % dev], check=True)
            _ip('-n', NETNS, 'link', 'set', dev, 'up')
        program = sp.SwitchPortProgram('unit%d' % os.getpid())
        program.attach(PORT, CONFIG, netns=NETNS)
        yield program
    finally:
        if program is not None:
            program.unload()
        subprocess.run(['ip', 'netns', 'del', NETNS], capture_output=True)


@pytest.fixture
def port(prog):
    """The port with CONFIG, found empty and frozen; returns a runner."""
    prog.configure(PORT, CONFIG)
    prog.set_state(PORT, backlog=0, last_ns=sp.FROZEN_NS)
    return prog


def run(prog, frame: bytes, *, backlog: int | None = None, dev: str = PORT):
    if backlog is not None:
        prog.set_state(PORT, backlog=backlog, last_ns=sp.FROZEN_NS)
    ifindex = prog._ports[dev].ifindex if dev in prog._ports else _ifindex(dev)
    return run_program(prog, frame, ifindex=ifindex, netns=NETNS)


def _ifindex(dev: str) -> int:
    out = subprocess.run(['ip', '-n', NETNS, '-o', 'link', 'show', dev], check=True,
                         capture_output=True, text=True).stdout
    return int(out.split(':')[0])


def only_ecn_changed(before: bytes, after: bytes, *offsets: int) -> bool:
    """Identical frames but for the ECN bits of the IPv6 headers at `offsets`."""
    a, b = bytearray(before), bytearray(after)
    for off in offsets:
        a[off + 1] &= ~0x30
        b[off + 1] &= ~0x30
    return a == b


# -- the program's view of the wire format ------------------------------------


def test_program_structs_match_python(port):
    """The Python packing of the maps is the C layout (from the object's BTF)."""
    dump = json.loads(subprocess.run(
        [sp.bpftool(), '-j', 'map', 'dump', 'pinned', str(port.map_pin(sp.STATE_MAP))],
        check=True, capture_output=True, text=True).stdout)
    formatted = dump[0]['formatted']['value']
    assert list(formatted)[2:] == list(sp.STATE_FIELDS)          # after lock, reserved
    assert len(bytes(int(b, 16) for b in dump[0]['value'])) == sp._STATE.size
    conf = json.loads(subprocess.run(
        [sp.bpftool(), '-j', 'map', 'dump', 'pinned', str(port.map_pin(sp.CONFIG_MAP))],
        check=True, capture_output=True, text=True).stdout)
    assert list(conf[0]['formatted']['value']) == list(sp.CONFIG_FIELDS)
    assert conf[0]['formatted']['value']['mark_bytes'] == MARK
    assert conf[0]['formatted']['value']['flags'] == sp.FLAG_MARK | sp.FLAG_TRIM


def test_wire_constants_come_from_wire_py():
    defines = sp.wire_defines()
    assert int(defines['MRC_FLAG_TRIMMED'], 16) == wire.FLAG_TRIMMED
    assert int(defines['MRC_FLAG_TRIMMED_LASTHOP'], 16) == wire.FLAG_TRIMMED_LASTHOP
    assert int(defines['MRC_BTH_FLAGS_OFFSET']) == wire.BTH_FLAGS_OFFSET
    assert int(defines['MRC_BTH_VERSION_OFFSET']) == wire.BTH_VERSION_OFFSET
    data = int(defines['MRC_DATA_OPCODES'].removesuffix('ULL'), 16)
    assert {op for op in range(64) if data >> op & 1} == set(wire.DATA_OPCODES)
    control = int(defines['MRC_CONTROL_OPCODES'].removesuffix('ULL'), 16)
    base = int(defines['MRC_CONTROL_OPCODE_BASE'], 16)
    assert {base + op for op in range(64) if control >> op & 1} == {
        wire.Opcode.SACK, wire.Opcode.NACK, wire.Opcode.RELIABILITY_PROBE,
        wire.Opcode.EV_PROBE, wire.Opcode.EV_PROBE_REPLY, wire.Opcode.PORT_STATUS_UPDATE}


# -- ECN -------------------------------------------------------------------------


def test_at_mark_threshold_not_marked(port):
    frame = mrc_frame(data_packet(payload_len=200))
    result = run(port, frame, backlog=MARK)       # not over: equal
    assert result.retval == TC_ACT_UNSPEC
    assert result.frame == frame
    assert port.counters(PORT)['ce_marked'] == 0


@pytest.mark.parametrize('codepoint', [ECT0, ECT1])
def test_over_mark_threshold_marks_outer_and_inner(port, codepoint):
    frame = mrc_frame(data_packet(payload_len=200), outer_tc=codepoint)
    result = run(port, frame, backlog=MARK + 1)
    assert ecn(result.frame, ETH_HLEN) == CE
    assert ecn(result.frame, inner_offset(frame)) == CE   # End.DT6 does not copy it in
    assert only_ecn_changed(frame, result.frame, ETH_HLEN, inner_offset(frame))
    counters = port.counters(PORT)
    assert (counters['ce_marked'], counters['not_ect_over'], counters['packets']) == (1, 0, 1)


def test_inner_not_ect_keeps_its_codepoint(port):
    frame = mrc_frame(data_packet(payload_len=200), outer_tc=ECT0, inner_tc=NOT_ECT)
    result = run(port, frame, backlog=MARK + 1)
    assert ecn(result.frame, ETH_HLEN) == CE
    assert ecn(result.frame, inner_offset(frame)) == NOT_ECT
    assert only_ecn_changed(frame, result.frame, ETH_HLEN)


def test_not_ect_never_marked_but_counted(port):
    frame = mrc_frame(data_packet(payload_len=200), outer_tc=NOT_ECT, inner_tc=ECT0)
    result = run(port, frame, backlog=MARK + 1)
    assert result.frame == frame
    counters = port.counters(PORT)
    assert (counters['ce_marked'], counters['not_ect_over']) == (0, 1)


def test_dscp_kept_when_marking(port):
    dscp = 26 << 2                                 # AF31
    frame = mrc_frame(data_packet(payload_len=200), outer_tc=dscp | ECT0,
                      inner_tc=dscp | ECT1)
    result = run(port, frame, backlog=MARK + 1)
    assert traffic_class(result.frame, ETH_HLEN) == dscp | CE
    assert traffic_class(result.frame, inner_offset(frame)) == dscp | CE


def test_marking_off(port):
    port.configure(PORT, replace(CONFIG, mark_threshold=None))
    frame = mrc_frame(data_packet(payload_len=200))
    assert run(port, frame, backlog=MARK + 1).frame == frame
    assert port.counters(PORT)['not_ect_over'] == 0


# -- trimming --------------------------------------------------------------------

TRIM_CASES = [
    (wire.Opcode.WRITE_ONLY, False),
    (wire.Opcode.WRITE_ONLY, True),
    (wire.Opcode.WRITE_FIRST, False),
    (wire.Opcode.WRITE_MIDDLE, True),
    (wire.Opcode.WRITE_LAST, False),
    (wire.Opcode.WRITE_LAST_WITH_IMM, False),
    (wire.Opcode.WRITE_LAST_WITH_IMM, True),
    (wire.Opcode.WRITE_ONLY_WITH_IMM, True),
]


@pytest.mark.parametrize('last_hop', [False, True], ids=['mid-path', 'last-hop'])
@pytest.mark.parametrize('opcode,timestamp', TRIM_CASES,
                         ids=['%s%s' % (op.name, '+ts' if ts else '') for op, ts in TRIM_CASES])
def test_over_trim_threshold_trims_as_wire_does(port, opcode, timestamp, last_hop):
    port.configure(PORT, replace(CONFIG, last_hop=last_hop))
    mrc = data_packet(opcode, 1200, timestamp=timestamp)
    frame = mrc_frame(mrc, outer_tc=NOT_ECT)       # not ECT: the trim alone is under test
    result = run(port, frame, backlog=TRIM + 1)
    assert result.frame == expected_trim(frame, last_hop=last_hop)
    # ... which is an ordinary, fully checked packet: lengths, flags and ICRC valid.
    _src, _dst, ev, trimmed_mrc = wire.parse_inner(result.frame[inner_offset(frame):])
    packet = wire.decode(trimmed_mrc)
    assert ev == 0x12345678
    assert packet == replace(wire.decode(mrc), payload=b'',
                             trim=wire.Trim.TRIMMED_LASTHOP if last_hop else wire.Trim.TRIMMED)
    assert result.priority == sp.CONTROL_PRIORITY
    counters = port.counters(PORT)
    assert (counters['trimmed'], counters['prioritized'], counters['trim_errors']) == (1, 1, 0)
    assert counters['bytes'] == len(result.frame)
    assert counters['backlog'] == TRIM + 1 + len(result.frame)   # the trimmed length queues


def test_trim_behind_an_srh(port):
    frame = mrc_frame(data_packet(payload_len=500), with_srh=True)
    result = run(port, frame, backlog=TRIM + 1)
    assert only_ecn_changed(expected_trim(frame, last_hop=False), result.frame,
                            ETH_HLEN, inner_offset(frame))
    assert ecn(result.frame, ETH_HLEN) == ecn(result.frame, inner_offset(frame)) == CE
    wire.decode(wire.parse_inner(result.frame[inner_offset(frame):])[3])


def test_at_trim_threshold_not_trimmed(port):
    frame = mrc_frame(data_packet(payload_len=1000))
    result = run(port, frame, backlog=TRIM)
    assert len(result.frame) == len(frame)
    assert ecn(result.frame, ETH_HLEN) == CE       # over the mark threshold all the same
    assert result.priority == 0                    # full-size data stays in the data class


def test_trimming_off(port):
    port.configure(PORT, replace(CONFIG, trim_threshold=None))
    frame = mrc_frame(data_packet(payload_len=1000), outer_tc=NOT_ECT)
    assert run(port, frame, backlog=TRIM + 1).frame == frame


def test_already_trimmed_passes_whole_at_high_priority(port):
    frame = mrc_frame(data_packet(payload_len=0, trim=wire.Trim.TRIMMED), outer_tc=NOT_ECT)
    result = run(port, frame, backlog=TRIM + 1)
    assert result.frame == frame
    assert result.priority == sp.CONTROL_PRIORITY
    assert port.counters(PORT)['trimmed'] == 0


def test_header_only_data_not_trimmed(port):
    """A WRITE_ONLY of 0 bytes is as small as its trimmed form: a trim flag would only
    cost a retransmission."""
    frame = mrc_frame(data_packet(payload_len=0), outer_tc=NOT_ECT)
    assert run(port, frame, backlog=TRIM + 1).frame == frame


def test_inconsistent_lengths_not_trimmed(port):
    frame = bytearray(mrc_frame(data_packet(payload_len=400), outer_tc=NOT_ECT))
    inner = inner_offset(bytes(frame))
    frame[inner + 4 + 40] ^= 1                     # UDP length off by 256
    assert run(port, bytes(frame), backlog=TRIM + 1).frame == bytes(frame)


def test_non_mrc_udp_not_trimmed_nor_prioritised(port):
    """Other UDP (another dport) over both thresholds: ECN applies to every ECT packet,
    trimming and the control class only to MRC."""
    frame = mrc_frame(data_packet(payload_len=1000), dport=5000)
    result = run(port, frame, backlog=TRIM + 1)
    assert only_ecn_changed(frame, result.frame, ETH_HLEN, inner_offset(frame))
    assert result.priority == 0
    non_ect = mrc_frame(data_packet(payload_len=1000), dport=5000, outer_tc=NOT_ECT)
    assert run(port, non_ect, backlog=TRIM + 1).frame == non_ect


def test_not_ipv6_untouched(port):
    ipv4 = ethernet(bytes.fromhex('4502002800000000401100000a0000010a000002') + bytes(20),
                    ETH_P_IP)                      # ECT(0) IPv4: not ours to mark
    result = run(port, ipv4, backlog=TRIM + 1)
    assert (result.retval, result.frame, result.priority) == (TC_ACT_UNSPEC, ipv4, 0)
    counters = port.counters(PORT)
    assert (counters['packets'], counters['bytes']) == (1, len(ipv4))   # it still queues
    assert counters['ce_marked'] == counters['not_ect_over'] == 0


def test_port_without_config_untouched(port):
    frame = mrc_frame(data_packet(payload_len=1000))
    port.set_state(PORT, backlog=TRIM + 1, last_ns=sp.FROZEN_NS)
    result = run(port, frame, dev=OTHER)
    assert (result.retval, result.frame, result.priority) == (TC_ACT_UNSPEC, frame, 0)
    assert port.counters(PORT)['packets'] == 0


# -- priority --------------------------------------------------------------------


@pytest.mark.parametrize('kind', sorted(control_packets()))
def test_control_packets_get_the_control_priority(port, kind):
    frame = mrc_frame(control_packets()[kind])
    result = run(port, frame, backlog=0)
    assert (result.frame, result.priority) == (frame, sp.CONTROL_PRIORITY)
    assert port.counters(PORT)['prioritized'] == 1


@pytest.mark.parametrize('kind', sorted(control_packets()))
def test_routed_control_packets_get_the_control_priority(port, kind):
    """The routed fabric's ACKs, NAKs and CNPs ride the control class, as RoCE fabrics
    give them a strict-priority class."""
    frame = routed_frame(control_packets()[kind])
    result = run(port, frame, backlog=0)
    assert (result.frame, result.priority) == (frame, sp.CONTROL_PRIORITY)


def test_routed_data_marked_never_trimmed(port):
    """Routed data over both thresholds: CE on its only header, whole, in the data class."""
    frame = routed_frame(data_packet(payload_len=1000))
    result = run(port, frame, backlog=TRIM + 1)
    assert only_ecn_changed(frame, result.frame, ETH_HLEN)
    assert ecn(result.frame, ETH_HLEN) == CE
    assert result.priority == 0
    assert port.counters(PORT)['trimmed'] == 0


def test_control_over_thresholds_marked_never_trimmed(port):
    frame = mrc_frame(control_packets()['sack'])
    result = run(port, frame, backlog=TRIM + 1)
    assert only_ecn_changed(frame, result.frame, ETH_HLEN, inner_offset(frame))
    assert result.priority == sp.CONTROL_PRIORITY


def test_priority_zero_leaves_skb_priority(port):
    port.configure(PORT, replace(CONFIG, control_priority=0))
    result = run(port, mrc_frame(control_packets()['nack']), backlog=0)
    assert result.priority == 0
    assert port.counters(PORT)['prioritized'] == 0


def test_data_below_thresholds_keeps_priority(port):
    result = run(port, mrc_frame(data_packet()), backlog=0)
    assert result.priority == 0


# -- the virtual queue -------------------------------------------------------------


def test_backlog_adds_what_is_sent_and_stops_at_the_limit(port):
    port.configure(PORT, replace(CONFIG, limit_bytes=TRIM + 500))
    port.set_state(PORT, backlog=0, last_ns=sp.FROZEN_NS)
    big = mrc_frame(data_packet(payload_len=1300), outer_tc=NOT_ECT)
    sizes = []
    for _ in range(12):
        sizes.append(len(run(port, big).frame))
    # Frozen: each packet finds the sum of what went before, so the first ones below TRIM
    # go whole and the rest are trimmed; the backlog stops at the limit.
    whole = len(big)
    expect, backlog = [], 0
    for _ in range(12):
        sent = whole if backlog <= TRIM else len(expected_trim(big, last_hop=False))
        expect.append(sent)
        backlog = min(backlog + sent, TRIM + 500)
    assert sizes == expect
    counters = port.counters(PORT)
    assert counters['backlog'] == backlog
    assert counters['bytes'] == sum(expect)
    assert counters['trimmed'] == sum(1 for s in expect if s != whole)


def test_queue_drains_at_the_rate(port):
    """last_ns a known interval in the past: the packet finds the backlog less what the
    rate drained in that interval, which the interval measured around the run bounds."""
    rate = 8_000_000                              # 1 byte per microsecond
    port.configure(PORT, replace(CONFIG, rate_bps=rate))
    backlog, ago_ns = 100_000, 20_000_000          # 20 ms ago: 20,000 bytes drained
    frame = mrc_frame(data_packet(payload_len=100), outer_tc=NOT_ECT)
    start = time.monotonic_ns()                    # bpf_ktime_get_ns() is CLOCK_MONOTONIC
    port.set_state(PORT, backlog=backlog, last_ns=start - ago_ns)
    run(port, frame)
    elapsed = time.monotonic_ns() - start
    left = port.counters(PORT)['backlog'] - len(frame)
    drained_min = ago_ns * rate // 8 // 10**9
    drained_max = (ago_ns + elapsed) * rate // 8 // 10**9 + 1
    assert backlog - drained_max <= left <= backlog - drained_min


def test_idle_link_banks_no_credit(port):
    """A second of idleness empties the queue and no more: the packet after it finds 0,
    and the one after that finds the first one, less at most what the gap drained."""
    rate = 8000                                    # 1 byte per millisecond
    port.configure(PORT, replace(CONFIG, rate_bps=rate))
    frame = mrc_frame(data_packet(payload_len=100), outer_tc=NOT_ECT)
    start = time.monotonic_ns()
    port.set_state(PORT, backlog=500, last_ns=start - 10**9)
    run(port, frame)
    assert port.counters(PORT)['backlog'] == len(frame)
    run(port, frame)
    drained_max = (time.monotonic_ns() - start) * rate // 8 // 10**9 + 1
    assert drained_max < len(frame), 'the runs took too long for this bound'
    backlog = port.counters(PORT)['backlog']
    assert 2 * len(frame) - drained_max <= backlog <= 2 * len(frame)


def test_set_rate_rewrites_only_the_rate(port):
    port.set_rate(PORT, 1_234_000)
    assert port.config(PORT) == replace(CONFIG, rate_bps=1_234_000)
    dump = json.loads(subprocess.run(
        [sp.bpftool(), '-j', 'map', 'dump', 'pinned', str(port.map_pin(sp.CONFIG_MAP))],
        check=True, capture_output=True, text=True).stdout)
    value = dump[0]['formatted']['value']
    assert (value['rate_bps'], value['mark_bytes'], value['trim_bytes']) == (1_234_000, MARK, TRIM)


def test_counters_of_all_ports(port):
    run(port, mrc_frame(data_packet()), backlog=0)
    everything = port.all_counters()
    assert set(everything) == {PORT}
    assert everything[PORT]['packets'] == 1
