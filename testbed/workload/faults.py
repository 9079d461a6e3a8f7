"""Fault injection on a running FabricNet: links, switches, planes and NIC
ports down, gray (randomly lossy) links, and link-rate changes.

Every fault is applied the moment its method is called and logged as an
event ``{'time', 'monotonic', 'fault', <params>, 'detail', 'apply_s'}``;
'time'/'monotonic' are read just before the first change, 'apply_s' is how
long applying took. Timed faults (link flaps, anything given to
`schedule`) wait in a queue that a single-threaded runner loop drains by
calling ``injector.due()`` as often as it likes. `restore_all()` undoes
whatever is still applied. See docs/faults.md.

Mechanics, chosen for what this kernel can emulate (design.md section 4):

- *Down* is admin-down of the switch-side veth of a link: both ends of a
  switch-to-switch link; on a host link only the switch end, so the host's
  port sees carrier loss like a real NIC whose peer went dark. Taking the
  host end admin-down would make its kernel flush the port's IPv6 address,
  routes and static gateway neighbour, which a real NIC keeps. A link is
  down while at least one fault holds it down, so overlapping faults
  (a link inside a downed plane, say) compose and undo independently.
- *Gray* loss is a tc filter on the clsact egress hook of each end of the
  link (a host end inside the host's namespace): a few instructions of
  classic BPF draw a random number and *steal* the chosen share of frames.
  Egress, because OVS reads switch ports with AF_PACKET, which sees a
  frame before any ingress hook could drop it; stolen, not dropped,
  because a drop is reported to the sender as ENOBUFS, and OVS's userspace
  datapath then discards the rest of the batch it was sending, turning
  50% into 90% under bursts. design.md's nftables recipe (netdev egress,
  ``numgen random``) drops that way; it remains available as
  ``method='nft'``, in tables named ``mrc_gray_*``.
- *Rate* is the HTB class 5:1 that Mininet's TCLink puts under root qdisc
  5:0, changed in place on both ends; on a fabric built without ``bw=`` an
  HTB of that same layout is added and removed again on restore.
"""
from __future__ import annotations

import dataclasses
import hashlib
import heapq
import inspect
import itertools
import math
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from pyroute2 import IPRoute

from testbed.fabric.net import FabricNet

EventLog = Callable[[dict], None]
# Runs a command in a namespace (host pid, or None for root) -> stdout.
Runner = Callable[[int | None, list[str], str | None], str]
Holder = tuple  # who holds a link down: ('link',), ('switch', name), ...

GRAY_TABLE_PREFIX = 'mrc_gray_'    # clean.py removes every mrc_* table
NFT_NAME_MAX = 31                  # kernels before 4.13 allowed 32 with NUL
NFT_SAFE_NAME = re.compile(r'^[A-Za-z0-9_]+$')
IFNAME = re.compile(r'^[A-Za-z0-9_.-]{1,15}$')
NFT_LOSS_SCALE = 10000             # numgen modulus: 0.01% loss resolution
GRAY_METHODS = ('tc', 'nft')
TC_GRAY_PREF = '49'                # our filter's place on clsact egress
# Classic BPF, as tc's `bytecode` takes it: opcodes and the ancillary
# offset of a random u32 (linux/filter.h), and tc verdicts (pkt_cls.h).
BPF_LD_W_ABS, BPF_JGE_K, BPF_RET_K = 0x20, 0x35, 0x06
SKF_AD_RANDOM = (-0x1000 + 56) & 0xFFFFFFFF
TC_ACT_UNSPEC, TC_ACT_STOLEN = 0xFFFFFFFF, 4
HTB_ROOT, HTB_CLASS = '5:0', '5:1'  # Mininet TCLink's HTB layout
HTB_BURST = '15k'                  # TCLink's burst, for HTB we add ourselves
MIN_MBIT = 0.001                   # tc's rate resolution is 1 kbit/s
COMMAND_TIMEOUT_S = 10.0
# What nft says when the kernel has no netdev egress hook (Linux < 5.16),
# or nft itself predates it (< 1.0.1).
NFT_UNSUPPORTED = ('Operation not supported', 'unknown chain hook',
                   "syntax error, unexpected egress")


class FaultError(ValueError):
    """A fault that names nothing in the fabric, has bad parameters, or
    could not be applied."""


class FaultUnavailable(FaultError):
    """The machine lacks what a fault needs (a tool or a kernel feature)."""

    def __init__(self, fault: str, missing: str, without: str) -> None:
        super().__init__('%s needs %s, which this machine does not have: %s'
                         % (fault, missing, without))
        self.fault = fault
        self.missing = missing


@dataclass(frozen=True)
class LinkEnd:
    node: str
    intf: str
    pid: int | None          # the host's namespace; None: the root namespace

    def where(self) -> str:
        return '%s (%s)' % (self.intf, 'root' if self.pid is None
                            else '%s netns' % self.node)


