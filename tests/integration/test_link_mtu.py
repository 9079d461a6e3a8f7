"""A fabric built with ``mtu=4096`` carries the hardware's 4 KB packets end
to end: every veth and OVS port takes the MTU, MRC fills it (a full data
packet is ``max_payload(4096)`` of payload), the transfer arrives intact,
and kernel TCP over the same seg6 encap routes sizes its segments to it."""
from __future__ import annotations

import json
import subprocess
import time

import pytest

from testbed.kernel.transports import KernelTransports
from testbed.nic.outgoing import Outgoing
from testbed.nic.socket_runtime import Nic
from testbed.nic.wire import max_payload
from testbed.workload.endpoint_flows import DATA_OPCODES, EndpointFlows

MTU = 4096
SPEC = 'fattree,k=4,planes=2,bw=20,mtu=%d' % MTU
SRC, DST = 'h1', 'h16'          # pod 0 to pod 3: 4 paths per plane
SIZE = 2 << 20
TIMEOUT_S = 60
# Inner IPv6 (40) and UDP (8): what the MRC packet rides in inside the
# outer IPv6 header the kernel's SRv6 encapsulation adds (40).
INNER_AND_OUTER = 2 * 40 + 8


@pytest.fixture
def fabric(fabric_factory):
    return fabric_factory(SPEC)


def link_mtus(fabric) -> dict[str, int]:
    """Interface -> MTU, for the root namespace's switch ports and every
    host's ports, as the kernel has them."""
    found = {}
    for intf in fabric.net.switches[0].intfList():
        if intf.link is not None:
            found[intf.name] = _mtu(None, intf.name)
    for host in fabric.net.hosts:
        for intf in host.intfList():
            found[intf.name] = _mtu(fabric.host_pid(host.name), intf.name)
    return found


def _mtu(pid: int | None, name: str) -> int:
    cmd = ['ip', '-j', 'link', 'show', 'dev', name]
    if pid is not None:
        cmd = ['nsenter', '--net=/proc/%d/ns/net' % pid, *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]['mtu']


def test_every_port_takes_the_mtu(fabric):
    mtus = link_mtus(fabric)
    assert mtus and set(mtus.values()) == {MTU}, mtus
    port = next(i for i in fabric.net.switches[0].intfList() if i.link)
    ovs_mtu = subprocess.run(['ovs-vsctl', 'get', 'interface', port.name, 'mtu'],
                             capture_output=True, text=True, check=True).stdout
    assert int(ovs_mtu) == MTU          # what the userspace datapath sizes its buffers to


def test_mrc_fills_4_kb_packets_and_arrives_intact(fabric):
    driver = EndpointFlows(fabric, 'mrc', seed=3)
    sizes: list[int] = []
    count = driver.runtime.tap

    def tap(now: float, nic: Nic, pkt: Outgoing) -> None:
        if pkt.data[0] in DATA_OPCODES:
            sizes.append(len(pkt.data))
        if count is not None:
            count(now, nic, pkt)
    driver.runtime.tap = tap
    try:
        assert driver.profile.transport_config.mtu == MTU
        driver.prepare([(SRC, DST, SIZE)])
        driver.start(1, SRC, DST, SIZE)
        deadline = time.monotonic() + TIMEOUT_S
        while driver.status(1) == 'running':
            assert time.monotonic() < deadline
            driver.poll()
        assert driver.status(1) == 'done', driver.error(1)
        assert driver.delivered(1) == SIZE
        assert driver.corrupt_bytes(1) == 0
    finally:
        driver.close()
    # The largest data packet fills the link: its payload is max_payload
    # (which counts an ImmDt that a mid-WRITE packet does not carry), in a
    # packet that with the two IPv6 headers and UDP is the MTU but for it.
    assert max(sizes) + INNER_AND_OUTER == MTU - 4
    full = max_payload(MTU)
    assert len(sizes) <= SIZE / full * 1.1 + 20   # the few resent or probing on top


def received(fabric, host: str) -> tuple[int, int]:
    """(bytes, packets) `host`'s ports have received, as its kernel counts."""
    pid = fabric.host_pid(host)
    out = subprocess.run(['nsenter', '--net=/proc/%d/ns/net' % pid, 'ip', '-s',
                          '-j', 'link', 'show'], capture_output=True, text=True,
                         check=True).stdout
    ports = [i for i in json.loads(out) if i['ifname'] != 'lo']
    return (sum(i['stats64']['rx']['bytes'] for i in ports),
            sum(i['stats64']['rx']['packets'] for i in ports))


def test_kernel_tcp_sizes_its_segments_to_the_mtu(fabric):
    with KernelTransports(fabric) as kt:
        bytes0, packets0 = received(fabric, DST)
        flow = kt.start_flow(SRC, DST, SIZE, 'tcp')
        assert kt.run(timeout_s=TIMEOUT_S)
        bytes1, packets1 = received(fabric, DST)
        assert flow.completed, flow.error
        assert flow.sha256_received == flow.sha256_sent is not None
    # The receiver takes the data segments and little else: their mean
    # size passes anything a 1,500-byte link could carry (1,514 with the
    # Ethernet header), so the kernel sized them to this MTU.
    mean = (bytes1 - bytes0) / (packets1 - packets0)
    assert 1514 < mean <= MTU + 14, mean
