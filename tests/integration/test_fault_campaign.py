"""A fault campaign: 24 random fault timelines (links, switches, planes,
flaps, gray loss, NIC ports) against MRC writes on one real fabric. Every
write must complete with every byte intact, or end in a clear QP error when
no path at all was left; one still crawling after STUCK_AFTER_S is reported
stuck, and at least three quarters must complete."""
import random
import time

from testbed.fabric.probe import PathProber
from testbed.workload.endpoint_flows import EndpointFlows
from testbed.fabric.faults.injector import FaultInjector

TIMELINES = 24
SIZE = 1 << 20
SRC, DST = 'h1', 'h16'
# 70x the write's time on one plane at 20 Mbit/s (0.42 s): a write still
# running then is stuck, an outcome of its own (neither done nor a QP
# error), counted against the quota below. One timeline (a dead agg switch
# on one plane and the receiver's port on the other) crawls at ~30
# packets/s for 30-40 s: EVs through the dead port are found one timeout
# at a time, since no port-status event reaches the endpoint yet.
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


def test_random_fault_timelines(fabric_factory):
    fab = fabric_factory('fattree,k=4,planes=2,bw=20')
    rnd = random.Random(7)
    outcomes = []
    for n in range(TIMELINES):
        driver = EndpointFlows(fab, 'mrc', seed=n)
        injector = FaultInjector(fab)
        try:
            driver.prepare([(SRC, DST, SIZE)])
            driver.start(n, SRC, DST, SIZE)
            faults = [random_fault(rnd, fab.plan) for _ in range(rnd.randint(1, 3))]
            at = sorted(rnd.uniform(0, 0.3) for _ in faults)
            t0 = time.monotonic()
            while driver.status(n) == 'running':
                if time.monotonic() - t0 > STUCK_AFTER_S:
                    break
                while at and time.monotonic() - t0 >= at[0]:
                    at.pop(0)
                    kind, params = faults[len(faults) - len(at) - 1]
                    injector.apply(kind, **params)
                injector.due()
                driver.poll()
            status = driver.status(n)
            outcomes.append((faults, 'stuck' if status == 'running' else status,
                             driver.error(n)))
            assert driver.corrupt_bytes(n) == 0
            if driver.status(n) == 'failed':
                # Acceptable only when the faults left no path at all: the
                # probes (before anything is restored) must find none.
                assert driver.error(n) == 'retry counter exceeded'
                assert no_path_left(fab), outcomes[-1]
        finally:
            injector.restore_all()
            driver.close()
    for faults, status, error in outcomes:
        print('%-8s %s' % (status, ', '.join(
            '%s(%s)' % (k, ','.join(str(v) for v in p.values()))
            for k, p in faults)))
    done = sum(status == 'done' for _, status, _ in outcomes)
    assert done >= TIMELINES * 3 // 4, outcomes
