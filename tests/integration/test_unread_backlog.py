"""The health gate's unread backlog on a real fabric: what waits in
ovs-vswitchd's packet sockets (`system` switch ports) or AF_XDP receive rings
(`afxdp` ones) before it forwards it is read as a wait
(testbed/workload/unread_backlog.py), within the gate's limit while the
datapath keeps up and past it once the offered load outruns it."""
from __future__ import annotations

from contextlib import ExitStack

from testbed.bench.emulator_scale import STAGED, Probe, probed_fabric, send_paced
from testbed.bench.harness import scenario
from testbed.fabric.faults.injector import FaultInjector
from testbed.fabric.net import FabricNet
from testbed.fabric.vswitchd_sockets import vswitchd_pid, xsk_rx_rings
from testbed.workload.emulation_health import (UNREAD_WAIT_LIMIT_S, HealthSample,
                                               health_between)
from testbed.workload.runner import TransportRunner, fabric_spec
from testbed.workload.unread_backlog import SAMPLE_S, datapath_sockets, watched
from testbed.workload.workloads import build_workload

SPEC = 'fattree,k=4,planes=2'
SECONDS = 1.5
LIGHT_PPS = 100       # probe packets/s: light for any datapath
SMALL = 'leafspine,leaves=2,spines=2,hosts=1,planes=1'


def health_of_sending(probe: Probe, rate: float | None) -> dict:
    """The gate's verdict on `rate` packets/s (None: flat out) from the probe
    for SECONDS, the backlog sampled meanwhile as a run samples it."""
    with watched(probe.fab.mtu) as sampler:
        sampler.start()
        start = HealthSample.now()
        send_paced(probe, rate, SECONDS)
        backlog = sampler.stop()
    # One sample every SAMPLE_S (a process of its own), less its start-up.
    assert backlog is not None and backlog.samples >= SECONDS / SAMPLE_S / 2, backlog
    # The probe sends one way; its packets cross a path's ports twice per
    # round trip, as a packet and its acknowledgement would.
    return health_between(start, HealthSample.now(), [], backlog=backlog,
                          round_trip_ports=2 * probe.hops)


def test_packets_waiting_unread_in_the_datapaths_sockets_are_a_wait_the_gate_limits():
    with ExitStack() as stack:
        fab, probe = probed_fabric(SMALL, 'h1', 'h2', 'system', stack)
        plan = fab.plan
        # Every switch end of every link (switch to switch, switch to host) is
        # a `system` port read through a packet socket of ovs-vswitchd's.
        ports = 2 * len(plan.links) + len(plan.host_ports)
        assert len(datapath_sockets()) == ports
        # Light: a packet waits at each port for ovs-vswitchd's main thread
        # to come round to its socket, at worst one turn of its loop, and a
        # turn goes over every bridge and port of the datapath. On the k=4
        # fat-tree (40 bridges, 160 ports) a turn took ~2 ms on one machine of
        # this kind even at 100 packets/s: 12-19 ms a round trip, past the
        # gate's limit, rightly (another machine of the kind read under it).
        # On 4 bridges and 10 ports a turn is a sixteenth of that.
        light = health_of_sending(probe, LIGHT_PPS)
    assert light['datapath_unread_wait_s'] < UNREAD_WAIT_LIMIT_S, light
    assert light['trusted'], light['reasons']


# MRC's 8-host permutation at 40 Mbit/s offers ~265k data packet-hops/s,
# ~400k with its SACKs: 2.6x what the k=4 fat-tree's `system` ports forward
# without loss (~100k, BENCHMARKS.md section 6).
PERMUTATION_MBIT = 40.0
PERMUTATION_HOSTS = ['h1', 'h2', 'h3', 'h4', 'h9', 'h10', 'h11', 'h12']


def permutation_health(fab: FabricNet, topology: str) -> dict:
    """The gate's verdict on MRC's permutation past what the datapath
    forwards: the sockets or rings fill and every packet queues where the
    fabric models no queue."""
    sc = scenario('unread-backlog', topology, PERMUTATION_MBIT,
                  {'type': 'permutation', 'hosts': PERMUTATION_HOSTS, 'size_mb': 4.0},
                  duration_s=6.0, seed=500)
    run = TransportRunner(sc, 'mrc', 0, lambda _m: None).execute(
        lambda plan, rng: build_workload(sc.workload, plan.hosts, plan, rng),
        lambda f, log: FaultInjector(f, log), fab)
    return run.health


def assert_read_as_a_wait_past_the_limit(health: dict) -> None:
    """The backlog's sampler read the wait, and the gate names it."""
    assert health['datapath_unread_wait_s'] > UNREAD_WAIT_LIMIT_S, health
    assert any('unread in the datapath' in r for r in health['reasons']), health
    assert not health['trusted']


def test_a_permutation_past_what_the_system_ports_forward_is_not_trusted():
    with FabricNet(fabric_spec(SPEC, PERMUTATION_MBIT)) as fab:
        health = permutation_health(fab, SPEC)
    assert_read_as_a_wait_past_the_limit(health)


def test_frames_waiting_in_the_af_xdp_rings_are_read_the_same_way():
    """Light load, then past what the PMD thread forwards, on one AF_XDP
    fat-tree (a build of its 160 ports takes ~40 s)."""
    with ExitStack() as stack:
        fab, probe = probed_fabric(SPEC, 'h1', 'h9', STAGED, stack)
        plan = fab.plan
        assert datapath_sockets() == frozenset()    # no port read through a packet socket
        pid = vswitchd_pid()
        assert pid is not None
        rings = xsk_rx_rings(pid)
        try:
            # One AF_XDP socket, one receive queue, per switch port.
            assert len(rings) == 2 * len(plan.links) + len(plan.host_ports)
        finally:
            for ring in rings:
                ring.close()
        # The same light load on the fat-tree: the PMD thread polls every
        # ring at every turn whether or not a packet came, and empties each.
        light = health_of_sending(probe, LIGHT_PPS)
        # Flat out: the PMD thread does a switch hop's work per packet at
        # each of the path's `hops` switches for every send of the one sender,
        # so the rings fill whatever the machine (here: 179k packets/s
        # offered, 68k forwarded, BENCHMARKS.md section 6).
        flooded = health_of_sending(probe, None)
    assert light['datapath_unread_wait_s'] is not None, light
    assert light['datapath_unread_wait_s'] < UNREAD_WAIT_LIMIT_S, light
    assert light['trusted'], light['reasons']
    assert_read_as_a_wait_past_the_limit(flooded)
