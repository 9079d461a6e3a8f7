"""Links, switches, planes and NIC ports down and up, and link flaps.

*Down* is admin-down of the switch-side veth of a link: both ends of a
switch-to-switch link; on a host link only the switch end, so the host's
port sees carrier loss like a real NIC whose peer went dark. Taking the
host end admin-down would make its kernel flush the port's IPv6 address,
routes and static gateway neighbour, which a real NIC keeps.

On a staged fabric (afxdp=1, testbed/fabric/port_stage.py) the link's two
stages go down instead, every port on it losing carrier, after OVS was told
to drop what it would send into the link's switch ports: an AF_XDP port
holds what it cannot send and sends it once back up (`port_stage.cut` says
how that was measured), a burst of stale packets no failed link sends.

A link is down while at least one fault holds it down, so overlapping
faults (a link inside a downed plane, say) compose and undo independently.
"""
from __future__ import annotations

import math
import os
from collections.abc import Callable

from pyroute2 import IPRoute

from testbed.fabric import port_stage
from testbed.fabric.faults.base import FabricLink, FaultError, _clock

Holder = tuple  # who holds a link down: ('link',), ('switch', name), ...


class OutageFaults:
    """The down/up faults of `FaultInjector` (a mixin: names, events and the
    queue are the injector's)."""

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
        """Links down or up: the switch-side ends' admin state, or a staged
        link's cut (port_stage.cut). All in the root namespace."""
        if not links:
            return
        with IPRoute() as ipr:
            for end in (e for l in links if not l.staged for e in l.switch_ends()):
                index = ipr.link_lookup(ifname=end.intf)
                if not index:
                    if missing_ok:
                        continue
                    raise FaultError('%s: no such interface' % end.where())
                ipr.link('set', index=index[0], state='up' if up else 'down')
        staged = [l for l in links if l.staged and not (missing_ok and _gone(l))]
        if staged:
            port_stage.cut([e.queue for l in staged for e in l.ends],
                           [(e.node, e.intf) for l in staged for e in l.switch_ends()], up)


def _cut_devices(link: FabricLink) -> list[str]:
    """What goes admin-down to take the link down: its switch-side ends, or
    the two stages of a staged link."""
    return [e.queue for e in link.ends] if link.staged else \
        [e.intf for e in link.switch_ends()]


def _gone(link: FabricLink) -> bool:
    """A staged link whose stages a stopped fabric took with it."""
    return not all(os.path.exists('/sys/class/net/' + e.queue) for e in link.ends)


def _admin_detail(state: str, changed: list[FabricLink], total: int) -> str:
    if not changed:
        return 'no link changed state (%d still held by other faults or ' \
               'already %s)' % (total, state)
    text = 'admin %s: %s' % (state, ', '.join(
        name for l in changed for name in _cut_devices(l)))
    if len(changed) < total:
        text += ' (%d more held by other faults)' % (total - len(changed))
    return text


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
