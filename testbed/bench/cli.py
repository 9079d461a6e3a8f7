"""`mrc-testbed bench` / `python -m testbed.bench`: run the benchmark sections and
write BENCHMARKS.md with their tables and plots.

    mrc-testbed bench                          # everything, ~35 min
    mrc-testbed bench --sections failover      # one section
    mrc-testbed bench --quick --out /tmp/b     # a quick version (~9 min)
    mrc-testbed bench --smoke --out /tmp/b     # one trial of each kind (~4 min)

A full run rewrites BENCHMARKS.md at the repository root and the plots in
docs/images/; raw per-trial data go to results/bench/<UTC stamp>/. Sections
that are not run keep nothing: run them all to publish.
"""
from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import time
from pathlib import Path

from testbed import checkout
from testbed.bench.sections import SECTIONS


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog='mrc-testbed bench', description=__doc__.split('\n\n')[0])
    add_arguments(parser)
    return parser.parse_args(argv)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument('--sections', type=sections, default=list(SECTIONS),
                        help='comma-separated, from: %s (default: all)'
                        % ', '.join(SECTIONS))
    parser.add_argument('--quick', action='store_true',
                        help='the quick version: one repetition, small '
                        'transfers, a few trials; figures not for publishing')
    parser.add_argument('--smoke', action='store_true',
                        help='the quick version cut to one trial of each kind '
                        'a section reports: that every section still runs '
                        '(the test suite\'s); figures meaningless')
    parser.add_argument('--resume', type=Path, default=None, metavar='RAW',
                        help='a results/bench/<stamp> directory of a run that '
                        'stopped: keep its finished sections, run the rest')
    parser.add_argument('--out', type=Path, default=None,
                        help='directory for BENCHMARKS.md and its plots '
                        '(default: the repository, for a full run; '
                        'required with --quick)')


def sections(text: str) -> list[str]:
    names = [s.strip() for s in text.split(',') if s.strip()]
    unknown = [n for n in names if n not in SECTIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            'unknown section %s (choose from %s)' % (
                ', '.join(map(repr, unknown)) or "''", ', '.join(SECTIONS)))
    return names


def run(args: argparse.Namespace) -> int:
    from testbed.bench.harness import BenchContext
    from testbed.bench.report import write_report
    from testbed.workload.results import new_results_dir
    args.quick = args.quick or args.smoke
    if args.quick and args.out is None:
        print('--quick figures are not for publishing: give --out DIR',
              file=sys.stderr)
        return 2
    repo = checkout.checkout()
    if repo is None and args.out is None:
        print('this is an installed copy, with no checkout whose BENCHMARKS.md '
              'a run could rewrite: give --out DIR', file=sys.stderr)
        return 2
    if args.out is None and not args.resume and \
            tuple(args.sections) != SECTIONS:
        # BENCHMARKS.md is every section from one run: a partial run writes
        # its report beside its raw data instead of replacing it.
        args.out = new_results_dir(repo / 'results', 'bench-partial')
        print('only %s: the report goes to %s, BENCHMARKS.md stays as it is'
              % (', '.join(args.sections), args.out), file=sys.stderr)
    out = args.out or repo
    images = out / 'docs' / 'images' if args.out is None else out / 'images'
    out.mkdir(parents=True, exist_ok=True)
    ctx = BenchContext(args.quick, out, images, smoke=args.smoke)
    if args.resume:
        raw, started, results = resumed(args.resume)
    else:
        raw = new_results_dir(out / 'results' if args.out else
                              repo / 'results', 'bench')
        started = time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())
        results = []
    done = {r.key for r in results}
    report = out / 'BENCHMARKS.md'

    def write(results: list) -> None:
        results.sort(key=lambda r: SECTIONS.index(r.key))
        write_report(report, results, started, args,
                     raw.relative_to(out) if raw.is_relative_to(out) else raw)

    todo = [k for k in args.sections if k not in done]
    for key in todo:
        ctx.say(key, 'starting')
        t0 = time.monotonic()
        result = importlib.import_module('testbed.bench.' + key).run(ctx)
        result.seconds = time.monotonic() - t0
        result.commit = code_version(repo)
        results.append(result)
        keep(raw, result, started)
        ctx.say(key, 'done in %.0f s' % result.seconds)
        # after every section: a later one failing loses nothing measured
        write(results)
    if not todo:        # --resume found nothing left to run: rewrite it
        write(results)
    ctx.say('bench', 'wrote %s and %s' % (report, raw))
    return 0


def keep(raw: Path, result, started: str) -> None:
    """A finished section's data, markdown and time, for --resume."""
    (raw / ('%s.json' % result.key)).write_text(json.dumps(
        result.data, indent=1, default=str))
    (raw / ('%s.md' % result.key)).write_text(result.markdown)
    index = raw / 'sections.json'
    kept = json.loads(index.read_text()) if index.exists() else {
        'started': started, 'sections': []}
    kept['sections'].append({'key': result.key, 'title': result.title,
                             'seconds': round(result.seconds, 1),
                             'commit': result.commit})
    index.write_text(json.dumps(kept, indent=1))


def resumed(raw: Path) -> tuple[Path, str, list]:
    from testbed.bench.harness import SectionResult
    index = raw / 'sections.json'
    if not index.exists():
        raise SystemExit('mrc-testbed bench: %s has no sections.json: not '
                         'the raw directory of a bench run' % raw)
    kept = json.loads(index.read_text())
    # A section whose files were deleted is measured again: that is how one
    # section of a finished run is run anew.
    whole = [s for s in kept['sections'] if all(
        (raw / ('%s.%s' % (s['key'], ext))).exists() for ext in ('md', 'json'))]
    if len(whole) < len(kept['sections']):
        index.write_text(json.dumps(dict(kept, sections=whole), indent=1))
    return raw, kept['started'], [SectionResult(
        s['key'], s['title'], (raw / ('%s.md' % s['key'])).read_text(),
        json.loads((raw / ('%s.json' % s['key'])).read_text()), s['seconds'],
        s.get('commit')) for s in whole]


# What a bench run itself rewrites in the checkout: not a change of the code.
BENCH_OUTPUTS = ('BENCHMARKS.md', 'docs/images')


def code_version(repo: Path | None) -> str | None:
    """The checkout's commit, `-dirty` if it has uncommitted changes other
    than the bench's own outputs; None outside a git checkout."""
    if repo is None:
        return None
    head = _git(repo, 'rev-parse', '--short', 'HEAD')
    if head is None:
        return None
    changed = _git(repo, 'status', '--porcelain', '--untracked-files=no',
                   '--', '.', *(':(exclude)%s' % p for p in BENCH_OUTPUTS))
    return head + '-dirty' if changed else head


def _git(repo: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(['git', '-C', str(repo), *args],
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def main(argv: list[str] | None = None) -> int:
    return run(parse_args(argv))
