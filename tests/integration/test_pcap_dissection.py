"""A capture of the real fabric dissected with the project's scapy layer."""
import ipaddress
import subprocess
import time
import zlib

from scapy.layers.inet import UDP
from scapy.layers.inet6 import IPv6
from scapy.utils import rdpcap

from testbed.nic import scapy_mrc
from testbed.nic.wire import DataPacket, decode
from tests.integration.test_mrc_transfer import DST, Pair


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