@dataclass(frozen=True)
class FabricLink:
    ends: tuple[LinkEnd, LinkEnd]

    @property
    def key(self) -> frozenset[str]:
        return frozenset(e.node for e in self.ends)

    @property
    def name(self) -> str:
        return '-'.join(sorted(self.key))

    def switch_ends(self) -> list[LinkEnd]:
        return [e for e in self.ends if e.pid is None]


@dataclass
class GrayLoss:
    link: FabricLink
    method: str                   # 'tc' or 'nft'
    loss_pct: float
    # tc: interface -> whether we added its clsact qdisc (else it was there)
    tc_filters: dict[str, bool] = field(default_factory=dict)
    # nft: the namespaces (host pid, None for root) holding the link's table
    nft_tables: set[int | None] = field(default_factory=set)

    @property
    def table(self) -> str:
        return gray_table_name(self.link)


@dataclass(frozen=True)
class HtbClass:
    """An HTB class's settings exactly as `tc class show` prints them, so
    restoring them writes back what was read."""
    rate: str
    ceil: str
    burst: str
    cburst: str


@dataclass
class RateChange:
    link: FabricLink
    mbit: float
    original: dict[str, HtbClass | None]  # intf -> class; None: HTB added


@dataclass(order=True)
class ScheduledAction:
    at: float                                   # time.monotonic() when due
    seq: int
    fault: str = field(compare=False)
    params: dict = field(compare=False)
    run: Callable[[], Any] = field(compare=False, repr=False)


FAULTS = ('link_down', 'link_up', 'link_flap', 'switch_down', 'switch_up',
          'plane_down', 'plane_up', 'nic_port_down', 'nic_port_up',
          'gray_failure', 'gray_clear', 'link_rate', 'link_rate_restore')


