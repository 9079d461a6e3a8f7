"""The client side of the MRC agent protocol: start agents
(`testbed.nic.agent`) inside fabric hosts and talk to them. The commands
and the reply each one gets are the agent's own table, `COMMAND_REPLIES`."""
from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from testbed.fabric.net import FabricNet
from testbed.nic.agent import COMMAND_REPLIES

REPO_ROOT = Path(__file__).resolve().parents[2]
REPLY_TIMEOUT_S = 30.0
ADDRESS_BOOK = 'addresses.json'     # in the fabric's work directory


class AgentError(RuntimeError):
    """An agent answered with an error, died, or did not answer in time."""


class AgentHandle:
    """One agent process: send commands, read events (a reader thread keeps
    stdout drained so the agent never blocks on a full pipe)."""

    def __init__(self, host, addresses: Path, seed: int = 0,
                 port_rate_bps: float | None = None) -> None:
        self.name = host.name
        rate = ['--port-rate-bps', repr(port_rate_bps)] if port_rate_bps else []
        self.proc = host.popen(
            [sys.executable, '-m', 'testbed.nic.agent', '--host', host.name,
             '--addresses', str(addresses), '--seed', str(seed), *rate],
            cwd=str(REPO_ROOT), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, bufsize=1)
        self.events: queue.Queue[dict] = queue.Queue()
        self.log: list[dict] = []      # every event, in order
        self.unclaimed: list[dict] = []  # received, not yet waited for
        threading.Thread(target=self._read, daemon=True).start()
        self.wait_for(lambda e: e['event'] == 'ready')

    def _read(self) -> None:
        for line in self.proc.stdout:
            event = json.loads(line)
            self.log.append(event)
            self.events.put(event)
        self.events.put({'event': 'exit'})

    def send(self, **command) -> None:
        try:
            self.proc.stdin.write(json.dumps(command) + '\n')
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError) as err:
            raise AgentError('%s: agent is gone (%s)' % (self.name, err)) from None

    def call(self, **command) -> dict:
        """Send a command and return its reply."""
        self.send(**command)
        kind = COMMAND_REPLIES.get(command.get('cmd'))
        return self.wait_for(lambda e: e['event'] == kind)

    def wait_for(self, predicate: Callable[[dict], bool],
                 timeout_s: float = REPLY_TIMEOUT_S) -> dict:
        """The first event, received before or from now on, that matches;
        events that do not match stay for later waits."""
        for i, event in enumerate(self.unclaimed):
            if predicate(event):
                return self.unclaimed.pop(i)
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            try:
                event = self.events.get(timeout=max(0.0, left))
            except queue.Empty:
                raise AgentError('%s: no answer within %.0f s'
                                 % (self.name, timeout_s)) from None
            if event['event'] == 'exit':
                raise AgentError('%s: agent exited: %s' % (
                    self.name, self.proc.stderr.read()[-2000:]))
            if event['event'] == 'error':
                raise AgentError('%s: %s' % (self.name, event['message']))
            if predicate(event):
                return event
            self.unclaimed.append(event)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass


def start_agent(fab: FabricNet, host: str, seed: int = 0) -> AgentHandle:
    """An MRC agent in `host`'s namespace. The caller stops it (or lets
    the fabric's teardown do it: see `FabricNet.add_cleanup`)."""
    assert fab.net is not None and fab.workdir is not None
    book = fab.workdir / ADDRESS_BOOK
    if not book.exists():
        ports: dict[str, dict[int, str]] = {}
        for (name, plane), port in fab.plan.host_ports.items():
            ports.setdefault(name, {})[plane] = port.address
        book.write_text(json.dumps(ports))
    return AgentHandle(fab.net[host], book, seed, fab.link_rate_bps)
