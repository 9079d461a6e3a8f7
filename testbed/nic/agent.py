"""The MRC agent: one emulated host's NIC as a long-running process.

Started inside a host's network namespace:

    python -m testbed.nic.agent --host h1 --addresses addresses.json \
        [--port-rate-bps R]

It reads one JSON command per line on stdin and writes one JSON event per
line on stdout, so scenarios and the CLI drive it without sharing memory:

    {"cmd": "register_mr", "size": 1048576}            -> {"event": "mr", "rkey": ..}
    {"cmd": "create_qp", "transport": "mrc",
     "profile": {..QpProfile.to_json()..}}            -> {"event": "qp", "info": {..}}
    {"cmd": "connect", "qpn": Q, "remote": {..info..},
     "paths_by_plane": {"1": [carrier, ..]},
     "profile": {..}}                                  -> {"event": "connected"}
    {"cmd": "post_recv", "qpn": Q, "wr_id": 7}          -> {"event": "posted"}
    {"cmd": "post_write", "qpn": Q, "size": N, "rkey": R,
     "remote_offset": 0, "imm": 5, "wr_id": 1, "seed": S} -> {"event": "posted", "sha256": ..}
    {"cmd": "hash_mr", "rkey": R, "offset": 0, "length": N} -> {"event": "hash", "sha256": ..}
    {"cmd": "stats"} / {"cmd": "evs", "qpn": Q}         -> {"event": "stats" | "evs", ..}
    {"cmd": "report", "every_s": 0.1}                   periodic {"event": "stats"} lines
    {"cmd": "set_denied", "qpn": Q, "ev_id": E, "denied": true}
    {"cmd": "quit"}

The QP profile is computed once by the caller (emulated_qp_profile, from the
rate the QP can reach) and travels as JSON: create_qp creates the QP with its
transport config and keeps it for that QP; connect brings the QP up with it,
or with the "profile" it carries itself (e.g. a pinned path). Without one the
agent uses emulated_qp_profile() (no congestion control).

Completions are pushed as {"event": "completion", ..} when they happen, EV
state changes as {"event": "ev", ..}. A bad command answers
{"event": "error", "cmd": .., "message": ..} and the agent carries on.
Write payloads are generated from a seed (a 32 MiB buffer does not travel
through a pipe); their SHA-256 lets the caller check the receiver's copy.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import select
import sys
import time
from typing import Any, Callable

from testbed.nic.emulated_timescale import emulated_qp_profile
from testbed.nic.endpoint import Endpoint, bring_up
from testbed.nic.ev_table import EvEvent
from testbed.nic.qp_profile import QpProfile
from testbed.nic.socket_runtime import AddressBook, SocketRuntime

# The protocol in one table: each command, and the event that answers it.
# Other events are pushed: completion, ev, periodic stats, error.
COMMAND_REPLIES = {
    'register_mr': 'mr', 'create_qp': 'qp', 'connect': 'connected',
    'post_recv': 'posted', 'post_write': 'posted', 'hash_mr': 'hash',
    'stats': 'stats', 'evs': 'evs', 'set_denied': 'denied',
    'report': 'reporting', 'quit': 'bye'}


class Agent:
    def __init__(self, host: str, book: AddressBook, seed: int = 0,
                 emit: Callable[[dict], None] | None = None,
                 port_rate_bps: float | None = None) -> None:
        self.endpoint = Endpoint(host, seed=seed)
        self.runtime = SocketRuntime(book, port_rate_bps=port_rate_bps)
        self.runtime.add(self.endpoint)
        self.emit = emit or _print_json
        self.report_every: float | None = None
        self.next_report = 0.0
        self.running = True
        self.profiles: dict[int, QpProfile] = {}      # by QPN, as create_qp gave them
        self.commands: dict[str, Callable[[dict], dict | None]] = {
            name: getattr(self, 'cmd_' + name) for name in COMMAND_REPLIES}

    # ---------------------------------------------------------------- loop

    def handle(self, line: str) -> None:
        try:
            command = json.loads(line)
            name = command.get('cmd')
            if name not in self.commands:
                raise ValueError('unknown command %r (known: %s)' % (
                    name, ', '.join(sorted(self.commands))))
            reply = self.commands[name](command)
        except Exception as err:  # noqa: BLE001 - one bad command never kills the agent
            self.emit({'event': 'error', 'cmd': _cmd_name(line),
                       'message': '%s: %s' % (type(err).__name__, err)})
            return
        if reply is not None:
            self.emit(reply)

    def after_turn(self) -> None:
        for wc in self.endpoint.poll_cq():
            self.emit({'event': 'completion', 'qpn': wc.qp_num,
                       'wr_id': wc.wr_id, 'status': str(wc.status),
                       'ok': wc.ok, 'opcode': str(wc.opcode),
                       'byte_len': wc.byte_len, 'imm': wc.imm_data,
                       'time': wc.time})
        for qp in self.endpoint.qps:
            if qp.ev_table is not None:
                for event in qp.ev_table.poll_events():
                    self.emit(_ev_event(qp.qpn, event))
        now = time.monotonic()
        if self.report_every and now >= self.next_report:
            self.next_report = now + self.report_every
            self.emit(self.cmd_stats({}))

    # ------------------------------------------------------------ commands

    def cmd_register_mr(self, c: dict) -> dict:
        mr = self.endpoint.register_mr(bytearray(int(c['size'])))
        return {'event': 'mr', 'rkey': mr.rkey, 'size': len(mr.buf)}

    def cmd_create_qp(self, c: dict) -> dict:
        # The emulator's timers (packet and probe timeouts, SKIP target) come
        # with the profile: the hardware defaults read every emulated path as dead.
        profile = _profile(c, emulated_qp_profile())
        qp = self.endpoint.create_qp(c.get('transport', 'mrc'),
                                     config=profile.transport_config)
        self.profiles[qp.qpn] = profile
        return {'event': 'qp', 'qpn': qp.qpn, 'info': qp.local_info()}

    def cmd_connect(self, c: dict) -> dict:
        qp = self.endpoint.qp(int(c['qpn']))
        paths = {int(p): list(v) for p, v in c['paths_by_plane'].items()}
        profile = _profile(c, self.profiles.get(qp.qpn) or emulated_qp_profile())
        bring_up(qp, c['remote'], paths, profile)
        return {'event': 'connected', 'qpn': qp.qpn}

    def cmd_post_recv(self, c: dict) -> dict:
        self.endpoint.qp(int(c['qpn'])).post_recv(int(c.get('wr_id', 0)))
        return {'event': 'posted', 'qpn': int(c['qpn'])}

    def cmd_post_write(self, c: dict) -> dict:
        data = random.Random(c.get('seed', 0)).randbytes(int(c['size']))
        self.endpoint.qp(int(c['qpn'])).post_write(
            data, int(c.get('remote_offset', 0)), int(c['rkey']),
            imm=c.get('imm'), wr_id=int(c.get('wr_id', 0)))
        return {'event': 'posted', 'qpn': int(c['qpn']),
                'wr_id': int(c.get('wr_id', 0)),
                'sha256': hashlib.sha256(data).hexdigest()}

    def cmd_hash_mr(self, c: dict) -> dict:
        mr = self.endpoint.placement.region(int(c['rkey']))
        if mr is None:
            raise ValueError('no memory region with rkey %s' % c['rkey'])
        start = int(c.get('offset', 0))
        view = memoryview(mr.buf)[start:start + int(c.get('length', len(mr.buf)))]
        return {'event': 'hash', 'rkey': mr.rkey,
                'sha256': hashlib.sha256(view).hexdigest()}

    def cmd_stats(self, c: dict) -> dict:
        nic = self.runtime.nics[0]
        return {'event': 'stats', 'time': time.monotonic(),
                'endpoint': self.endpoint.stats(),
                'nic': {'tx_errors': nic.tx_errors,
                        'tx_unmodelled': nic.tx_unmodelled,
                        'rx_unknown_source': nic.rx_unknown_source}}

    def cmd_evs(self, c: dict) -> dict:
        qp = self.endpoint.qp(int(c['qpn']))
        return {'event': 'evs', 'qpn': qp.qpn, 'evs': qp.ev_snapshot()}

    def cmd_set_denied(self, c: dict) -> dict:
        qp = self.endpoint.qp(int(c['qpn']))
        if qp.ev_table is None:
            raise ValueError('QP %#x has no EV table (transport %s)'
                             % (qp.qpn, qp.transport))
        changed = qp.ev_table.set_denied(int(c['ev_id']), bool(c['denied']),
                                         now=time.monotonic())
        return {'event': 'denied', 'qpn': qp.qpn, 'ev_id': int(c['ev_id']),
                'changed': changed}

    def cmd_report(self, c: dict) -> dict:
        every = float(c.get('every_s', 0))
        self.report_every = every if every > 0 else None
        return {'event': 'reporting', 'every_s': self.report_every}

    def cmd_quit(self, c: dict) -> dict:
        self.running = False
        return {'event': 'bye'}


def _ev_event(qpn: int, e: EvEvent) -> dict[str, Any]:
    return {'event': 'ev', 'qpn': qpn, 'time': e.time, 'ev_id': e.ev_id,
            'plane': e.plane, 'path': str(e.path), 'old': str(e.old_state),
            'new': str(e.new_state), 'reason': str(e.reason),
            'drop_count': e.drop_count}


# What the agent protocol carried before the profile did: refused, so that a stale
# caller fails loudly instead of getting a QP without congestion control.
_RETIRED_FIELDS = ('link_rate_bps', 'base_rtt_s', 'pinned_path')


def _profile(c: dict, default: QpProfile) -> QpProfile:
    retired = [name for name in _RETIRED_FIELDS if name in c]
    if retired:
        raise ValueError('%s: the QP profile now travels whole as "profile" '
                         '(QpProfile.to_json())' % ', '.join(retired))
    return QpProfile.from_json(c['profile']) if c.get('profile') else default


def _cmd_name(line: str) -> str | None:
    try:
        return json.loads(line).get('cmd')
    except (ValueError, AttributeError):
        return None


def _print_json(event: dict) -> None:
    sys.stdout.write(json.dumps(event, default=str) + '\n')
    sys.stdout.flush()


def load_addresses(path: str) -> AddressBook:
    """{"h1": {"1": "fd00:0:0:1::1", ...}, ...} as written by the fabric."""
    with open(path) as f:
        data = json.load(f)
    return AddressBook({(host, int(plane)): addr
                        for host, planes in data.items()
                        for plane, addr in planes.items()})


def serve(agent: Agent, stdin_fd: int) -> None:
    os.set_blocking(stdin_fd, False)
    pending = b''
    while agent.running:
        agent.runtime.turn()
        agent.after_turn()
        if not select.select([stdin_fd], [], [], 0)[0]:
            continue
        chunk = os.read(stdin_fd, 1 << 16)
        if not chunk:
            return              # the controlling process went away
        pending += chunk
        *lines, pending = pending.split(b'\n')
        for line in lines:
            if line.strip():
                agent.handle(line.decode())


def main() -> None:
    parser = argparse.ArgumentParser(prog='python -m testbed.nic.agent')
    parser.add_argument('--host', required=True)
    parser.add_argument('--addresses', required=True)
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument('--port-rate-bps', type=float, default=None,
                        help="the NIC ports' line rate: they pace at it")
    args = parser.parse_args()
    agent = Agent(args.host, load_addresses(args.addresses), args.seed,
                  port_rate_bps=args.port_rate_bps)
    agent.emit({'event': 'ready', 'host': args.host, 'pid': os.getpid()})
    try:
        serve(agent, sys.stdin.fileno())
    finally:
        agent.runtime.close()


if __name__ == '__main__':
    main()
