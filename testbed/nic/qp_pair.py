"""An in-process pair of endpoints and a connected QP between them, for tests and benchmarks.

Everything that sets up two Endpoints over the Loopback channel lives here: `make_pair`
(endpoint A writes into a memory region of endpoint B over 2 planes x 4 paths), the
profile such pairs get unless told otherwise, a `Trace` of what the loopback carried
(decoded: a test's tool, decoding costs), and small predicates over raw packets. Nothing
here opens a socket or reads a clock.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from testbed.nic.endpoint import Endpoint, bring_up, connect
from testbed.nic.ev_table import EvTableConfig
from testbed.nic.loopback import Loopback, make_paths
from testbed.nic.memory import MemoryRegion
from testbed.nic.outgoing import Outgoing
from testbed.nic.qp import QueuePair
from testbed.nic.qp_profile import QpProfile
from testbed.nic.wire import BTH_FLAGS_OFFSET, FLAG_RETRANSMIT, DataPacket, Nack, Sack, decode

RKEY = 0x77
# 2 planes x 8 active EVs over 4 paths each, 4 backups per plane, fast probing.
SMALL_EV_PROFILE = EvTableConfig(active_count=16, backup_per_plane=4, ev_min_active=1,
                                 probe_interval_s=1e-3)
# What every pair gets unless a test says otherwise: the small EV table, a 5 ms ACK timeout.
PAIR_PROFILE = QpProfile(ev_table=SMALL_EV_PROFILE, timeout_s=5e-3)


@dataclass
class Pair:
    a: Endpoint
    b: Endpoint
    qa: QueuePair
    qb: QueuePair
    mr: MemoryRegion
    paths_ab: dict[int, list[str]]
    paths_ba: dict[int, list[str]]


def make_pair(transport: str = "mrc", *, planes: int = 2, per_plane: int = 4, seed: int = 1,
              mr_size: int = 1 << 20, profile: QpProfile = PAIR_PROFILE,
              psn_a: int | None = None, psn_b: int | None = None,
              **profile_fields: Any) -> Pair:
    """A connected pair A -> B; `profile_fields` replace fields of `profile` (a name
    QpProfile does not have is refused, as dataclasses.replace refuses it)."""
    a, b = Endpoint("A", seed=seed), Endpoint("B", seed=seed + 100)
    mr = b.register_mr(bytearray(mr_size), rkey=RKEY)
    paths_ab = make_paths("A", "B", planes, per_plane)
    paths_ba = make_paths("B", "A", planes, per_plane)
    qa, qb = connect(a, b, paths_ab, paths_ba, transport, replace(profile, **profile_fields),
                     psn_a=psn_a, psn_b=psn_b)
    return Pair(a, b, qa, qb, mr, paths_ab, paths_ba)


def make_pair_asymmetric(transport: str, profile_a: QpProfile, profile_b: QpProfile,
                         *, seed: int = 1, mr_size: int = 1 << 20) -> Pair:
    """Like make_pair, but each side created and brought up with its own profile."""
    a, b = Endpoint("A", seed=seed), Endpoint("B", seed=seed + 100)
    mr = b.register_mr(bytearray(mr_size), rkey=RKEY)
    paths_ab, paths_ba = make_paths("A", "B", 2, 4), make_paths("B", "A", 2, 4)
    qa = a.create_qp(transport, config=profile_a.transport_config)
    qb = b.create_qp(transport, config=profile_b.transport_config)
    info_a, info_b = qa.local_info(), qb.local_info()
    bring_up(qa, info_b, paths_ab, profile_a)
    bring_up(qb, info_a, paths_ba, profile_b)
    return Pair(a, b, qa, qb, mr, paths_ab, paths_ba)


def payload(nbytes: int, seed: int = 0) -> bytes:
    return random.Random(seed).randbytes(nbytes)


@dataclass
class SentData:
    time: float
    src: Any
    psn: int
    ev_id: int
    path: Any
    retransmit: bool
    packet: DataPacket


@dataclass
class Trace:
    """Everything a loopback transmitted, decoded (test-only: decoding costs)."""

    data: list[SentData] = field(default_factory=list)
    sacks: list[tuple[float, Sack]] = field(default_factory=list)
    nacks: list[tuple[float, Nack]] = field(default_factory=list)

    def attach(self, loop: Loopback) -> Trace:
        loop.on_send = self._record
        return self

    def _record(self, now: float, src: Endpoint, out: Outgoing) -> None:
        pkt = decode(out.data)
        if isinstance(pkt, DataPacket):
            self.data.append(SentData(now, src.addr, pkt.psn, out.ev_id, out.path,
                                      pkt.retransmit, pkt))
        elif isinstance(pkt, Sack):
            self.sacks.append((now, pkt))
        elif isinstance(pkt, Nack):
            self.nacks.append((now, pkt))

    def retransmissions(self, src: Any = "A") -> list[SentData]:
        return [d for d in self.data if d.src == src and d.retransmit]

    def retransmits_on_previous_ev(self, src: Any = "A") -> list[SentData]:
        """Retransmissions that went on the EV the previous copy of that PSN used."""
        last_ev: dict[int, int] = {}
        bad = []
        for d in self.data:
            if d.src != src:
                continue
            if d.retransmit and last_ev.get(d.psn) == d.ev_id:
                bad.append(d)
            last_ev[d.psn] = d.ev_id
        return bad

    def first_sends(self, src: Any = "A") -> dict[int, SentData]:
        first: dict[int, SentData] = {}
        for d in self.data:
            if d.src == src and not d.retransmit:
                first.setdefault(d.psn, d)
        return first


def is_data(out: Outgoing) -> bool:
    return 0x06 <= out.data[0] <= 0x0B


def data_psn(out: Outgoing) -> int:
    """BTH PSN of a packet without a full decode."""
    return int.from_bytes(out.data[9:12], "big")


def is_retransmit(out: Outgoing) -> bool:
    return bool(out.data[BTH_FLAGS_OFFSET] & FLAG_RETRANSMIT)


def done(*endpoints: Endpoint, count: int = 1) -> Callable[[], bool]:
    """stop() predicate: every endpoint has at least `count` completions queued."""
    return lambda: all(len(ep.cq) >= count for ep in endpoints)
