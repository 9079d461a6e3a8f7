"""Multi-plane 2-tier leaf-spine: the shape MRC runs in production.

Each plane has `leaves` leaf (T0) and `spines` spine (T1) switches, every
leaf wired to every spine; `hosts` hosts hang off each leaf position and have
one NIC port per plane.

    sudo mn --custom testbed/topologies/leafspine.py \
       --topo leafspine,leaves=4,spines=4,hosts=2,planes=4 \
       --controller mrc --host mrc --switch ovs,datapath=user,protocols=OpenFlow15

(`testbed.topologies.stock_mn` says what the mrc controller and hosts do.)

Names: ``p2l0`` (plane 2, leaf 0), ``p2s3`` (plane 2, spine 3), host port on
plane p is ``h<n>-p<p>``.
"""
import os
import sys

if '__file__' not in globals():
    # `mn --custom` execs this file without __file__, and the directory that
    # holds testbed/ is not on sys.path: put it there from the code's name.
    sys.path.insert(0, os.path.abspath(os.path.join(
        sys._getframe().f_code.co_filename, '..', '..', '..')))

from mininet.topo import Topo  # noqa: E402 (after the path fix above)

from testbed.topologies import stock_mn  # noqa: E402
from testbed.topologies.link_params import check_mtu, tc_link_params  # noqa: E402

TIER_CODE = {'leaf': 1, 'spine': 2}


class MultiPlaneLeafSpine(Topo):
    """`planes` (1-8) planes of `leaves` x `spines`; leaves*hosts hosts.
    `bw` (Mbit/s) shapes every link with HTB when given, `delay` (ms)
    adds netem delay, `ecn=1` RED/ECN marking and `mtu` (bytes) sizes
    every link (see tc_link_params)."""

    def build(self, leaves=4, spines=4, hosts=2, planes=1, bw=None,
              delay=None, ecn=None, mark=None, trim=None, mark_kb=None,
              trim_kb=None,
              mark_last=None, mtu=None, afxdp=None):
        # mark, trim, mark_kb, trim_kb, mark_last: the switch ports' congestion signals,
        # and afxdp (AF_XDP switch ports, testbed.fabric.port_stage), which
        # mrc-testbed's FabricNet applies (stock mn ignores them).
        leaves, spines, hosts, planes = (int(leaves), int(spines),
                                         int(hosts), int(planes))
        if leaves < 1 or spines < 1 or hosts < 1:
            raise ValueError('leafspine: leaves, spines and hosts must be '
                             '>= 1, got %d, %d, %d' % (leaves, spines, hosts))
        if not 1 <= planes <= 8:
            raise ValueError('leafspine: planes must be 1..8, got %d' % planes)
        link = tc_link_params(bw, delay, ecn, check_mtu('leafspine', mtu, afxdp))
        nodes = [self.addHost('h%d' % (n + 1)) for n in range(leaves * hosts)]
        for p in range(1, planes + 1):
            tops = [self.sw('p%ds%d' % (p, s), p, 'spine', s)
                    for s in range(spines)]
            for l in range(leaves):
                leaf = self.sw('p%dl%d' % (p, l), p, 'leaf', l)
                for top in tops:
                    self.addLink(leaf, top, **link)
                for h in nodes[l * hosts:(l + 1) * hosts]:
                    self.addLink(h, leaf, intfName1='%s-p%d' % (h, p), **link)

    def sw(self, name, plane, tier, index):
        """Add a switch whose role rides along as node options, and whose
        datapath id encodes plane, tier and index so it never collides."""
        dpid = '%016x' % (plane << 32 | TIER_CODE[tier] << 24 | index)
        return self.addSwitch(name, dpid=dpid, plane=plane, tier=tier,
                              index=index)


# Mininet's --custom convention: what `mn --topo/--controller/--host` offer.
topos = {'leafspine': stock_mn.recording_spec('leafspine', MultiPlaneLeafSpine)}
controllers = stock_mn.CONTROLLERS
hosts = stock_mn.HOSTS
