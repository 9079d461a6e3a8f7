"""Put a real run of the default scenario into the README.

    python scripts/readme_run.py results/link_failure_allreduce/<stamp>
    python scripts/readme_run.py --check

Copies the run's summary.json to docs/default-run/summary.json (the record
the README quotes), its goodput plot to docs/images/, and rewrites the
README's blocks between `<!-- default-run:NAME -->` and
`<!-- /default-run:NAME -->` from that record: the table `mrc-testbed run`
printed, and the health figures of MRC's row. `--check` only compares
(tests/unit/test_readme_run.py runs it), so the README cannot drift from the
record.
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from testbed.workload.report import table  # noqa: E402

README = REPO / 'README.md'
RECORD = REPO / 'docs' / 'default-run' / 'summary.json'
PLOT = REPO / 'docs' / 'images' / 'link_failure_allreduce_goodput.png'
BLOCK = re.compile(r'(<!-- default-run:(\w+) -->\n)(.*?)(<!-- /default-run:\2 -->)',
                   re.S)


def blocks(record: dict) -> dict[str, str]:
    """Block name -> its text, from the recorded summary."""
    summary = record['transports']
    mrc = summary['mrc']['health']
    return {
        'table': '```\n%s\n\nresults: %s (report.md, summary.json, '
                 'timeline.csv, events.jsonl, plots)\n```\n' % (
                     table(summary), record['results']),
        'health': 'In the run above MRC\'s endpoint loop used %.0f %% of a '
                  'core and waited %.0f %% of the run for one; the machine '
                  'was %.0f %% busy (endpoint core: %s; switch ports: %s).\n' % (
                      100 * mrc['endpoint_process_cpu'],
                      100 * mrc['endpoint_cpu_wait'],
                      100 * mrc['machine_cpu_busy'],
                      record.get('endpoint_core', 'not recorded'),
                      mrc.get('switch_ports', {}).get('type', 'system')),
    }


def rendered(text: str, record: dict) -> str:
    new = blocks(record)
    found = {m.group(2) for m in BLOCK.finditer(text)}
    if found != set(new):
        raise SystemExit('README.md: expected blocks %s, found %s'
                         % (sorted(new), sorted(found)))
    return BLOCK.sub(lambda m: m.group(1) + new[m.group(2)] + m.group(4), text)


def record_of(run: Path) -> dict:
    summary = json.loads((run / 'summary.json').read_text())
    try:
        shown = run.resolve().relative_to(REPO)
    except ValueError:
        shown = run
    return {'results': str(shown), 'endpoint_core': summary.get(
        'endpoint_core'), 'transports': summary['transports']}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('run', nargs='?', type=Path,
                        help='a results directory of the default scenario')
    parser.add_argument('--check', action='store_true',
                        help='only check that README.md matches the record')
    args = parser.parse_args(argv)
    if args.check:
        record = json.loads(RECORD.read_text())
        if rendered(README.read_text(), record) != README.read_text():
            print('README.md does not match %s: run scripts/readme_run.py '
                  'on a results directory' % RECORD.relative_to(REPO))
            return 1
        return 0
    if args.run is None:
        parser.error('give a results directory, or --check')
    record = record_of(args.run)
    RECORD.parent.mkdir(parents=True, exist_ok=True)
    RECORD.write_text(json.dumps(record, indent=1) + '\n')
    shutil.copyfile(args.run / 'goodput.png', PLOT)
    README.write_text(rendered(README.read_text(), record))
    print('README.md updated from %s' % args.run)
    return 0


if __name__ == '__main__':
    sys.exit(main())
