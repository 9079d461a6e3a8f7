"""The run's pictures (PNG, matplotlib without a display)."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # noqa: E402

from testbed.workload.metrics import smoothed  # noqa: E402
from testbed.workload.runner import BIN_S, TransportRun  # noqa: E402
from testbed.workload.transports import colour  # noqa: E402



def _first_reps(runs: list[TransportRun]) -> list[TransportRun]:
    return [r for r in runs if r.repetition == 0]


def goodput_plot(path: Path, runs: list[TransportRun], title: str) -> None:
    fig, ax = plt.subplots(figsize=(9, 4))
    for run in _first_reps(runs):
        mbps = smoothed([b * 8 / BIN_S / 1e6 for b in run.goodput_bins], BIN_S)
        ax.plot([(i + 1) * BIN_S for i in range(len(mbps))], mbps,
                label=run.transport, color=colour(run.transport))
    faults = {f for run in runs for f in run.fault_times}
    for at, kind in sorted(faults):
        ax.axvline(at, color='grey', linestyle='--', linewidth=0.8)
        ax.annotate(kind, (at, ax.get_ylim()[1]), rotation=90, fontsize=7,
                    va='top', ha='right', color='grey')
    ax.set(xlabel='time (s)', ylabel='goodput (Mbit/s, 100 ms mean)',
           title=title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


HEATMAP_BIN_S = 0.1


def _coarse(series: list[float], factor: int) -> list[float]:
    """Mbit/s per coarser bin, from bytes per timeline bin."""
    return [sum(series[i:i + factor]) * 8 / (factor * BIN_S) / 1e6
            for i in range(0, len(series), factor)]


def plane_plot(path: Path, runs: list[TransportRun]) -> None:
    reps = _first_reps(runs)
    factor = round(HEATMAP_BIN_S / BIN_S)
    fig, axes = plt.subplots(len(reps), 1, figsize=(9, 1.8 * len(reps) + 0.6),
                             squeeze=False, sharex=True)
    for ax, run in zip(axes[:, 0], reps):
        planes = sorted(run.plane_bins)
        grid = [_coarse(run.plane_bins[p], factor) for p in planes]
        width = len(grid[0]) if grid else 0
        if width:
            image = ax.imshow(grid, aspect='auto', interpolation='nearest',
                              extent=(0, width * HEATMAP_BIN_S,
                                      len(planes) - 0.5, -0.5),
                              cmap='viridis')
            fig.colorbar(image, ax=ax, label='Mbit/s sent')
        ax.set_yticks(range(len(planes)), [str(p) for p in planes])
        ax.set(ylabel='%s\nplane' % run.transport)
    axes[-1, 0].set_xlabel('time (s)')
    fig.suptitle('per-plane load')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


SIGNAL_LINKS = 16          # the busiest links the marks-and-trims plot shows


def signals_plot(path: Path, runs: list[TransportRun]) -> bool:
    """CE marks and trims per link over time (each transport's first
    repetition, the busiest links); False when no run had signals."""
    reps = [r for r in _first_reps(runs) if r.switch_series]
    if not reps:
        return False
    fig, axes = plt.subplots(len(reps), 2, figsize=(11, 2.6 * len(reps) + 0.6),
                             squeeze=False)
    for row, run in zip(axes, reps):
        times, per_link = _signal_rates(run)
        links = sorted(per_link, key=lambda l: -sum(map(sum, per_link[l])))
        links = links[:SIGNAL_LINKS]
        for ax, kind, which in ((row[0], 'CE marks', 0), (row[1], 'trims', 1)):
            grid = [[cell[which] for cell in per_link[l]] for l in links]
            if grid and times:
                image = ax.imshow(grid, aspect='auto', interpolation='nearest',
                                  extent=(0, times[-1], len(links) - 0.5, -0.5),
                                  cmap='inferno')
                fig.colorbar(image, ax=ax, label='%s per s' % kind)
            ax.set_yticks(range(len(links)), links, fontsize=6)
            ax.set(title='%s: %s per link' % (run.transport, kind),
                   xlabel='time (s)')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _signal_rates(run: TransportRun) -> tuple[list[float],
                                             dict[str, list[tuple[float, float]]]]:
    """Sample times, and per link the (CE, trims) per second between them."""
    series = run.switch_series
    times = [t for t, _ in series]
    per_link: dict[str, list[tuple[float, float]]] = {}
    for (t0, before), (t1, after) in zip(series, series[1:]):
        span = max(t1 - t0, 1e-9)
        sums: dict[str, list[float]] = {}
        for port, (ce, trims) in after.items():
            if port not in run.port_links:
                continue
            name = '-'.join(sorted(run.port_links[port]))
            ce0, trims0 = before.get(port, (0, 0))
            cell = sums.setdefault(name, [0.0, 0.0])
            cell[0] += (ce - ce0) / span
            cell[1] += (trims - trims0) / span
        for name, (ce, trims) in sums.items():
            per_link.setdefault(name, []).append((ce, trims))
    return times[1:], per_link


def path_plot(path: Path, runs: list[TransportRun], paths: list[str]) -> None:
    reps = [r for r in _first_reps(runs) if r.path_bytes]
    if not reps or not paths:
        return
    grid = [[run.path_bytes.get(p, 0) / 1e6 for p in paths] for run in reps]
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(reps) + 1.5))
    image = ax.imshow(grid, aspect='auto', interpolation='nearest',
                      cmap='magma')
    ax.set_yticks(range(len(reps)), [r.transport for r in reps])
    ax.set_xlabel('path (%d candidate uSID carriers)' % len(paths))
    fig.colorbar(image, ax=ax, label='MB sent')
    ax.set_title('per-path load')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def cdf_plot(path: Path, runs: list[TransportRun], steps: dict[str, list]
             ) -> None:
    fig, ax = plt.subplots(figsize=(6, 4))
    for transport, values in steps.items():
        if values:
            ordered = sorted(values)
            ax.step(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))],
                    where='post', label=transport,
                    color=colour(transport))
    ax.set(xlabel='step / flow completion time (s)', ylabel='CDF',
           title='completion times')
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def comparison_plot(path: Path, summary: dict[str, dict]) -> None:
    names = list(summary)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    left.bar(names, [summary[n]['goodput_mbps'] for n in names],
             color=[colour(n) for n in names])
    left.set(ylabel='goodput (Mbit/s)', title='goodput')
    right.bar(names, [summary[n]['flows_done'] / max(summary[n]['flows'], 1)
                      for n in names], color=[colour(n) for n in names])
    right.set(ylabel='fraction of flows completed', ylim=(0, 1.05),
              title='completion')
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
