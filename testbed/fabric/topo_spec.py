"""Topology specs in Mininet's ``name,key=value`` convention.

``fattree,k=4,planes=2`` or ``leafspine,leaves=4,spines=4,hosts=2,planes=4``;
an optional ``bw=<Mbit/s>`` shapes every link, ``delay=<ms>`` adds netem
delay, ``ecn=1`` RED/ECN marking and ``mtu=<bytes>`` sets every link's MTU
(1,500 unless given; ``mtu=4096`` carries the hardware's 4 KB packets). On
a shaped fabric the switch ports mark CE and trim
(`testbed.fabric.signals`): ``mark=0`` / ``trim=0`` turn either off,
``mark_kb=`` / ``trim_kb=`` set their thresholds, ``mark_last=1`` marks the
last hop into a host too (a RoCE fabric, for DCQCN). ``afxdp=1`` builds
AF_XDP switch ports polled by a PMD thread (`testbed.fabric.port_stage`),
``afxdp=auto`` builds them where they fit (`FabricNet`). Whether this
kernel can apply them is decided when a fabric is built
(`testbed.fabric.link_options`, `FabricNet`), not here: parsing stays free
of side effects and of root.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass

from mininet.topo import Topo

from testbed.topologies.fattree import MultiPlaneFatTree
from testbed.topologies.leafspine import MultiPlaneLeafSpine

TOPOLOGIES: dict[str, type[Topo]] = {
    'fattree': MultiPlaneFatTree,
    'leafspine': MultiPlaneLeafSpine,
}
DEFAULT_SPEC = 'fattree,k=4,planes=2'
DECIMAL_KEYS = ('bw', 'delay', 'mark_kb', 'trim_kb')  # Mbit/s, ms, kB
FLAG_KEYS = ('ecn', 'mark', 'trim', 'mark_last', 'afxdp')     # 0 or 1
AUTO = 'auto'
AUTO_KEYS = ('afxdp',)          # ... or auto: the fabric decides when it is built
Value = float | int | str


class TopoSpecError(ValueError):
    """A topology spec that names no topology or gives it bad parameters."""


@dataclass(frozen=True)
class TopoSpec:
    name: str
    params: tuple[tuple[str, Value], ...]

    def __str__(self) -> str:
        return ','.join([self.name] + ['%s=%s' % kv for kv in self.params])

    def kwargs(self) -> dict[str, Value]:
        return dict(self.params)

    def build(self) -> Topo:
        try:
            return TOPOLOGIES[self.name](**self.kwargs())
        except ValueError as err:
            raise TopoSpecError(str(err)) from None


def parse_topo_spec(text: str) -> TopoSpec:
    """Parse and validate a spec; every refusal names the offending part."""
    name, *pairs = [part.strip() for part in text.strip().split(',')]
    if name not in TOPOLOGIES:
        raise TopoSpecError('unknown topology %r (known: %s)'
                            % (name, ', '.join(sorted(TOPOLOGIES))))
    allowed = _parameters(TOPOLOGIES[name])
    params: dict[str, Value] = {}
    for pair in pairs:
        key, sep, value = pair.partition('=')
        if not sep or key not in allowed:
            raise TopoSpecError('%s: unknown parameter %r (allowed: %s)'
                                % (name, pair, ', '.join(allowed)))
        params[key] = _number(name, key, value)
    spec = TopoSpec(name, tuple(sorted(params.items())))
    spec.build()  # the Topo's own checks (k even, planes 1..8, ...)
    return spec


def _parameters(cls: type[Topo]) -> list[str]:
    return [p for p in inspect.signature(cls.build).parameters if p != 'self']


def _number(name: str, key: str, value: str) -> Value:
    if key in FLAG_KEYS:
        return _flag(name, key, value)
    decimal = key in DECIMAL_KEYS
    try:
        number: float | int = float(value) if decimal else int(value)
    except ValueError:
        raise TopoSpecError('%s: %s=%r is not a %s' % (
            name, key, value, 'number' if decimal else 'whole number')
        ) from None
    if number <= 0:
        raise TopoSpecError('%s: %s must be positive, got %s'
                            % (name, key, value))
    return number


def _flag(name: str, key: str, value: str) -> int | str:
    if key in AUTO_KEYS and value == AUTO:
        return AUTO
    if value not in ('0', '1'):
        raise TopoSpecError('%s: %s=%r must be 0 or 1%s' % (
            name, key, value, ' or auto' if key in AUTO_KEYS else ''))
    return int(value)
