"""What stock Mininet needs to run a forwarding MRC fabric from our topology
files, offered the `--custom` way (their `controllers` and `hosts` dicts):

    sudo mn --custom testbed/topologies/fattree.py --topo fattree,k=4,planes=2 \\
        --controller mrc --host mrc --switch ovs,datapath=user,protocols=OpenFlow15

`--controller mrc` runs the testbed's uSID controller
(``python -m testbed.controller --topo SPEC``) as a child process on
127.0.0.1, killed when mn stops it; `--host mrc` plumbs each host as
FabricNet does (``python -m testbed.fabric.host_plumbing``). Both compute
the plan from the spec mn built, so they need one of our topologies.

Debian's mn runs under /usr/bin/python3, which has Mininet but usually not
os-ken and pyroute2, so this module uses only the standard library and
Mininet, and runs the testbed's programs under a Python that has them:
$MRC_PYTHON if set, else the first of mn's own Python, the repository's
.venv (scripts/setup.sh makes it) and the Python of an installed
`mrc-testbed` that can import them.
"""
from __future__ import annotations

import ctypes
import inspect
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from mininet.node import Host, RemoteController

# The directory holding testbed/: the programs we run must import this copy.
CODE_ROOT = Path(__file__).resolve().parents[2]
NEEDED_MODULES = ('os_ken', 'pyroute2', 'mininet', 'testbed')
LISTEN_TIMEOUT_S = 30.0
PR_SET_PDEATHSIG = 1


class _Built:
    """The topology spec this mn process built (mn builds one)."""
    spec: str | None = None


def recording_spec(name: str, cls: type) -> Callable[..., object]:
    """A `topos` entry that builds `cls` as mn asks and remembers its spec
    (``fattree,k=4,planes=2``) for the controller and hosts."""
    def build(*args, **kwargs):
        bound = inspect.signature(cls.build).bind(None, *args, **kwargs)
        topo = cls(*args, **kwargs)
        _Built.spec = ','.join([name] + ['%s=%s' % kv for kv in
                                         list(bound.arguments.items())[1:]])
        return topo
    return build


def _refuse(message: str) -> None:
    """Stop mn before it builds anything. SystemExit, not an exception:
    mn answers any exception with its full cleanup, which deletes every
    OVS bridge on the machine, not only its own."""
    print('mn: %s' % message, file=sys.stderr)
    raise SystemExit(2)


def _abandon(message: str) -> None:
    """Stop mn once it has built something. SystemExit again (see _refuse):
    what mn built is left for `mrc-testbed clean`, which removes only what
    is ours, the names of these topologies."""
    print('mn: %s\nmn: stopped; run `mrc-testbed clean` to remove this '
          "network (mn -c would delete every OVS bridge on the machine)"
          % message, file=sys.stderr)
    raise SystemExit(1)


def built_spec(option: str) -> str:
    if _Built.spec is None:
        _refuse('%s serves the topologies of testbed/topologies (loaded with '
                '--custom, e.g. --topo fattree,k=4,planes=2)' % option)
    return _Built.spec


@lru_cache(maxsize=None)
def testbed_python() -> str:
    """The interpreter for the testbed's programs (see the module doc)."""
    chosen = os.environ.get('MRC_PYTHON')
    candidates = [chosen] if chosen else [
        sys.executable, str(CODE_ROOT / '.venv' / 'bin' / 'python'),
        _installed_python()]
    for python in filter(None, candidates):
        if os.access(python, os.X_OK) and _has_modules(python):
            return python
    _refuse('--controller mrc and --host mrc need a Python with %s (tried: '
            '%s). Run scripts/setup.sh (it makes %s), or name one: sudo '
            'MRC_PYTHON=/path/to/venv/bin/python mn ...'
            % (', '.join(NEEDED_MODULES), ', '.join(filter(None, candidates)),
               CODE_ROOT / '.venv'))
    raise AssertionError('unreachable')