class FaultInjector:
    """Faults on one running FabricNet. Single-threaded: call every method,
    `due()` included, from the thread that runs the experiment."""

    def __init__(self, fab: FabricNet, log: EventLog | None = None) -> None:
        self.fab = fab
        self.plan = fab.plan
        self.log = log
        self.events: list[dict] = []
        self._links: dict[frozenset[str], FabricLink] = {}
        self._holds: dict[frozenset[str], set[Holder]] = {}
        self._gray: dict[frozenset[str], GrayLoss] = {}
        self._rates: dict[frozenset[str], RateChange] = {}
        self._pending: list[ScheduledAction] = []
        self._seq = itertools.count()

    def __enter__(self) -> 'FaultInjector':
        return self

    def __exit__(self, *exc) -> None:
        self.restore_all()

    # -- what this machine offers --------------------------------------

    @property
    def missing_features(self) -> list[str]:
        """What the faults need and this machine lacks, for reports."""
        missing = []
        if not tc_random_drop_available():
            missing.append('tc cls_bpf on clsact egress (gray_failure)')
        if not shutil.which('tc'):
            missing.append('tc (link_rate)')
        return missing

    # -- down and up -----------------------------------------------------

    def link_down(self, a: str, b: str) -> dict:
        link = self._link(a, b)
        t = _clock()
        return self._event('link_down', {'a': a, 'b': b}, t,
                           self._hold([link], ('link',)))

    def link_up(self, a: str, b: str) -> dict:
        link = self._link(a, b)
        t = _clock()
        return self._event('link_up', {'a': a, 'b': b}, t,
                           self._release([link], ('link',)))

    def switch_down(self, name: str) -> dict:
        """Every port of the switch down, like a switch losing power; its
        flow tables are left as they are."""
        links = self._switch_links(name)
        t = _clock()
        return self._event('switch_down', {'name': name}, t,
                           self._hold(links, ('switch', name)))

    def switch_up(self, name: str) -> dict:
        links = self._switch_links(name)
        t = _clock()
        return self._event('switch_up', {'name': name}, t,
                           self._release(links, ('switch', name)))

    def plane_down(self, plane: int) -> dict:
        links = self._plane_links(plane)
        t = _clock()
        return self._event('plane_down', {'plane': plane}, t,
                           self._hold(links, ('plane', plane)))

    def plane_up(self, plane: int) -> dict:
        links = self._plane_links(plane)
        t = _clock()
        return self._event('plane_up', {'plane': plane}, t,
                           self._release(links, ('plane', plane)))

    def nic_port_down(self, host: str, plane: int) -> dict:
        link = self._nic_link(host, plane)
        t = _clock()
        return self._event('nic_port_down', {'host': host, 'plane': plane}, t,
                           self._hold([link], ('nic', host, plane)))

    def nic_port_up(self, host: str, plane: int) -> dict:
        link = self._nic_link(host, plane)
        t = _clock()
        return self._event('nic_port_up', {'host': host, 'plane': plane}, t,
                           self._release([link], ('nic', host, plane)))

    def link_flap(self, a: str, b: str, period_s: float, count: int,
                  down_s: float | None = None) -> list[tuple[float, str]]:
        """`count` cycles of `period_s`, each starting with the link down
        for `down_s` (default half the period), then up. The first down is
        applied now; the rest is queued for `due()`. Returns the whole
        schedule as (offset in seconds from now, 'down' | 'up')."""
        link = self._link(a, b)
        down_s = _check_flap(period_s, count, down_s)
        # Rounded so that offsets read as written (0.6, not 0.6000000000000001).
        steps = [(round(i * period_s + offset, 9), action)
                 for i in range(count)
                 for offset, action in ((0.0, 'down'), (down_s, 'up'))]
        t = _clock()
        detail = self._hold([link], ('flap',))
        params = {'a': a, 'b': b, 'period_s': period_s, 'count': count,
                  'down_s': down_s, 'schedule': steps}
        self._event('link_flap', params, t, detail)
        for offset, action in steps[1:]:
            at = t[1] + offset
            self._queue(at, 'link_flap_' + action,
                        {'a': a, 'b': b, 'offset_s': offset},
                        self._flap_step(link, (a, b), offset, at,
                                        action == 'down'))
        return steps

    def _flap_step(self, link: FabricLink, names: tuple[str, str],
                   offset: float, at: float, down: bool) -> Callable[[], None]:
        def step() -> None:
            t = _clock()
            change = self._hold if down else self._release
            self._event('link_flap_' + ('down' if down else 'up'), {
                'a': names[0], 'b': names[1], 'offset_s': offset,
                'late_s': t[1] - at}, t, change([link], ('flap',)))
        return step

    # -- gray failure ------------------------------------------------------

    def gray_failure(self, a: str, b: str, loss_pct: float,
                     method: str = 'tc') -> dict:
        """Drop `loss_pct` % of the frames in each direction of the link,
        at random, replacing any gray loss already on it. `method` 'tc'
        (the default) drops silently; 'nft' is design.md's nftables recipe,
        which makes OVS discard the rest of each batch (docs/faults.md)."""
        link = self._link(a, b)
        loss_pct = _check_loss(loss_pct)
        if method not in GRAY_METHODS:
            raise FaultError('gray_failure: method must be one of %s, got %r'
                             % (', '.join(GRAY_METHODS), method))
        self._require_gray(method)
        t = _clock()
        old = self._gray.get(link.key)
        if old is not None and old.method != method:
            self._clear_gray(self._gray.pop(link.key))
        gray = self._gray.setdefault(link.key, GrayLoss(link, method, loss_pct))
        gray.loss_pct = loss_pct
        try:
            self._gray_on(gray)
        except FaultError:
            del self._gray[link.key]     # half a gray link is no fault to keep
            _try(lambda: self._clear_gray(gray), 'roll back', [])
            raise
        return self._event('gray_failure', {
            'a': a, 'b': b, 'loss_pct': loss_pct, 'method': method}, t,
            _gray_detail(gray))

    def gray_clear(self, a: str, b: str) -> dict:
        link = self._link(a, b)
        t = _clock()
        gray = self._gray.pop(link.key, None)
        dropped = self._clear_gray(gray) if gray else {}
        detail = ('%s gray loss removed from %s' % (gray.method, ', '.join(
            e.where() for e in link.ends)) if gray else
            'no gray loss on this link')
        return self._event('gray_clear', {'a': a, 'b': b, 'dropped': dropped},
                           t, detail)

    def _gray_on(self, gray: GrayLoss) -> None:
        if gray.method == 'tc':
            for end in gray.link.ends:
                if end.intf not in gray.tc_filters:
                    gray.tc_filters[end.intf] = _tc_add_clsact(self._run, end)
                _tc_set_filter(self._run, end, gray.loss_pct)
            return
        for pid, ends in _by_namespace(gray.link.ends).items():
            self._nft(pid, _nft_ruleset(gray.table, ends, gray.loss_pct))
            gray.nft_tables.add(pid)

    def _clear_gray(self, gray: GrayLoss) -> dict[str, int]:
        """Remove the loss; returns the frames each end dropped where the
        method counts them (nft does, tc does not)."""
        dropped: dict[str, int] = {}
        for end in gray.link.ends:
            if end.intf in gray.tc_filters and _exists(end):
                _tc_gray_off(self._run, end, gray.tc_filters[end.intf])
        for pid, ends in _by_namespace(gray.link.ends).items():
            if pid not in gray.nft_tables or (pid is not None
                                              and not _alive(pid)):
                continue        # never made, or gone with its namespace
            dropped.update(_nft_gray_off(self._run, pid, gray.table, ends))
        return dropped

    def _require_gray(self, method: str) -> None:
        if method == 'nft':
            self._require('nft', 'gray_failure', 'no nftables random loss')
            return
        self._require('tc', 'gray_failure', 'no random-loss injection')
        if not tc_random_drop_available():
            raise FaultUnavailable(
                'gray_failure', 'tc clsact egress with a classic-BPF filter '
                '(CONFIG_NET_SCH_INGRESS, CONFIG_NET_CLS_BPF)',
                "no silent random loss; method='nft' works without it but "
                'OVS then loses more than asked under bursts')

    # -- link rate -----------------------------------------------------------

    def link_rate(self, a: str, b: str, mbit: float) -> dict:
        """Shape both ends of the link to `mbit` Mbit/s."""
        link = self._link(a, b)
        mbit = _check_mbit(mbit)
        self._require('tc', 'link_rate', 'no link-rate changes')
        t = _clock()
        # Registered before the first change, so that restore_all can undo
        # a change that failed half-way.
        change = self._rates.setdefault(link.key, RateChange(link, mbit, {}))
        change.mbit = mbit
        for end in link.ends:
            if end.intf not in change.original:
                change.original[end.intf] = self._read_htb(end)
            self._set_rate(end, mbit, change.original[end.intf])
        detail = 'HTB class %s rate %gMbit on %s' % (
            HTB_CLASS, mbit, ', '.join(e.where() for e in link.ends))
        return self._event('link_rate', {'a': a, 'b': b, 'mbit': mbit}, t,
                           detail)

    def link_rate_restore(self, a: str, b: str) -> dict:
        link = self._link(a, b)
        t = _clock()
        change = self._rates.pop(link.key, None)
        if change:
            self._restore_rate(change)
        detail = ('HTB restored on %s' % ', '.join(change.original) if change
                  else 'rate was not changed')
        return self._event('link_rate_restore', {'a': a, 'b': b}, t, detail)

    def _read_htb(self, end: LinkEnd) -> HtbClass | None:
        """The link's HTB class 5:1, or None when there is no HTB root
        (a fabric built without bw=): then one is added."""
        out = self._run(end.pid, ['tc', 'class', 'show', 'dev', end.intf])
        for line in out.splitlines():
            if line.startswith('class htb %s ' % HTB_CLASS):
                return _parse_htb(line, end)
        qdisc = self._run(end.pid, ['tc', 'qdisc', 'show', 'dev', end.intf,
                                    'root'])
        if ' 5: ' in qdisc or ' htb ' in qdisc:
            raise FaultError('%s: root qdisc is not the HTB layout of '
                             'Mininet TCLink: %s' % (end.where(), qdisc.strip()))
        return None

    def _set_rate(self, end: LinkEnd, mbit: float,
                  original: HtbClass | None) -> None:
        rate = '%.3fmbit' % mbit
        dev = ['dev', end.intf]
        if original is None:
            self._run(end.pid, ['tc', 'qdisc', 'replace', *dev, 'root',
                                'handle', HTB_ROOT, 'htb', 'default', '1'])
            self._run(end.pid, ['tc', 'class', 'replace', *dev, 'parent',
                                HTB_ROOT, 'classid', HTB_CLASS, 'htb', 'rate',
                                rate, 'burst', HTB_BURST])
            return
        self._run(end.pid, ['tc', 'class', 'change', *dev, 'parent', HTB_ROOT,
                            'classid', HTB_CLASS, 'htb', 'rate', rate,
                            'ceil', rate, 'burst', original.burst,
                            'cburst', original.cburst])

    def _restore_rate(self, change: RateChange) -> None:
        for end in change.link.ends:
            if end.intf not in change.original or not _exists(end):
                continue        # never changed, or gone with the fabric
            original = change.original[end.intf]
            if original is None:
                self._run(end.pid, ['tc', 'qdisc', 'del', 'dev', end.intf,
                                    'root'])
                continue
            self._run(end.pid, [
                'tc', 'class', 'change', 'dev', end.intf, 'parent', HTB_ROOT,
                'classid', HTB_CLASS, 'htb', 'rate', original.rate, 'ceil',
                original.ceil, 'burst', original.burst, 'cburst',
                original.cburst])

    # -- timed faults ----------------------------------------------------

    def schedule(self, at: float, fault: str, **params: Any) -> ScheduledAction:
        """Queue a fault for `due()` at monotonic time `at`. The fault name
        and its parameters are checked now, so a bad timeline fails before
        the experiment starts."""
        method = self._fault_method(fault)
        try:
            inspect.signature(method).bind(**params)
        except TypeError as err:
            raise FaultError('%s: %s' % (fault, err)) from None
        self._check(fault, params)
        return self._queue(at, fault, dict(params), lambda: method(**params))

    def apply(self, fault: Any, /, **params: Any) -> dict | list:
        """Apply a fault now. `fault` is its name (parameters as keywords),
        or a record: a mapping or dataclass with 'kind' (or 'type') and the
        parameters, where a scenario's ``link=(a, b)`` and ``switch=`` read
        as a, b and name, and 'at' and unset (None) fields are ignored."""
        kind, given = _fault_and_params(fault, params)
        method = self._fault_method(kind)
        try:
            inspect.signature(method).bind(**given)
        except TypeError as err:
            raise FaultError('%s: %s' % (kind, err)) from None
        return method(**given)

    def due(self, now: float | None = None) -> list[dict]:
        """Apply every queued action due by `now` (default: the monotonic
        clock), in time order; returns their events."""
        now = time.monotonic() if now is None else now
        first = len(self.events)
        while self._pending and self._pending[0].at <= now:
            heapq.heappop(self._pending).run()   # logs its own event
        return self.events[first:]

    def next_due(self) -> float | None:
        """Monotonic time of the next queued action, None when idle."""
        return self._pending[0].at if self._pending else None

    def pending(self) -> list[ScheduledAction]:
        return sorted(self._pending)

    def _queue(self, at: float, fault: str, params: dict,
               run: Callable[[], Any]) -> ScheduledAction:
        if not isinstance(at, (int, float)) or not math.isfinite(at):
            raise FaultError('schedule: at must be a monotonic time, got %r'
                             % (at,))
        action = ScheduledAction(float(at), next(self._seq), fault, params, run)
        heapq.heappush(self._pending, action)
        return action

    def _fault_method(self, fault: str) -> Callable[..., Any]:
        if fault not in FAULTS:
            raise FaultError('unknown fault %r (known: %s)'
                             % (fault, ', '.join(FAULTS)))
        return getattr(self, fault)

    def _check(self, fault: str, params: dict) -> None:
        """The argument checks the fault itself will make, made early."""
        if 'a' in params:
            self._link(params['a'], params['b'])
        if 'name' in params:
            self._switch(params['name'])
        if 'host' in params:
            self._nic_link(params['host'], params['plane'])
        elif 'plane' in params:
            self._plane(params['plane'])
        if 'loss_pct' in params:
            _check_loss(params['loss_pct'])
        if params.get('method', 'tc') not in GRAY_METHODS:
            raise FaultError('gray_failure: method must be one of %s, got %r'
                             % (', '.join(GRAY_METHODS), params['method']))
        if 'mbit' in params:
            _check_mbit(params['mbit'])
        if fault == 'link_flap':
            _check_flap(params['period_s'], params['count'],
                        params.get('down_s'))

    # -- undo everything -----------------------------------------------------

    def restore_all(self) -> dict:
        """Cancel queued actions and undo every fault still applied: links
        up, gray tables deleted, rates restored. Works after the fabric has
        stopped too (what went with it is skipped). Raises FaultError, after
        trying everything, if something could not be undone."""
        t = _clock()
        cancelled = len(self._pending)
        self._pending.clear()
        done, errors = [], []
        held = [self._links[key] for key, holds in self._holds.items() if holds]
        self._holds.clear()
        _try(lambda: self._set_admin(held, up=True, missing_ok=True),
             'links up', errors)
        done += ['up: ' + l.name for l in held]
        for key in list(self._gray):
            gray = self._gray.pop(key)
            _try(lambda: self._clear_gray(gray), 'gray ' + gray.link.name,
                 errors)
            done.append('gray cleared: ' + gray.link.name)
        for key in list(self._rates):
            change = self._rates.pop(key)
            _try(lambda: self._restore_rate(change),
                 'rate ' + change.link.name, errors)
            done.append('rate restored: ' + change.link.name)
        if cancelled:
            done.append('%d queued actions cancelled' % cancelled)
        event = self._event('restore_all', {'errors': errors}, t,
                            '; '.join(done) or 'nothing to restore')
        if errors:
            raise FaultError('restore_all could not undo: ' + '; '.join(errors))
        return event

    # -- link holds ------------------------------------------------------------

    def _hold(self, links: list[FabricLink], holder: Holder) -> str:
        """Hold links down; only those nobody held down yet change state."""
        newly = [l for l in links if not self._holds.get(l.key)]
        for link in links:
            self._holds.setdefault(link.key, set()).add(holder)
        self._set_admin(newly, up=False)
        return _admin_detail('down', newly, len(links))

    def _release(self, links: list[FabricLink], holder: Holder) -> str:
        """Drop a hold; links nothing else holds down come back up."""
        freed = []
        for link in links:
            holds = self._holds.get(link.key, set())
            if holder in holds:
                holds.discard(holder)
                if not holds:
                    freed.append(link)
        self._set_admin(freed, up=True)
        return _admin_detail('up', freed, len(links))

    def _set_admin(self, links: list[FabricLink], up: bool,
                   missing_ok: bool = False) -> None:
        """Switch ports live in the root namespace: one netlink handle."""
        if not links:
            return
        with IPRoute() as ipr:
            for end in (e for l in links for e in l.switch_ends()):
                index = ipr.link_lookup(ifname=end.intf)
                if not index:
                    if missing_ok:
                        continue
                    raise FaultError('%s: no such interface' % end.where())
                ipr.link('set', index=index[0], state='up' if up else 'down')

    # -- names, checked against the plan -------------------------------------

    def _switch(self, name: str) -> str:
        if not isinstance(name, str) or name not in self.plan.switches:
            raise FaultError('no switch named %r in this fabric' % (name,))
        return name

    def _plane(self, plane: int) -> int:
        if isinstance(plane, bool) or plane not in self.plan.planes:
            raise FaultError('no plane %r in this fabric (planes: %s)' % (
                plane, ', '.join(map(str, self.plan.planes))))
        return plane

    def _host(self, host: str) -> str:
        if not isinstance(host, str) or host not in self.plan.hosts:
            raise FaultError('no host named %r in this fabric' % (host,))
        return host

    def _link(self, a: str, b: str) -> FabricLink:
        for name in (a, b):
            if not isinstance(name, str) or (name not in self.plan.switches
                                             and name not in self.plan.hosts):
                raise FaultError('no switch or host named %r in this fabric'
                                 % (name,))
        key = frozenset((a, b))
        if key not in self._links:
            if not self._planned_link(a, b):
                raise FaultError('no link between %s and %s' % (a, b))
            self._links[key] = self._resolve_link(a, b)
        return self._links[key]

    def _planned_link(self, a: str, b: str) -> bool:
        if a in self.plan.switches and b in self.plan.switches:
            return b in self.plan.neighbours(a)
        host, switch = (a, b) if a in self.plan.hosts else (b, a)
        if switch not in self.plan.switches:
            return False
        port = self.plan.host_ports.get(
            (host, self.plan.switches[switch].plane))
        return port is not None and port.switch == switch

    def _resolve_link(self, a: str, b: str) -> FabricLink:
        """The running link's interface names and namespaces."""
        net = self.fab.net
        if net is None:
            raise FaultError('the fabric is not running')
        found = net.linksBetween(net[a], net[b])
        if len(found) != 1:
            raise FaultError('expected one link between %s and %s, found %d'
                             % (a, b, len(found)))
        ends = tuple(self._end(intf) for intf in (found[0].intf1,
                                                  found[0].intf2))
        return FabricLink(ends)  # type: ignore[arg-type]

    def _end(self, intf) -> LinkEnd:
        name = intf.node.name
        if not IFNAME.match(intf.name):
            raise FaultError('unexpected interface name %r' % intf.name)
        pid = None if name in self.plan.switches else self.fab.host_pid(name)
        return LinkEnd(name, intf.name, pid)

    def _switch_links(self, name: str) -> list[FabricLink]:
        self._switch(name)
        peers = list(self.plan.neighbours(name)) + [
            p.host for p in self.plan.hosts_on(name)]
        return [self._link(name, peer) for peer in peers]

    def _plane_links(self, plane: int) -> list[FabricLink]:
        self._plane(plane)
        links: dict[frozenset[str], FabricLink] = {}
        for name, info in self.plan.switches.items():
            if info.plane == plane:
                links.update((l.key, l) for l in self._switch_links(name))
        return list(links.values())

    def _nic_link(self, host: str, plane: int) -> FabricLink:
        self._host(host)
        self._plane(plane)
        return self._link(host, self.plan.host_ports[(host, plane)].switch)

    # -- commands, events ------------------------------------------------------

    def _require(self, tool: str, fault: str, without: str) -> None:
        if not shutil.which(tool):
            raise FaultUnavailable(fault, '`%s` (install %s)' % (
                tool, 'nftables' if tool == 'nft' else 'iproute2'), without)

    def _nft(self, pid: int | None, script: str) -> str:
        try:
            return self._run(pid, ['nft', '-f', '-'], script)
        except FaultError as err:
            if any(sign in str(err) for sign in NFT_UNSUPPORTED):
                raise FaultUnavailable('gray_failure', 'the nftables netdev '
                                       'egress hook (Linux >= 5.16)',
                                       str(err)) from None
            raise

    def _run(self, pid: int | None, argv: list[str], stdin: str | None = None
             ) -> str:
        """Run a command in the root namespace, or a host's (mnexec is
        Mininet's own way into a host)."""
        if pid is not None:
            argv = ['mnexec', '-a', str(pid), *argv]
        done = subprocess.run(argv, input=stdin, capture_output=True,
                              text=True, timeout=COMMAND_TIMEOUT_S)
        if done.returncode != 0:
            raise FaultError('%s failed: %s' % (
                ' '.join(argv), (done.stderr or done.stdout).strip()))
        return done.stdout

    def _event(self, fault: str, params: dict, started: tuple[float, float],
               detail: Any) -> dict:
        wall, mono = started
        event = {'time': wall, 'monotonic': mono, 'fault': fault, **params,
                 'detail': detail, 'apply_s': time.monotonic() - mono}
        self.events.append(event)
        if self.log is not None:
            self.log(event)
        return event


