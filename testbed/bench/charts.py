"""The benchmark report's pictures: grouped bars with their spread, and
distributions as CDFs."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

from testbed.bench.harness import Spread  # noqa: E402
from testbed.workload.transports import colour  # noqa: E402



def grouped_bars(path: Path, groups: Mapping[str, Mapping[str, Spread]],
                 ylabel: str, title: str, scale: float = 1.0,
                 reference: float | None = None,
                 reference_label: str = '') -> Path:
    """One cluster per group, one bar per transport (its median), whiskers
    from the smallest to the largest repetition."""
    transports = list(dict.fromkeys(t for g in groups.values() for t in g))
    width = 0.8 / max(1, len(transports))
    fig, ax = plt.subplots(figsize=(9, 4))
    for transport in transports:
        xs, mids, los, his = [], [], [], []
        for g, by_transport in enumerate(groups.values()):
            shown = [t for t in transports if by_transport.get(t) is not None
                     and by_transport[t].median is not None]
            if transport not in shown:
                continue
            s = by_transport[transport]
            i = shown.index(transport)      # a group's bars stay centred
            xs.append(g + (i - (len(shown) - 1) / 2) * width)
            mids.append(s.median * scale)
            los.append((s.median - min(s.values)) * scale)
            his.append((max(s.values) - s.median) * scale)
        ax.bar(xs, mids, width, yerr=[los, his], capsize=3, label=transport,
               color=colour(transport))
    if reference is not None:
        ax.axhline(reference, color='grey', linestyle='--', linewidth=1,
                   label=reference_label)
    ax.set_xticks(range(len(groups)), list(groups))
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, loc='upper left', bbox_to_anchor=(1.01, 1))
    ax.grid(axis='y', alpha=0.3)
    return save(fig, path)


def cdfs(path: Path, series: Mapping[str, Sequence[float]], xlabel: str,
         title: str, log: bool = False) -> Path:
    fig, ax = plt.subplots(figsize=(8, 4))
    for name, values in series.items():
        ordered = sorted(values)
        if not ordered:
            continue
        ys = [(i + 1) / len(ordered) for i in range(len(ordered))]
        ax.step(ordered, ys, where='post', label='%s (n=%d)' % (
            name, len(ordered)), color=colour(name.split()[0]))
    if log:
        ax.set_xscale('symlog', linthresh=0.01)
    ax.set_xlabel(xlabel)
    ax.set_ylabel('fraction of failures')
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return save(fig, path)


def save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
