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

from testbed.fabric.cpu_placement import PMD_THREADS, threads
from testbed.workload.emulation_health import (
    ENDPOINT, UNREAD_WAIT_LIMIT_S, VSWITCHD, HealthSample, _run_queue_wait_ns,
    _vswitchd_forwarding_wait_ns, health_between)
from testbed.workload.unread_backlog import BacklogReading, frame_truesize
from testbed.workload.run_queue_waits import BUCKETS, WaitHistogram, bucket_of
from tests.unit.stand_in_threads import pmd_thread

SPIN_S = 0.6


def spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def run_and_wait_ns() -> tuple[int, int]:
    """How long this (main) thread has run on a CPU and waited, runnable, for one."""
    with open('/proc/self/task/%d/schedstat' % os.getpid()) as f:
        ran, waited = f.read().split()[:2]
    return int(ran), int(waited)


def waited_while_spinning(competitor: bool) -> float:
    """How long this thread waited for its one CPU per unit of time it ran, spinning
    SPIN_S beside a busy loop pinned to the same CPU (or alone)."""
    cpu = min(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    hog = None
    try:
        if competitor:
            hog = subprocess.Popen([sys.executable, '-c', 'import os; os.sched_setaffinity('
                                    '0, {%d})\nwhile True: pass' % cpu])
            time.sleep(0.2)                  # it runs before the measurement starts
        ran, waited = run_and_wait_ns()
        spin(SPIN_S)
        ran_now, waited_now = run_and_wait_ns()
        return (waited_now - waited) / max(ran_now - ran, 1)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
        os.sched_setaffinity(0, before)


def test_a_process_sharing_the_cpu_shows_as_wait():
    if not os.path.exists('/proc/self/task/%d/schedstat' % os.getpid()):
        pytest.skip('kernel without scheduler statistics')
    # CFS shares a CPU equally among the tasks runnable on it: with n others always
    # runnable, this loop waits n ms for each ms it runs. The busy loop is one more, so
    # it adds about 1 ms of wait per ms run to whatever the machine's other work on
    # that CPU adds alone (on a shared CI machine that waited 36 % of the wall clock
    # alone, and the wall-clock difference with the busy loop came to only 27 %): half
    # of that 1 ms is the bound.
    shared = waited_while_spinning(competitor=True)
    alone = waited_while_spinning(competitor=False)
    assert shared - alone > 0.5


def test_ovs_forwarding_wait_is_its_pmd_threads_where_it_has_them():
    """This process stands in for ovs-vswitchd: its main thread waits beside a busy loop
    while a thread named as OVS names a PMD thread sleeps. With no such thread every
    thread's wait counts (the main thread reads `system` ports); with one, only its wait
    does (AF_XDP ports: the main thread serves the control plane)."""
    if not os.path.exists('/proc/self/task/%d/schedstat' % os.getpid()):
        pytest.skip('kernel without scheduler statistics')
    pid = str(os.getpid())

    def forwarding_wait_while_spinning() -> float:
        """Share of SPIN_S the forwarding threads waited while the main thread waited
        at least half as long as it ran (as in the test above), so at least a third of
        SPIN_S."""
        before = _vswitchd_forwarding_wait_ns(pid)
        assert waited_while_spinning(competitor=True) > 0.5
        return (_vswitchd_forwarding_wait_ns(pid) - before) / 1e9 / SPIN_S

    assert threads(pid, PMD_THREADS) == []
    assert forwarding_wait_while_spinning() > 0.3
    with pmd_thread() as pmd:
        assert threads(pid, PMD_THREADS) == [str(pmd)]
        # The sleeping PMD thread waited for nothing; the main thread's wait is not
        # counted.
        assert forwarding_wait_while_spinning() < 0.05


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


def histogram(waits: dict[float, int]) -> WaitHistogram:
    """`waits`: wait length in seconds -> how many."""
    count, total = [0] * BUCKETS, [0] * BUCKETS
    for wait_s, n in waits.items():
        count[bucket_of(wait_s)] += n
        total[bucket_of(wait_s)] += int(n * wait_s * 1e9)
    return WaitHistogram(tuple(count), tuple(total))


def test_the_gate_limits_long_waits_not_wake_ups():
    """Where each wait was watched, the gate limits the share of the run in waits of 1 % of
    the base RTT or more: 13,000 wake-ups of 10 us in a second (13 % of it) delay no packet
    by a part of a 27.6 ms RTT that counts; 40 slices of 3 ms (12 %) do."""
    none = {ENDPOINT: WaitHistogram(), VSWITCHD: WaitHistogram()}
    start = HealthSample(0.0, 0.0, (1000, 600), 0, 10, 0, 0, 0, waits=none)
    wake_ups = replace(start, wall=1.0, process_cpu=0.3, ticks=(1400, 800), packets=5010,
                       vswitchd_wait_ns=int(0.13e9),
                       waits={ENDPOINT: WaitHistogram(),
                              VSWITCHD: histogram({10e-6: 13_000})})
    health = health_between(start, wake_ups, [], base_rtt_s=0.0276)
    assert health['vswitchd_cpu_wait'] == 0.13 and health['trusted'], health['reasons']
    assert health['long_cpu_wait_s'] == 0.000276
    assert health['long_cpu_wait'] == {ENDPOINT: 0.0, VSWITCHD: 0.0}
    slices = replace(wake_ups, vswitchd_wait_ns=int(0.12e9),
                     waits={ENDPOINT: WaitHistogram(), VSWITCHD: histogram({3e-3: 40})})
    health = health_between(start, slices, [], base_rtt_s=0.0276)
    assert health['long_cpu_wait'][VSWITCHD] == 0.12 and not health['trusted']
    assert health['reasons'] == [
        "ovs-vswitchd waited 12% of the run for a CPU in waits of 0.28 ms or more (the "
        "cores were busy: the fabric's own forwarding or other work)"]
    assert health['longest_cpu_wait_s'][VSWITCHD] == 2 ** 12 / 1e6
    # Not watched one by one (no eBPF): the sums are gated, wake-ups and all.
    unwatched = health_between(replace(start, waits=None), replace(wake_ups, waits=None),
                               [], base_rtt_s=0.0276)
    assert unwatched['long_cpu_wait'] is None and not unwatched['trusted']


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


def test_the_shares_are_of_the_window_between_the_samples():
    start = HealthSample(10.0, 1.0, (1000, 600), 0, 10, 0, 0, 0)
    end = HealthSample(12.5, 2.0, (1500, 900), 0, 5010, 0)
    health = health_between(start, end, [])
    assert health['window_s'] == 2.5
    assert health['endpoint_process_cpu'] == 0.4        # 1 s of CPU in 2.5 s


def test_the_gate_reads_the_datapaths_unread_backlog_as_a_wait():
    """Little's law over the samples: 100,000 packets read a second, 200 full frames
    waiting on average, so each waited 2 ms at each port; a round trip over 8 ports
    waited 16 ms, past the limit (the base RTT's 10 ms processing allowance). A
    tenth of that backlog is 1.6 ms: trusted."""
    start = HealthSample(0.0, 0.0, (1000, 600), 0, 0)
    end = HealthSample(1.0, 0.1, (1400, 800), 0, 100_000)
    frame = frame_truesize(1500)
    verdicts = {}
    for frames in (200, 20):
        backlog = BacklogReading(3 * frames * frame, 3, frame)
        verdicts[frames] = health_between(start, end, [], backlog=backlog,
                                          round_trip_ports=8)
        assert verdicts[frames]['datapath_unread_wait_s'] == pytest.approx(frames * 8e-5)
    assert UNREAD_WAIT_LIMIT_S == 0.01
    assert verdicts[20]['trusted'] and verdicts[20]['reasons'] == []
    assert verdicts[200]['reasons'] == [
        "packets waited 16.0 ms a round trip unread in the datapath's sockets (a queue "
        "the fabric does not model; limit 10.0 ms)"]
    # Nothing sampled, or no reading at all (the sampler found no socket or
    # ring of ovs-vswitchd's to read): not measured.
    for backlog in (BacklogReading(0, 0, frame), None):
        unseen = health_between(start, end, [], backlog=backlog, round_trip_ports=8)
        assert unseen['datapath_unread_wait_s'] is None and unseen['trusted']
