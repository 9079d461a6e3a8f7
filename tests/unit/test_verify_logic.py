"""Pure parts of verify: isolation verdicts, pair selection, probe bytes."""
import socket
import struct

from testbed.fabric.probe import all_pairs, inner_udp, sample_pairs
from testbed.fabric.topo_spec import parse_topo_spec
from testbed.fabric.usid_plan import FabricPlan
from testbed.fabric.verify import plane_leaks


def test_plane_leaks_names_the_switch_that_saw_another_plane():
    p = FabricPlan.from_topo(parse_topo_spec('fattree,k=4,planes=2').build())
    before = {name: 10 for name in p.switches}
    after = dict(before, p2c0=13, p1c0=50)
    assert plane_leaks(p, 1, before, after) == [
        'plane 1 probe reached p2c0 (plane 2): 3 packets']
    assert plane_leaks(p, 2, before, after) == [
        'plane 2 probe reached p1c0 (plane 1): 40 packets']
    assert plane_leaks(p, 1, before, dict(before, p1c0=99)) == []


def test_pairs():
    hosts = ['h%d' % i for i in range(1, 9)]
    assert len(all_pairs(hosts)) == 56
    pairs = sample_pairs(hosts)
    assert ('h1', 'h2') in pairs and ('h1', 'h5') in pairs
    assert all(a != b for a, b in pairs)


def test_inner_udp_layout():
    pkt = inner_udp('fd00::1', 'fd00::2', 4790, b'abcd', flow_label=0x12345)
    first, length, nxt, hops = struct.unpack('!IHBB', pkt[:8])
    assert first >> 28 == 6 and first & 0xFFFFF == 0x12345
    assert (length, nxt, hops) == (12, 17, 64)
    assert pkt[8:24] == socket.inet_pton(socket.AF_INET6, 'fd00::1')
    assert struct.unpack('!HHHH', pkt[40:48]) == (4790, 4790, 12, 0)
    assert pkt[48:] == b'abcd'
