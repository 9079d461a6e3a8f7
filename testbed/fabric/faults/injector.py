"""FaultInjector: faults on a running FabricNet, applied at once or queued.

Every fault is applied the moment its method is called and logged as an
event ``{'time', 'monotonic', 'fault', <params>, 'detail', 'apply_s'}``;
'time'/'monotonic' are read just before the first change, 'apply_s' is how
long applying took. Timed faults (link flaps, anything given to
`schedule`) wait in a queue that a single-threaded runner loop drains by
calling ``injector.due()`` as often as it likes. `restore_all()` undoes
whatever is still applied. The kinds are `catalogue.FAULT_KINDS`; each is
a method of this name, in the mixin of its mechanism (`outages`, `gray`,
`rate`). See docs/faults.md.
"""
from __future__ import annotations

import heapq
import inspect
import itertools
import math
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from testbed.fabric import port_stage
from testbed.fabric.faults.base import (COMMAND_TIMEOUT_S, IFNAME, EventLog,
                                        FabricLink, FaultError,
                                        FaultUnavailable, LinkEnd, _clock,
                                        _try)
from testbed.fabric.faults.catalogue import FAULT_KINDS
from testbed.fabric.faults import gray
from testbed.fabric.faults.gray import (GRAY_METHODS, GrayFaults, GrayLoss,
                                        _check_loss)
from testbed.fabric.faults.outages import Holder, OutageFaults, _check_flap
from testbed.fabric.faults.rate import RateChange, RateFaults, _check_mbit
from testbed.fabric.net import FabricNet


@dataclass(order=True)
class ScheduledAction:
    at: float                                   # time.monotonic() when due
    seq: int
    fault: str = field(compare=False)
    params: dict = field(compare=False)
    run: Callable[[], Any] = field(compare=False, repr=False)


class FaultInjector(OutageFaults, GrayFaults, RateFaults):
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

    @property
    def missing_features(self) -> list[str]:
        """What the faults need and this machine lacks, for reports."""
        missing = []
        if not gray.tc_random_drop_available():
            missing.append('tc cls_bpf on clsact egress (gray_failure)')
        if not shutil.which('tc'):
            missing.append('tc (link_rate)')
        return missing

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

    def apply(self, fault: str, /, **params: Any) -> dict | list:
        """Apply a fault now: its kind and the method's keywords (a
        scenario's parameters become those through `catalogue.call_args`)."""
        method = self._fault_method(fault)
        try:
            inspect.signature(method).bind(**params)
        except TypeError as err:
            raise FaultError('%s: %s' % (fault, err)) from None
        return method(**params)

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
        if not isinstance(fault, str) or fault not in FAULT_KINDS:
            raise FaultError('unknown fault %r (known: %s)'
                             % (fault, ', '.join(FAULT_KINDS)))
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
        return LinkEnd(name, intf.name, pid, port_stage.queue_of(intf))

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

    def _require(self, tool: str, fault: str, without: str) -> None:
        if not shutil.which(tool):
            raise FaultUnavailable(fault, '`%s` (install %s)' % (
                tool, 'nftables' if tool == 'nft' else 'iproute2'), without)

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
