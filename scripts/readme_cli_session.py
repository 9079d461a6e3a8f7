"""Record the README's interactive CLI session from a real one.

    .venv/bin/python scripts/readme_cli_session.py

Runs `mrc-testbed cli` in a pseudo-terminal (as root, on a real fabric:
about a minute), types the session below, and writes what the screen showed
into README.md between `<!-- cli-session -->` and `<!-- /cli-session -->`
(the progress bar, redrawn in place, is left out as the terminal leaves it:
wiped).
"""
from __future__ import annotations

import re
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.integration.test_interactive_cli import Terminal  # noqa: E402

README = REPO / 'README.md'
TOPO = 'fattree,k=4,planes=2'
SESSION = ('write h1 h16 4M', 'fail p1a0x0-p1c0', 'paths h1 h16 --plane 1',
           'write h1 h16 4M', 'evs h1 --paths', 'restore p1a0x0-p1c0',
           'evs h1 --paths', 'write h1 h99 1M')
BLOCK = re.compile(r'(<!-- cli-session -->\n)(.*?)(<!-- /cli-session -->)', re.S)
ESCAPE = re.compile(r'\x1b\[[0-9;?]*[A-Za-z]')


def screen_text(raw: str) -> str:
    """What stays on screen: per line, the last segment after a carriage
    return (a redrawn progress bar), escapes removed, blank ones dropped."""
    lines = []
    for line in ESCAPE.sub('', raw).replace('\r\n', '\n').split('\n'):
        shown = line.split('\r')[-1].rstrip()
        if shown:
            lines.append(shown)
    return '\n'.join(lines)


def record() -> str:
    term = Terminal(TOPO)
    parts = ['$ mrc-testbed cli', screen_text(term.screen)]
    for command in SESSION:
        parts += ['mrc> ' + command, screen_text(term.run(command, timeout=120))]
        if command.startswith('restore'):
            time.sleep(2)          # the probes bring the EVs back meanwhile
    left = screen_text(term.leave()).split('\n')
    parts += ['mrc> exit'] + left[left[0] == 'exit':]   # its echo, once
    return '\n'.join(p for p in parts if p)


def main() -> int:
    text = README.read_text()
    if not BLOCK.search(text):
        raise SystemExit('README.md has no <!-- cli-session --> block')
    session = record()
    stamp = time.strftime('%Y-%m-%d', time.gmtime())
    README.write_text(BLOCK.sub(lambda m: m.group(1) + (
        'Recorded %s by `scripts/readme_cli_session.py`:\n\n```\n%s\n```\n'
        % (stamp, session)) + m.group(3), text))
    print(session)
    return 0


if __name__ == '__main__':
    sys.exit(main())