def gray_table_name(link: FabricLink) -> str:
    """mrc_gray_<a>_<b>, or a digest where node names would make it too
    long or not a plain nft identifier."""
    a, b = sorted(link.key)
    name = '%s%s_%s' % (GRAY_TABLE_PREFIX, a, b)
    if len(name) <= NFT_NAME_MAX and NFT_SAFE_NAME.match(name):
        return name
    digest = hashlib.sha1(('%s|%s' % (a, b)).encode()).hexdigest()
    return GRAY_TABLE_PREFIX + digest[:NFT_NAME_MAX - len(GRAY_TABLE_PREFIX)]


def _nft_ruleset(table: str, ends: list[LinkEnd], loss_pct: float) -> str:
    """One transaction: drop the table if present, then define it with an
    egress chain per interface (counting what it drops)."""
    threshold = round(loss_pct * NFT_LOSS_SCALE / 100)
    chains = ''.join(
        '  chain egress%d {\n'
        '    type filter hook egress device "%s" priority 0; policy accept;\n'
        '    numgen random mod %d < %d counter drop\n'
        '  }\n' % (i, end.intf, NFT_LOSS_SCALE, threshold)
        for i, end in enumerate(ends))
    return ('add table netdev {t}\ndelete table netdev {t}\n'
            'table netdev {t} {{\n{c}}}\n'.format(t=table, c=chains))


