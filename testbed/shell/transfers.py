"""RDMA WRITEs between fabric hosts through their MRC agents, for the
interactive CLI (`mrc-testbed cli`).

Like a collective library, each (src, dst, transport) keeps one connected QP
pair across writes: what a QP learned about its paths (EVs gone ASSUMED_BAD
behind a dead link) carries over to the next write and shows in `evs`. A
pair whose QP went to ERROR is dropped, and the next write opens a new one.

Agents start on first use. An idle agent still wakes every millisecond, so
one per host up front would keep a small machine's cores busy for nothing.
"""
from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pyroute2 import IPRoute

from testbed.shell.agent_client import (AgentError, AgentHandle,
                                        start_agent)
from testbed.fabric.net import FabricNet
from testbed.fabric.netns import inside
from testbed.nic.emulated_timescale import fabric_qp_profile

WRITE_TIMEOUT_S = 300.0     # RC's retry budget on a dead path ends far sooner
PROGRESS_EVERY_S = 0.2
IMM_TIMEOUT_S = 10.0
# What a progress callback gets: bytes delivered so far, seconds since posting.
Progress = Callable[[int, float], None]


class TransferError(RuntimeError):
    """A write could not be set up or did not finish."""


@dataclass
class Connection:
    src: str
    dst: str
    transport: str
    src_qpn: int
    dst_qpn: int
    rkey: int = 0
    region: int = 0          # bytes registered at dst under rkey
    posted: int = 0          # bytes of every write posted on the QP


@dataclass
class WriteResult:
    conn: Connection
    size: int
    ok: bool
    status: str
    elapsed_s: float
    hash_ok: bool | None = None      # None: not checked (the write failed)
    imm: int | None = None           # immediate the receiver got, if asked
    backlog: int = 0                 # bytes of interrupted writes ahead
    retransmitted: int = 0           # packets, during this write
    timeouts: int = 0                # packet timeouts, during this write
    ev_changes: list[dict] = field(default_factory=list)

    @property
    def goodput_mbps(self) -> float:
        return self.size * 8 / self.elapsed_s / 1e6 if self.elapsed_s else 0.0


