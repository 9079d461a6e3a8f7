"""The link options every topology offers (bw, delay, ecn)."""
from mininet.link import TCLink


def tc_link_params(bw=None, delay=None, ecn=None):
    """TCLink options for every link, or {} for plain veths: HTB at `bw`
    Mbit/s, netem `delay` ms one way (each end delays what it sends), and
    with `ecn=1` RED marking ECN-capable packets. TCLink hangs RED under the
    HTB class, so ecn takes effect only together with bw."""
    params = {}
    if bw:
        params['bw'] = float(bw)
    if delay:
        params['delay'] = '%gms' % float(delay)
    if ecn:
        params['enable_ecn'] = True
    return dict(params, cls=TCLink) if params else {}
