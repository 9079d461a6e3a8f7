"""What the signalling switch ports did during one transport's run: CE
marks, trims and real-queue drops per port, summed per link and per plane,
and sampled over time for the marks-and-trims plot.

The fabric may be reused across runs (the bench, the interactive CLI), so
everything is a difference from the counters read when the run started.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

COUNTED = ('packets', 'ce_marked', 'trimmed', 'queue_drops', 'not_ect_over')
SAMPLE_EVERY_S = 0.5      # a sample is one bpftool process: ~2 % of a core


@dataclass
class SwitchCounters:
    """Samples of a running fabric's `SignallingPorts` (or nothing, when the
    fabric does not signal)."""
    ports: object | None                  # fabric.signals.SignallingPorts
    start: dict[str, dict[str, int]] = field(default_factory=dict)
    series: list[tuple[float, dict[str, tuple[int, int]]]] = field(
        default_factory=list)             # (t, port -> (CE, trims)) so far
    _next: float = 0.0

    def begin(self) -> None:
        if self.ports is not None:
            self.start = self.ports.counters()

    def sample(self, t: float) -> None:
        """At most every SAMPLE_EVERY_S: the cumulative marks and trims."""
        if self.ports is None or t < self._next:
            return
        self._next = t + SAMPLE_EVERY_S
        self.series.append((t, {port: (row['ce_marked'], row['trimmed'])
                                for port, row in self._delta(False).items()}))

    def finish(self, t: float) -> dict[str, dict[str, int]]:
        """Per port, what this run added; a last sample is taken."""
        if self.ports is None:
            return {}
        delta = self._delta()
        self.series.append((t, {port: (row['ce_marked'], row['trimmed'])
                                for port, row in delta.items()}))
        return delta

    def _delta(self, queues: bool = True) -> dict[str, dict[str, int]]:
        now = self.ports.counters(queues)
        return {port: {k: row.get(k, 0) - self.start.get(port, {}).get(k, 0)
                       for k in COUNTED}
                for port, row in now.items()}


def by_link(per_port: dict[str, dict[str, int]],
            port_links: dict[str, tuple[str, str]]) -> dict[str, dict[str, int]]:
    """Per link 'a-b' (names sorted): both of its switch ports' counters."""
    out: dict[str, Counter] = {}
    for port, row in per_port.items():
        if port in port_links:
            name = '-'.join(sorted(port_links[port]))
            out.setdefault(name, Counter()).update(row)
    return {name: dict(c) for name, c in sorted(out.items())}


def by_plane(per_port: dict[str, dict[str, int]],
             port_planes: dict[str, int]) -> dict[int, dict[str, int]]:
    out: dict[int, Counter] = {}
    for port, row in per_port.items():
        if port in port_planes:
            out.setdefault(port_planes[port], Counter()).update(row)
    return {plane: dict(c) for plane, c in sorted(out.items())}
