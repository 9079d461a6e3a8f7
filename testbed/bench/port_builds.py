"""The default scenario's fabric built with each kind of switch port, side by
side: where an AF_XDP fabric's build goes, phase by phase (part of the
emulator-scale section; FabricNet.timings names the phases).

Each AF_XDP port is an AF_XDP socket of ovs-vswitchd's with a umem of 16,384
frames of 4 KiB (64 MiB; fixed in OVS's netdev-afxdp.c, NUM_FRAMES), which
OVS allocates and clears and the kernel zeroes and pins as the port opens:
about 10 GiB written twice for the 160 ports of this fabric, in the
nodes-and-links phase (ovs-vsctl returns once the ports are open).
"""
from __future__ import annotations

from testbed.bench.fabric_build import measure
from testbed.bench.harness import BenchContext, md_table
from testbed.fabric import ovs

DEFAULT_FABRIC = 'fattree,k=4,planes=2,mtu=3500'   # the default scenario's
KINDS = {'system': DEFAULT_FABRIC + ',afxdp=0', 'afxdp': DEFAULT_FABRIC + ',afxdp=1'}
PHASES = ('controller_s', 'nodes_links_s', 'ports_open_s', 'flows_s', 'plumbing_s',
          'signals_s')


def measure_port_builds(ctx: BenchContext) -> list[dict]:
    """One build and teardown of the default fabric per kind of port, one
    after the other (a full run; the quick and smoke ones skip it: an AF_XDP
    build takes a minute)."""
    if ctx.quick:
        return []
    rows = []
    for kind, spec in KINDS.items():
        if kind == 'afxdp' and 'afxdp' not in ovs.interface_types():
            continue
        rows.append(dict(measure(spec), kind=kind, spec=spec))
        ctx.say('emulator_scale', '%s: ready in %.1f s, torn down in %.1f s' % (
            spec, rows[-1]['ready_s'], rows[-1]['teardown_s']))
    return rows


def port_builds_text(rows: list[dict]) -> str:
    if not rows:
        return ''
    table = md_table(['switch ports', 'controller', 'nodes and links', 'ports open',
                      'flows', 'plumbing', 'signals', 'ready', 'teardown'],
                     [(r['kind'], *('%.1f s' % r.get(p, 0.0) for p in PHASES),
                       '%.1f s' % r['ready_s'], '%.1f s' % r['teardown_s'])
                      for r in rows])
    by_kind = {r['kind']: r for r in rows}
    ratio = ''
    if len(by_kind) == 2:
        ratio = (' With AF_XDP ports the fabric was ready %.0fx later and torn down '
                 '%.0fx later than with system ports.' % (
                     by_kind['afxdp']['ready_s'] / by_kind['system']['ready_s'],
                     by_kind['afxdp']['teardown_s'] / by_kind['system']['teardown_s']))
    return '\n\n'.join([
        '### The default fabric, by kind of switch port',
        '`%s`, built and torn down once with each kind, one after the other. '
        "An AF_XDP port's umem is 64 MiB that OVS clears and the kernel zeroes "
        'and pins as the port opens (`testbed/bench/port_builds.py`), in the '
        'nodes-and-links phase.%s' % (DEFAULT_FABRIC, ratio),
        table])
