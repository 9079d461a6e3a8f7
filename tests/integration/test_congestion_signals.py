"""Congestion signals on a real fabric: the switch ports mark and trim,
the receiver NACKs every trimmed PSN, the data arrives intact, and no packet
is lost uncounted or timed out on a healthy path."""
from __future__ import annotations

import subprocess
import time

from scapy.layers.inet6 import IPv6
from scapy.utils import rdpcap

from testbed.fabric import ovs
from testbed.fabric.packet_capture import BUFFER_KIB, DROPPED
from testbed.nic import scapy_mrc
from testbed.nic.wire import DataPacket, Nack, NackReason, Trim, decode
from testbed.workload.endpoint_flows import EndpointFlows

# Four flows leave leaf 0 for leaf 1 over its two 5 Mbit/s uplinks: twice
# what they can carry, so the uplink ports queue, mark and trim.
SPEC = 'leafspine,leaves=2,spines=2,hosts=4,planes=1,bw=5'
FLOWS = [('h1', 'h5'), ('h2', 'h6'), ('h3', 'h7'), ('h4', 'h8')]
SIZE = 1 << 20
TIMEOUT_S = 60
CE = 0b11


def capture(intf: str, path, netns_pid: int | None = None) -> subprocess.Popen:
    cmd = ['tcpdump', '--immediate-mode', '-U', '-Z', 'root', '-n',
           '-B', str(BUFFER_KIB), '-i', intf, '-w', str(path), 'ip6']
    if netns_pid is not None:
        cmd = ['nsenter', '--net=/proc/%d/ns/net' % netns_pid, *cmd]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    assert 'listening on' in proc.stderr.readline()
    return proc


def run_flows(driver: EndpointFlows) -> None:
    driver.prepare([(a, b, SIZE) for a, b in FLOWS])
    for i, (a, b) in enumerate(FLOWS):
        driver.start(i, a, b, SIZE)
    t0 = time.monotonic()
    while any(driver.status(i) == 'running' for i in range(len(FLOWS))):
        assert time.monotonic() - t0 < TIMEOUT_S
        driver.poll()


def mrc_packets(path):
    """(outer IPv6, MRC bytes decoded) of every MRC packet of a capture."""
    out = []
    for pkt in rdpcap(str(path)):
        if pkt.haslayer(scapy_mrc.MRC_BTH):
            out.append((pkt[IPv6], decode(bytes(pkt[scapy_mrc.MRC_BTH]))))
    return out


def test_congested_uplinks_mark_and_trim_and_every_trim_is_nacked(
        fabric_factory, tmp_path):
    fab = fabric_factory(SPEC)
    assert fab.signals is not None
    uplink = next(i for i, p in fab.signals.ports.items()
                  if p.switch == 'p1l0' and p.peer == 'p1s0')
    receiver = fab.plan.host_ports[('h5', 1)].intf
    at_uplink = capture(uplink, tmp_path / 'uplink.pcap')
    at_host = capture(receiver, tmp_path / 'h5.pcap', fab.host_pid('h5'))
    driver = EndpointFlows(fab, 'mrc', seed=5)
    try:
        run_flows(driver)
        time.sleep(0.3)
    finally:
        for proc in (at_uplink, at_host):
            proc.terminate()
            proc.wait()
    # A capture that lost packets would miss trims or NACKs below.
    for proc in (at_uplink, at_host):
        assert DROPPED.search(proc.stderr.read()).group(1) == '0'
    try:
        for i in range(len(FLOWS)):
            assert driver.status(i) == 'done' and driver.corrupt_bytes(i) == 0
        senders = [c.requester.stats() for c in driver.connections.values()]
        receivers = [c.responder.stats() for c in driver.connections.values()]
        counters = fab.signals.counters()[uplink]
    finally:
        driver.close()
    # The uplink is offered twice its rate for seconds: its queue passes
    # both thresholds, so it marks and trims, and trims rather than drops.
    assert counters['ce_marked'] > 0 and counters['trimmed'] > 0
    assert counters['queue_drops'] == 0
    # Nothing vanishes: every data packet sent arrived (whole or trimmed),
    # every trimmed one was NACKed, and no healthy path timed out.
    assert sum(s['packets_sent'] for s in senders) == sum(
        r['packets_received'] for r in receivers)
    assert sum(r['trimmed_received'] for r in receivers) == sum(
        r['nacks_sent'] for r in receivers) > 0
    assert sum(s['packet_timeouts'] for s in senders) == 0

    # On the wire: CE in the outer header at the uplink, and in the inner
    # one the host reads (End.DT6 does not copy it inward); trimmed packets
    # that decode, with their ICRC, as header-only data packets.
    leaving = mrc_packets(tmp_path / 'uplink.pcap')
    assert any(outer.tc & CE == CE for outer, _ in leaving)
    arrived = [(o, p) for o, p in mrc_packets(tmp_path / 'h5.pcap')
               if isinstance(p, DataPacket)]
    assert any(o[1].tc & CE == CE for o, _ in arrived)      # the inner IPv6
    assert all(not p.payload for _, p in arrived if p.trim is not Trim.NONE)
    # A trimmed copy of a PSN that already arrived whole (a retransmission
    # that crossed its original) is a duplicate: the responder SACKs it and
    # has nothing to NACK. Every other trimmed PSN must be NACKed.
    whole: set[int] = set()
    trimmed: set[int] = set()
    for _, p in arrived:
        if p.trim is Trim.NONE:
            whole.add(p.psn)
        elif p.psn not in whole:
            trimmed.add(p.psn)
    assert trimmed
    nacked = {p.psn for _, p in mrc_packets(tmp_path / 'h5.pcap')
              if isinstance(p, Nack) and p.reason in (
                  NackReason.TRIMMED, NackReason.TRIMMED_LASTHOP)}
    assert trimmed <= nacked


def test_the_datapaths_transmit_buffer_is_raised(fabric_factory):
    fab = fabric_factory('leafspine,leaves=2,spines=1,hosts=1,planes=1,bw=5')
    assert fab.datapath != 'user' or (
        ovs.raise_tx_buffer() >= 2 * ovs.TX_SNDBUF_BYTES)
    assert not any('transmit buffer' in m for m in fab.missing_features)
