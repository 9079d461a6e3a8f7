"""Packets per second of the sans-IO endpoint core on one CPU core.

    python testbed/bench/endpoint_core.py                    # 5 runs of one 8 MiB WRITE
    python testbed/bench/endpoint_core.py --size 32 --repeat 3
    python testbed/bench/endpoint_core.py --profile          # cProfile of one run, top functions
    python testbed/bench/endpoint_core.py --cc nscc          # with NSCC congestion control running

Same set-up as tests/unit/test_qp_throughput.py: sender and receiver in one in-process
loopback, no loss, 2 planes x 4 paths, 128 active EVs. Every data packet is encoded (CRC
included), decoded, placed and acknowledged, every SACK encoded and decoded, so the figures
cover both ends of the full protocol plus the loopback's event handling. The QPs' default CC
profile is disabled (as in the test); --cc nscc runs NSCC with its UEC defaults for 100 Gbit/s
and the loopback's 40 us RTT. Not a test: the machine is shared and noisy, so the best and
the median of the runs are printed.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import sys
import time
from typing import Any
from pathlib import Path

if not __package__:            # run as a script: the repository is not on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from testbed import native_core  # noqa: E402
from testbed.nic.cc import NSCC_ALGORITHM, CcProfile, NsccConfig  # noqa: E402
from testbed.nic.ev_table import EvTableConfig  # noqa: E402
from testbed.nic.loopback import Loopback  # noqa: E402
from testbed.nic.qp_pair import RKEY, done, make_pair, payload  # noqa: E402


LOOPBACK_RTT_S = 40e-6         # Loopback's default one-way delay_s is 20 us


def cc_profile(name: str) -> CcProfile:
    if name == "none":
        return CcProfile()
    return CcProfile(NSCC_ALGORITHM, NsccConfig.defaults(100e9, LOOPBACK_RTT_S, 1500, True))


class TimedEndpoint:
    """An endpoint whose packet-path calls add up the time spent in them: the core's own
    share of a run, apart from the loopback's event heap (interpreted Python), which stands
    in for what a real run spends in the socket runtime and the kernel."""

    def __init__(self, endpoint: Any) -> None:
        self.endpoint, self.addr, self.spent_s = endpoint, endpoint.addr, 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.endpoint, name)

    def _timed(self, call: Any, *args: Any) -> Any:
        started = time.perf_counter()
        try:
            return call(*args)
        finally:
            self.spent_s += time.perf_counter() - started

    def on_packet(self, *args: Any) -> Any:
        return self._timed(self.endpoint.on_packet, *args)

    def poll_tx(self, *args: Any) -> Any:
        return self._timed(self.endpoint.poll_tx, *args)

    def on_timer(self, *args: Any) -> Any:
        return self._timed(self.endpoint.on_timer, *args)

    def next_deadline(self) -> Any:
        return self._timed(self.endpoint.next_deadline)


def run_once(size: int, data: bytes, cc: str = "none", timed: bool = False) -> dict[str, float]:
    """One WRITE of `size` bytes from A to B; rates per second of wall time. `timed`: also
    `core_pps`, packets per second of the time spent inside the two endpoints (the timing
    slows the run's wall-time figures: it is a run of its own)."""
    pair = make_pair(mr_size=size, ev_table=EvTableConfig(active_count=128, backup_per_plane=8),
                     cc_profile=cc_profile(cc))
    pair.qa.post_write(data, 0, RKEY)
    endpoints = [TimedEndpoint(pair.a), TimedEndpoint(pair.b)] if timed else [pair.a, pair.b]
    loop = Loopback(endpoints)
    started = time.perf_counter()
    loop.run(stop=done(pair.a))
    elapsed = time.perf_counter() - started
    core_s = sum(e.spent_s for e in endpoints) if timed else elapsed
    if bytes(pair.mr.buf) != data:
        raise SystemExit("payload mismatch: the core is broken, figures are meaningless")
    data_packets = pair.qa.counters.packets_sent
    sacks = pair.qb.counters.sacks_sent
    return {
        "elapsed_s": elapsed,
        "data_pps": data_packets / elapsed,
        "sack_pps": sacks / elapsed,
        "total_pps": (data_packets + sacks) / elapsed,
        "core_s": core_s,
        "core_data_pps": data_packets / core_s,
        "core_pps": (data_packets + sacks) / core_s,
        "mib_s": size / elapsed / 2**20,
        "data_packets": data_packets,
        "sacks": sacks,
    }


def measure(size_mib: int, repeat: int, cc: str = "none",
            timed: bool = False) -> list[dict[str, float]]:
    """`repeat` runs of a `size_mib` MiB WRITE, after a warm-up run (imports, allocator,
    caches). Also the endpoint part of `mrc-testbed bench`'s emulator-scale section."""
    size = size_mib << 20
    data = payload(size)
    run_once(size, data, cc)
    return [run_once(size, data, cc, timed) for _ in range(repeat)]


def report(label: str, r: dict[str, float]) -> None:
    print(f"{label:>7}: {r['data_pps']:>9,.0f} data pkt/s + {r['sack_pps']:>8,.0f} SACK/s = "
          f"{r['total_pps']:>9,.0f} pkt/s, {r['mib_s']:6.1f} MiB/s payload "
          f"({r['elapsed_s']:.3f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8, help="WRITE size in MiB (default 8)")
    parser.add_argument("--repeat", type=int, default=5, help="runs (default 5)")
    parser.add_argument("--profile", action="store_true", help="cProfile one run instead")
    parser.add_argument("--top", type=int, default=30, help="functions shown with --profile")
    parser.add_argument("--cc", choices=("none", "nscc"), default="none",
                        help="congestion control of the QPs (default none, as in the test)")
    parser.add_argument("--json", action="store_true",
                        help="print the runs and the core that ran them as JSON")
    args = parser.parse_args()
    if args.profile:
        size = args.size << 20
        data = payload(size)
        profiler = cProfile.Profile()
        profiler.enable()
        run_once(size, data, args.cc)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.top)
        return
    runs = measure(args.size, args.repeat, args.cc)
    if args.json:
        print(json.dumps({"core": native_core.status(), "runs": runs}))
        return
    first = runs[0]
    print(f"sans-IO core ({native_core.status()}), sender+receiver on one core, CC {args.cc}: "
          f"{args.size} MiB WRITE = "
          f"{first['data_packets']:.0f} data packets + {first['sacks']:.0f} SACKs, "
          f"{args.repeat} runs")
    report("best", max(runs, key=lambda r: r["total_pps"]))
    median = {key: statistics.median(r[key] for r in runs) for key in first}
    report("median", median)
    timed = measure(args.size, args.repeat, args.cc, timed=True)
    core = {key: statistics.median(r[key] for r in timed)
            for key in ("core_data_pps", "core_pps", "core_s", "elapsed_s")}
    print(f"   core: {core['core_data_pps']:>9,.0f} data pkt/s, {core['core_pps']:>9,.0f} pkt/s "
          f"of the time inside the endpoints (median of {args.repeat} timed runs; "
          f"{core['core_s'] / core['elapsed_s']:.0%} of such a run, the rest the loopback's "
          "event heap and the timing)")


if __name__ == "__main__":
    main()
