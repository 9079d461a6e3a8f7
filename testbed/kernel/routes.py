"""The kernel routes that carry TCP and MPTCP over the uSID fabric: a
`seg6` encap route per flow and plane, alone in its own table, chosen by a
policy rule; and the mirror of a path for the reverse direction. On the
routed fabric, the same table and rule hold a plain route through a plane's
gateway instead (MPTCP's subflows, each on its own plane). On a kernel
without seg6 routes the rule's route is a plain one too, and eBPF puts the
carrier on (testbed.kernel.seg6_encap, docs/host-decap.md)."""
from __future__ import annotations

import errno
import socket
import subprocess
from collections.abc import Callable
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from testbed.fabric.netns import inside
from testbed.fabric.usid_plan import GATEWAY_LL, FabricPlan, Path
from testbed.kernel.seg6_encap import OUTER_LEN, Seg6Encap, flow_key, flow_path

SEG6_MODES: tuple[str, ...] = ('encap', 'encap.red')
RULE_PRIORITY = 1000                # before main (32766), after local (0)
TABLE_BASE = 1000                   # flow n, plane p: table 1000 + 16 n + p
TABLES_PER_FLOW = 16


class KernelTransportError(RuntimeError):
    """A flow could not be set up (bad arguments or kernel refusal)."""


@dataclass(frozen=True)
class _RouteEntry:
    """One route, alone in its table, and the rule that selects it: seg6
    into `carrier`, or (carrier None) plain IPv6 through the port's
    gateway, which the routed fabric forwards."""
    table: int
    intf: str
    local: str          # preferred source address
    peer: str           # destination address (/128)
    carrier: str | None
    selector: tuple[tuple[str, object], ...]


def _add_routes(pid: int, entries: list[_RouteEntry], mode: str,
                encap: Seg6Encap | None = None, mtu: int = 0) -> None:
    """Routes, then the rules that select them. pyroute2 (in-process, ~1 ms)
    knows seg6 modes `encap` and `inline` only; other modes go through
    iproute2. With `encap` (a kernel without seg6 routes) each route is a
    plain one whose MTU leaves room for the carrier on links of `mtu` bytes,
    and the carrier goes into encap's map, keyed as the rule selects."""
    if encap is not None:
        _add_encap_routes(pid, entries, mode, encap, mtu)
        return
    if mode != 'encap':
        for e in entries:
            if e.carrier is not None:
                ip_in(pid, '-6', 'route', 'add', e.peer + '/128', 'encap',
                      'seg6', 'mode', mode, 'segs', e.carrier, 'dev', e.intf,
                      'src', e.local, 'table', str(e.table))
    with inside(pid), IPRoute() as ipr:
        for e in entries:
            idx = ipr.link_lookup(ifname=e.intf)[0]
            if e.carrier is None:
                ipr.route('add', dst=e.peer + '/128', table=e.table, oif=idx,
                          prefsrc=e.local, gateway=GATEWAY_LL)
            elif mode == 'encap':
                ipr.route('add', dst=e.peer + '/128', table=e.table, oif=idx,
                          prefsrc=e.local, encap={
                              'type': 'seg6', 'mode': 'encap',
                              'segs': [e.carrier]})
            ipr.rule('add', family=socket.AF_INET6, priority=RULE_PRIORITY,
                     table=e.table, **dict(e.selector))


def _add_encap_routes(pid: int, entries: list[_RouteEntry], mode: str,
                      encap: Seg6Encap, mtu: int) -> None:
    with inside(pid), IPRoute() as ipr:
        for e in entries:
            idx = ipr.link_lookup(ifname=e.intf)[0]
            metrics = {'mtu': mtu - OUTER_LEN[mode]} if e.carrier is not None else {}
            ipr.route('add', dst=e.peer + '/128', table=e.table, oif=idx,
                      prefsrc=e.local, gateway=GATEWAY_LL, metrics=metrics)
            if e.carrier is not None:
                encap.add(_encap_key(e), flow_path(e.carrier, mode))
            ipr.rule('add', family=socket.AF_INET6, priority=RULE_PRIORITY,
                     table=e.table, **dict(e.selector))


def _encap_key(e: _RouteEntry) -> bytes:
    """The seg6_encap map key that matches what the entry's rule selects."""
    rule = dict(e.selector)

    def given(name: str) -> str | None:
        return str(rule[name]) if name in rule else None

    def port(name: str) -> int | None:
        value = given(name + '_range')             # 'N:N', one port
        return int(value.split(':')[0]) if value else None
    return flow_key(given('src'), given('dst'), port('sport'), port('dport'))


def _del_routes(pid: int, entries: list[_RouteEntry],
                encap: Seg6Encap | None = None) -> None:
    if encap is not None:
        for e in entries:
            if e.carrier is not None:
                encap.remove(_encap_key(e))
    with inside(pid), IPRoute() as ipr:
        for e in entries:
            _ignore_missing(ipr.rule, 'del', family=socket.AF_INET6,
                            priority=RULE_PRIORITY, table=e.table,
                            **dict(e.selector))
            _ignore_missing(ipr.route, 'del', dst=e.peer + '/128',
                            table=e.table)


def _ignore_missing(call: Callable, *args, **kwargs) -> None:
    try:
        call(*args, **kwargs)
    except NetlinkError as err:
        if err.code not in (errno.ENOENT, errno.ESRCH):
            raise


def _selector(src: str | None = None, dst: str | None = None,
              sport: int | None = None, dport: int | None = None
              ) -> tuple[tuple[str, object], ...]:
    """pyroute2 rule arguments: TCP, the given /128 addresses and ports."""
    rule: dict[str, object] = {'ip_proto': socket.IPPROTO_TCP}
    if src:
        rule.update(src=src, src_len=128)
    if dst:
        rule.update(dst=dst, dst_len=128)
    if sport:
        rule['sport_range'] = '%d:%d' % (sport, sport)
    if dport:
        rule['dport_range'] = '%d:%d' % (dport, dport)
    return tuple(rule.items())


def mirror(plan: FabricPlan, path: Path) -> Path:
    """The reverse of a path: same plane, same switches, reversed."""
    for back in plan.paths(path.dst, path.src, path.plane):
        if back.switches == path.switches[::-1]:
            return back
    raise KernelTransportError('no reverse path for %s' % path.carrier)


def ip_in(pid: int, *args: str) -> str:
    """Run `ip ARGS` in a host's namespace; its stdout, or an error."""
    done = subprocess.run(['nsenter', '--net=/proc/%d/ns/net' % pid, 'ip',
                           *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise KernelTransportError('ip %s: %s' % (' '.join(args),
                                                  done.stderr.strip()))
    return done.stdout