def _nft_gray_off(run: Runner, pid: int | None, table: str,
                  ends: list[LinkEnd]) -> dict[str, int]:
    listing = run(pid, ['nft', 'list', 'table', 'netdev', table], None)
    run(pid, ['nft', 'delete', 'table', 'netdev', table], None)
    return dict(zip((e.intf for e in ends), _counter_packets(listing)))


def random_drop_bytecode(loss_pct: float) -> str:
    """A classic-BPF tc filter, in tc's `bytecode` notation, that steals
    (drops without telling the sender) a loss_pct share of packets:
    A = random u32; if A >= threshold: pass; else: TC_ACT_STOLEN."""
    threshold = round(loss_pct / 100 * 2 ** 32)
    if threshold >= 2 ** 32:
        return '1,6 0 0 %d' % TC_ACT_STOLEN
    program = [(BPF_LD_W_ABS, 0, 0, SKF_AD_RANDOM),
               (BPF_JGE_K, 0, 1, threshold),
               (BPF_RET_K, 0, 0, TC_ACT_UNSPEC),
               (BPF_RET_K, 0, 0, TC_ACT_STOLEN)]
    return '%d,%s' % (len(program), ','.join(
        '%d %d %d %d' % insn for insn in program))


def _tc_add_clsact(run: Runner, end: LinkEnd) -> bool:
    """Give the interface a clsact qdisc; False if it had one already."""
    dev = ['dev', end.intf]
    if 'qdisc clsact ' in run(end.pid, ['tc', 'qdisc', 'show', *dev], None):
        return False
    run(end.pid, ['tc', 'qdisc', 'add', *dev, 'clsact'], None)
    return True