def _installed_python() -> str | None:
    """The interpreter in the `#!` line of an installed mrc-testbed."""
    command = shutil.which('mrc-testbed')
    if not command:
        return None
    with open(command, 'rb') as f:
        first = f.readline().decode(errors='replace')
    return first[2:].strip().split(' ')[0] if first.startswith('#!') else None


def _has_modules(python: str) -> bool:
    probe = ('import importlib.util, sys; sys.exit(any(importlib.util.'
             'find_spec(m) is None for m in %r))' % (NEEDED_MODULES,))
    return subprocess.run([python, '-c', probe], cwd=CODE_ROOT,
                          capture_output=True).returncode == 0


def run_testbed(*args: str) -> None:
    """Run ``python -m ARGS`` of this copy of the testbed; raise on failure."""
    result = subprocess.run([testbed_python(), '-m', *args], cwd=CODE_ROOT,
                            capture_output=True, text=True)
    if result.returncode != 0:
        _abandon('%s failed: %s' % (' '.join(args[:2]),
                                    result.stderr.strip()[-2000:]))


class MrcHost(Host):
    """`--host mrc`: a host plumbed for SRv6 as FabricNet's hosts are (its
    namespace made quiet before its ports exist, then addresses, SIDs and
    routes from the plan)."""

    def __init__(self, name: str, **params) -> None:
        self.spec = built_spec('--host mrc')
        testbed_python()             # refuse before this host exists
        super().__init__(name, **params)

    def startShell(self, *args, **kwargs) -> None:
        super().startShell(*args, **kwargs)
        run_testbed('testbed.fabric.host_plumbing', 'prepare',
                    '--pid', str(self.pid))

    def config(self, **params):
        result = super().config(**params)
        run_testbed('testbed.fabric.host_plumbing', 'plumb', '--topo',
                    self.spec, '--host', self.name, '--pid', str(self.pid))
        return result


class MrcController(RemoteController):
    """`--controller mrc`: the testbed's uSID controller as a child process
    listening on 127.0.0.1 on a free port; stop() (mn calls it when it
    exits) kills it, and it dies with mn if mn is killed."""

    def __init__(self, name: str, **params) -> None:
        self.spec = built_spec('--controller mrc')
        self.python = testbed_python()
        self.process: subprocess.Popen | None = None
        self.logdir: str | None = None
        params.update(ip='127.0.0.1', port=_free_tcp_port())
        super().__init__(name, **params)

    def checkListening(self) -> None:
        """Mininet would telnet from a shell, whose output can catch the
        controller's binary OpenFlow hello; start() waits for the port."""

    def start(self) -> None:
        # The log lives where `mrc-testbed clean` looks for our leftovers.
        self.logdir = tempfile.mkdtemp(prefix='mrc-fabric-mn-')
        log = open(os.path.join(self.logdir, 'controller.log'), 'w')
        with log:
            self.process = subprocess.Popen(
                [self.python, '-m', 'testbed.controller', '--topo', self.spec,
                 '--port', str(self.port)], cwd=CODE_ROOT, stdout=log,
                stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=_die_with_parent)
        self._wait_listening()

    def _wait_listening(self) -> None:
        deadline = time.monotonic() + LISTEN_TIMEOUT_S
        while time.monotonic() < deadline and self.process.poll() is None:
            with socket.socket() as s:
                if s.connect_ex(('127.0.0.1', self.port)) == 0:
                    return
            time.sleep(0.05)
        with open(os.path.join(self.logdir, 'controller.log')) as f:
            tail = f.read()[-2000:]
        self.stop()
        _abandon('the mrc controller did not listen on 127.0.0.1:%d:\n%s'
                 % (self.port, tail))

    def stop(self, *args, **kwargs) -> None:
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()
            self.process = None
        if self.logdir is not None:
            shutil.rmtree(self.logdir, ignore_errors=True)
            self.logdir = None
        super().stop(*args, **kwargs)


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when mn dies, however mn dies."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


CONTROLLERS = {'mrc': MrcController}
HOSTS = {'mrc': MrcHost}
