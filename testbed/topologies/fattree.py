"""Multi-plane 3-tier k-ary fat-tree.

Every host has one NIC port per plane; port p connects to an edge switch of
plane p, and planes share no switch, as in MRC's multi-plane fabrics.

    mn --custom testbed/topologies/fattree.py --topo fattree,k=4,planes=2 \
       --switch ovs,datapath=user,protocols=OpenFlow13 --controller remote

Switch names show plane, tier, pod and index: ``p1c3`` (plane 1, core 3),
``p1a0x1`` (plane 1, pod 0, aggregation 1), ``p1e0x1`` (edge). Host port on
plane p is ``h<n>-p<p>``.
"""
from mininet.link import TCLink
from mininet.topo import Topo

TIER_CODE = {'edge': 1, 'agg': 2, 'core': 3}


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

class MultiPlaneFatTree(Topo):
    """k-ary fat-tree (k even, >= 4) replicated over `planes` planes (1-8);
    k**3/4 hosts. `bw` (Mbit/s) shapes every link with HTB when given,
    `delay` (ms) adds netem delay and `ecn=1` RED/ECN marking (see
    tc_link_params)."""

    def build(self, k=4, planes=1, bw=None, delay=None, ecn=None, mark=None,
              trim=None, mark_kb=None, trim_kb=None):
        # mark, trim, mark_kb, trim_kb: the switch ports' congestion signals,
        # which mrc-testbed's FabricNet applies (stock mn ignores them).
        k, planes = int(k), int(planes)
        if k < 4 or k % 2:
            raise ValueError('fattree: k must be even and >= 4, got %d' % k)
        if not 1 <= planes <= 8:
            raise ValueError('fattree: planes must be 1..8, got %d' % planes)
        half = k // 2
        link = tc_link_params(bw, delay, ecn)
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


topos = {'fattree': MultiPlaneFatTree}
