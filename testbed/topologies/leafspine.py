"""Multi-plane 2-tier leaf-spine: the shape MRC runs in production.

Each plane has `leaves` leaf (T0) and `spines` spine (T1) switches, every
leaf wired to every spine; `hosts` hosts hang off each leaf position and have
one NIC port per plane.

    mn --custom testbed/topologies/leafspine.py \
       --topo leafspine,leaves=4,spines=4,hosts=2,planes=4 \
       --switch ovs,datapath=user,protocols=OpenFlow13 --controller remote

Names: ``p2l0`` (plane 2, leaf 0), ``p2s3`` (plane 2, spine 3), host port on
plane p is ``h<n>-p<p>``.
"""
from mininet.link import TCLink
from mininet.topo import Topo

TIER_CODE = {'leaf': 1, 'spine': 2}


def tc_link_params(bw=None, delay=None, ecn=None):
    """TCLink options for every link, or {} for plain veths: HTB at `bw`
    Mbit/s, netem `delay` ms one way (each end delays what it sends), and
    with `ecn=1` RED marking ECN-capable packets. TCLink hangs RED under the
    HTB class, so ecn takes effect only together with bw.
    (A copy lives in each topology file: `mn --custom` loads one file.)"""
    params = {}
    if bw:
        params['bw'] = float(bw)
    if delay:
        params['delay'] = '%gms' % float(delay)
    if ecn:
        params['enable_ecn'] = True
    return dict(params, cls=TCLink) if params else {}

class MultiPlaneLeafSpine(Topo):
    """`planes` (1-8) planes of `leaves` x `spines`; leaves*hosts hosts.
    `bw` (Mbit/s) shapes every link with HTB when given, `delay` (ms)
    adds netem delay and `ecn=1` RED/ECN marking (see tc_link_params)."""

    def build(self, leaves=4, spines=4, hosts=2, planes=1, bw=None,
              delay=None, ecn=None, mark=None, trim=None, mark_kb=None,
              trim_kb=None):
        # mark, trim, mark_kb, trim_kb: the switch ports' congestion signals,
        # which mrc-testbed's FabricNet applies (stock mn ignores them).
        leaves, spines, hosts, planes = (int(leaves), int(spines),
                                         int(hosts), int(planes))
        if leaves < 1 or spines < 1 or hosts < 1:
            raise ValueError('leafspine: leaves, spines and hosts must be '
                             '>= 1, got %d, %d, %d' % (leaves, spines, hosts))
        if not 1 <= planes <= 8:
            raise ValueError('leafspine: planes must be 1..8, got %d' % planes)
        link = tc_link_params(bw, delay, ecn)
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


topos = {'leafspine': MultiPlaneLeafSpine}
