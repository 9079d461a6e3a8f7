"""The unread backlog's parts that need no fabric: what a frame costs a packet
socket's buffer on this kernel, and the wait Little's law reads from samples
(testbed/workload/unread_backlog.py; on a fabric:
tests/integration/test_unread_backlog.py)."""
from __future__ import annotations

import subprocess
import sys

import pytest

from testbed.workload.unread_backlog import (READY, STOP_TIMEOUT_S, BacklogReading,
                                            frame_truesize)


TRUESIZE_PROBE = r'''
import socket, subprocess, time
mtu, frames = %d, %d
subprocess.run(['ip', 'link', 'add', 'name', 'vtx', 'mtu', str(mtu), 'type', 'veth',
                'peer', 'name', 'vrx', 'mtu', str(mtu)], check=True)
for dev in ('vtx', 'vrx'):
    subprocess.run(['ip', 'link', 'set', dev, 'up'], check=True)
# EtherType 0x88b5 (IEEE local experimental): our frames alone, no IPv6 chatter
rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x88b5))
rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
rx.bind(('vrx', 0))
tx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
tx.bind(('vtx', 0))
frame = b'\x02' * 6 + b'\x04' * 6 + b'\x88\xb5' + bytes(mtu)
for _ in range(frames):
    tx.send(frame)
time.sleep(0.2)
with open('/proc/net/packet') as f:
    print(max(int(line.split()[6]) for line in f.readlines()[1:]))
'''


@pytest.mark.parametrize('mtu', [1500, 3500])
def test_a_full_frame_is_charged_its_truesize(mtu):
    """What a packet socket's buffer is charged for a full frame sent through
    another packet socket (as ovs-vswitchd forwards), on this kernel, in a network
    namespace of its own that goes with the process."""
    frames = 20
    out = subprocess.run(['unshare', '--net', sys.executable, '-c',
                          TRUESIZE_PROBE % (mtu, frames)],
                         capture_output=True, text=True, check=True).stdout
    assert int(out) == frames * frame_truesize(mtu)


def test_the_wait_is_frames_waiting_over_frames_read():
    frame = frame_truesize(1500)
    # 50 frames waiting on average while 25,000 are read a second: 2 ms each.
    assert BacklogReading(4 * 50 * frame, 4, frame).wait_per_port_s(25_000) == \
        pytest.approx(0.002)
    assert BacklogReading(0, 0, frame).wait_per_port_s(25_000) is None
    assert BacklogReading(0, 4, frame).wait_per_port_s(0) is None


def test_the_sampler_says_it_is_ready_before_its_first_sample():
    """The sampling process's protocol (UnreadSampler.start waits for READY,
    so that a short window is sampled from its start): READY, then on a line
    on stdin the sum and count of its samples. Here it samples a packet
    socket that does not exist: 0 bytes, at least one sample."""
    proc = subprocess.Popen(
        [sys.executable, '-m', 'testbed.workload.unread_backlog', '999999999'],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == READY
        out, _ = proc.communicate('stop\n', timeout=STOP_TIMEOUT_S * 5)
    finally:
        if proc.poll() is None:
            proc.kill()
    total, samples = (int(w) for w in out.split())
    assert proc.returncode == 0 and total == 0 and samples >= 1, out
