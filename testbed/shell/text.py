"""Argument parsing and text for the interactive CLI (testbed.shell.mrc_cli):
one-line errors, sizes, tables, write summaries."""
from __future__ import annotations

import argparse
import re
import shlex
from collections import Counter
from collections.abc import Callable
from typing import Any

from testbed.shell.transfers import WriteResult

SIZE = re.compile(r'^(\d+(?:\.\d+)?)(?:([KMG])(?:i?B)?|B)?$', re.IGNORECASE)
UNITS = {'': 1, 'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}
MAX_WRITE = 256 << 20       # the agent builds the payload in memory
MIB = float(1 << 20)


class CliError(Exception):
    """A command given wrong arguments: its message is the whole answer."""


class _Args(argparse.ArgumentParser):
    """argparse that raises instead of printing usage and exiting."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog=prog, add_help=False)

    def error(self, message: str) -> None:  # type: ignore[override]
        raise CliError(message)


def parse_size(text: str) -> int:
    """4M, 512K, 1.5M, 1G, 1000 (binary units) -> bytes."""
    match = SIZE.match(text)
    if not match:
        raise CliError('SIZE %r: expected a number of bytes, or with K, M or '
                       'G, e.g. 512K or 4M' % text)
    size = int(float(match.group(1)) * UNITS[(match.group(2) or '').upper()])
    if not 1 <= size <= MAX_WRITE:
        raise CliError('SIZE %s: must be 1 byte to %s'
                       % (text, mib(MAX_WRITE)))
    return size


def parse_args(prog: str, line: str, positionals: tuple[str, ...],
               **options: Any) -> argparse.Namespace:
    """Positionals ending in '?' are optional; an option given `bool` is a
    flag, a tuple one choice, a list repeatable choices, a type a value."""
    parser = _Args(prog)
    for name in positionals:
        parser.add_argument(name.rstrip('?'),
                            nargs='?' if name.endswith('?') else None)
    for name, kind in options.items():
        flag = '--' + name
        if kind is bool:
            parser.add_argument(flag, action='store_true')
        elif isinstance(kind, (tuple, list)):
            parser.add_argument(flag, choices=kind, action='append'
                                if isinstance(kind, list) else 'store')
        else:
            parser.add_argument(flag, type=kind)
    return parser.parse_args(split_words(line))


def split_words(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError as err:
        raise CliError(str(err)) from None


def number(kind: Callable[[str], Any], text: str, what: str) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise CliError('%s %r is not a number' % (what, text)) from None


def short_detail(detail: str) -> str:
    """'admin down: <80 interfaces>' as a count and the first few."""
    head, sep, names = detail.partition(': ')
    items = names.split(', ')
    if not sep or len(items) <= 4:
        return detail
    return '%s: %d ports (%s, ...)' % (head, len(items), ', '.join(items[:3]))


def target_name(kind: str, params: dict) -> str:
    """What a fault acts on: p1a0x0-p1c0, p1c0, plane 2, h1 port on ..."""
    if kind == 'link':
        return '%s-%s' % (params['a'], params['b'])
    if kind == 'switch':
        return params['name']
    if kind == 'plane':
        return 'plane %d' % params['plane']
    return '%s port on plane %d' % (params['host'], params['plane'])


def write_summary(r: WriteResult, names: Callable[[str], str]) -> str:
    """The result lines; `names` turns a carrier into its switches."""
    lines = []
    if not r.ok:
        lines.append('FAILED after %.2f s: %s (the next write on %s -> %s '
                     'makes a new QP pair)\n' % (r.elapsed_s, r.status,
                                                r.conn.src, r.conn.dst))
    else:
        lines.append('done in %.2f s: %.1f Mbit/s goodput, %d packets '
                     'retransmitted, %d packet timeouts; %s\n' % (
                         r.elapsed_s, r.goodput_mbps, r.retransmitted,
                         r.timeouts, 'sha256 of %s\'s copy matches'
                         % r.conn.dst if r.hash_ok else
                         'HASH MISMATCH: %s\'s copy differs' % r.conn.dst))
    if r.backlog:
        lines.append('(it waited behind %s of an interrupted write)\n'
                     % mib(r.backlog))
    if r.imm is not None:
        lines.append('%s got the immediate %#x\n' % (r.conn.dst, r.imm))
    # In the order they first happened: a demotion reads before its undoing.
    changes = Counter((e['old'], e['new'], names(e['path']))
                      for e in r.ev_changes)
    for (old, new, path), n in changes.items():
        lines.append('  %d EV%s %s -> %s on %s\n' % (
            n, '' if n == 1 else 's', old, new, path))
    return ''.join(lines)


def state_counts(states: Counter) -> str:
    return ', '.join('%d %s' % (n, s) for s, n in sorted(states.items()))


def table(headers: tuple[str, ...], rows: list[tuple]) -> str:
    cells = [list(map(str, headers))] + [[str(c) for c in r] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return ''.join('  '.join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
                   + '\n' for row in cells)


def mib(size: int) -> str:
    return '%.1f MiB' % (size / MIB) if size >= 1 << 20 else \
        '%.0f KiB' % (size / 1024)


def ms(seconds: float | None) -> str:
    return '-' if seconds is None else '%.1f' % (seconds * 1000)


def one_line(err: BaseException) -> str:
    """An exception as one line: its first line, and its last if longer
    (an agent's stderr tail ends with the actual error)."""
    if isinstance(err, KeyError):      # str() of a KeyError is just the key
        return 'no such name: %s' % err
    lines = [l.strip() for l in str(err).strip().splitlines() if l.strip()]
    text = lines[0] if lines else type(err).__name__
    if len(lines) > 1:
        text += ' ... ' + lines[-1]
    return text
