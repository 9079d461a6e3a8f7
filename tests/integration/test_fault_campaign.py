"""A fault campaign: 24 random fault timelines (links, switches, planes,
flaps, gray loss, NIC ports) against MRC writes on one real fabric. Every
write must complete with every byte intact, or end in a clear QP error when
no path at all was left; one still crawling after STUCK_AFTER_S is stuck,
which is a failure unless, again, no path was left. Every drawn fault is
applied while the write still has data in flight (checked as it is
applied)."""
import random
import time

import pytest

from testbed.fabric.probe import PathProber
from testbed.workload.endpoint_flows import EndpointFlows
from testbed.fabric.faults.injector import FaultInjector
from testbed.nic.emulated_timescale import DATA_FRAME_BYTES, DATA_PAYLOAD_BYTES
from tests.integration.time_limits import BASE_S

TIMELINES = 24
SIZE = 2 << 20
SRC, DST = 'h1', 'h16'
RATE_BPS = 20e6
# The shortest time the write can take: every payload byte in full MRC
# frames over both of the sender's 20 Mbit/s ports, nothing lost (2 MiB:
# 1,533 frames of 1,510 bytes, 0.46 s). No write can finish sooner, so a
# fault drawn before FAULTS_BY_S always lands while data is in flight; the
# 0.16 s left covers the loop's own latency between a fault's time and its
# injection (one poll turn, milliseconds). The loop checks it anyway.
MIN_WRITE_S = -(-SIZE // DATA_PAYLOAD_BYTES) * DATA_FRAME_BYTES * 8 / (
    2 * RATE_BPS)
FAULTS_BY_S = 0.3
# 32x the write's time on one plane (0.93 s): a write still running then
# is stuck, neither done nor a QP error. While one path is left MRC moves
# every EV onto the paths that carry (the dead ones found a timeout each), so
# it finishes within a few times its one-plane time; with none left its retry
# budget errors the QP. Stuck is so a failure where a path was left. Before
# the Port Status Update one timeline (a
# dead agg switch on one plane and the receiver's port on the other)
# crawled at ~30 packets/s, the sender finding the dead port's EVs one
# timeout at a time; told by the receiver, it now completes.
STUCK_AFTER_S = 30


def random_fault(rnd, plan):
    """(apply, describe) of one random fault on the fabric."""
    links = [(l.a, l.b) for l in plan.links]
    a, b = rnd.choice(links)
    switch = rnd.choice(sorted(plan.switches))
    choices = [
        ('link_down', {'a': a, 'b': b}),
        ('switch_down', {'name': switch}),
        ('plane_down', {'plane': rnd.choice(plan.planes)}),
        ('nic_port_down', {'host': rnd.choice([SRC, DST]),
                           'plane': rnd.choice(plan.planes)}),
        ('gray_failure', {'a': a, 'b': b, 'loss_pct': rnd.choice([1, 5, 20])}),
        ('link_flap', {'a': a, 'b': b, 'period_s': 0.2, 'count': 3}),
    ]
    return rnd.choice(choices)


def no_path_left(fab) -> bool:
    prober = PathProber(fab.plan, {h: fab.host_pid(h) for h in (SRC, DST)})
    try:
        paths = fab.plan.all_paths(SRC, DST)
        return not prober.probe(paths).ok
    finally:
        prober.close()


def test_faults_are_drawn_within_the_shortest_write():
    assert FAULTS_BY_S < MIN_WRITE_S


@pytest.mark.slow
@pytest.mark.time_limit(BASE_S + TIMELINES * STUCK_AFTER_S,
                        why='every timeline cut at STUCK_AFTER_S')
def test_random_fault_timelines(fabric_factory):
    fab = fabric_factory('fattree,k=4,planes=2,bw=%g' % (RATE_BPS / 1e6))
    rnd = random.Random(7)
    outcomes = []
    for n in range(TIMELINES):
        driver = EndpointFlows(fab, 'mrc', seed=n)
        injector = FaultInjector(fab)
        try:
            driver.prepare([(SRC, DST, SIZE)])
            driver.start(n, SRC, DST, SIZE)
            faults = [random_fault(rnd, fab.plan) for _ in range(rnd.randint(1, 3))]
            at = sorted(rnd.uniform(0, FAULTS_BY_S) for _ in faults)
            applied = []
            t0 = time.monotonic()
            while driver.status(n) == 'running':
                if time.monotonic() - t0 > STUCK_AFTER_S:
                    break
                while at and time.monotonic() - t0 >= at[0] \
                        and driver.status(n) == 'running':
                    at.pop(0)
                    kind, params = faults[len(faults) - len(at) - 1]
                    # In flight: the write is not complete and not all of
                    # it has reached the receiver.
                    applied.append((round(time.monotonic() - t0, 3),
                                    driver.delivered(n)))
                    injector.apply(kind, **params)
                injector.due()
                driver.poll()
            status = driver.status(n)
            assert len(applied) == len(faults), (n, faults, applied, status)
            assert all(got < SIZE for _, got in applied), (n, applied)
            outcomes.append((faults, 'stuck' if status == 'running' else status,
                             driver.error(n)))
            assert driver.corrupt_bytes(n) == 0
            if status == 'failed':
                # Acceptable only when the faults left no path at all: the
                # probes (before anything is restored) must find none.
                assert driver.error(n) == 'retry counter exceeded'
                assert no_path_left(fab), outcomes[-1]
            if status == 'running':        # stuck (STUCK_AFTER_S says why)
                assert no_path_left(fab), outcomes[-1]
        finally:
            injector.restore_all()
            driver.close()
    for faults, status, error in outcomes:
        print('%-8s %s' % (status, ', '.join(
            '%s(%s)' % (k, ','.join(str(v) for v in p.values()))
            for k, p in faults)))
    assert len(outcomes) == TIMELINES, outcomes