def _tc_set_filter(run: Runner, end: LinkEnd, loss_pct: float) -> None:
    """Install, or replace, the random-drop filter on clsact egress."""
    run(end.pid, ['tc', 'filter', 'replace', 'dev', end.intf, 'egress',
                  'pref', TC_GRAY_PREF, 'handle', '1', 'bpf', 'da',
                  'bytecode', random_drop_bytecode(loss_pct)], None)


def _tc_gray_off(run: Runner, end: LinkEnd, added_clsact: bool) -> None:
    dev = ['dev', end.intf]
    if added_clsact:
        run(end.pid, ['tc', 'qdisc', 'del', *dev, 'clsact'], None)
    else:
        run(end.pid, ['tc', 'filter', 'del', *dev, 'egress', 'pref',
                      TC_GRAY_PREF], None)


@cache
def tc_random_drop_available() -> bool:
    """Try the gray-loss filter on a veth in a scratch namespace."""
    if os.geteuid() != 0 or not shutil.which('tc') or not shutil.which('ip'):
        return False
    ns = 'mrcgray%d' % os.getpid()   # clean.py removes mrc* namespaces
    steps = [['ip', 'link', 'add', 'g0', 'type', 'veth', 'peer', 'name', 'g1'],
             ['tc', 'qdisc', 'add', 'dev', 'g0', 'clsact'],
             ['tc', 'filter', 'add', 'dev', 'g0', 'egress', 'bpf', 'da',
              'bytecode', random_drop_bytecode(50)]]
    try:
        if subprocess.run(['ip', 'netns', 'add', ns],
                          capture_output=True).returncode:
            return False
        return all(subprocess.run(['ip', 'netns', 'exec', ns, *step],
                                  capture_output=True).returncode == 0
                   for step in steps)
    finally:
        subprocess.run(['ip', 'netns', 'del', ns], capture_output=True)


