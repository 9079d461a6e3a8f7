"""A running fabric's switch ports re-opened as AF_XDP ports keep every path
working; a shaped fabric's qdiscs then no longer see what the switches send,
which is why the fabric builds `system` ports (ovs.PORT_TYPES)."""
from __future__ import annotations

import subprocess
import time
from contextlib import ExitStack
from pathlib import Path

import pytest

from testbed.bench.emulator_scale import capacity_point, probed_fabric
from testbed.fabric import ovs
from testbed.workload.emulation_health import HealthSample, health_between
from testbed.workload.endpoint_flows import EndpointFlows

AFXDP = 'afxdp-nonpmd'
SPEC = 'leafspine,leaves=2,spines=2,hosts=1,planes=1,bw=10'
SIZE = 256 << 10
TIMEOUT_S = 60

pytestmark = pytest.mark.skipif(AFXDP not in ovs.interface_types(),
                                reason='this Open vSwitch offers no AF_XDP ports')


def root_qdisc_packets(port: str) -> int:
    out = subprocess.run(['tc', '-s', 'qdisc', 'show', 'dev', port, 'root'],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split(' pkt')[0].rsplit(' ', 1)[1])


def tx_packets(port: str) -> int:
    with open('/sys/class/net/%s/statistics/tx_packets' % port) as f:
        return int(f.read())


def write_h1_to_h2(fab) -> float:
    """One MRC write of SIZE from h1 to h2, checked whole; its seconds."""
    driver = EndpointFlows(fab, 'mrc', seed=2)
    try:
        driver.prepare([('h1', 'h2', SIZE)])
        t0 = time.monotonic()
        driver.start(1, 'h1', 'h2', SIZE)
        while driver.status(1) == 'running':
            assert time.monotonic() < t0 + TIMEOUT_S
            driver.poll()
        elapsed = time.monotonic() - t0
        assert driver.status(1) == 'done', driver.error(1)
        assert driver.delivered(1) == SIZE and driver.corrupt_bytes(1) == 0
    finally:
        driver.close()
    return elapsed


def test_afxdp_ports_forward_but_skip_the_qdisc(fabric_factory):
    fab = fabric_factory(SPEC)
    ports = fab.switch_ports
    ovs.set_port_type(ports, AFXDP)
    for port in ports[:2]:
        kind = subprocess.run(['ovs-vsctl', 'get', 'interface', port, 'type'],
                              capture_output=True, text=True, check=True).stdout
        assert kind.strip() == AFXDP
    before = {p: (tx_packets(p), root_qdisc_packets(p)) for p in ports}
    write_h1_to_h2(fab)
    sent = sum(tx_packets(p) - before[p][0] for p in ports)
    queued = sum(root_qdisc_packets(p) - before[p][1] for p in ports)
    # The write's data and SACKs crossed the switches (2 switch ports per
    # packet each way), and none of it went through a switch port's HTB.
    assert sent > 2 * SIZE // 1500
    assert queued < sent / 100, (queued, sent)


STAGED = 'leafspine,leaves=2,spines=2,hosts=1,planes=1,bw=10,afxdp=1'
RATE_BPS = 10e6


@pytest.mark.skipif('afxdp' not in ovs.interface_types(),
                    reason='this Open vSwitch offers no AF_XDP ports')
def test_afxdp_fabric_queues_every_port_in_its_stage(fabric_factory):
    """afxdp=1: PMD-polled AF_XDP switch ports, and what they send still
    queues in an HTB at the link's rate, where the switch-port program
    counts it (testbed.fabric.port_stage)."""
    fab = fabric_factory(STAGED)
    ports = fab.switch_ports
    types = subprocess.run(['ovs-vsctl', '--bare', '--columns=type', 'list',
                            'interface', *ports], capture_output=True, text=True,
                           check=True).stdout.split()
    assert types == ['afxdp'] * len(ports)
    assert fab.signals is not None
    queued0 = sum(root_qdisc_packets(q) for q in fab.signals.queues.values())
    elapsed = write_h1_to_h2(fab)
    # Shaped: one plane's port at RATE_BPS cannot carry the payload faster.
    assert elapsed >= SIZE * 8 / RATE_BPS
    # Every data packet queued at three switch ports (leaf, spine, leaf) on
    # its way, in the stages' HTBs, and the program there counted it.
    data_packets = SIZE // 1500
    queued = sum(root_qdisc_packets(q) for q in fab.signals.queues.values()) - queued0
    counted = sum(row['packets'] for row in fab.signals.counters().values())
    assert queued >= 3 * data_packets, queued
    assert counted >= 3 * data_packets, counted
    assert set(fab.signals.counters()) == set(ports)


