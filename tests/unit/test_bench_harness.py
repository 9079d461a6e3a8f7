"""The benchmark harness's arithmetic and argument checks (no fabric)."""
from __future__ import annotations

import argparse
import types

import pytest

from testbed.bench.cli import parse_args, sections
from testbed.bench.sections import SECTIONS
from testbed.bench.harness import (SectionResult, Spread, Trial, md_table,
                                   rejected_note, side_by_side, spread)
from testbed.bench.report import anchor, code_line, code_versions
from testbed.workload.metrics import recovery_time
from testbed.workload.runner import TransportRun


def trial(transport: str, rep: int, trusted: bool = True, **values) -> Trial:
    run = TransportRun(transport, rep, health={'trusted': trusted,
                                               'reasons': [] if trusted else
                                               ['machine CPU 99% busy']})
    return Trial(transport, 'c', rep, run, 1, dict(values))


def test_spread_text_shows_median_and_range() -> None:
    assert Spread((0.5, 0.7, 0.6)).text('%.0f', 100, '%') == '60% (50–70)'
    assert Spread((2.0,)).text('%.1f', unit=' s') == '2.0 s'
    assert Spread((1.0, 1.01)).text('%.1f') == '1.0'      # range rounds away
    assert Spread(()).text() == '—'


def test_untrusted_trials_give_no_number() -> None:
    trials = [trial('mrc', 0, x=1.0), trial('mrc', 1, False, x=9.0),
              trial('mrc', 2, x=None)]
    assert spread(trials, 'x').values == (1.0,)


def test_side_by_side_pairs_the_same_repetition() -> None:
    trials = [trial('mrc', 0, f=0.9), trial('ecmp', 0, f=0.45),
              trial('mrc', 1, f=0.8), trial('ecmp', 1, f=0.8),
              trial('rc', 0, False, f=0.1)]
    text = side_by_side(trials, 'f')
    assert text == 'MRC / ECMP = 1.50× (1.00–2.00)'     # rc untrusted: no pair


UNREAD = ("packets waited %s ms a round trip unread in the datapath's sockets "
          "(a queue the fabric does not model; limit 10.0 ms)")
CPU_WAIT = 'endpoint loop waited %d%% of the run for a CPU in waits of 0.35 ms or more'


def test_rejected_trials_are_counted_by_reason_with_the_range_of_its_figures() -> None:
    def rejected(*reasons: str) -> Trial:
        run = TransportRun('mrc', 0, health={'trusted': False, 'reasons': list(reasons)})
        return Trial('mrc', 'c', 0, run, 3)
    trials = [rejected(UNREAD % '37.2'), rejected(UNREAD % '11.4', CPU_WAIT % 10),
              rejected(UNREAD % '19.1'), rejected(CPU_WAIT % 12), trial('mrc', 1)]
    assert rejected_note(trials) == (
        '4 of 5 trials rejected as saturated (in 3: %s; in 2: %s)'
        % (UNREAD % '11.4–37.2', CPU_WAIT.replace('%d%%', '10–12%')))
    assert rejected_note([trial('mrc', 0)]) == 'Every trial ran on an emulator that kept up'


def test_section_list_is_checked() -> None:
    assert sections('failover, incast') == ['failover', 'incast']
    with pytest.raises(argparse.ArgumentTypeError, match='unknown section'):
        sections('failover,nope')
    assert parse_args([]).sections == list(SECTIONS)


def test_markdown_helpers() -> None:
    assert md_table(['a', 'b'], [(1, 2)]) == '| a | b |\n|---|---|\n| 1 | 2 |'
    assert anchor(2, 'Failover') == '2-failover'
    assert anchor(5, 'Scale of the emulator') == '5-scale-of-the-emulator'


def test_recovery_after_capacity_loss_uses_what_is_left() -> None:
    # 10 Mbit/s, then a fault at 1 s halves it for good
    goodput = [10.0] * 100 + [5.0] * 100
    assert recovery_time(goodput, 0.01, 1.0) is None
    assert recovery_time(goodput, 0.01, 1.0, fraction=0.45) == 0.0


def test_a_stopped_run_resumes_with_what_it_finished(tmp_path) -> None:
    from testbed.bench.cli import keep, resumed
    keep(tmp_path, SectionResult('failover', 'Failover', '| a |\n', {'n': 1},
                                 12.5, 'abc1234'), '2026-11-29 22:35 UTC')
    raw, started, results = resumed(tmp_path)
    assert (raw, started) == (tmp_path, '2026-11-29 22:35 UTC')
    [back] = results
    assert (back.key, back.title, back.markdown, back.data, back.seconds,
            back.commit) == ('failover', 'Failover', '| a |\n', {'n': 1}, 12.5,
                             'abc1234')
    with pytest.raises(SystemExit, match='no sections.json'):
        resumed(tmp_path / 'elsewhere')