def _gray_detail(gray: GrayLoss) -> str:
    where = ', '.join(e.where() for e in gray.link.ends)
    if gray.method == 'tc':
        return 'tc clsact egress bpf filter stealing %.2f%% on %s' % (
            gray.loss_pct, where)
    return 'nft table netdev %s dropping %.2f%% at egress of %s' % (
        gray.table, gray.loss_pct, where)


_COUNTER = re.compile(r'counter packets (\d+) bytes \d+')


def _counter_packets(listing: str) -> list[int]:
    return [int(n) for n in _COUNTER.findall(listing)]


_HTB_FIELD = re.compile(r' (rate|ceil|burst|cburst) (\S+)')


def _parse_htb(line: str, end: LinkEnd) -> HtbClass:
    fields = dict(_HTB_FIELD.findall(line))
    try:
        return HtbClass(fields['rate'], fields['ceil'], fields['burst'],
                        fields['cburst'])
    except KeyError:
        raise FaultError('%s: cannot read HTB class: %s'
                         % (end.where(), line)) from None


def _by_namespace(ends: tuple[LinkEnd, ...]) -> dict[int | None,
                                                     list[LinkEnd]]:
    grouped: dict[int | None, list[LinkEnd]] = {}
    for end in ends:
        grouped.setdefault(end.pid, []).append(end)
    return grouped


