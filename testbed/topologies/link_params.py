"""The link options every topology offers (bw, delay, ecn, mtu)."""
from mininet.link import TCIntf, TCLink

MIN_MTU, MAX_MTU = 1280, 9000     # IPv6's minimum; the largest jumbo frame veths take


class SizedIntf(TCIntf):
    """A TCLink end that also takes `mtu=`, set before any switch adds
    the port, so that OVS sizes its receive buffers from it."""

    def config(self, mtu=None, **params):
        result = TCIntf.config(self, **params)
        if mtu:
            self.cmd('ip link set dev', self, 'mtu', int(mtu))
        return result


class SizedLink(TCLink):
    def __init__(self, *args, **kwargs):
        kwargs.setdefault('cls1', SizedIntf)
        kwargs.setdefault('cls2', SizedIntf)
        TCLink.__init__(self, *args, **kwargs)


# The largest MTU of a veth whose peer runs an XDP program in native mode, as an
# afxdp=1 fabric's ports do (testbed.fabric.port_stage): the frame must fit one
# page beside XDP's headroom and the skb's shared info. Measured on kernel 6.18,
# x86-64, 4 KB pages: 3,506 takes the program, 3,507 is refused ("veth: Peer MTU
# is too large to set XDP"); OVS's AF_XDP program takes no multi-buffer frames.
AFXDP_MAX_MTU = 3506


def check_mtu(topology, mtu, afxdp=None):
    """`mtu` as an int, refused outside MIN_MTU..MAX_MTU (AFXDP_MAX_MTU with
    `afxdp` 1); None stays None."""
    if mtu is None:
        return None
    staged = afxdp == 1             # afxdp=auto builds system ports above it
    highest = AFXDP_MAX_MTU if staged else MAX_MTU
    if not MIN_MTU <= int(mtu) <= highest:
        raise ValueError('%s: mtu must be %d..%d bytes%s, got %s'
                         % (topology, MIN_MTU, highest,
                            ' with afxdp=1 (native XDP on veths)' if staged else '',
                            mtu))
    return int(mtu)


def tc_link_params(bw=None, delay=None, ecn=None, mtu=None):
    """TCLink options for every link, or {} for plain veths: HTB at `bw`
    Mbit/s, netem `delay` ms one way (each end delays what it sends), with
    `ecn=1` RED marking ECN-capable packets, and `mtu` bytes on both ends
    (the IPv6 packet; unset: the kernel's 1,500). TCLink hangs RED under
    the HTB class, so ecn takes effect only together with bw."""
    params = {}
    if bw:
        params['bw'] = float(bw)
    if delay:
        params['delay'] = '%gms' % float(delay)
    if ecn:
        params['enable_ecn'] = True
    if mtu:
        params['mtu'] = int(mtu)
    return dict(params, cls=SizedLink) if params else {}
