"""The routed fabric mode on real bridges: ECMP select groups that hash the
UDP source port, each switch from its own basis, reconvergence after the
controller's convergence delay, and an RC QP on it."""
import socket
import subprocess
import time

from testbed.fabric.faults.injector import FaultInjector
from testbed.fabric.netns import inside
from testbed.fabric.verify import REVALIDATE_S, verify_fabric
from testbed.kernel.transports import KernelTransports
from testbed.nic.retry_timer import time_to_error
from testbed.workload.endpoint_flows import EndpointFlows

# Two leaves, four spines, one plane: every leaf-to-leaf flow has four
# equal-cost next hops at its first switch.
SPEC = 'leafspine,leaves=2,spines=4,hosts=1,planes=1'
SRC, DST = 'h1', 'h2'
SPORTS = range(50000, 50032)
PACKETS_PER_PORT = 5
DELAY_S = 1.0
# After the delay the controller sends its group mods at once; OVS then
# revalidates the datapath flows that use the group, at the latest after its
# max-revalidator interval (REVALIDATE_S, 500 ms by default): the repaired
# route carries traffic within DELAY_S + REVALIDATE_S (+ one send interval)
# of the report.
SEND_INTERVAL_S = 0.005
RC_BYTES = 2 << 20
# Longer than the verbs retry count at the QP's timer (8 T, 1.6 s; asserted
# in the test from the QP's own timer), far shorter than the deployed budget
# it stands for (testbed/nic/deployed_ack_timer.py): minutes on this clock.
PAST_RETRY_CNT_DELAY_S = 3.0


def tx_packets(intf: str) -> int:
    with open('/sys/class/net/%s/statistics/tx_packets' % intf) as f:
        return int(f.read())


def uplinks(fab) -> dict[str, str]:
    """The first switch's spine neighbours -> its interface toward each."""
    leaf = fab.plan.host_ports[(SRC, 1)].switch
    node = fab.net[leaf]
    return {spine: node.intfs[port].name
            for spine, port in fab.plan.neighbours(leaf).items()}


def udp_socket(fab, host: str, sport: int | None = None) -> socket.socket:
    with inside(fab.host_pid(host)):
        s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.bind((fab.plan.host_ports[(host, 1)].address, sport or 4791))
    return s


def spine_of_each_port(fab) -> dict[int, list[str]]:
    """Send a few packets per UDP source port; the uplinks each port's
    packets left by (counted on the switch's ports)."""
    links = uplinks(fab)
    dst = fab.plan.host_ports[(DST, 1)].address
    taken = {}
    for sport in SPORTS:
        before = {s: tx_packets(i) for s, i in links.items()}
        with udp_socket(fab, SRC, sport) as s:
            for _ in range(PACKETS_PER_PORT):
                s.sendto(b'x' * 64, (dst, 4791))
        time.sleep(0.02)
        taken[sport] = [s for s, i in links.items()
                        if tx_packets(i) - before[s] >= PACKETS_PER_PORT]
    return taken


def test_udp_source_ports_spread_over_the_ecmp_next_hops(fabric_factory):
    fab = fabric_factory(SPEC)
    rx = udp_socket(fab, DST)
    rx.setblocking(False)
    taken = spine_of_each_port(fab)
    # Every port's packets leave on one uplink (a flow is never split)...
    assert all(len(spines) == 1 for spines in taken.values()), taken
    # ...and 32 ports over 4 next hops leave none unused unless the hash
    # ignored the port (OVS's default dp_hash does: every port one bucket).
    used = {spines[0] for spines in taken.values()}
    assert used == set(uplinks(fab)), taken
    time.sleep(0.1)
    got = 0
    while True:
        try:
            rx.recv(2048)
        except BlockingIOError:
            break
        got += 1
    rx.close()
    assert got == len(SPORTS) * PACKETS_PER_PORT


# Three tiers: a cross-pod flow meets an ECMP choice at its edge switch and
# again at the aggregation switch (testbed.controller.ofp_groups).
FAT_TREE = 'fattree,k=4,planes=1'
CROSS_POD = (('h1', 'h9'), ('h2', 'h10'), ('h3', 'h11'), ('h4', 'h12'))
FAT_TREE_SPORTS = range(50000, 50016)


def core_links(fab, pod_host: str) -> dict[tuple[str, str], str]:
    """(aggregation switch, core) -> the aggregation switch's interface
    toward that core, for the pod of `pod_host`."""
    plan = fab.plan
    edge = plan.host_ports[(pod_host, 1)].switch
    out = {}
    for agg in plan.neighbours(edge):
        if plan.switches[agg].tier != 'agg':
            continue
        for core, port in plan.neighbours(agg).items():
            if plan.switches[core].tier == 'core':
                out[(agg, core)] = fab.net[agg].intfs[port].name
    return out


