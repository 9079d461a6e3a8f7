"""`mrc-testbed cli` driven as a person would: typed into a pseudo-terminal,
judged by what comes back on the screen."""
import os
import re
import signal
import sys
import time
from pathlib import Path

import pexpect
import pytest

from testbed.fabric.host_decap import kernel_seg6local
from testbed.fabric.topo_spec import parse_topo_spec
from testbed.fabric.usid_plan import FabricPlan
from testbed.nic.emulated_timescale import ACTIVE_EVS
from tests.integration.children import default_sigint
from tests.integration.leaks import leaked

REPO = Path(__file__).resolve().parents[2]
TOPO = 'fattree,k=4,planes=2'
SMALL = 'leafspine,leaves=2,spines=1,hosts=1,planes=1'
PROMPT = 'mrc> '
BUILD_TIMEOUT_S = 900        # another fabric may hold the machine first
DEAD_LINK = 'p1a0x0 p1c0'    # as it reads inside a path's switch list
EV_ROW = re.compile(r'^\s*(\d+)\s+(GOOD|SKIP|ASSUMED_BAD|DENIED)\s+(\w+)\s+'
                    r'(\d+)\s+(.+?)\s+(\d+)\s+(\d+)\s+(\S+)\s*$')


class Terminal:
    """The CLI in a pty: type a line, get the screen text it produced."""

    def __init__(self, topo: str) -> None:
        self.child = pexpect.spawn(
            sys.executable, ['-m', 'testbed.cli', 'cli', '--topo', topo],
            cwd=str(REPO), encoding='utf-8', dimensions=(60, 220),
            env=dict(os.environ, TERM='vt100'), timeout=60, preexec_fn=default_sigint)
        self.screen = ''
        self.child.expect_exact(PROMPT, timeout=BUILD_TIMEOUT_S)
        self.screen += self.child.before

    def run(self, line: str, timeout: float = 60) -> str:
        """The command's output, without the echoed command line."""
        self.child.sendline(line)
        self.child.expect_exact(PROMPT, timeout=timeout)
        text = self.child.before.replace('\r\n', '\n')
        self.screen += text
        return text.split('\n', 1)[1] if '\n' in text else ''

    def complete(self, partial: str, tabs: int = 1) -> str:
        """The screen after typing `partial` and TAB(s); the line is then
        dropped (two TABs on an ambiguous word list the candidates)."""
        self.child.send(partial + '\t' * tabs)
        time.sleep(0.5)
        self.child.sendcontrol('u')              # readline: kill the line
        self.child.sendline('nodes')             # resynchronise on it
        self.child.expect_exact('available nodes are')
        shown = self.child.before
        self.child.expect_exact(PROMPT)
        self.screen += shown
        return shown

    def leave(self, keys: str = 'exit') -> str:
        """Type exit, or control keys ('cc': Ctrl-C twice, 'd': Ctrl-D);
        returns what the CLI printed until it ended."""
        if keys == 'exit':
            self.child.sendline('exit')
        elif keys == 'cc':
            # As a person would: the first Ctrl-C a moment after the prompt
            # is up (complete() pauses as long after typing), the second after the first's
            # notice. Two signals the process has not yet taken count as one. (The CLI
            # starts with SIGINT at its default, whoever started pytest: see
            # tests/integration/children.py.)
            time.sleep(0.5)
            self.child.sendcontrol('c')
            self.child.expect_exact('Ctrl-C again', timeout=30)
            self.child.sendcontrol('c')
        else:
            self.child.sendcontrol(keys)
        self.child.expect(pexpect.EOF, timeout=120)
        self.child.close()
        self.screen += self.child.before
        return self.child.before


@pytest.fixture
def terminals():
    """Open CLIs; one still running when the test ends (an assertion
    failed) gets SIGTERM, on which the CLI tears its fabric down."""
    opened: list[Terminal] = []

    def open_terminal(topo: str) -> Terminal:
        opened.append(Terminal(topo))
        return opened[-1]
    yield open_terminal
    for term in opened:
        if term.child.isalive():
            term.child.kill(signal.SIGTERM)
            term.child.expect(pexpect.EOF, timeout=120)
            term.child.close()


def ev_rows(text: str) -> list[tuple[str, str, str]]:
    """(state, role, path) of every EV row of `evs` output."""
    return [(m[2], m[3], m[5]) for m in map(EV_ROW.match, text.splitlines())
            if m]


def wait_for_evs(term: Terminal, done, timeout_s: float) -> list:
    """Run `evs h1` until done(rows) holds; returns the last rows."""
    deadline = time.monotonic() + timeout_s
    while True:
        rows = ev_rows(term.run('evs h1'))
        if done(rows) or time.monotonic() > deadline:
            return rows
        time.sleep(0.5)


def one_error_line(text: str, command: str) -> bool:
    lines = [l for l in text.splitlines() if l.strip()]
    return len(lines) == 1 and lines[0].startswith('*** %s' % command)


