"""The README quotes a real run of the default scenario: its table and
health figures are rendered from the recorded summary
(docs/default-run/summary.json) by scripts/readme_run.py, never typed."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def script():
    spec = importlib.util.spec_from_file_location(
        'readme_run', REPO / 'scripts' / 'readme_run.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_readme_matches_the_recorded_run():
    assert script().main(['--check']) == 0


def test_the_record_is_a_trusted_run_of_the_default_scenario():
    record = json.loads((REPO / 'docs/default-run/summary.json').read_text())
    assert 'link_failure_allreduce' in record['results']
    assert all(m['trusted'] for m in record['transports'].values())


def test_a_readme_without_the_blocks_is_refused():
    module = script()
    record = json.loads(module.RECORD.read_text())
    with pytest.raises(SystemExit, match='expected blocks'):
        module.rendered('no blocks here\n', record)
