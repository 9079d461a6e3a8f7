"""The health gate's run-queue wait: read from the kernel's scheduler statistics, it sees
a process that competes for this process's CPU, and the gate turns it into a reason."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import replace

import pytest

from testbed.workload.emulation_health import (
    HealthSample, _run_queue_wait_ns, health_between)

SPIN_S = 0.6


def spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def waited_while_spinning(competitor: bool) -> float:
    """Share of SPIN_S this process waited for its one CPU, spinning beside a busy loop
    pinned to the same CPU (or alone)."""
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    hog = None
    try:
        if competitor:
            hog = subprocess.Popen([sys.executable, '-c', 'import os; os.sched_setaffinity('
                                    '0, {%d})\nwhile True: pass' % cpu])
            time.sleep(0.2)                  # it runs before the measurement starts
        start = _run_queue_wait_ns('self')
        spin(SPIN_S)
        return (_run_queue_wait_ns('self') - start) / 1e9 / SPIN_S
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
        os.sched_setaffinity(0, before)


def test_a_process_sharing_the_cpu_shows_as_wait():
    if not os.path.exists('/proc/self/task/%d/schedstat' % os.getpid()):
        pytest.skip('kernel without scheduler statistics')
    # Two busy loops on one CPU get about half each (CFS): this one waits about as long
    # as it runs. Alone it waits only for what else the machine runs on that CPU, so
    # the competitor shows as at least a third of the time more (not a fixed floor: the
    # machine may be shared).
    shared = waited_while_spinning(competitor=True)
    alone = waited_while_spinning(competitor=False)
    assert shared > 0.3 and shared - alone > 0.3


def test_the_gate_names_who_waited():
    start = HealthSample(0.0, 0.0, (1000, 600), 0, 10, 0, 0, 0)
    end = HealthSample(1.0, 0.4, (1400, 800), 0, 5010, 0,
                       endpoint_wait_ns=int(0.3e9), vswitchd_wait_ns=int(0.05e9))
    health = health_between(start, end, [])
    assert health['endpoint_cpu_wait'] == 0.3 and health['vswitchd_cpu_wait'] == 0.05
    assert not health['trusted']
    assert health['reasons'] == [
        "endpoint loop waited 30% of the run for a CPU (the cores were busy: the "
        "fabric's own forwarding or other work)"]
    # The kernel's TCP: this process only watches; its wait is reported, not gated.
    kernel = health_between(start, end, [], endpoint_loop=False)
    assert kernel['endpoint_cpu_wait'] == 0.3 and kernel['trusted']


def test_a_full_receive_socket_is_loss_outside_the_model():
    # A socket that nobody reads, with the smallest receive buffer, flooded on the
    # loopback: the kernel counts what it could not queue in Udp6RcvbufErrors, as it
    # does in an emulated host whose endpoint loop fell behind.
    here = {'this namespace': os.getpid()}
    rx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)   # the kernel's minimum
        rx.bind(('::1', 0))
        start = HealthSample.now(here)
        for _ in range(500):
            tx.sendto(bytes(1000), rx.getsockname()[:2])
        end = HealthSample.now(here)
    finally:
        rx.close()
        tx.close()
    health = health_between(replace(start, packets=0), replace(end, packets=1000), [])
    # 500 sent, a minimal buffer holds a few: nearly all of them are lost.
    assert health['host_receive_losses'] >= 400
    assert not health['trusted'] and any(r.startswith(
        'the hosts lost %d received packets (Udp6RcvbufErrors'
        % health['host_receive_losses']) for r in health['reasons'])


def test_packets_the_endpoints_could_not_send_are_loss_outside_the_model():
    start = HealthSample(0.0, 0.0, (1000, 600), 0, 10, 0, 0, 0)
    end = HealthSample(1.0, 0.4, (1400, 800), 0, 10010, 0)
    # 0.1% of the 10,000 datapath packets is the limit, as for the hosts'
    # receive losses: 10 pass, 11 do not.
    assert health_between(start, end, [], send_losses=10)['trusted']
    health = health_between(start, end, [], send_losses=11)
    assert health['endpoint_send_losses'] == 11 and not health['trusted']
    assert health['reasons'] == ['the endpoints could not send 11 packets (a '
                                 'full socket buffer or host queue)']


def test_a_send_refused_by_a_down_port_is_the_fault_not_the_emulator():
    # As root, in a scratch namespace: a veth port (what a host's NIC port
    # is) with an address, taken down, refuses a send toward its prefix with
    # one of PORT_DOWN_ERRNOS.
    if os.geteuid() != 0:
        pytest.skip('needs root (a network namespace)')
    from testbed.nic.socket_runtime import PORT_DOWN_ERRNOS
    script = '''
import errno, socket, subprocess
run = lambda *a: subprocess.run(a, check=True)
run('ip', 'link', 'add', 'd0', 'type', 'veth', 'peer', 'name', 'd1')
run('ip', 'link', 'set', 'd0', 'up')
run('ip', '-6', 'addr', 'add', 'fd00:99::1/64', 'dev', 'd0', 'nodad')
run('ip', 'link', 'set', 'd0', 'down')
s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
try:
    s.sendto(b'x', ('fd00:99::2', 4791))
except OSError as err:
    print(err.errno)
'''
    done = subprocess.run(['unshare', '--net', sys.executable, '-c', script],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) in PORT_DOWN_ERRNOS, done.stdout
