"""The switch-port program on a real link: two namespaces joined by a veth pair.

Sender namespace A: the MRC endpoint's send path (a protocol-41 raw socket; the kernel adds
the outer IPv6 header, DA = an SRv6 carrier), then the port under test, mrcspa0, with the
priority HTB and the program on clsact egress. Receiver namespace B: End.DT6 decapsulation
of the carrier's /48 into the local table (host_decap.c on a kernel without it), and a UDP socket on port 4791 reading the inner
traffic class (IPV6_RECVTCLASS), as the endpoint's receiver does.

The bounds in these tests come from the mechanisms, with the send phase's measured duration
as their one input: the virtual queue drains at most rate x (duration of the burst) during
the burst, and HTB lets out at most its token buckets plus rate x elapsed time.
"""
from __future__ import annotations

import ctypes
import json
import os
import select
import socket
import struct
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import pytest

from testbed.fabric import host_decap
from testbed.fabric.host_decap import kernel_seg6local
from testbed.fabric import switch_port as sp
from testbed.fabric.run_lock import RunLock
from testbed.nic import wire

if sp.clang() is None or sp.bpftool() is None or not sp.headers_present():
    pytest.skip('no clang, bpftool or BPF headers (scripts/setup.sh installs them)',
                allow_module_level=True)

A, B = 'mrcspa%d' % os.getpid(), 'mrcspb%d' % os.getpid()   # mrc*: clean removes them
DEV_A, DEV_B = 'mrcspa0', 'mrcspb0'
ADDR_A, ADDR_B = 'fd00:5::1', 'fd00:5::2'
CARRIER_PREFIX, CARRIER = 'fc00:0:1::/48', 'fc00:0:1::'
NOT_ECT, ECT0, CE = 0, 2, 3
UDP_NO_CHECK6_RX = 102
SO_SNDBUFFORCE, SO_RCVBUFFORCE = 32, 33    # asm-generic/socket.h; Python lacks the names
ETH_HLEN = 14
OUTER_HLEN = 40
IPV6_TCLASS = getattr(socket, 'IPV6_TCLASS', 67)
BUF_BYTES = 8 << 20            # socket buffers far above a burst: no drops but the qdisc's
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def sh(*cmd: str, ns: str | None = None) -> str:
    full = (['ip', 'netns', 'exec', ns] if ns else []) + list(cmd)
    result = subprocess.run(full, capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, '%s: %s' % (' '.join(full), result.stderr)
    return result.stdout


@contextmanager
def inside(ns: str) -> Iterator[None]:
    """This thread in namespace `ns` (sockets made here stay in it)."""
    home = os.open('/proc/thread-self/ns/net', os.O_RDONLY)
    target = os.open('/var/run/netns/' + ns, os.O_RDONLY)
    try:
        assert _libc.setns(target, CLONE_NEWNET) == 0
        try:
            yield
        finally:
            assert _libc.setns(home, CLONE_NEWNET) == 0
    finally:
        os.close(target)
        os.close(home)


@pytest.fixture(scope='module')
def link():
    """A and B joined by mrcspa0 -- mrcspb0, B decapsulating the carrier; removed whatever
    happens. The run lock is held meanwhile: a test session starting now would take these
    namespaces for a crashed run's leftovers and clean them away."""
    lock = RunLock()
    lock.acquire()
    try:
        sh('ip', 'netns', 'add', A)
        sh('ip', 'netns', 'add', B)
        sh('ip', 'link', 'add', DEV_A, 'netns', A, 'type', 'veth', 'peer', 'name', DEV_B,
           'netns', B)
        for ns, dev, addr in ((A, DEV_A, ADDR_A), (B, DEV_B, ADDR_B)):
            sh('sysctl', '-qw', 'net.ipv6.conf.all.seg6_enabled=1',
               'net.ipv6.conf.%s.seg6_enabled=1' % dev, 'net.ipv6.conf.all.forwarding=1',
               'net.ipv6.conf.%s.accept_dad=0' % dev, ns=ns)
            sh('ip', 'addr', 'add', addr + '/64', 'dev', dev, 'nodad', ns=ns)
            sh('ip', 'link', 'set', 'lo', 'up', ns=ns)
            sh('ip', 'link', 'set', dev, 'up', ns=ns)
        mac_b = json.loads(sh('ip', '-j', 'link', 'show', DEV_B, ns=B))[0]['address']
        # A static neighbour: no neighbour discovery crossing the port during a test.
        sh('ip', '-6', 'neigh', 'replace', ADDR_B, 'lladdr', mac_b, 'dev', DEV_A,
           'nud', 'permanent', ns=A)
        sh('ip', '-6', 'route', 'add', 'fc00::/16', 'via', ADDR_B, 'dev', DEV_A, ns=A)
        if kernel_seg6local():
            sh('ip', '-6', 'route', 'add', CARRIER_PREFIX, 'encap', 'seg6local', 'action',
               'End.DT6', 'table', '255', 'dev', DEV_B, ns=B)
        else:           # as a fabric's hosts decapsulate there (docs/host-decap.md)
            for command in host_decap.attach_commands(DEV_B, host_decap.build()):
                sh('tc', *command.split(), ns=B)
        yield
    finally:
        for ns in (A, B):
            subprocess.run(['ip', 'netns', 'del', ns], capture_output=True)
        lock.release()


@dataclass
class Received:
    tclass: int
    mrc: bytes


class Receiver:
    """The endpoint's receive socket in B, drained by a thread into a list."""

    def __init__(self) -> None:
        with inside(B):
            self.sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, BUF_BYTES)
        self.sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_RECVTCLASS, 1)
        self.sock.setsockopt(socket.IPPROTO_UDP, UDP_NO_CHECK6_RX, 1)
        self.sock.bind(('::', wire.UDP_PORT))
        self.got: list[Received] = []

    def collect(self, count: int, timeout_s: float) -> list[Received]:
        deadline = time.monotonic() + timeout_s
        while len(self.got) < count and time.monotonic() < deadline:
            ready, _, _ = select.select([self.sock], [], [], 0.1)
            if ready:
                data, anc, _flags, _addr = self.sock.recvmsg(4096, 256)
                tclass = [struct.unpack('=i', d[:4])[0] for level, kind, d in anc
                          if level == socket.IPPROTO_IPV6 and kind == IPV6_TCLASS]
                self.got.append(Received(tclass[0] if tclass else -1, data))
        return self.got

    def close(self) -> None:
        self.sock.close()