spotless = leaked


def carrier(plan: FabricPlan, src: str, dst: str, core: str) -> str:
    return next(p.carrier for p in plan.paths(src, dst, 1)
                if core in p.switches)


def test_a_session_paths_writes_faults_and_teardown(terminals):
    term = terminals(TOPO)
    plan = FabricPlan.from_topo(parse_topo_spec(TOPO).build())

    paths = term.run('paths h1 h16')
    assert 'h1 -> h16: 8 paths, 8 work' in paths
    assert 'p1e0x0 p1a0x0 p1c0 p1a3x0 p1e3x1' in paths
    assert 'fcbb:bb01:1000:2000:3000:2006:1007:8010' in paths

    write = term.run('write h1 h16 2M')
    assert re.search(r'done in [\d.]+ s: [\d.]+ Mbit/s goodput', write)
    assert "sha256 of h16's copy matches" in write

    assert 'p1a0x0-p1c0 down' in term.run('fail p1a0x0-p1c0')
    write = term.run('write h1 h16 2M')
    assert "sha256 of h16's copy matches" in write
    # GOOD, or SKIP if the queue on that path had grown first.
    assert re.search(r'EVs? (GOOD|SKIP) -> ASSUMED_BAD on p1e0x0 p1a0x0 '
                     r'p1c0 ', write), write
    probed = term.run('paths h1 h16 --plane 1')
    assert 'h1 -> h16: 4 paths, 3 work' in probed
    assert re.search(r'NO\s+p1e0x0 p1a0x0 p1c0 ', probed)

    # Only EVs through the dead link stay ASSUMED_BAD; an EV elsewhere that
    # an emulator hiccup demoted is probed back within a fraction of a second.
    rows = wait_for_evs(term, lambda rows: all(
        DEAD_LINK in path for state, _, path in rows
        if state == 'ASSUMED_BAD'), 10)
    bad = [path for state, _, path in rows if state == 'ASSUMED_BAD']
    assert len(rows) >= ACTIVE_EVS and bad
    assert all(DEAD_LINK in path for path in bad)
    assert not [r for r in rows if DEAD_LINK in r[2] and r[1] == 'active']

    assert 'admin up' in term.run('restore p1a0x0-p1c0')
    rows = wait_for_evs(term, lambda rows: rows and all(
        state == 'GOOD' for state, _, _ in rows), 15)
    assert rows and {state for state, _, _ in rows} == {'GOOD'}

    stats = term.run('stats h1')
    assert '0x100' in stats and 'mrc -> h16' in stats and 'h1-p2' in stats

    # Errors: one line each, and the prompt survives them.
    assert one_error_line(term.run('frobnicate now'), 'Unknown command')
    assert one_error_line(term.run('write h1 h99 1M'), 'write:')
    assert one_error_line(term.run('write h1 h16 12Q'), 'write:')
    assert one_error_line(term.run('fail p1a0x0-p1c9'), 'fail:')
    assert one_error_line(term.run('evs h2'), 'evs:')
    assert one_error_line(term.run('x nosuchnode'), 'x:')

    # Stock Mininet commands: nodes, and, where the kernel has seg6 routes
    # (docs/host-decap.md), a ping6 across the fabric over SRv6 encap routes
    # set with `ip` in each host.
    assert 'h16' in term.run('nodes') and 'p2c3' in term.run('nodes')
    if kernel_seg6local():
        term.run('h1 ip -6 route add fd00:0:0:1::10/128 encap seg6 mode encap '
                 'segs %s dev h1-p1' % carrier(plan, 'h1', 'h16', 'p1c1'))
        term.run('h16 ip -6 route add fd00:0:0:1::1/128 encap seg6 mode encap '
                 'segs %s dev h16-p1' % carrier(plan, 'h16', 'h1', 'p1c1'))
        assert '1 received' in term.run('h1 ping6 -c1 -W2 fd00:0:0:1::10')

    # Tab completion of the new commands: real links, options, files.
    assert re.search(r'p1c0\s+p1c1', term.complete('fail p1a0x0-p1c', 2))
    assert 'write h1 h16 1M --transport' in term.complete(
        'write h1 h16 1M --tra')
    assert 'link_failure_allreduce.yaml' in term.complete(
        'scenario scenarios/link_fail')

    goodbye = term.leave('exit')
    assert 'fabric torn down' in goodbye
    assert term.child.exitstatus == 0
    assert 'Traceback' not in term.screen
    assert spotless() == {}


def test_ctrl_c_twice_and_ctrl_d_tear_down(terminals):
    for keys in ('cc', 'd'):
        term = terminals(SMALL)
        assert 'h2' in term.run('nodes')
        goodbye = term.leave(keys)
        assert 'fabric torn down' in goodbye, keys
        assert term.child.exitstatus == 0
        assert 'Traceback' not in term.screen
        assert spotless() == {}