@pytest.mark.skipif('afxdp' not in ovs.interface_types(),
                    reason='this Open vSwitch offers no AF_XDP ports')
def test_health_gate_counts_what_afxdp_ports_drop_unread():
    """A sender flat out (hundreds of thousands of frames/s from one
    Python loop) outruns one PMD thread forwarding over 3 switches; what
    the AF_XDP rings could not take is the fabric's loss, and the health
    gate's unread-drop counter accounts for all of it."""
    with ExitStack() as stack:
        fab, probe = probed_fabric('leafspine,leaves=2,spines=2,hosts=1,planes=1,afxdp=1',
                                   'h1', 'h2', 'system', stack)
        start = HealthSample.now()
        point = capacity_point(probe, None, 1.0)
        health = health_between(start, HealthSample.now(), [])
    lost = round((point['entered_pps'] - point['delivered_pps']) * 1.0)
    assert lost > 1000, point
    # entered and delivered are read 0.3 s apart at the hosts' ports, the
    # drops over the whole call: a few packets either way.
    assert abs(health['datapath_unread_drops'] - lost) <= 0.01 * lost
    assert health['saturated']


def test_afxdp_auto_builds_the_faster_ports_only_where_they_fit():
    """afxdp=auto: AF_XDP ports where this machine can hold them (features.afxdp_misfit:
    OVS support, their locked memory, a core for the PMD thread), system ports with the
    reason otherwise; an MTU above what a veth runs native XDP at always gets system ports."""
    from testbed.fabric.features import afxdp_misfit
    from testbed.fabric.net import FabricNet
    from testbed.fabric.topo_spec import parse_topo_spec
    big = FabricNet(parse_topo_spec(SPEC + ',mtu=4096,afxdp=auto'))
    assert not big.afxdp and big.placement is None
    assert 'mtu 4096 is above the 3506' in big.switch_port_choice
    fab = FabricNet(parse_topo_spec(SPEC + ',afxdp=auto'))
    # 10 switch ports: a host's port at each leaf, and 4 leaf-spine links' two ends.
    why_not = afxdp_misfit(10)
    assert fab.afxdp == (why_not is None), fab.switch_port_choice
    assert fab.afxdp == (fab.placement is not None)


def vswitchd_log() -> Path:
    """ovs-vswitchd's log file, from its command line."""
    with open('/proc/%d/cmdline' % ovs.vswitchd_pid(), 'rb') as f:
        args = f.read().decode().split('\0')
    named = [a.split('=', 1)[1] for a in args if a.startswith('--log-file=')]
    return Path(named[0] if named else '/var/log/openvswitch/ovs-vswitchd.log')


def file_levels() -> dict[str, str]:
    levels = ovs.file_log_levels()
    return {m: levels[m] for m in ovs.CHATTY_AFXDP_MODULES}


@pytest.mark.skipif('afxdp' not in ovs.interface_types(),
                    reason='this Open vSwitch offers no AF_XDP ports')
def test_afxdp_fabric_keeps_its_port_churn_out_of_the_vswitchd_log():
    """The netdev datapath logs every port's queue placement after each port
    added or deleted (ports squared lines per build; ovs.CHATTY_AFXDP_MODULES):
    an afxdp=1 fabric keeps those modules at WARN from before its first port
    to after its last is gone, and puts their levels back."""
    from testbed.fabric.net import FabricNet
    from testbed.fabric.topo_spec import parse_topo_spec
    log = vswitchd_log()
    before = file_levels()
    start = log.stat().st_size
    with FabricNet(parse_topo_spec(STAGED)) as fab:
        assert set(file_levels().values()) == {'warn'}
        assert len(fab.switch_ports) == 10
    assert file_levels() == before
    with open(log, 'rb') as f:
        f.seek(start)
        lines = f.read().decode(errors='replace').splitlines()
    # Each of the 10 ports was added and deleted (the bridge module says so at
    # INFO): the log did cover the build and the teardown.
    assert sum('|bridge|INFO|' in line and 'interface' in line for line in lines) >= 20
    chatty = [line for line in lines if any('|%s|INFO|' % m in line
                                            for m in ovs.CHATTY_AFXDP_MODULES)]
    assert not chatty, chatty[:5]