class Sender:
    """The endpoint's send path in A: inner packet to a protocol-41 raw socket."""

    def __init__(self) -> None:
        with inside(A):
            self.sock = socket.socket(socket.AF_INET6, socket.SOCK_RAW, 41)
        self.sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, BUF_BYTES)
        self.outer_tc = -1

    def send(self, mrc: bytes, *, tc: int = ECT0, inner_tc: int | None = None) -> None:
        if tc != self.outer_tc:                   # the outer traffic class the kernel writes
            self.sock.setsockopt(socket.IPPROTO_IPV6, IPV6_TCLASS, tc)
            self.outer_tc = tc
        inner = wire.build_inner(ADDR_A, ADDR_B, 0x00010002, mrc,
                                 traffic_class=tc if inner_tc is None else inner_tc)
        self.sock.sendto(inner, (CARRIER, 0))

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def ends(link):
    receiver, sender = Receiver(), Sender()
    yield sender, receiver
    sender.close()
    receiver.close()


@pytest.fixture
def program(link):
    prog = sp.SwitchPortProgram('it%d' % os.getpid())
    try:
        yield prog
    finally:
        prog.unload()
        subprocess.run(sp._in_netns(A, ['tc', 'qdisc', 'del', 'dev', DEV_A, 'root']),
                       capture_output=True)


def data(psn: int, payload_len: int = 1000) -> bytes:
    return wire.DataPacket(opcode=wire.Opcode.WRITE_MIDDLE, dest_qp=0x77, psn=psn, msn=1,
                           rqmsn=0, remote_offset=psn * payload_len, rkey=0x1234,
                           total_length=1 << 20, payload=bytes([psn & 0xFF]) * payload_len
                           ).encode()


def frame_len(mrc: bytes) -> int:
    """skb->len at the port's egress hook, what both the virtual queue and HTB count."""
    return ETH_HLEN + OUTER_HLEN + wire.INNER_HEADERS_LEN + len(mrc)


