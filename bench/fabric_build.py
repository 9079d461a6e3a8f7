"""Fabric build / flow-install / plumbing / teardown times.

    bash scripts/setup.sh bench            # or: .venv/bin/python bench/fabric_build.py
    .venv/bin/python bench/fabric_build.py --repeat 3 fattree,k=4,planes=4

Prints one row per fabric (median of --repeat runs) and checks after each
teardown that nothing of ours is left. Not a test: the machine is shared and
noisy, so these are figures to read, not thresholds to assert.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed.fabric.clean import leftovers  # noqa: E402
from testbed.fabric.net import FabricNet  # noqa: E402
from testbed.fabric.topo_spec import parse_topo_spec  # noqa: E402

DEFAULT_SPECS = ['fattree,k=4,planes=1', 'fattree,k=4,planes=2',
                 'fattree,k=4,planes=4', 'fattree,k=4,planes=8',
                 'fattree,k=8,planes=2']
PHASES = ['build_s', 'flows_s', 'plumbing_s', 'teardown_s']


def measure(spec_text: str) -> dict[str, float]:
    fab = FabricNet(parse_topo_spec(spec_text))
    with fab:
        pass
    left = {k: v for k, v in leftovers().items() if v}
    if left:
        raise SystemExit('%s leaked: %s' % (spec_text, left))
    t = fab.timings
    return dict(t, ready_s=t['build_s'] + t['flows_s'] + t['plumbing_s'],
                switches=len(fab.plan.switches), hosts=len(fab.plan.hosts),
                links=len(fab.topo.links()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('specs', nargs='*', default=DEFAULT_SPECS)
    parser.add_argument('--repeat', type=int, default=1)
    parser.add_argument('--json', metavar='FILE')
    args = parser.parse_args()
    rows = []
    header = '%-24s %8s %6s %6s %8s %8s %8s %8s %8s' % (
        'fabric', 'switches', 'hosts', 'links', 'build', 'flows', 'plumb',
        'ready', 'teardown')
    print(header)
    for spec in args.specs:
        runs = [measure(spec) for _ in range(args.repeat)]
        row = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        row['spec'] = spec
        rows.append(row)
        print('%-24s %8d %6d %6d %7.2fs %7.2fs %7.2fs %7.2fs %7.2fs' % (
            spec, row['switches'], row['hosts'], row['links'], row['build_s'],
            row['flows_s'], row['plumbing_s'], row['ready_s'],
            row['teardown_s']), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({'date': time.strftime(
            '%Y-%m-%d'), 'rows': rows}, indent=2))


if __name__ == '__main__':
    main()
