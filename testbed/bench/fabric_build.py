"""Fabric build / flow-install / plumbing / teardown times and memory.

    .venv/bin/python testbed/bench/fabric_build.py
    .venv/bin/python testbed/bench/fabric_build.py --repeat 3 fattree,k=4,planes=4

Prints one row per fabric (median of --repeat runs) and checks after each
teardown that nothing of ours is left. Memory is the machine's in-use memory
(MemTotal - MemAvailable, less the per-CPU free lists) and ovs-vswitchd's
resident set, from just before the build to once the fabric is ready. Not a
test: the machine is shared and noisy, so these are figures to read, not
thresholds to assert.
`measure()` is also the build part of `mrc-testbed bench`'s emulator-scale
section.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

if not __package__:            # run as a script: the repository is not on sys.path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from testbed.fabric import ovs  # noqa: E402
from testbed.fabric.clean import leftovers  # noqa: E402
from testbed.fabric.net import FabricNet  # noqa: E402
from testbed.fabric.run_lock import RunLock  # noqa: E402
from testbed.fabric.topo_spec import parse_topo_spec  # noqa: E402

SETTLE_STEP_S = 1.0
SETTLE_MB = 2.0
SETTLE_MAX_S = 20.0
DEFAULT_SPECS = ['fattree,k=4,planes=1', 'fattree,k=4,planes=2',
                 'fattree,k=4,planes=4', 'fattree,k=4,planes=8',
                 'fattree,k=8,planes=2']


def used_memory_mb() -> float:
    """Machine-wide memory in use: MemTotal - MemAvailable, less the free
    pages parked in the per-CPU lists, which MemAvailable leaves out and
    which move by tens of MB on their own (identical builds differed by
    75 MB without them, by 2 MB with)."""
    info = {}
    with open('/proc/meminfo') as f:
        for line in f:
            key, value = line.split(':', 1)
            info[key] = int(value.split()[0])          # kB
    return (info['MemTotal'] - info['MemAvailable']) / 1024 - \
        per_cpu_free_pages() * os.sysconf('SC_PAGE_SIZE') / 2**20


def per_cpu_free_pages() -> int:
    """Pages in the per-CPU free lists of every zone (/proc/zoneinfo)."""
    with open('/proc/zoneinfo') as f:
        return sum(int(line.split()[1]) for line in f
                   if line.strip().startswith('count:'))


def settled_memory_mb() -> float:
    """In-use memory once the last fabric is gone: its Python objects
    (reference cycles) collected now rather than during the next build, and
    the kernel done freeing its namespaces, which it does in the background
    (~10 MB/s here). A baseline taken before either would credit the next
    fabric with them."""
    gc.collect()
    used = used_memory_mb()
    deadline = time.monotonic() + SETTLE_MAX_S
    while time.monotonic() < deadline:
        time.sleep(SETTLE_STEP_S)
        now = used_memory_mb()
        if used - now < SETTLE_MB:
            return now
        used = now
    return used


def vswitchd_pid() -> int:
    """ovs-vswitchd's pid now: the fast teardown restarts it."""
    return int(subprocess.run(['pidof', 'ovs-vswitchd'], capture_output=True,
                              text=True).stdout.split()[0])


def vswitchd_rss_mb() -> float:
    pid = vswitchd_pid()
    with open('/proc/%d/status' % pid) as f:
        for line in f:
            if line.startswith('VmRSS:'):
                return int(line.split()[1]) / 1024
    raise RuntimeError('ovs-vswitchd %s has no VmRSS' % pid)


class HeldMachine:
    """The fabric's run lock, plus what must happen while the machine is
    ours: the memory baseline just before the build, the leak check just
    after the teardown (another fabric may start as soon as it is free)."""

    def __init__(self, lock: RunLock) -> None:
        self.lock = lock
        self.used_mb = 0.0
        self.vswitchd_mb = 0.0
        self.released_at = 0.0
        self.left: dict[str, list] = {}

    def acquire(self, *args, **kwargs) -> None:
        self.lock.acquire(*args, **kwargs)
        ovs.ensure_running()       # the baseline includes an idle ovs-vswitchd
        self.used_mb, self.vswitchd_mb = settled_memory_mb(), vswitchd_rss_mb()

    def release(self) -> None:
        self.released_at = time.monotonic()
        self.left = {k: v for k, v in leftovers().items() if v}
        self.lock.release()


def measure(spec_text: str) -> dict:
    """Build `spec_text`, sample memory once it is ready, tear it down."""
    fab = FabricNet(parse_topo_spec(spec_text))
    held = HeldMachine(fab.lock)
    fab.lock = held
    with fab:
        ready_used, ready_vswitchd = used_memory_mb(), vswitchd_rss_mb()
        stopping = time.monotonic()
    t = fab.timings
    return dict(t, ready_s=t['build_s'] + t['flows_s'] + t['plumbing_s'],
                # FabricNet's own teardown_s would include the leak check
                teardown_s=held.released_at - stopping,
                switches=len(fab.plan.switches), hosts=len(fab.plan.hosts),
                links=len(fab.topo.links()),
                memory_mb=ready_used - held.used_mb,
                vswitchd_mb=ready_vswitchd - held.vswitchd_mb,
                leftovers=held.left)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('specs', nargs='*', default=DEFAULT_SPECS)
    parser.add_argument('--repeat', type=int, default=1)
    parser.add_argument('--json', metavar='FILE')
    args = parser.parse_args()
    rows = []
    print('%-24s %8s %6s %6s %8s %8s %8s %8s %8s %8s %8s' % (
        'fabric', 'switches', 'hosts', 'links', 'build', 'flows', 'plumb',
        'ready', 'teardown', 'memory', 'vswitchd'))
    for spec in args.specs:
        runs = []
        for _ in range(args.repeat):
            run = measure(spec)
            left = run.pop('leftovers')
            if left:
                raise SystemExit('%s leaked: %s' % (spec, left))
            runs.append(run)
        row = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        row['spec'] = spec
        rows.append(row)
        print('%-24s %8d %6d %6d %7.2fs %7.2fs %7.2fs %7.2fs %7.2fs %6.0fMB '
              '%6.0fMB' % (
                  spec, row['switches'], row['hosts'], row['links'],
                  row['build_s'], row['flows_s'], row['plumbing_s'],
                  row['ready_s'], row['teardown_s'], row['memory_mb'],
                  row['vswitchd_mb']), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({'date': time.strftime(
            '%Y-%m-%d'), 'rows': rows}, indent=2))


if __name__ == '__main__':
    main()