def test_ecmp_hashes_cross_pod_flows_onto_every_core_link(fabric_factory):
    """Each switch hashes from a basis of its own, as real switches do: with
    one basis the aggregation switch repeats the edge switch's bucket index
    and only two of a pod's four core links ever carry routed traffic (hash
    polarization). 64 distinct 5-tuples from pod 0 to pod 2: with each
    switch's choice independent and uniform over two next hops, a given
    core link is left unused with probability (3/4)^64, about 1e-8, so every
    one of them carries some; with one basis, half of them carry none."""
    fab = fabric_factory(FAT_TREE)
    links = core_links(fab, 'h1')
    assert len(links) == 4
    before = {k: tx_packets(i) for k, i in links.items()}
    for src, dst in CROSS_POD:
        address = fab.plan.host_ports[(dst, 1)].address
        for sport in FAT_TREE_SPORTS:
            with udp_socket(fab, src, sport) as s:
                for _ in range(PACKETS_PER_PORT):
                    s.sendto(b'x' * 64, (address, 4791))
    time.sleep(0.2)
    carried = {k: tx_packets(i) - before[k] for k, i in links.items()}
    # A link some flow took carries all of that flow's packets.
    assert all(n >= PACKETS_PER_PORT for n in carried.values()), carried
    assert sum(carried.values()) >= len(CROSS_POD) * len(FAT_TREE_SPORTS) * PACKETS_PER_PORT


def arrivals_across(fab, injector, sport: int, spine: str,
                    leaf: str) -> tuple[list[float], float]:
    """Stream one UDP flow, then take its uplink down: the arrival times from
    the moment the fault began to be applied, and how long applying it took
    (the link goes down, and the controller hears of it and starts its
    delay, somewhere in that time)."""
    dst = fab.plan.host_ports[(DST, 1)].address
    rx = udp_socket(fab, DST)
    rx.setblocking(False)
    times = []
    t_fault = time.monotonic() + 0.3
    t_end = t_fault + DELAY_S + REVALIDATE_S + 0.5
    faulted, apply_s = False, 0.0
    with udp_socket(fab, SRC, sport) as tx:
        while time.monotonic() < t_end:
            if not faulted and time.monotonic() >= t_fault:
                t_fault, faulted = time.monotonic(), True
                injector.apply('link_down', a=leaf, b=spine)
                apply_s = time.monotonic() - t_fault
            tx.sendto(b'x' * 64, (dst, 4791))
            time.sleep(SEND_INTERVAL_S)
            try:
                while True:
                    rx.recv(2048)
                    times.append(time.monotonic())
            except BlockingIOError:
                pass
    rx.close()
    return [t - t_fault for t in times], apply_s


def test_a_failed_link_is_routed_around_after_the_convergence_delay(fabric_factory):
    fab = fabric_factory(SPEC, convergence_delay_s=DELAY_S)
    taken = spine_of_each_port(fab)
    leaf = fab.plan.host_ports[(SRC, 1)].switch
    sport, (spine,) = next(iter(taken.items()))
    injector = FaultInjector(fab)
    try:
        seen, apply_s = arrivals_across(fab, injector, sport, spine, leaf)
        # Nothing arrives between the fault and the controller's repair: the
        # flow's bucket points at the dead port until the delay has passed,
        # counted from when the controller heard of the fault, which is no
        # earlier than the start of applying it (t = 0). What was sent before
        # the link went down, by the end of applying it, may still land...
        gap = [t for t in seen if apply_s + 2 * SEND_INTERVAL_S < t < DELAY_S]
        assert not gap, (apply_s, gap)
        # ...and the repaired group carries it again soon after (heard by the
        # end of applying it).
        after = [t for t in seen if t >= DELAY_S]
        print('link_down applied in %.3f s, first arrival after the delay at %.3f s'
              % (apply_s, after[0] if after else float('nan')))
        assert after and after[0] < apply_s + DELAY_S + REVALIDATE_S + \
            2 * SEND_INTERVAL_S, (apply_s, after[:3])
        log = fab.routing_events()
        heard = [e for e in log if e['event'] == 'port_status' and not e['up']]
        changed = [e for e in log if e['event'] == 'group_change']
        assert {e['switch'] for e in heard} == {leaf, spine}   # both ends
        assert changed and min(e['monotonic'] for e in changed) - \
            min(e['monotonic'] for e in heard) >= DELAY_S
        injector.apply('link_up', a=leaf, b=spine)
        time.sleep(DELAY_S + REVALIDATE_S)
        back = spine_of_each_port(fab)
        assert spine in {s[0] for s in back.values()}, back
    finally:
        injector.restore_all()


