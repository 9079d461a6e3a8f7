"""Where the emulation runs on the machine's cores: everything that decides it lives here.

On an `afxdp=1` fabric (testbed.fabric.port_stage) two threads carry every packet: OVS's
PMD thread, which polls the switch ports, and the endpoint loop, which runs every NIC of
the trial. Left to the scheduler beside other work, each waits for a CPU often enough for
its packets' timing to be the scheduler's (the health gate's WAIT_LIMIT). So such a fabric
puts the PMD thread on one core (`other_config:pmd-cpu-mask`) and the endpoint loop on the
others, at ovs-vswitchd's own priority (nice -10, as Open vSwitch's start-up script runs
it): a process of ordinary priority beside them then takes what they leave.

Decided by measurement: the default scenario (MRC, `fattree,k=4,planes=2,mtu=3500,afxdp=1`,
10 Mbit/s) on this 2-core machine beside `python3 -c 'while True: pass'`, share of the run
each waited for a CPU (endpoint loop / ovs-vswitchd):
  neither           34 % / 15 %   NOT TRUSTED
  nice -10 only     16 % / 27 %   NOT TRUSTED (the two then wait for each other)
  pinned only       15 % / 12 %   NOT TRUSTED
  pinned + nice     4.6 % / 6.8 % trusted
The kernel datapath and `system` ports are left alone: their forwarding runs in the
kernel's softirq and ovs-vswitchd's main thread wherever the kernel puts them (with
`system` ports that thread alone took ~0.9 of a core at this load, and no placement
brought the run under the gate's limits beside a busy core).
"""
from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

ENDPOINT_NICE = -10         # ovs-vswitchd's (Open vSwitch's ovs-ctl: --ovs-vswitchd-priority)


@dataclass(frozen=True)
class Placement:
    pmd_cores: frozenset[int]
    endpoint_cores: frozenset[int]

    @property
    def pmd_cpu_mask(self) -> str:
        """OVS's `pmd-cpu-mask`: a hexadecimal core mask."""
        return '0x%x' % sum(1 << core for core in self.pmd_cores)

    def describe(self) -> dict:
        return {'pmd_cores': sorted(self.pmd_cores),
                'endpoint_cores': sorted(self.endpoint_cores),
                'endpoint_nice': ENDPOINT_NICE}


def plan(cores: frozenset[int] | None = None) -> Placement | None:
    """The PMD thread on the lowest of the cores this process may use, the endpoint loop on
    the rest; None (nothing pinned) with fewer than two."""
    usable = sorted(cores if cores is not None else os.sched_getaffinity(0))
    if len(usable) < 2:
        return None
    return Placement(frozenset(usable[:1]), frozenset(usable[1:]))


@contextmanager
def endpoint_loop(placement: Placement | None) -> Iterator[None]:
    """Run the calling thread (the endpoint loop, and what it starts) on the placement's
    endpoint cores at ENDPOINT_NICE; both restored on leaving. Without the privilege to
    raise its priority the thread is only pinned: the health gate reports what it waited."""
    if placement is None:
        yield
        return
    thread = threading.get_native_id()
    cores, nice = os.sched_getaffinity(0), os.getpriority(os.PRIO_PROCESS, thread)
    os.sched_setaffinity(0, placement.endpoint_cores)      # 0: the calling thread
    try:
        os.setpriority(os.PRIO_PROCESS, thread, ENDPOINT_NICE)
    except PermissionError:
        pass
    try:
        yield
    finally:
        os.sched_setaffinity(0, cores)
        try:
            os.setpriority(os.PRIO_PROCESS, thread, nice)
        except PermissionError:
            pass
