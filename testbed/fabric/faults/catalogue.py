"""Every fault kind the testbed knows, in one table.

Everything that names or describes a fault kind reads it from here: the
injector's dispatch (`FaultInjector.apply` / `schedule`), the scenario
schema (which parameters a kind takes, of which type), the runner (how a
scenario's fault becomes the injector's call), the interactive CLI (what
`fail` and `restore` do to a target), the results (after which faults
recovery is measured) and the docs (`docs/scenarios.md` carries
`markdown_table()`, checked by a test). Adding a kind means its mechanism
(a method of `FaultInjector` with the kind's name) and one entry below.

Parameters are named as a scenario writes them: a link is one ``link``
pair, a switch is ``switch``. `call_args` is the one translation into the
injector's keywords (``a, b`` and ``name``).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

# Checks across a kind's parameters: (parameter, problem) or None.
CrossCheck = Callable[[Mapping[str, Any]], 'tuple[str, str] | None']


@dataclass(frozen=True)
class Param:
    """One parameter of a fault kind. `type` says what the scenario loader
    checks against the topology: 'link' (a pair of nodes with a link
    between them), 'switch', 'plane', 'host', 'number' (within `above` /
    `most`) or 'count' (a whole number >= 1)."""
    name: str
    type: str
    above: float | None = None      # exclusive lower bound of a number
    most: float | None = None       # inclusive upper bound of a number
    optional: bool = False
    doc: str = ''


@dataclass(frozen=True)
class FaultKind:
    name: str
    target: str                     # 'link' | 'switch' | 'plane' | 'nic_port'
    params: tuple[Param, ...]
    doc: str
    undoes: str | None = None       # the kind this one undoes
    # Takes capacity away: recovery is measured after it.
    disruptive: bool = False
    check: CrossCheck | None = None

    def problem(self, params: Mapping[str, Any]) -> tuple[str, str] | None:
        """What is wrong with these (individually valid) parameters."""
        return self.check(params) if self.check else None

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params if not p.optional)

    @property
    def optional(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params if p.optional)


LINK = Param('link', 'link', doc='two node names with a link between them')
SWITCH = Param('switch', 'switch', doc='a switch of the topology')
PLANE = Param('plane', 'plane', doc='a plane number of the topology')
HOST = Param('host', 'host', doc='a host of the topology')


def _flap_check(params: Mapping[str, Any]) -> tuple[str, str] | None:
    down = params.get('down_s')
    if down is not None and down >= params['period_s']:
        return 'down_s', 'must be shorter than period_s'
    return None


_KINDS = (
    FaultKind('link_down', 'link', (LINK,), 'the link goes down (admin-down of '
              'its switch-side ports, or of its stages with AF_XDP ports; flow '
              'tables untouched)', disruptive=True),
    FaultKind('link_up', 'link', (LINK,), 'the link comes back',
              undoes='link_down'),
    FaultKind('link_flap', 'link', (
        LINK, Param('period_s', 'number', above=0, doc='seconds per cycle'),
        Param('count', 'count', doc='cycles'),
        Param('down_s', 'number', above=0, optional=True,
              doc='down part of each cycle, default half the period')),
        'down at `at + i·period_s` for `down_s`, then up, i = 0..count−1; '
        'the last up must be before `duration_s`', disruptive=True,
        check=_flap_check),
    FaultKind('switch_down', 'switch', (SWITCH,), 'every port of the switch '
              'goes down, as when it loses power', disruptive=True),
    FaultKind('switch_up', 'switch', (SWITCH,), 'the switch comes back',
              undoes='switch_down'),
    FaultKind('plane_down', 'plane', (PLANE,), 'every switch of the plane goes '
              'down', disruptive=True),
    FaultKind('plane_up', 'plane', (PLANE,), 'the plane comes back',
              undoes='plane_down'),
    FaultKind('nic_port_down', 'nic_port', (HOST, PLANE), "the host's port on "
              'that plane loses its link', disruptive=True),
    FaultKind('nic_port_up', 'nic_port', (HOST, PLANE), 'the port comes back',
              undoes='nic_port_down'),
    FaultKind('gray_failure', 'link', (
        LINK, Param('loss_pct', 'number', above=0, most=100,
                    doc='% of frames lost each way')),
        'silent random loss each way; the link stays up', disruptive=True),
    FaultKind('gray_clear', 'link', (LINK,), 'the gray loss is removed',
              undoes='gray_failure'),
    FaultKind('link_rate', 'link', (
        LINK, Param('mbit', 'number', above=0, doc='the new rate')),
        'both ends of the link reshaped to `mbit`', disruptive=True),
    FaultKind('link_rate_restore', 'link', (LINK,), 'back to the rate the '
              'fabric was built with', undoes='link_rate'),
)
FAULT_KINDS: Mapping[str, FaultKind] = {k.name: k for k in _KINDS}
# Steps a link_flap queues, logged as events of their own.
FLAP_STEPS = {'link_flap_down': True, 'link_flap_up': False}  # -> disruptive


def fault_kind(name: str) -> FaultKind:
    if name not in FAULT_KINDS:
        raise KeyError('unknown fault %r (known: %s)'
                       % (name, ', '.join(FAULT_KINDS)))
    return FAULT_KINDS[name]


def disruptive(event_fault: str) -> bool:
    """Whether a logged fault event (a kind, or a flap's step) takes
    capacity away."""
    if event_fault in FLAP_STEPS:
        return FLAP_STEPS[event_fault]
    return event_fault in FAULT_KINDS and FAULT_KINDS[event_fault].disruptive


def undo_kinds(target: str) -> tuple[str, ...]:
    """The kinds that undo a fault on this kind of target (`restore LINK`
    clears a link's outage, gray loss and rate change alike)."""
    return tuple(k.name for k in _KINDS if k.target == target and k.undoes)


def down_kind(target: str) -> str:
    return next(k.name for k in _KINDS if k.target == target
                and k.name.endswith('_down'))


def call_args(kind: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """A scenario's fault parameters as the injector method's keywords."""
    fault_kind(kind)
    args = dict(params)
    if 'link' in args:
        args['a'], args['b'] = args.pop('link')
    if 'switch' in args:
        args['name'] = args.pop('switch')
    return args


def last_step_at(kind: str, at: float, params: Mapping[str, Any]) -> float:
    """When the fault's last change happens (a flap's last up)."""
    if kind != 'link_flap':
        return at
    period = params['period_s']
    down = params.get('down_s') or period / 2
    return at + (params['count'] - 1) * period + down


def markdown_table() -> str:
    """The kinds as docs/scenarios.md lists them."""
    rows = ['| type | parameters | what happens |', '|---|---|---|']
    for kind in _KINDS:
        params = ', '.join(_param_text(p) for p in kind.params)
        rows.append('| `%s` | %s | %s |' % (kind.name, params, kind.doc))
    return '\n'.join(rows) + '\n'


def _param_text(param: Param) -> str:
    text = '`%s`' % param.name
    if param.type == 'number':
        bound = ' > %g' % param.above if param.above is not None else ''
        if param.most is not None:
            bound = ' (%g < x ≤ %g)' % (param.above or 0, param.most)
        text += bound
    elif param.type == 'count':
        text += ' ≥ 1'
    return text + (' (optional)' if param.optional else '')


if __name__ == '__main__':
    print(markdown_table(), end='')
