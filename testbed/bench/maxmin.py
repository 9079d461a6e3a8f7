"""The max-min fair fluid model of flows on fixed paths: what a permutation's
flows would take if every link were shared out max-min fairly among the flows
crossing it, at every moment, with no queue, no loss and no congestion-control
dynamics (the ideal a single-path transport's congestion control aims for).

Each flow has a size (bytes) and a path (the links it crosses, a link being
any hashable name with a capacity in bit/s). Rates are found by progressive
filling (Bertsekas and Gallager, "Data Networks", section 6.5.2): the link
whose remaining capacity divided among its unfixed flows is smallest fixes
those flows at that share, until every flow has a rate. Time advances to the
next flow's end, which frees its share, and the rates are found again.
Everything here is arithmetic: the bench gives it the paths its flows took.
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

Link = Hashable


@dataclass(frozen=True)
class Flow:
    size_bytes: float
    path: tuple[Link, ...]


def max_min_rates(flows: Sequence[Flow], capacity_bps: Mapping[Link, float]
                  ) -> list[float]:
    """Each flow's max-min fair rate, bit/s (progressive filling)."""
    unknown = {link for f in flows for link in f.path} - set(capacity_bps)
    if unknown:
        raise ValueError('links without a capacity: %s' % sorted(map(str, unknown)))
    rates: list[float | None] = [None] * len(flows)
    left = dict(capacity_bps)
    while None in rates:
        open_on = {link: [i for i, f in enumerate(flows)
                          if rates[i] is None and link in f.path] for link in left}
        share, link = min(((left[link] / len(ids), link)
                           for link, ids in open_on.items() if ids),
                          key=lambda pair: pair[0])
        for i in open_on[link]:
            rates[i] = share
            for other in flows[i].path:
                left[other] -= share
    return [r for r in rates if r is not None]


def completion_times(flows: Sequence[Flow], capacity_bps: Mapping[Link, float]
                     ) -> list[float]:
    """Each flow's completion time, s, all starting at 0."""
    remaining = [f.size_bytes * 8 for f in flows]
    done: list[float | None] = [None] * len(flows)
    now = 0.0
    while None in done:
        active = [i for i in range(len(flows)) if done[i] is None]
        rates = max_min_rates([flows[i] for i in active], capacity_bps)
        step = min(remaining[i] / r for i, r in zip(active, rates))
        now += step
        for i, rate in zip(active, rates):
            remaining[i] -= rate * step
            if remaining[i] <= 1e-9 * flows[i].size_bytes * 8:
                done[i] = now
    return [t for t in done if t is not None]
