"""The benchmark harness end to end in its smoke form (the quick one cut to
one trial of each kind a section reports), so it cannot rot: every section
runs on real fabrics and writes its table and plot. The figures of a smoke
run are not checked (one repetition, tiny transfers on a shared machine);
what it produced is."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.bench.sections import SECTIONS
from tests.integration.leaks import leaked
from tests.integration.time_limits import BASE_S, build_allowance, run_allowance

REPO = Path(__file__).resolve().parents[2]


# What the smoke run builds and runs, in a child process: the sections' 11
# fabrics (the emulator-scale section's build, capacity probe and fidelity
# trial among them; none with AF_XDP ports, none over the 160 ports of
# fattree,k=4,planes=2) and 18 trials, none with a scenario longer than the
# incast section's 30 s (the others' 5-17 s), each run once. ~4 min seen.
SMOKE_S = 11 * build_allowance(160, afxdp=False) + 18 * run_allowance(30)


@pytest.mark.slow
@pytest.mark.time_limit(BASE_S + SMOKE_S, why='the smoke bench in a child')
def test_smoke_bench_writes_every_section(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, '-m', 'testbed.cli', 'bench', '--smoke', '--out',
         str(tmp_path)], cwd=REPO, capture_output=True, text=True,
        timeout=SMOKE_S)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = (tmp_path / 'BENCHMARKS.md').read_text()
    headings = re.findall(r'^## \d\. (.+)$', report, re.M)
    assert headings == ['Load balance', 'Failover',
                        'Failover on the routed fabric', 'Random loss',
                        'Incast', 'Scale of the emulator']
    assert 'mrc-testbed bench --smoke' in report and 'not for publishing' in report
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
    # The load-balance model ran on ECMP's routed hash draws: on two planes a
    # single-path flow has one of its host's two NIC ports, so even max-min
    # fair sharing gives it at most half the ideal.
    (ecmp,) = [t for ts in json.loads((raw / 'load_balance.json').read_text()).values()
               for t in ts if t['transport'] == 'ecmp']
    assert 0 < ecmp['model_fraction'] <= 0.5 + 1e-9, ecmp
    assert '[' in done.stdout and 'done in' in done.stdout   # progress shown
    assert leaked() == {}
