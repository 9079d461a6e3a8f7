"""Multi-plane 3-tier k-ary fat-tree.

Every host has one NIC port per plane; port p connects to an edge switch of
plane p, and planes share no switch, as in MRC's multi-plane fabrics.

    sudo mn --custom testbed/topologies/fattree.py --topo fattree,k=4,planes=2 \
       --controller mrc --host mrc --switch ovs,datapath=user,protocols=OpenFlow15

(`testbed.topologies.stock_mn` says what the mrc controller and hosts do.)

Switch names show plane, tier, pod and index: ``p1c3`` (plane 1, core 3),
``p1a0x1`` (plane 1, pod 0, aggregation 1), ``p1e0x1`` (edge). Host port on
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

TIER_CODE = {'edge': 1, 'agg': 2, 'core': 3}


class MultiPlaneFatTree(Topo):
    """k-ary fat-tree (k even, >= 4) replicated over `planes` planes (1-8);
    k**3/4 hosts. `bw` (Mbit/s) shapes every link with HTB when given,
    `delay` (ms) adds netem delay, `ecn=1` RED/ECN marking and `mtu`
    (bytes) sizes every link (see tc_link_params)."""

    def build(self, k=4, planes=1, bw=None, delay=None, ecn=None, mark=None,
              trim=None, mark_kb=None, trim_kb=None,
              mark_last=None, mtu=None, afxdp=None):
        # mark, trim, mark_kb, trim_kb, mark_last: the switch ports' congestion signals,
        # and afxdp (AF_XDP switch ports, testbed.fabric.port_stage), which
        # mrc-testbed's FabricNet applies (stock mn ignores them).
        k, planes = int(k), int(planes)
        if k < 4 or k % 2:
            raise ValueError('fattree: k must be even and >= 4, got %d' % k)
        if not 1 <= planes <= 8:
            raise ValueError('fattree: planes must be 1..8, got %d' % planes)
        half = k // 2
        link = tc_link_params(bw, delay, ecn, check_mtu('fattree', mtu, afxdp))
        hosts = [self.addHost('h%d' % (n + 1)) for n in range(k ** 3 // 4)]
        for p in range(1, planes + 1):
            core = [self.sw('p%dc%d' % (p, c), p, 'core', c)
                    for c in range(half * half)]
            for pod in range(k):
                aggs = [self.sw('p%da%dx%d' % (p, pod, a), p, 'agg',
                                pod * half + a, pod) for a in range(half)]
                for e in range(half):
                    edge = self.sw('p%de%dx%d' % (p, pod, e), p, 'edge',
                                   pod * half + e, pod)
                    for agg in aggs:
                        self.addLink(edge, agg, **link)
                    first = (pod * half + e) * half
                    for h in hosts[first:first + half]:
                        self.addLink(h, edge, intfName1='%s-p%d' % (h, p),
                                     **link)
                for a, agg in enumerate(aggs):
                    for c in range(half):
                        self.addLink(agg, core[a * half + c], **link)

    def sw(self, name, plane, tier, index, pod=None):
        """Add a switch whose role rides along as node options, and whose
        datapath id encodes plane, tier and index so it never collides."""
        dpid = '%016x' % (plane << 32 | TIER_CODE[tier] << 24 | index)
        return self.addSwitch(name, dpid=dpid, plane=plane, tier=tier,
                              index=index, pod=pod)


# Mininet's --custom convention: what `mn --topo/--controller/--host` offer.
topos = {'fattree': stock_mn.recording_spec('fattree', MultiPlaneFatTree)}
controllers = stock_mn.CONTROLLERS
hosts = stock_mn.HOSTS
