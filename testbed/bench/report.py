"""BENCHMARKS.md: the machine, the date, the command, then every section
in the order it ran."""
from __future__ import annotations

import argparse
import importlib
import os
import platform
import subprocess
from collections.abc import Sequence
from pathlib import Path

from testbed.bench.harness import SectionResult
from testbed.bench.sections import SECTIONS


def machine() -> str:
    mem_kb = 0
    with open('/proc/meminfo') as f:
        for line in f:
            if line.startswith('MemTotal:'):
                mem_kb = int(line.split()[1])
    model = ''
    with open('/proc/cpuinfo') as f:
        for line in f:
            if line.startswith('model name'):
                model = line.split(':', 1)[1].strip()
                break
    ovs = subprocess.run(['ovs-vswitchd', '--version'], capture_output=True,
                         text=True).stdout.split('\n')[0]
    distro = ''
    if Path('/etc/os-release').exists():
        for line in Path('/etc/os-release').read_text().splitlines():
            if line.startswith('PRETTY_NAME='):
                distro = line.split('=', 1)[1].strip('"')
    return ('%s, kernel %s, %d cores (%s), %.0f GB; %s, userspace (netdev) '
            'datapath; Python %s' % (
                distro, platform.release(), os.cpu_count() or 0, model,
                mem_kb / 1e6, ovs, platform.python_version()))


def command(args: argparse.Namespace) -> str:
    parts = ['mrc-testbed bench']
    if getattr(args, 'smoke', False):
        parts.append('--smoke')
    elif args.quick:
        parts.append('--quick')
    if tuple(args.sections) != SECTIONS:
        parts.append('--sections ' + ','.join(args.sections))
    if args.out is not None:
        parts.append('--out %s' % args.out)
    if getattr(args, 'resume', None) is not None:
        parts.append('--resume %s' % args.resume)
    return ' '.join(parts)


def write_report(path: Path, results: Sequence[SectionResult], started: str,
                 args: argparse.Namespace, raw: Path) -> Path:
    total = sum(r.seconds for r in results)
    versions = code_versions(results)
    head = [
        '# Benchmarks',
        '',
        'Written by `%s` (%s): every figure in the tables, charts and section '
        'text comes from that %s, and nothing is edited by hand; each '
        '*What limits these figures (analysis)* paragraph is reasoning kept '
        'in the section\'s code (`testbed/bench/`), read against the figures, '
        'not measured by the run. Raw per-trial data: `%s/`.'
        % (command(args), 'quick smoke version: not for publishing'
           if args.quick else 'full run', 'run' if len(versions) < 2
           else 'run and the sections it resumed', raw),
        '',
        '- **Machine:** %s.' % machine(),
        *code_line(versions),
        '- **Started:** %s; took %.0f min (%s).' % (
            started, total / 60, ', '.join('%s %.0f s' % (r.key, r.seconds)
                                           for r in results)),
        '- **Method:** transports are compared side by side in the same run '
        'on the same fabric with the same seeds and fault times, one trial '
        'after another (never concurrently: the emulator has 2 cores). '
        'Every trial checks the emulator\'s health (machine CPU, the '
        'endpoint loop\'s CPU, OVS lost upcalls, packets the datapath left '
        'unread in its sockets\' buffers); a saturated trial is run '
        'again and, if it never runs clean, reported as rejected, not as a '
        'number. Figures are `median (min–max)` over the repetitions.',
        '- **Reproduce:** `make bench` or `bash scripts/setup.sh bench` (sets '
        'everything up, then `mrc-testbed bench`); one section: '
        '`mrc-testbed bench --sections KEY`.',
        '',
        'Sections: ' + ', '.join('[%s](#%s)' % (r.title, anchor(i, r.title))
                                 for i, r in enumerate(results, 1)),
    ]
    body = ['## %d. %s\n\n%s%s' % (i, r.title, r.markdown.strip(), limits(r.key))
            for i, r in enumerate(results, 1)]
    path.write_text('\n'.join(head) + '\n\n' + '\n\n'.join(body) + '\n')
    return path


def code_versions(results: Sequence[SectionResult]) -> dict[str | None, list[str]]:
    """Commit -> the sections measured with it."""
    versions: dict[str | None, list[str]] = {}
    for r in results:
        versions.setdefault(r.commit, []).append(r.key)
    return versions


def code_line(versions: dict[str | None, list[str]]) -> list[str]:
    """Which code measured which sections (`code_versions`), each named
    when a resumed run mixes them."""
    if len(versions) < 2:
        only = next(iter(versions), None)
        return ['- **Code:** %s.' % only] if only else []
    return ['- **Code:** sections measured with different code (a resumed '
            'run): %s.' % '; '.join(
                '%s at %s' % (', '.join(keys), commit or 'a commit not '
                              'recorded (before the bench recorded it)')
                for commit, keys in versions.items())]


def limits(key: str) -> str:
    """The section's own explanation of what bounds its figures, if it
    keeps it apart from the figures (the emulator_scale section writes it from them)."""
    text = getattr(importlib.import_module('testbed.bench.' + key), 'LIMITS', '')
    return '\n\n' + ' '.join(text.split()) if text else ''


def anchor(index: int, title: str) -> str:
    text = ('%d. %s' % (index, title)).lower()
    return ''.join(c if c.isalnum() or c in '- ' else '' for c in text) \
        .replace(' ', '-')