def test_a_section_whose_files_were_deleted_is_measured_again(tmp_path) -> None:
    from testbed.bench.cli import keep, resumed
    for key in ('failover', 'incast'):
        keep(tmp_path, SectionResult(key, key.title(), '| a |\n', {}, 1.0, 'abc1234'),
             '2026-11-29 22:35 UTC')
    (tmp_path / 'incast.md').unlink()
    _, _, results = resumed(tmp_path)
    assert [r.key for r in results] == ['failover']
    # ... and the section measured again is recorded once
    keep(tmp_path, SectionResult('incast', 'Incast', '| b |\n', {}, 2.0, 'def5678'),
         '2026-11-29 22:35 UTC')
    assert [r.key for r in resumed(tmp_path)[2]] == ['failover', 'incast']


def test_what_limits_paragraphs_are_marked_as_analysis() -> None:
    """BENCHMARKS.md says its figures come from the run; the reasoning kept in
    the sections' code is not measured by it, so each says so."""
    from testbed.bench.report import limits
    for key in SECTIONS:
        text = limits(key).strip()
        assert not text or text.startswith(
            '**What limits these figures (analysis).**'), key


class _Ctx:
    def __init__(self, smoke: bool = False) -> None:
        self.said: list[str] = []
        self.smoke = smoke

    def say(self, section: str, text: str) -> None:
        self.said.append(text)


def _retrying(monkeypatch, healths: list[dict], smoke: bool = False):
    """run_trial over a fake runner whose runs have these health verdicts."""
    from testbed.bench import harness
    runs = [TransportRun('mrc', 0, health=h) for h in healths]
    executed = []

    class FakeRunner:
        def __init__(self, sc, transport, rep, progress) -> None:
            pass

        def execute(self, workload, make, fab):
            executed.append(fab)
            return runs[len(executed) - 1]
    monkeypatch.setattr(harness, 'TransportRunner', FakeRunner)
    monkeypatch.setattr(harness.time, 'sleep', lambda s: None)
    ctx = _Ctx(smoke)
    unshaped = types.SimpleNamespace(signals=None)    # a fabric whose ports do not signal
    trial = harness.run_trial(ctx, 'failover', unshaped, None, 'mrc', 'c', 0)
    return trial, len(executed), ctx.said


SATURATED = {'trusted': False, 'saturated': True, 'reasons': ['machine CPU 99%']}
CLEAN = {'trusted': True, 'saturated': False, 'reasons': []}


def test_a_saturated_trial_is_run_again_until_it_runs_clean(monkeypatch) -> None:
    from testbed.bench.harness import MAX_ATTEMPTS
    trial, runs, said = _retrying(monkeypatch, [SATURATED, CLEAN])
    assert (trial.trusted, trial.attempts, runs) == (True, 2, 2)
    assert len(said) == 1 and 'emulator saturated' in said[0]
    # never clean: MAX_ATTEMPTS runs, and the last, rejected, is what is kept
    trial, runs, _ = _retrying(monkeypatch, [SATURATED] * MAX_ATTEMPTS)
    assert (trial.trusted, trial.attempts, runs) == (False, MAX_ATTEMPTS,
                                                     MAX_ATTEMPTS)
    assert trial.rejected


def test_a_smoke_run_takes_each_trial_once(monkeypatch) -> None:
    # its figures are not read: a saturated trial is reported rejected
    trial, runs, said = _retrying(monkeypatch, [SATURATED, CLEAN], smoke=True)
    assert (trial.trusted, trial.attempts, runs) == (False, 1, 1)
    assert trial.rejected


def test_an_untrusted_trial_that_did_not_saturate_is_not_retried(monkeypatch) -> None:
    # e.g. a kernel feature missing: running it again would change nothing
    missing = {'trusted': False, 'saturated': False, 'reasons': ['no netem']}
    trial, runs, said = _retrying(monkeypatch, [missing, CLEAN])
    assert (trial.trusted, trial.attempts, runs, said) == (False, 1, 1, [])


def test_a_report_names_the_code_of_each_section_when_a_resumed_run_mixes_them():
    fresh = SectionResult('incast', 'Incast', '', {}, 1.0, 'abc1234')
    old = SectionResult('failover', 'Failover', '', {}, 1.0, None)
    assert code_line(code_versions([fresh])) == ['- **Code:** abc1234.']
    assert code_line(code_versions([])) == []
    mixed = code_line(code_versions([old, fresh]))[0]
    assert 'failover at a commit not recorded' in mixed
    assert 'incast at abc1234' in mixed


def test_the_code_version_ignores_what_the_bench_itself_rewrites(tmp_path):
    import subprocess
    from testbed.bench.cli import code_version

    def git(*args):
        subprocess.run(['git', '-C', str(tmp_path), '-c', 'user.name=t',
                        '-c', 'user.email=t@t', *args], check=True,
                       capture_output=True)
    git('init', '-q')
    (tmp_path / 'docs' / 'images').mkdir(parents=True)
    for name in ('BENCHMARKS.md', 'docs/images/a.png', 'code.py'):
        (tmp_path / name).write_text('before')
    git('add', '.')
    git('commit', '-qm', 'x')
    clean = code_version(tmp_path)
    assert clean and not clean.endswith('-dirty')
    (tmp_path / 'BENCHMARKS.md').write_text('after')
    (tmp_path / 'docs/images/a.png').write_text('after')
    assert code_version(tmp_path) == clean
    (tmp_path / 'code.py').write_text('after')
    assert code_version(tmp_path) == clean + '-dirty'
    assert code_version(None) is None