def test_end_dt6_decap_drops_outer_ce(ends):
    """The fact switch_port.c's inner marking rests on: this kernel's End.DT6 (or, on a
    kernel without it, host_decap.c, which does as End.DT6 does) delivers the
    inner traffic class as it was, outer CE or not. Should it start propagating CE
    (RFC 6040), marking the inner header becomes redundant, not wrong."""
    sender, receiver = ends
    sender.send(wire.ReliabilityProbe(dest_qp=0x77, probe_id=1).encode(), tc=CE, inner_tc=ECT0)
    got = receiver.collect(1, timeout_s=5)
    assert [r.tclass for r in got] == [ECT0]


def test_marks_and_trims_reach_the_receiver(ends, program):
    rate = 4_000_000
    mark, trim = 15_000, 45_000
    sp.setup_priority_htb(DEV_A, rate, netns=A)
    program.attach(DEV_A, sp.PortConfig(rate_bps=rate, mark_threshold=mark,
                                        trim_threshold=trim), netns=A)
    sender, receiver = ends
    n = 120
    sent = {psn: data(psn) for psn in range(n)}
    start = time.monotonic_ns()
    for mrc in sent.values():
        sender.send(mrc, tc=ECT0)
    burst_ns = time.monotonic_ns() - start
    # Everything gets through: the HTB queue holds far more than the burst (pfifo,
    # txqueuelen 1000) and the trimmed tail is small; the rate sets the time to drain.
    got = receiver.collect(n, timeout_s=5 + 2 * n * frame_len(sent[0]) * 8 / rate)
    assert len(got) == n

    full = frame_len(sent[0])
    trimmed_len = frame_len(wire.trim_data_packet(sent[0]))
    marked = trimmed = 0
    for packet in got:
        decoded = wire.decode(packet.mrc)        # lengths, flags and ICRC all valid
        assert packet.tclass in (ECT0, CE)
        marked += packet.tclass == CE
        if decoded.trim != wire.Trim.NONE:
            trimmed += 1
            assert decoded.trim == wire.Trim.TRIMMED          # not a last-hop port
            assert packet.mrc == wire.trim_data_packet(sent[decoded.psn])
        else:
            assert packet.mrc == sent[decoded.psn]
    counters = program.counters(DEV_A)
    assert (counters['ce_marked'], counters['trimmed']) == (marked, trimmed)
    assert counters['trim_errors'] == 0

    # The bounds. A packet finds the bytes sent before it, less what drained meanwhile,
    # and during the burst at most drain = rate x burst duration drains.
    drain = rate * (burst_ns + 1) // 8 // 10**9 + 1
    # Upper: no packet is over a threshold before that many bytes were sent, counting
    # what the kernel itself sent on the port (an MLD report, say) as sent before all ours.
    noise = counters['bytes'] - full * (n - trimmed) - trimmed_len * trimmed
    assert noise >= 0
    assert marked <= n - ((mark - noise) // full + 1)
    assert trimmed <= n - ((trim - noise) // full + 1)
    # Lower: trimming starts by the packet that finds trim + drain bytes of full-size
    # packets before it; after that an untrimmed packet adds a full frame, and only the
    # drain can take the queue back under the threshold, at most drain // full + 1 times.
    first_trim = (trim + drain) // full + 1
    assert trimmed >= n - first_trim - (drain // full + 1)
    # Marking starts by the packet that finds mark + drain bytes; after that every packet
    # adds at least a trimmed frame, so the drain can undo at most drain // trimmed_len + 1.
    first_mark = (mark + drain) // full + 1
    assert marked >= n - first_mark - (drain // trimmed_len + 1)


def test_control_class_is_served_first(ends, program):
    rate, burst = 1_000_000, 2 * 1514
    sp.setup_priority_htb(DEV_A, rate, netns=A, burst_bytes=burst)
    config = sp.PortConfig(rate_bps=rate)          # no marking, no trimming: priority only
    program.attach(DEV_A, config, netns=A)
    sender, receiver = ends
    n = 40
    packets = [data(psn) for psn in range(n)]
    sack = wire.Sack(dest_qp=0x77, cack_psn=5, ev=0x00010002).encode()
    full = frame_len(packets[0])

    def position_of_sack() -> tuple[int, int]:
        """(data packets that arrived before the SACK, ns from the first send to the SACK)."""
        receiver.got.clear()
        start = time.monotonic_ns()
        for mrc in packets:
            sender.send(mrc, tc=NOT_ECT)
        sender.send(sack, tc=NOT_ECT)
        elapsed = time.monotonic_ns() - start
        got = receiver.collect(n + 1, timeout_s=5 + 2 * (n + 1) * full * 8 / rate)
        assert len(got) == n + 1
        kinds = [type(wire.decode(r.mrc)).__name__ for r in got]
        return kinds.index('Sack'), elapsed

    ahead, elapsed = position_of_sack()
    # What HTB can have let out before the SACK was queued: the data class's own bucket
    # and the parent's (burst bytes each, one packet of overdraft each), plus both rates
    # for the time the sends took.
    control_rate, data_rate = sp.priority_htb_rates(rate)
    bound = 2 * (burst // full + 1) + (rate + data_rate) * elapsed // 8 // 10**9 // full + 1
    assert ahead <= bound
    stats = sp.htb_class_stats(DEV_A, netns=A)
    assert stats[sp.HTB_CONTROL]['packets'] == 1
    assert stats[sp.HTB_DATA]['packets'] >= n
    assert program.counters(DEV_A)['prioritized'] == 1

    # The same SACK without the control priority waits behind every data packet (one FIFO).
    program.configure(DEV_A, sp.PortConfig(rate_bps=rate, control_priority=0))
    ahead, _ = position_of_sack()
    assert ahead == n


def test_unload_leaves_nothing(ends, program):
    program.attach(DEV_A, sp.PortConfig(rate_bps=10**9, mark_threshold=0), netns=A)
    prog_id = program.prog_id()
    assert _filters(A, DEV_A)
    program.unload()
    program.unload()                               # idempotent
    assert not program.pin_dir.exists()
    assert not _filters(A, DEV_A)
    assert 'clsact' not in sh('tc', 'qdisc', 'show', 'dev', DEV_A, ns=A)   # we added it
    _assert_freed(prog_id)


def test_clsact_of_others_is_kept(ends, program):
    """A clsact qdisc we did not add, or one another filter still uses, stays."""
    sh('tc', 'qdisc', 'add', 'dev', DEV_A, 'clsact', ns=A)
    try:
        program.attach(DEV_A, sp.PortConfig(rate_bps=10**9), netns=A)
        program.detach(DEV_A)
        assert 'clsact' in sh('tc', 'qdisc', 'show', 'dev', DEV_A, ns=A)
        assert not _filters(A, DEV_A)
    finally:
        sh('tc', 'qdisc', 'del', 'dev', DEV_A, 'clsact', ns=A)


def test_clean_removes_what_a_killed_run_left(ends):
    """A run killed before unload(): its pins and filters are found and removed by name."""
    prog = sp.SwitchPortProgram('killed%d' % os.getpid())
    prog.attach(DEV_A, sp.PortConfig(rate_bps=10**9), netns=A)
    prog_id = prog.prog_id()
    del prog                                       # no unload: as if SIGKILLed
    # clean_pins() cleans the namespace it runs in; run it in A, where the filter is.
    out = subprocess.run(['nsenter', '--net=/var/run/netns/' + A, sys.executable, '-c',
                          'from testbed.fabric import switch_port as sp; print(sp.clean_pins())'],
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, 'PYTHONPATH': str(sp.REPO)})
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) >= 1
    assert not sp.leftover_pin_dirs()
    assert not _filters(A, DEV_A)
    _assert_freed(prog_id)
    sh('tc', 'qdisc', 'del', 'dev', DEV_A, 'clsact', ns=A)


def _filters(ns: str, dev: str) -> list:
    return json.loads(sh('tc', '-j', 'filter', 'show', 'dev', dev, 'egress', ns=ns) or '[]')


def _assert_freed(prog_id: int) -> None:
    """The kernel frees a program once no pin and no filter holds it, after an RCU grace
    period: wait for that, not for a time we would have to guess."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if subprocess.run([sp.bpftool(), 'prog', 'show', 'id', str(prog_id)],
                          capture_output=True).returncode != 0:
            return
        time.sleep(0.05)
    pytest.fail('program %d still loaded' % prog_id)