class Transfers:
    """Agents, QP pairs and writes on one running fabric."""

    def __init__(self, fab: FabricNet) -> None:
        self.fab = fab
        self.connections: dict[tuple[str, str, str], Connection] = {}
        self.labels: dict[tuple[str, int], str] = {}   # (host, qpn) -> text
        self.agents: dict[str, AgentHandle] = {}
        self._wr_ids = itertools.count(1)
        # An agent would keep its host's namespace alive past the teardown.
        fab.add_cleanup(self.stop_agents)

    # -- agents ------------------------------------------------------------

    def agent(self, host: str) -> AgentHandle:
        """The host's agent, started now if it is not running."""
        if host not in self.agents:
            self.agents[host] = start_agent(self.fab, host, seed=int(host[1:]))
        return self.agents[host]

    def running(self, host: str) -> AgentHandle | None:
        return self.agents.get(host)

    def stop_agents(self) -> None:
        for agent in self.agents.values():
            agent.stop()
        self.agents.clear()

    def reset(self) -> None:
        """Stop every agent and forget their QPs (a scenario's endpoints
        need the MRC UDP port the agents hold in each host)."""
        self.stop_agents()
        self.connections.clear()
        self.labels.clear()

    # -- queue pairs ----------------------------------------------------------

    def connection(self, src: str, dst: str, transport: str,
                   size: int) -> Connection:
        """The pair's QPs, connected, with at least `size` bytes at dst."""
        key = (src, dst, transport)
        conn = self.connections.get(key) or self._connect(src, dst, transport)
        self.connections[key] = conn
        if conn.region < size:
            mr = self.agent(dst).call(cmd='register_mr', size=size)
            conn.rkey, conn.region = mr['rkey'], size
        return conn

    def _connect(self, src: str, dst: str, transport: str) -> Connection:
        a, b = self.agent(src), self.agent(dst)
        plan = self.fab.plan
        profile = fabric_qp_profile(transport, self.fab.link_rate_bps,
                                    len(plan.planes), plan.longest_path_links,
                                    self.fab.congestion_signals,
                                    mtu=self.fab.mtu).to_json()
        qa = a.call(cmd='create_qp', transport=transport, profile=profile)
        qb = b.call(cmd='create_qp', transport=transport, profile=profile)
        a.call(cmd='connect', qpn=qa['qpn'], remote=qb['info'],
               paths_by_plane=self._paths(src, dst))
        b.call(cmd='connect', qpn=qb['qpn'], remote=qa['info'],
               paths_by_plane=self._paths(dst, src))
        self.labels[(src, qa['qpn'])] = '%s -> %s' % (transport, dst)
        self.labels[(dst, qb['qpn'])] = '%s <- %s' % (transport, src)
        return Connection(src, dst, transport, qa['qpn'], qb['qpn'])

    def _paths(self, src: str, dst: str) -> dict[str, list[str]]:
        plan = self.fab.plan
        return {str(p): [x.carrier for x in plan.paths(src, dst, p)]
                for p in plan.planes}

    # -- writes ---------------------------------------------------------------

    def write(self, src: str, dst: str, size: int, transport: str,
              imm: bool, progress: Progress) -> WriteResult:
        conn = self.connection(src, dst, transport, size)
        a, b = self.agent(src), self.agent(dst)
        drain(a)                    # stale replies of an interrupted command
        drain(b)
        wr = next(self._wr_ids)
        if imm:
            b.call(cmd='post_recv', qpn=conn.dst_qpn, wr_id=wr)
        before = self.qp_stats(src, conn.src_qpn)
        # A write whose wait was interrupted goes on: this one queues
        # behind what is left of it.
        backlog = max(0, conn.posted - _delivered(before))
        t0 = time.monotonic()
        posted = a.call(cmd='post_write', qpn=conn.src_qpn, size=size,
                        rkey=conn.rkey, wr_id=wr, seed=wr,
                        imm=wr if imm else None)
        conn.posted += size
        done, events = self._wait(a, conn, wr, _delivered(before) + backlog,
                                  t0, size, progress)
        after = self.qp_stats(src, conn.src_qpn)
        result = WriteResult(
            conn, size, done['ok'], done['status'], done['time'] - t0,
            backlog=backlog,
            retransmitted=_grew(before, after, 'retransmitted_packets'),
            timeouts=_grew(before, after, 'packet_timeouts'),
            ev_changes=[e for e in events + drain(a) if e['event'] == 'ev'
                        and e['qpn'] == conn.src_qpn])
        if not result.ok:      # the QP is in ERROR: the next write starts over
            self.connections.pop((src, dst, transport), None)
            return result
        got = b.call(cmd='hash_mr', rkey=conn.rkey, length=size)
        result.hash_ok = got['sha256'] == posted['sha256']
        if imm:
            result.imm = b.wait_for(lambda e: e['event'] == 'completion'
                                    and e['wr_id'] == wr,
                                    timeout_s=IMM_TIMEOUT_S).get('imm')
        return result

    def _wait(self, agent: AgentHandle, conn: Connection, wr: int,
              start: int, t0: float, size: int,
              progress: Progress) -> tuple[dict, list[dict]]:
        """The write's completion, and every other event seen meanwhile;
        progress is the QP's delivered-byte counter past `start`."""
        seen: list[dict] = []
        while time.monotonic() - t0 < WRITE_TIMEOUT_S:
            for event in drain(agent):
                if event['event'] == 'completion' and \
                        event['qpn'] == conn.src_qpn and event['wr_id'] == wr:
                    return event, seen
                seen.append(event)
            stats = self.qp_stats(conn.src, conn.src_qpn)
            delivered = _delivered(stats) - start
            progress(max(0, min(size, delivered)), time.monotonic() - t0)
            time.sleep(PROGRESS_EVERY_S)
        raise TransferError('no completion within %.0f s; the write goes on '
                            'in %s\'s agent' % (WRITE_TIMEOUT_S, conn.src))

    # -- what the agents know -------------------------------------------------

    def qps(self, host: str) -> dict[int, dict]:
        """qpn -> the QP's counters, for a host whose agent runs."""
        agent = self.running(host)
        if agent is None:
            return {}
        stats = agent.call(cmd='stats')['endpoint']['qps']
        return {int(qpn, 16): qp for qpn, qp in stats.items()}

    def qp_stats(self, host: str, qpn: int) -> dict:
        return self.qps(host).get(qpn, {})

    def evs(self, host: str, qpn: int) -> list[dict]:
        return self.agent(host).call(cmd='evs', qpn=qpn)['evs']

    def label(self, host: str, qpn: int) -> str:
        return self.labels.get((host, qpn), '?')


def drain(agent: AgentHandle) -> list[dict]:
    """Every event the agent sent that nobody waited for, oldest first."""
    events = []
    while True:
        try:
            events.append(agent.wait_for(lambda e: True, timeout_s=0))
        except AgentError:
            return events


def port_counters(fab: FabricNet, host: str) -> dict[int, dict[str, int]]:
    """plane -> the host's NIC port counters for that plane (netlink, in
    the host's namespace)."""
    ports = {p.intf: p.plane for (h, _), p in fab.plan.host_ports.items()
             if h == host}
    out: dict[int, dict[str, int]] = {}
    with inside(fab.host_pid(host)), IPRoute() as ipr:
        for link in ipr.get_links():
            name = link.get_attr('IFLA_IFNAME')
            stats = link.get_attr('IFLA_STATS64')
            if name in ports and stats is not None:
                out[ports[name]] = {k: stats[k] for k in (
                    'tx_packets', 'rx_packets', 'tx_bytes', 'rx_bytes',
                    'tx_dropped', 'rx_dropped')}
    return out


def _delivered(stats: dict) -> int:
    return (stats.get('requester') or {}).get('peer_received_bytes', 0)


def _grew(before: dict, after: dict, key: str) -> int:
    return after.get(key, 0) - before.get(key, 0)
