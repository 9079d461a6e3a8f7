"""An in-process channel between Endpoints, driven by a deterministic discrete-event clock.

For unit tests and demos: no sockets, no threads, no wall clock. A heap holds packet
deliveries, endpoint timer deadlines, transmitter wake-ups and scripted actions; `run()`
pops them in time order (ties in insertion order), so a run is a pure function of its
inputs and seed.

Channel model, per packet, in this order:
  - a path in `dead_paths` (checked on arrival, so packets in flight when a path dies are
    lost too) drops it; so does `drop_if(now, src, out)` or, with probability `loss`, the
    seeded rng;
  - on a path in `trim_paths` a data packet arrives trimmed (wire.trim_data_packet); on a
    path in `ecn_paths` every packet arrives CE-marked;
  - delay = delay_s + path_delay[path] + U(0, jitter_s) + delay_if(now, src, out); random
    jitter is what reorders packets.
With `rate_bps` set, each endpoint's NIC serialises one packet at a time at that rate (all
ports together); without it, endpoints transmit everything poll_tx yields at once.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from testbed.nic.endpoint import Endpoint
from testbed.nic.outgoing import Outgoing
from testbed.nic.wire import DATA_OPCODES, INNER_HEADERS_LEN, IPV6_HEADER_LEN, trim_data_packet

WIRE_OVERHEAD = IPV6_HEADER_LEN + INNER_HEADERS_LEN    # outer IPv6 + inner IPv6/UDP
_DATA_OPCODE_VALUES = frozenset(int(op) for op in DATA_OPCODES)
_DELIVER, _TIMER, _TX, _ACTION = 0, 1, 2, 3

PacketHook = Callable[[float, Endpoint, Outgoing], Any]


def make_paths(src: str, dst: str, planes: int, per_plane: int) -> dict[int, list[str]]:
    """Opaque path names "src>dst/p<plane>/<i>" for `planes` planes of `per_plane` paths."""
    return {p: [f"{src}>{dst}/p{p}/{i}" for i in range(per_plane)] for p in range(1, planes + 1)}


class Loopback:
    """Discrete-event channel connecting endpoints by address (see module docstring)."""

    def __init__(self, endpoints: Iterable[Endpoint], *, seed: int = 0, delay_s: float = 20e-6,
                 jitter_s: float = 0.0, loss: float = 0.0,
                 path_delay: Mapping[Any, float] | None = None, rate_bps: float | None = None,
                 budget: int = 64) -> None:
        self.endpoints = {ep.addr: ep for ep in endpoints}
        self.now = 0.0
        self.delay_s = delay_s
        self.jitter_s = jitter_s
        self.loss = loss
        self.path_delay = dict(path_delay or {})
        self.rate_bps = rate_bps
        self.budget = budget
        self.dead_paths: set[Any] = set()
        self.trim_paths: set[Any] = set()
        self.trim_last_hop = False      # trims are TRIMMED_LASTHOP (a host's own port)
        self.ecn_paths: set[Any] = set()
        self.drop_if: PacketHook | None = None
        self.delay_if: PacketHook | None = None
        self.on_send: PacketHook | None = None
        self._rng = random.Random(seed)
        self._heap: list[tuple] = []
        self._seq = 0
        self._timer_at: dict[Any, float | None] = dict.fromkeys(self.endpoints)
        self._tx_free_at: dict[Any, float] = dict.fromkeys(self.endpoints, 0.0)
        self._fired_at: dict[Any, float] = {}
        self.events = 0
        self.timer_spins = 0
        self.sent = self.delivered = self.dropped_dead = 0
        self.dropped_random = self.dropped_hook = self.trimmed = 0

    # ------------------------------------------------------------------------- scripting

    def kill_path(self, *paths: Any) -> None:
        self.dead_paths.update(paths)

    def revive_path(self, *paths: Any) -> None:
        self.dead_paths.difference_update(paths)

    def at(self, time: float, action: Callable[[], Any]) -> None:
        """Run `action` at simulated `time`, then let every endpoint transmit."""
        self._push(max(time, self.now), _ACTION, action, None)

    def kick(self) -> None:
        """Let every endpoint transmit and re-arm its timer (after posting work, say)."""
        for ep in self.endpoints.values():
            self._pump(ep)
            self._rearm(ep)

    # ------------------------------------------------------------------------- running

    def run(self, until: float | None = None, stop: Callable[[], bool] | None = None,
            max_events: int = 50_000_000) -> float:
        """Process events until none is left, `until` is reached or `stop()` is true."""
        self.kick()
        heap = self._heap
        heappop, deliver, dispatch = heapq.heappop, self._deliver, self._dispatch
        while heap and max_events > 0:
            if stop is not None and stop():
                return self.now
            if until is not None and heap[0][0] > until:
                self.now = until
                return self.now
            time, _, kind, a, b = heappop(heap)
            self.now = time
            self.events += 1
            max_events -= 1
            if kind == _DELIVER:              # most events: skip the general dispatch
                deliver(a, b)
            else:
                dispatch(kind, a, b)
        if until is not None and not heap:
            self.now = max(self.now, until)
        return self.now

    def _dispatch(self, kind: int, a: Any, b: Any) -> None:
        if kind == _DELIVER:
            self._deliver(a, b)
        elif kind == _TIMER:
            if self._timer_at.get(a.addr) == b:
                self._timer_at[a.addr] = None
                self._fired_at[a.addr] = self.now
                a.on_timer(self.now)
                self._pump(a)
                self._rearm(a)
        elif kind == _TX:
            self._pump(a)
            self._rearm(a)
        else:
            a()
            self.kick()

    def _deliver(self, dst: Endpoint, item: tuple) -> None:
        src_addr, out, ecn = item
        path, plane, ev_id, data, _dst_addr = out
        dead = self.dead_paths
        if dead and path in dead:
            self.dropped_dead += 1
            return
        self.delivered += 1
        dst.on_packet(self.now, data, ev_id, plane, src_addr, ecn)
        self._pump(dst)
        self._rearm(dst)

    # ------------------------------------------------------------------------- endpoints

    def _pump(self, ep: Endpoint) -> None:
        now = self.now
        if self._tx_free_at[ep.addr] > now:
            return                                   # a _TX wake-up is already queued
        if self.rate_bps is None:
            budget, transmit = self.budget, self._transmit
            while True:
                batch = ep.poll_tx(now, budget)
                for out in batch:
                    transmit(ep, out, now)
                if len(batch) < budget:
                    return
        batch = ep.poll_tx(now, 1)
        if batch:
            out = batch[0]
            done = now + (len(out.data) + WIRE_OVERHEAD) * 8 / self.rate_bps
            self._transmit(ep, out, done)
            self._tx_free_at[ep.addr] = done
            self._push(done, _TX, ep, None)

    def _rearm(self, ep: Endpoint) -> None:
        deadline = ep.next_deadline()
        if deadline is None:
            return
        current = self._timer_at[ep.addr]
        if current is not None and current <= deadline:
            return
        if deadline <= self.now and self._fired_at.get(ep.addr) == self.now:
            # on_timer ran at this instant and the deadline is still due: step past it
            # rather than spin (the sans-IO core should never ask for this).
            self.timer_spins += 1
            deadline = self.now + 1e-9
        self._timer_at[ep.addr] = deadline
        self._push(max(deadline, self.now), _TIMER, ep, deadline)

    def _transmit(self, src: Endpoint, out: Outgoing, departs: float) -> None:
        self.sent += 1
        if self.on_send is not None:
            self.on_send(self.now, src, out)
        path = out[0]
        dst = self.endpoints.get(out.dst_addr)
        if dst is None:
            raise KeyError(f"no endpoint at {out.dst_addr!r} on this loopback")
        if self.drop_if is not None and self.drop_if(self.now, src, out):
            self.dropped_hook += 1
            return
        if self.loss and self._rng.random() < self.loss:
            self.dropped_random += 1
            return
        # Set and dict look-ups only when the scenario configured any (once per packet).
        trim_paths, path_delay, ecn_paths = self.trim_paths, self.path_delay, self.ecn_paths
        if trim_paths and path in trim_paths and out.data[0] in _DATA_OPCODE_VALUES:
            out = out._replace(data=trim_data_packet(out.data,
                                                     last_hop=self.trim_last_hop))
            self.trimmed += 1
        delay = self.delay_s + (path_delay.get(path, 0.0) if path_delay else 0.0)
        if self.jitter_s:
            delay += self._rng.uniform(0.0, self.jitter_s)
        if self.delay_if is not None:
            delay += self.delay_if(self.now, src, out)
        ecn = bool(ecn_paths) and path in ecn_paths
        self._seq += 1                        # _push(), inlined: once per packet
        heapq.heappush(self._heap,
                       (departs + delay, self._seq, _DELIVER, dst, (src.addr, out, ecn)))

    def _push(self, time: float, kind: int, a: Any, b: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (time, self._seq, kind, a, b))

    def stats(self) -> dict[str, Any]:
        return {"now": self.now, "events": self.events, "sent": self.sent,
                "delivered": self.delivered, "dropped_dead": self.dropped_dead,
                "dropped_random": self.dropped_random, "dropped_hook": self.dropped_hook,
                "trimmed": self.trimmed,
                "timer_spins": self.timer_spins}