def start_rc_and_fail_its_link(fab) -> tuple[EndpointFlows, FaultInjector, float]:
    """An RC write from SRC to DST on the routed fabric; once a quarter is
    through, the one uplink its packets take goes down. Returns the driver,
    the injector and the time of the fault."""
    driver = EndpointFlows(fab, 'rc', seed=3, fabric_mode='routed')
    injector = FaultInjector(fab)
    links = uplinks(fab)
    before = {spine: tx_packets(i) for spine, i in links.items()}
    driver.prepare([(SRC, DST, RC_BYTES)])
    driver.start(0, SRC, DST, RC_BYTES)
    while driver.status(0) == 'running' and driver.delivered(0) < RC_BYTES // 4:
        driver.poll()
    # The QP's packets all take one spine (its UDP source port hashes to
    # one bucket): fail that link under the running write.
    sent = {spine: tx_packets(i) - before[spine] for spine, i in links.items()}
    used = max(sent, key=sent.get)
    assert sorted(sent.values())[-2] < sent[used] // 10, sent
    injector.apply('link_down', a=fab.plan.host_ports[(SRC, 1)].switch, b=used)
    return driver, injector, time.monotonic()


def finish(driver: EndpointFlows, limit_s: float) -> None:
    t0 = time.monotonic()
    while driver.status(0) == 'running':
        assert time.monotonic() - t0 < limit_s
        driver.poll()


def retry_budget_s(driver: EndpointFlows) -> float:
    """Seconds from the last progress to the QP error on a dead path."""
    timer = driver.connections[(SRC, DST)].requester.requester.retry
    return timer.give_up_s or time_to_error(timer.base_s, timer.retry)


def assert_one_stall(driver: EndpointFlows) -> None:
    """The QP stalled, and that stood for one deployed ACK timeout: the
    compressed retries may meet the fabric mid-repair (routes moved, OVS
    still revalidating) and stall again, all before the deployed retry."""
    counters = driver.transport_counters()
    assert counters['ack_timer_stalls'] >= 1, counters
    assert counters['ack_timer_hardware_timeouts'] == 1, counters
    assert counters['ack_timer_stalled_at_end'] == 0
    assert driver.deployed_ack_timer()['timeout_s'] == 4.295


def test_an_rc_qp_survives_a_convergence_shorter_than_its_retry_budget(
        fabric_factory):
    fab = fabric_factory(SPEC, convergence_delay_s=DELAY_S)
    driver, injector, _ = start_rc_and_fail_its_link(fab)
    try:
        assert retry_budget_s(driver) > DELAY_S + REVALIDATE_S
        finish(driver, 120)
        assert driver.status(0) == 'done', driver.error(0)
        assert driver.corrupt_bytes(0) == 0
        assert [e for e in fab.routing_events() if e['event'] == 'group_change']
        assert_one_stall(driver)
    finally:
        injector.restore_all()
        driver.close()


def test_an_rc_qp_outlasts_its_verbs_retry_count_as_deployed(fabric_factory):
    """A repair after more than retry_cnt + 1 timeouts of the QP's
    (compressed) timer: the QP keeps retrying every T, as a deployed one
    would still be in its first 4.3 s timeout, resumes once the routes move,
    and counts one stall."""
    fab = fabric_factory(SPEC, convergence_delay_s=PAST_RETRY_CNT_DELAY_S)
    driver, injector, _ = start_rc_and_fail_its_link(fab)
    try:
        timer = driver.connections[(SRC, DST)].requester.requester.retry
        assert time_to_error(timer.base_s, timer.retry) < PAST_RETRY_CNT_DELAY_S \
            < retry_budget_s(driver)
        finish(driver, 120)
        assert driver.status(0) == 'done', driver.error(0)
        assert driver.corrupt_bytes(0) == 0
        assert driver.transport_counters()['retry_timeouts'] > timer.retry.linear_cnt + 1
        assert_one_stall(driver)
    finally:
        injector.restore_all()
        driver.close()


