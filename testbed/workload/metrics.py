"""Numbers a run reports, computed from what it recorded."""
from __future__ import annotations

import math
from collections.abc import Sequence

RECOVERED_FRACTION = 0.9     # goodput back to >= 90% of its pre-fault level
PRE_FAULT_WINDOW_S = 1.0
SMOOTHING_S = 0.1


def jain_index(values: Sequence[float]) -> float | None:
    """Jain's fairness index: 1.0 when all equal, 1/n when one takes all."""
    values = list(values)
    if not values or not any(values):
        return None
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def smoothed(series: Sequence[float], bin_s: float,
             window_s: float = SMOOTHING_S) -> list[float]:
    """Trailing moving average over `window_s` of a per-bin series."""
    width = max(1, round(window_s / bin_s))
    out, total = [], 0.0
    for i, value in enumerate(series):
        total += value
        if i >= width:
            total -= series[i - width]
        out.append(total / min(i + 1, width))
    return out


def recovery_time(goodput: Sequence[float], bin_s: float, fault_s: float,
                  end_s: float | None = None,
                  fraction: float = RECOVERED_FRACTION,
                  hold_s: float = 0.0) -> float | None:
    """Seconds from a fault until smoothed goodput is back to `fraction`
    (90%) of its level in the second before it; None if it never came back
    (or there was no traffic before the fault to compare with). A fault
    that takes capacity away for good (a NIC port) passes a lower
    `fraction`: what is left of the level. `hold_s`: back means back for
    that long (or until the end), so a short return before the fault has
    fully struck is not read as its recovery."""
    curve = smoothed(goodput, bin_s)
    first = int(fault_s / bin_s)
    before = curve[max(0, first - int(PRE_FAULT_WINDOW_S / bin_s)):first]
    if not before or sum(before) == 0:
        return None
    level = fraction * sum(before) / len(before)
    last = len(curve) if end_s is None else min(len(curve), int(end_s / bin_s))
    i = first
    while i < last and curve[i] >= level:     # not (yet) hurt by the fault
        i += 1
    if i == last:
        return 0.0
    hold = max(1, round(hold_s / bin_s))
    for i in range(i, last):
        if all(c >= level for c in curve[i:min(last, i + hold)]):
            return (i + 1) * bin_s - fault_s
    return None
