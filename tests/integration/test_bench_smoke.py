"""The benchmark harness end to end in its quick form, so it cannot rot:
every section runs on real fabrics and writes its table and plot. The
figures of a quick run are not checked (one repetition, tiny transfers on
a shared machine); what it produced is."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from testbed.bench.sections import SECTIONS
from tests.integration.leaks import leaked

REPO = Path(__file__).resolve().parents[2]


def test_quick_bench_writes_every_section(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, '-m', 'testbed.cli', 'bench', '--quick', '--out',
         str(tmp_path)], cwd=REPO, capture_output=True, text=True,
        timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = (tmp_path / 'BENCHMARKS.md').read_text()
    headings = re.findall(r'^## \d\. (.+)$', report, re.M)
    assert headings == ['Load balance', 'Failover',
                        'Failover on the routed fabric', 'Random loss',
                        'Incast', 'Scale of the emulator']
    assert 'quick smoke version' in report
    assert report.count('mrc-testbed bench --sections') >= len(SECTIONS)
    for image in re.findall(r'!\[[^\]]*\]\(([^)]+)\)', report):
        assert (tmp_path / image).stat().st_size > 1000, image
    raw = next((tmp_path / 'results' / 'bench').iterdir())
    assert sorted(p.stem for p in raw.glob('*.md')) == sorted(SECTIONS)
    assert sorted(p.stem for p in raw.glob('*.json')) == sorted(
        SECTIONS + ('sections',))           # what --resume reads
    failover = json.loads((raw / 'failover.json').read_text())
    # one base RTT per timescale: the fabric's own and the hardware profile's
    assert set(failover['base_rtt_s']) == {'own timescale', 'mrc-8x100g'}
    assert all(rtt > 0 for rtt in failover['base_rtt_s'].values())
    assert failover['trials']
    assert {t['transport'] for t in failover['trials']} == {'mrc', 'rc', 'tcp'}
    assert '[' in done.stdout and 'done in' in done.stdout   # progress shown
    assert leaked() == {}