def test_an_rc_connection_splits_a_flow_over_its_qps(fabric_factory):
    """16 QPs per connection (the MRC paper's RoCE comparison): the write is
    split into 16 parts, one per QP, each with its own UDP source port, so
    the leaf hashes each on its own: 16 draws over 4 spines leave every one
    unused with probability 4 x (3/4)^16 (4 %), all on one with 4^-15, so
    at least two spines carry parts; the flow completes intact."""
    fab = fabric_factory(SPEC)
    driver = EndpointFlows(fab, 'rc', seed=3, fabric_mode='routed',
                           qps_per_connection=16)
    links = uplinks(fab)
    before = {spine: tx_packets(i) for spine, i in links.items()}
    try:
        driver.prepare([(SRC, DST, RC_BYTES)])
        event = driver.start(0, SRC, DST, RC_BYTES)
        finish(driver, 120)
        assert driver.status(0) == 'done', driver.error(0)
        assert driver.corrupt_bytes(0) == 0 and driver.delivered(0) == RC_BYTES
    finally:
        driver.close()
    qps = event['qps']
    assert len(qps) == 16 and sum(q['bytes'] for q in qps) == RC_BYTES
    assert len({q['pinned_path']['sport'] for q in qps}) == 16
    assert event['qpn'] == qps[0]['qpn']
    sent = {spine: tx_packets(i) - before[spine] for spine, i in links.items()}
    busiest = max(sent.values())
    assert sum(n >= busiest // 10 for n in sent.values()) >= 2, sent


def test_verify_probes_the_routed_mode_around_a_converged_failure(fabric_factory):
    fab = fabric_factory(SPEC, convergence_delay_s=DELAY_S)
    report = verify_fabric(fab, fabric='routed')
    # One flow per equal-cost path of each pair: 4 spines, both directions.
    assert report.ok and report.paths_total == 2 * 4, report
    leaf = fab.plan.host_ports[(SRC, 1)].switch
    spine = sorted(uplinks(fab))[0]
    fab.set_link(leaf, spine, up=False)
    time.sleep(DELAY_S + REVALIDATE_S)
    assert verify_fabric(fab, fabric='routed').ok


def test_kernel_tcp_on_the_routed_fabric_needs_no_seg6_route(fabric_factory):
    fab = fabric_factory(SPEC)
    with KernelTransports(fab, routed=True) as kt:
        flow = kt.start_flow(SRC, DST, 1 << 20, 'tcp')
        assert kt.run(lambda: flow.finished, timeout_s=30)
        assert flow.completed, flow.error
        assert flow.sha256_received == flow.sha256_sent is not None
        routes = subprocess.run(['nsenter', '--net=/proc/%d/ns/net' % fab.host_pid(SRC),
                                 'ip', '-6', 'route', 'show', 'table', 'all'],
                                capture_output=True, text=True, check=True).stdout
        assert 'seg6 ' not in routes.replace('seg6local', '')


def seg6_routes(fab, host: str) -> str:
    routes = subprocess.run(['nsenter', '--net=/proc/%d/ns/net' % fab.host_pid(host),
                             'ip', '-6', 'route', 'show', 'table', 'all'],
                            capture_output=True, text=True, check=True).stdout
    return routes.replace('seg6local', '')


# Two planes, each leaf-to-leaf link shaped: one subflow cannot carry the
# transfer's rate alone, so MPTCP's scheduler keeps both busy.
MPTCP_SPEC = 'leafspine,leaves=2,spines=2,hosts=1,planes=2,bw=5'
MPTCP_BYTES = 2 << 20


def test_kernel_mptcp_on_the_routed_fabric_opens_a_subflow_per_plane(
        fabric_factory):
    fab = fabric_factory(MPTCP_SPEC)

    def switch_port(host: str, plane: int) -> str:
        port = fab.plan.host_ports[(host, plane)]
        return fab.net[port.switch].intfs[port.switch_port].name

    def data_bytes() -> dict[int, tuple[int, int]]:
        """plane -> (bytes the sender's port sent into it, bytes the
        receiver's port got out of it), from the switches' ports."""
        return {p: (byte_count(switch_port(SRC, p), 'rx'),
                    byte_count(switch_port(DST, p), 'tx'))
                for p in fab.plan.planes}
    before = data_bytes()
    with KernelTransports(fab, routed=True) as kt:
        flow = kt.start_flow(SRC, DST, MPTCP_BYTES, 'mptcp')
        assert kt.run(lambda: flow.finished, timeout_s=60)
        assert flow.completed, flow.error
        assert flow.sha256_received == flow.sha256_sent is not None
        assert 'seg6 ' not in seg6_routes(fab, SRC)
    after = data_bytes()
    # Each plane carried its share end to end: both are shaped alike, so in
    # steady state each carries about half; a fifth leaves the join's late
    # start (one handshake after the first subflow's) and the scheduler's
    # preference for the lower-RTT subflow room.
    for plane in fab.plan.planes:
        sent, got = (b - a for a, b in zip(before[plane], after[plane]))
        assert sent >= MPTCP_BYTES / 5 and got >= MPTCP_BYTES / 5, \
            (plane, before, after)


def byte_count(intf: str, direction: str) -> int:
    with open('/sys/class/net/%s/statistics/%s_bytes' % (intf, direction)) as f:
        return int(f.read())
