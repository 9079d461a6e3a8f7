"""Link-rate changes: the HTB class 5:1 that Mininet's TCLink puts under
root qdisc 5:0, changed in place on both ends of a link; on a fabric built
without ``bw=`` an HTB of that same layout is added, and removed again on
restore."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from testbed.fabric.faults.base import FabricLink, FaultError, LinkEnd, _clock, _exists

HTB_ROOT, HTB_CLASS = '5:0', '5:1'  # Mininet TCLink's HTB layout
HTB_BURST = '15k'                  # TCLink's burst, for HTB we add ourselves
MIN_MBIT = 0.001                   # tc's rate resolution is 1 kbit/s


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


class RateFaults:
    """The link-rate faults of `FaultInjector` (a mixin)."""

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
                change.original[end.intf] = self._read_htb(end.queue_end())
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

    def _signal_port(self, end: LinkEnd):
        """The fabric's signals, when this end is a signalling switch port
        (its HTB has a control and a data class under 5:1, and its virtual
        queue must drain at the new rate too)."""
        signals = self.fab.signals
        if end.pid is None and signals is not None and signals.handles(end.intf):
            return signals
        return None

    def _set_rate(self, end: LinkEnd, mbit: float,
                  original: HtbClass | None) -> None:
        signals = self._signal_port(end)
        if signals is not None:
            signals.set_rate(end.intf, mbit * 1e6)
            return
        rate = '%.3fmbit' % mbit
        queue = end.queue_end()
        dev = ['dev', queue.intf]
        if original is None:
            self._run(queue.pid, ['tc', 'qdisc', 'replace', *dev, 'root',
                                  'handle', HTB_ROOT, 'htb', 'default', '1'])
            self._run(queue.pid, ['tc', 'class', 'replace', *dev, 'parent',
                                  HTB_ROOT, 'classid', HTB_CLASS, 'htb', 'rate',
                                  rate, 'burst', HTB_BURST])
            return
        self._run(queue.pid, ['tc', 'class', 'change', *dev, 'parent', HTB_ROOT,
                              'classid', HTB_CLASS, 'htb', 'rate', rate,
                              'ceil', rate, 'burst', original.burst,
                              'cburst', original.cburst])

    def _restore_rate(self, change: RateChange) -> None:
        for end in change.link.ends:
            if end.intf not in change.original or not _exists(end):
                continue        # never changed, or gone with the fabric
            original = change.original[end.intf]
            signals = self._signal_port(end)
            if signals is not None:
                signals.set_rate(end.intf, signals.rate_bps)
                continue
            queue = end.queue_end()
            if original is None:
                self._run(queue.pid, ['tc', 'qdisc', 'del', 'dev', queue.intf,
                                      'root'])
                continue
            self._run(queue.pid, [
                'tc', 'class', 'change', 'dev', queue.intf, 'parent', HTB_ROOT,
                'classid', HTB_CLASS, 'htb', 'rate', original.rate, 'ceil',
                original.ceil, 'burst', original.burst, 'cburst',
                original.cburst])


_HTB_FIELD = re.compile(r' (rate|ceil|burst|cburst) (\S+)')


def _parse_htb(line: str, end: LinkEnd) -> HtbClass:
    fields = dict(_HTB_FIELD.findall(line))
    try:
        return HtbClass(fields['rate'], fields['ceil'], fields['burst'],
                        fields['cburst'])
    except KeyError:
        raise FaultError('%s: cannot read HTB class: %s'
                         % (end.where(), line)) from None


def _check_mbit(mbit: float) -> float:
    if isinstance(mbit, bool) or not isinstance(mbit, (int, float)) \
            or not math.isfinite(mbit) or mbit < MIN_MBIT:
        raise FaultError('mbit must be a rate of at least %g Mbit/s, got %r'
                         % (MIN_MBIT, mbit))
    return float(mbit)
