"""What the two NIC-port tests share: one MRC transfer h1 -> h16 on a
2-plane fat-tree, a port of one host failing on plane 1 mid-transfer and
returning on its own clock, and the loop that runs the transfer and notes
the sender's plane-1 timeouts up to the turn that heard of the fault
(test_nic_port_events: the sender's own port; test_peer_port_status: the
receiver's, told to the sender by a Port Status Update)."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from testbed.fabric.faults.injector import FaultInjector
from testbed.nic.outgoing import Outgoing
from testbed.nic.socket_runtime import Nic
from testbed.workload.endpoint_flows import DATA_OPCODES, EndpointFlows

SPEC = 'fattree,k=4,planes=2,bw=20'
SRC, DST = 'h1', 'h16'          # pod 0 to pod 3: 4 paths per plane
PLANE = 1
SIZE = 16 << 20                 # >= 3 s at 2 x 20 Mbit/s: outlives the outage
DOWN_AT_S, UP_AT_S = 0.8, 1.6   # into the transfer
TIMEOUT_S = 120


@dataclass
class Watch:
    """What a test reads off the run: the sender's data packets (loop turn
    time, plane) and its plane-1 timeouts before it heard of the fault."""
    data_sent: list[tuple[float, int]] = field(default_factory=list)
    timeouts_before_heard: int | None = None


def tap_sender(driver: EndpointFlows, watch: Watch,
               also: Callable[[float, Nic, Outgoing], None] | None = None) -> None:
    """Record the sender's data packets in `watch`, show every packet to
    `also`, then count as before."""
    count = driver.runtime.tap

    def tap(now: float, nic: Nic, pkt: Outgoing) -> None:
        if nic.endpoint.addr == SRC and pkt.data[0] in DATA_OPCODES:
            watch.data_sent.append((now, pkt.plane))
        elif also is not None:
            also(now, nic, pkt)
        if count is not None:
            count(now, nic, pkt)
    driver.runtime.tap = tap


def nic_of(driver: EndpointFlows, host: str) -> Nic:
    return next(n for n in driver.runtime.nics if n.endpoint.addr == host)


def fault_later(inj: FaultInjector, t0: float, host: str) -> threading.Thread:
    """`host`'s port fails and returns on its own clock, as a real port
    does: the endpoint loop keeps running while the fault is applied."""
    def act() -> None:
        time.sleep(max(0.0, t0 + DOWN_AT_S - time.monotonic()))
        inj.nic_port_down(host, PLANE)
        time.sleep(max(0.0, t0 + UP_AT_S - time.monotonic()))
        inj.nic_port_up(host, PLANE)
    thread = threading.Thread(target=act, daemon=True)
    thread.start()
    return thread


@contextmanager
def transfer_across_a_port_fault(
        fab, host: str, tap: Callable[[EndpointFlows], None],
        heard: Callable[[EndpointFlows], bool]
) -> Iterator[tuple[EndpointFlows, FaultInjector, int | None]]:
    """Run the transfer to its end across `host`'s port fault, with `tap`
    installed on the runtime; yields the driver, the injector and the
    sender's plane-1 timeouts before the loop turn in which `heard` first
    held (None: it never did). Undoes the fault and closes the driver."""
    driver = EndpointFlows(fab, 'mrc', seed=5)
    inj = FaultInjector(fab)
    try:
        driver.prepare([(SRC, DST, SIZE)])
        tap(driver)
        driver.ev_events()                       # the profiles: not read here
        t0 = time.monotonic()
        driver.start(1, SRC, DST, SIZE)
        thread = fault_later(inj, t0, host)
        qp = driver.connections[(SRC, DST)].requester
        deadline = time.monotonic() + TIMEOUT_S
        before_heard = None
        while driver.status(1) == 'running':
            assert time.monotonic() < deadline
            before = qp.counters.timeout_losses_by_plane.get(PLANE, 0)
            driver.poll()
            if before_heard is None and heard(driver):
                before_heard = before
        thread.join(timeout=10)
        yield driver, inj, before_heard
    finally:
        inj.restore_all()
        driver.close()