def _admin_detail(state: str, changed: list[FabricLink], total: int) -> str:
    if not changed:
        return 'no link changed state (%d still held by other faults or ' \
               'already %s)' % (total, state)
    text = 'admin %s: %s' % (state, ', '.join(
        e.intf for l in changed for e in l.switch_ends()))
    if len(changed) < total:
        text += ' (%d more held by other faults)' % (total - len(changed))
    return text


def _check_loss(loss_pct: float) -> float:
    if isinstance(loss_pct, bool) or not isinstance(loss_pct, (int, float)) \
            or not 0 < loss_pct <= 100:
        raise FaultError('loss_pct must be a number in (0, 100], got %r'
                         % (loss_pct,))
    return float(loss_pct)


def _check_mbit(mbit: float) -> float:
    if isinstance(mbit, bool) or not isinstance(mbit, (int, float)) \
            or not math.isfinite(mbit) or mbit < MIN_MBIT:
        raise FaultError('mbit must be a rate of at least %g Mbit/s, got %r'
                         % (MIN_MBIT, mbit))
    return float(mbit)


def _check_flap(period_s: float, count: int, down_s: float | None) -> float:
    if isinstance(period_s, bool) or not isinstance(period_s, (int, float)) \
            or not math.isfinite(period_s) or period_s <= 0:
        raise FaultError('period_s must be positive, got %r' % (period_s,))
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise FaultError('count must be a whole number >= 1, got %r'
                         % (count,))
    down_s = period_s / 2 if down_s is None else down_s
    if isinstance(down_s, bool) or not isinstance(down_s, (int, float)) \
            or not 0 < down_s < period_s:
        raise FaultError('down_s must be in (0, period_s), got %r' % (down_s,))
    return float(down_s)


def _fault_and_params(fault: Any, params: dict) -> tuple[str, dict]:
    """(kind, keyword arguments) from what `apply` accepts."""
    if isinstance(fault, str):
        return fault, params
    if isinstance(fault, Mapping):
        fields = dict(fault)
    elif dataclasses.is_dataclass(fault) and not isinstance(fault, type):
        fields = {f.name: getattr(fault, f.name)
                  for f in dataclasses.fields(fault)}
    elif hasattr(fault, 'kind'):
        fields = {'kind': fault.kind, 'params': getattr(fault, 'params', {})}
    else:
        raise FaultError('cannot read a fault from %r' % (fault,))
    kind = fields.pop('kind', None) or fields.pop('type', None)
    fields.pop('at', None)
    fields.update(fields.pop('params', None) or {})
    # A scenario's record names a link as one (a, b) pair and a switch as
    # 'switch'; unset fields of the record are None.
    link = fields.pop('link', None)
    if link is not None:
        if isinstance(link, str) or len(link) != 2:
            raise FaultError('link must be a pair of node names, got %r'
                             % (link,))
        fields['a'], fields['b'] = link
    if 'switch' in fields:
        fields['name'] = fields.pop('switch')
    given = {k: v for k, v in fields.items() if v is not None}
    return str(kind), {**given, **params}


def _clock() -> tuple[float, float]:
    return time.time(), time.monotonic()


def _alive(pid: int) -> bool:
    return os.path.exists('/proc/%d' % pid)


def _exists(end: LinkEnd) -> bool:
    """Whether the interface is still there (a stopped fabric took its
    links and namespaces with it)."""
    if end.pid is None:
        return os.path.exists('/sys/class/net/' + end.intf)
    return _alive(end.pid)


def _try(step: Callable[[], Any], what: str, errors: list[str]) -> None:
    """Run one undo step; a failure is noted and the next step still runs."""
    try:
        step()
    except Exception as err:  # noqa: BLE001 - restore_all must try everything
        errors.append('%s: %s' % (what, err))
