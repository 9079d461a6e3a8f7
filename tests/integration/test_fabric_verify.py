"""Real fabrics: every path works, planes are isolated, links carry their
rate (a failed link's exact paths: tests/integration/test_faults.py)."""
import socket
import struct
import subprocess
import time

import pytest

from testbed.fabric.netns import inside
from testbed.fabric.probe import PROBE_PORT, inner_udp
from testbed.fabric.switch_port import HTB_BURST_BYTES
from testbed.fabric.usid_plan import GATEWAY_MAC
from testbed.fabric.verify import plane_leaks, verify_fabric, wait_quiet

FAT_TREE = 'fattree,k=4,planes=2'
LEAF_SPINE = 'leafspine,leaves=4,spines=4,hosts=2,planes=4'


@pytest.mark.parametrize('spec,paths', [(FAT_TREE, 1696), (LEAF_SPINE, 800)])
def test_every_path_works_and_planes_are_isolated(fabric_factory, spec, paths):
    fab = fabric_factory(spec)
    report = verify_fabric(fab)
    assert report.paths_total == paths
    assert report.paths_ok == paths, report.failed_paths[:5]
    assert report.isolation_ok, report.isolation_leaks


def test_isolation_check_catches_a_packet_on_the_wrong_plane(fabric_factory):
    fab = fabric_factory('leafspine,leaves=2,spines=2,hosts=1,planes=2')
    plan = fab.plan
    path = plan.paths('h1', 'h2', 1)[0]
    before = wait_quiet()
    # A plane-1 carrier put on the wire of h1's plane-2 port, as a host with
    # a broken route table would: the plane-2 leaf must be seen receiving it.
    wrong_port = plan.host_ports[('h1', 2)]
    inner = inner_udp(plan.host_ports[('h1', 1)].address,
                      plan.host_ports[('h2', 1)].address, PROBE_PORT, b'leak')
    outer = struct.pack('!IHBB16s16s', 6 << 28, len(inner), 41, 64,
                        socket.inet_pton(socket.AF_INET6, wrong_port.address),
                        socket.inet_pton(socket.AF_INET6, path.carrier))
    frame = (bytes.fromhex(GATEWAY_MAC.replace(':', '')) +
             bytes.fromhex(wrong_port.mac.replace(':', '')) +
             b'\x86\xdd' + outer + inner)
    with inside(fab.host_pid('h1')), \
            socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
        s.bind((wrong_port.intf, 0))
        s.send(frame)
    leaks = plane_leaks(plan, 1, before, wait_quiet())
    assert leaks == ['plane 1 probe reached p2l0 (plane 2): 1 packets']


# A timed blast h1 -> h2 over the fabric, at three times the shaped rate, so
# the queue at h1's port never empties and the shaper alone sets the rate.
BLAST_FRAME = 1514           # a full MTU frame: the bytes HTB and rx_bytes count
BLAST_OFFERED = 3            # times the link rate
BLAST_WARMUP_S = 0.5         # the queue fills, the burst is spent
BLAST_WINDOW_S = 2.0         # measured after the warm-up


def rx_bytes(pid, intf):
    """An interface's received bytes in the namespace of process `pid`."""
    with open('/proc/%d/net/dev' % pid) as f:
        for line in f:
            name, _, counters = line.partition(':')
            if name.strip() == intf:
                return int(counters.split()[0])
    raise AssertionError('%s not in the namespace of %d' % (intf, pid))


def blast(fab, src, dst, rate_bps):
    """Send BLAST_FRAME frames from src to dst on plane 1 at BLAST_OFFERED
    times `rate_bps` for the warm-up and the window; return (bytes dst
    received in the window, the window's length, bytes offered per s)."""
    plan = fab.plan
    path = plan.paths(src, dst, 1)[0]
    inner = inner_udp(plan.host_ports[(src, 1)].address,
                      plan.host_ports[(dst, 1)].address, PROBE_PORT,
                      bytes(BLAST_FRAME - 14 - 40 - 40 - 8))
    pid, intf = fab.host_pid(dst), plan.host_ports[(dst, 1)].intf
    gap = BLAST_FRAME * 8 / (BLAST_OFFERED * rate_bps)
    with inside(fab.host_pid(src)):
        sock = socket.socket(socket.AF_INET6, socket.SOCK_RAW, 41)
    sent = 0
    try:
        start = time.monotonic()
        marks = {}
        while True:
            now = time.monotonic()
            if 'a' not in marks and now - start >= BLAST_WARMUP_S:
                marks['a'] = (rx_bytes(pid, intf), now)
            if now - start >= BLAST_WARMUP_S + BLAST_WINDOW_S:
                got = rx_bytes(pid, intf)
                marks['b'] = (got, time.monotonic())   # after the read
                break
            # Paced by the clock: as many frames as are due by now.
            while sent * gap < now - start:
                try:
                    sock.sendto(inner, (path.carrier, 0))
                except OSError:
                    pass                  # the port's queue is full: dropped
                sent += 1
            time.sleep(gap * 8)
    finally:
        sock.close()
    (a, t_a), (b, t_b) = marks['a'], marks['b']
    return b - a, t_b - t_a, sent * BLAST_FRAME / (time.monotonic() - start)


@pytest.mark.parametrize('mbit', [5, 20])
def test_shaped_links_carry_their_rate_and_no_more(fabric_factory, mbit):
    """Bytes over time at the receiver of a saturating blast: within what
    HTB lets through at the configured rate. Upper bound (strict): HTB
    sends at most its rate, plus its bucket (burst, and cburst for the
    ceiling, HTB_BURST_BYTES each) and the frame on the wire, over any
    window; every hop is shaped to the same rate, so no later one adds to
    it. Lower bound (generous, for the shared 2-core machine): with the
    queue never empty, HTB falls behind only when its dequeue runs late by
    more than its bucket holds (15 kB: 24 ms at 5 Mbit/s, 6 ms at 20);
    80 % leaves a fifth of the window, 400 ms, for such stalls."""
    rate = mbit * 1e6
    fab = fabric_factory('leafspine,leaves=2,spines=1,hosts=1,planes=1,bw=%d'
                         % mbit)
    classes = subprocess.run(['tc', 'class', 'show', 'dev', 'p1l0-eth1'],
                             capture_output=True, text=True).stdout
    assert 'htb' in classes and 'rate %dMbit' % mbit in classes, classes
    got, window, offered = blast(fab, 'h1', 'h2', rate)
    achieved = got * 8 / window
    print('shaped to %d Mbit/s: %.2f Mbit/s received over %.2f s, %.1f '
          'Mbit/s offered' % (mbit, achieved / 1e6, window, offered * 8 / 1e6))
    assert offered * 8 >= 2 * rate, 'the blast did not saturate the link'
    assert got <= rate / 8 * window + 2 * HTB_BURST_BYTES + BLAST_FRAME, (
        achieved, rate)
    assert achieved >= 0.8 * rate, (achieved, rate)
