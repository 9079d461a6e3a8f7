"""Captures of the real fabric dissected with the project's scapy layer, and
with tshark and the project's Wireshark dissector (wireshark/mrc.lua)."""
import ipaddress
import socket
import subprocess
import time
import zlib

from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.utils import rdpcap

from testbed.fabric.netns import inside
from testbed.fabric.packet_capture import PacketCapture, capture_points
from testbed.fabric.usid_plan import carrier_usids
from testbed.nic import scapy_mrc
from testbed.nic.wire import (DataPacket, EvProbe, Opcode, ReliabilityProbe,
                              Sack, Trim, build_inner, decode, parse_inner,
                              trim_data_packet)
from tests.integration.test_mrc_transfer import DST, SRC, Pair
from tests.unit import tshark_mrc


def test_captured_packets_dissect_and_match_what_was_sent(fabric_factory,
                                                          tmp_path):
    fab = fabric_factory('fattree,k=4,planes=2')
    port = fab.plan.host_ports[(DST, 1)]     # the last hop, plane 1
    intf = '%s-eth%d' % (port.switch, port.switch_port)
    pcap = tmp_path / 'last-hop.pcap'
    # Immediate mode: without it packets wait in the capture ring for a
    # block to fill. -Z root: the pytest tmp dir is not writable by the
    # tcpdump user tcpdump switches to.
    tcpdump = subprocess.Popen(['tcpdump', '--immediate-mode', '-U', '-Z',
                                'root', '-n', '-i', intf, '-w', str(pcap),
                                'ip6'], stderr=subprocess.PIPE, text=True)
    assert 'listening on' in tcpdump.stderr.readline()
    pair = Pair(fab, size=256 << 10)
    try:
        pair.post()
        assert pair.rt.run(pair.finished, timeout_s=30)
        time.sleep(0.2)
    finally:
        pair.close()
        tcpdump.terminate()
        tcpdump.wait()
    carriers = {s['ev_id']: s['path'] for s in pair.qa.ev_snapshot()}
    data = [p for p in rdpcap(str(pcap))
            if p.haslayer(scapy_mrc.MRC_RETH)]
    assert len(data) > 50
    for pkt in data:
        outer, inner = pkt[IPv6], pkt[IPv6][1]
        # The last switch consumed its uSID: what reaches the host is its SID.
        assert outer.nh == 41 and outer.dst == str(
            ipaddress.IPv6Address(port.sid))
        assert inner.dst == port.address and pkt[UDP].dport == 4791
        bth = pkt[scapy_mrc.MRC_BTH]
        raw = bytes(bth)
        assert bth.icrc == zlib.crc32(raw[:-4])
        decoded = decode(raw)
        assert isinstance(decoded, DataPacket)
        # The EV in the source port names a plane-1 path ending at DST.
        carrier = carriers[pkt[UDP].sport]
        assert carrier.startswith('fcbb:bb01:') and carrier.endswith(
            '%x' % port.usid)
        start = decoded.remote_offset
        assert decoded.payload == pair.data[start:start + len(decoded.payload)]
        assert pkt[scapy_mrc.MRC_RETH].rkey == pair.mr.rkey


# -- tshark with the MRC dissector, every packet kind ---------------------------

def _kind(packet) -> str:
    if isinstance(packet, DataPacket):
        return 'trimmed' if packet.trim is not Trim.NONE else packet.opcode.name
    if isinstance(packet, Sack):
        return 'sack-probe-reply' if packet.probe_reply else 'sack'
    return type(packet).__name__


def _frames(pcap):
    """(outer IPv6 destination, EV, MRC bytes) of every MRC frame; None for others."""
    out = []
    for pkt in rdpcap(str(pcap)):
        inner = pkt.getlayer(IPv6, 2)
        if inner is None or not inner.haslayer(UDP) or inner[UDP].dport != 4791:
            out.append(None)
            continue
        _src, _dst, ev, mrc = parse_inner(bytes(inner))
        out.append((pkt[IPv6].dst, ev, mrc))
    return out


def _inject(fab, pair, packets):
    """MRC packets from h1's plane-1 port to h16 across the fabric, as the
    endpoint sends them (inner IPv6 + UDP to a protocol-41 raw socket)."""
    plan = fab.plan
    carrier = pair.paths_ab[1][0]
    ev = next(s['ev_id'] for s in pair.qa.ev_snapshot() if s['path'] == carrier)
    src, dst = (plan.host_ports[(h, 1)].address for h in (SRC, DST))
    with inside(fab.host_pid(SRC)):
        sock = socket.socket(socket.AF_INET6, socket.SOCK_RAW, 41)
    try:
        for mrc in packets:
            sock.sendto(build_inner(src, dst, ev, mrc), (carrier, 0))
    finally:
        sock.close()


def test_tshark_reads_every_packet_kind_as_the_decoder(fabric_factory,
                                                       tmp_path):
    fab = fabric_factory('fattree,k=4,planes=2')
    last_hop = fab.plan.host_ports[(DST, 1)]
    points = capture_points(fab, links=((last_hop.switch, DST),),
                            hosts=(SRC,))
    capture = PacketCapture(points, tmp_path, snaplen=65535)
    pair = Pair(fab, size=256 << 10)
    try:
        with capture:
            pair.post()
            assert pair.rt.run(pair.finished, timeout_s=30)
            responder = pair.qb.responder
            next_psn = responder.window.wire_psn(responder.window.expected)
            # The kinds a clean transfer does not send: an EV probe (h16
            # answers with a reply), a reliability probe (a SACK with
            # PROBE_REPLY), a trimmed packet (a NACK TRIMMED).
            trimmed = trim_data_packet(DataPacket(
                Opcode.WRITE_ONLY, pair.qb.qpn, next_psn, 9, 0, 0,
                pair.mr.rkey, 64, bytes(64), tx_timestamp=1).encode())
            _inject(fab, pair, [
                EvProbe(0x77, 0x00010002, 1, 1234).encode(),
                ReliabilityProbe(pair.qb.qpn, 0x42, 99).encode(), trimmed])
            assert pair.rt.run(
                lambda: pair.b.ev_probes_answered == 1 and
                pair.qb.counters.trimmed_received == 1, timeout_s=5)
            # The replies leave h16 in that same run; 0.5 s is hundreds of
            # the fabric's base RTTs (~1 ms) for them to reach h1's port.
            pair.rt.run(lambda: False, timeout_s=0.5)
    finally:
        pair.close()
    # Every packet is in the pcaps: none lost to the kernel's capture buffer.
    assert set(capture.dropped.values()) == {0}, capture.dropped
    kinds = set()
    for point in points:
        pcap = capture.pcap(point)
        for frame, fields in zip(_frames(pcap), tshark_mrc.dissected(pcap)):
            if frame is None:
                assert 'mrc.opcode' not in fields
                continue
            outer_dst, ev, mrc = frame
            packet = decode(mrc)
            kinds.add(_kind(packet))
            assert tshark_mrc.mrc_fields(fields) == tshark_mrc.expected(
                packet, ev, mrc)
            plane, usids = carrier_usids(outer_dst)
            assert fields['mrc.carrier.plane'] == plane
            assert fields['mrc.carrier.usid'] == usids
    assert kinds >= {'WRITE_FIRST', 'WRITE_MIDDLE', 'WRITE_LAST_WITH_IMM',
                     'sack', 'sack-probe-reply', 'Nack', 'ReliabilityProbe',
                     'EvProbe', 'EvProbeReply', 'trimmed'}, kinds
