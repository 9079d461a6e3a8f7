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


def outcomes(path: Path, series: Mapping[str, Sequence[tuple[float, float | None]]],
             xlabel: str, ylabel: str, title: str) -> Path:
    """One point per trial (x, y) on log-log axes, one colour per series; a
    trial with no y (it never recovered) is a cross on a 'never' line above
    the rest."""
    fig, ax = plt.subplots(figsize=(8, 4))
    seen = [y for pts in series.values() for _, y in pts if y]
    never = 2 * max(seen, default=1.0)
    for offset, (name, points) in enumerate(series.items()):
        shift = 1 + 0.06 * (offset - (len(series) - 1) / 2)   # side by side
        ok = [(x * shift, max(y, 1e-3)) for x, y in points if y is not None]
        bad = [x * shift for x, y in points if y is None]
        ax.scatter([x for x, _ in ok], [y for _, y in ok], label=name,
                   color=colour(name), alpha=0.8)
        if bad:
            ax.scatter(bad, [never] * len(bad), marker='x', color=colour(name),
                       label='%s: never (QP error or not by the end)' % name)
    ax.axhline(never, color='grey', lw=0.5, ls=':')
    ax.set_xscale('log')
    ax.set_yscale('log')
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
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
