"""Path failure and repair on a sprayed QP; reverse EVs; verdicts."""

from __future__ import annotations

from collections import Counter

from testbed.nic.ev_table import EvState
from testbed.nic.loopback import Loopback
from testbed.nic.routes import ReverseRoutes
from testbed.nic.wire import max_payload

from testbed.nic.qp_pair import RKEY, Trace, done, make_pair, payload

P = max_payload(1500)
KILL_AT, REVIVE_AT, END = 5e-3, 45e-3, 60e-3


def test_dead_path_is_avoided_balanced_and_resurrected() -> None:
    pair = make_pair(mr_size=4 << 20)
    table = pair.qa.ev_table
    dead = pair.paths_ab[1][0]
    on_dead = {ev.ev_id for ev in table.evs() if ev.path == dead}
    active_on_dead = {ev.ev_id for ev in table.active_evs() if ev.path == dead}
    assert active_on_dead
    data = payload(3 << 20, seed=3)
    pair.qa.post_write(data, 0, RKEY, wr_id=5)
    loop = Loopback([pair.a, pair.b], seed=2, jitter_s=20e-6, rate_bps=1e9)
    trace = Trace().attach(loop)
    loop.at(KILL_AT, lambda: loop.kill_path(dead))
    loop.at(REVIVE_AT, lambda: loop.revive_path(dead))
    loop.run(stop=done(pair.a))
    assert [wc.ok for wc in pair.a.poll_cq()] == [True]
    assert pair.mr.buf[:len(data)] == data
    finished = loop.now
    assert finished < REVIVE_AT

    # Every EV that carried data on the dead path was detected, and none carried data after.
    events = table.poll_events()
    detected = {e.ev_id: e.time for e in events if e.new_state is EvState.ASSUMED_BAD
                and e.ev_id in on_dead}
    assert active_on_dead <= set(detected)
    assert all(KILL_AT < t < KILL_AT + 10e-3 for t in detected.values())
    for d in trace.data:
        if d.src == "A" and d.ev_id in detected:
            assert d.time <= detected[d.ev_id], f"data on EV {d.ev_id} after its detection"
    assert not [d for d in trace.data if d.src == "A" and d.path == dead
                and d.time > KILL_AT + 10e-3]

    # Planes stay balanced: same-plane backups replaced the demoted EVs.
    assert table.active_by_plane() == {1: 8, 2: 8}
    settled = KILL_AT + 10e-3
    per_plane = Counter(table.ev(d.ev_id).plane for d in trace.data
                        if d.src == "A" and not d.retransmit and d.time > settled)
    assert abs(per_plane[1] - per_plane[2]) <= 0.05 * sum(per_plane.values())

    # Probing failed while the path was dead, then brought every EV back.
    loop.run(until=END)
    assert all(table.ev(ev_id).state is EvState.GOOD for ev_id in on_dead)
    back = [e for e in table.poll_events() if e.new_state is EvState.GOOD and e.ev_id in on_dead]
    assert back and all(REVIVE_AT < e.time < REVIVE_AT + 5e-3 for e in back)
    assert pair.qa.counters.probe_timeouts > 0 and pair.qa.counters.probe_replies >= 3


def test_dead_reverse_path_does_not_silence_the_qp() -> None:
    """E13: one B->A path dies; feedback still gets through, no timeout storm."""
    pair = make_pair(mr_size=2 << 20)
    reverse = pair.qb.responder.reverse_routes
    dead = reverse.routes[0].path
    data = payload(1 << 20, seed=4)
    pair.qa.post_write(data, 0, RKEY)
    loop = Loopback([pair.a, pair.b], rate_bps=1e9)
    loop.kill_path(dead)
    loop.run(stop=done(pair.a))
    assert pair.mr.buf[:len(data)] == data
    assert loop.dropped_dead > 0
    assert pair.qa.counters.packet_timeouts <= 2
    assert pair.qa.counters.retransmitted_packets <= 2
    used = Counter(route.plane for route in reverse.routes if route.packets_sent)
    assert set(used) == {1, 2}                     # feedback alternates planes


def test_dead_reverse_path_is_replaced_when_little_is_in_flight() -> None:
    """E13 with a window of one packet: cumulative repair cannot hide a lost SACK, so the
    responder learns from the duplicate and swaps the dead reverse path for another one."""
    pair = make_pair(mr_size=1 << 20, mpr=1, max_wimm=1)
    reverse = pair.qb.responder.reverse_routes
    dead = {r.path for r in reverse.routes if r.plane == 2}
    writes = [payload(P, seed=i) for i in range(40)]
    loop = Loopback([pair.a, pair.b], rate_bps=1e9)
    for path in dead:
        loop.kill_path(path)
    for i, data in enumerate(writes):     # one packet at a time: each SACK stands alone
        pair.qa.post_write(data, 0, RKEY, wr_id=i)
        loop.run(stop=done(pair.a))
        assert [wc.ok for wc in pair.a.poll_cq()] == [True]
        assert pair.mr.buf[:P] == data
    assert pair.qb.counters.reverse_routes_replaced >= 1
    assert not dead & {r.path for r in reverse.routes}
    timeouts = pair.qa.counters.packet_timeouts + pair.qa.counters.retry_timeouts
    assert timeouts <= 8                          # a few per dead route, not one per write


def test_retry_timer_demotes_the_ev_it_times_out() -> None:
    """With one packet in flight the QP's retry timer fires before the per-packet timer: the
    EV the lost packet went on must be demoted all the same, so each dead EV swallows at most
    one packet instead of one per rotation."""
    from testbed.nic.transport_config import TransportConfig
    pair = make_pair(mr_size=1 << 20, mpr=1, max_wimm=1,
                     transport_config=TransportConfig(packet_timeout_s=50e-3))
    dead = pair.paths_ab[1][0]
    on_dead = [ev.ev_id for ev in pair.qa.ev_table.active_evs() if ev.path == dead]
    loop = Loopback([pair.a, pair.b], rate_bps=1e9)
    trace = Trace().attach(loop)
    loop.kill_path(dead)
    for i in range(80):
        data = payload(P, seed=i)
        pair.qa.post_write(data, 0, RKEY, wr_id=i)
        loop.run(stop=done(pair.a))
        assert [wc.ok for wc in pair.a.poll_cq()] == [True]
        assert pair.mr.buf[:P] == data
    lost = [d for d in trace.data if d.src == "A" and d.path == dead]
    assert pair.qa.counters.retry_timeouts > 0
    assert len(lost) <= len(on_dead)
    assert all(pair.qa.ev_table.ev(e).state is EvState.ASSUMED_BAD
               for e in {d.ev_id for d in lost})


def test_reverse_route_replacement_stays_on_its_plane() -> None:
    import random
    routes = ReverseRoutes.sampled({1: ["a", "b", "c"], 2: ["d", "e"]}, 1, random.Random(1))
    first = routes.routes[0]
    assert routes.replace(first)
    new = routes.routes[0]
    assert new.plane == first.plane and new.ev_id == first.ev_id and new.path != first.path
    assert not routes.replace(first)              # already gone
    second = routes.routes[1]                     # plane 2: one of d, e in use
    assert second.plane == 2 and routes.replace(second)
    swapped = routes.routes[1]
    assert swapped.plane == 2 and swapped.ev_id == second.ev_id
    assert {second.path, swapped.path} == {"d", "e"}
    assert routes.routes[0] is new                # plane 1's slot untouched
    pinned = ReverseRoutes(routes.routes[:1])     # no pool: nothing to swap in
    assert not pinned.replace(pinned.routes[0])


def test_reverse_routes_interleave_planes() -> None:
    import random
    routes = ReverseRoutes.sampled({1: ["a", "b", "c"], 2: ["d", "e"], 3: ["f"]}, 2,
                                   random.Random(1))
    planes = [routes.next().plane for _ in range(10)]
    assert planes[:5] == [1, 2, 3, 1, 2] and planes[5:] == planes[:5]
    assert len({r.ev_id for r in routes.routes}) == 5


def test_ecn_marked_path_is_skipped_then_abandoned() -> None:
    pair = make_pair(mr_size=4 << 20)
    marked = pair.paths_ab[2][1]
    data = payload(2 << 20, seed=6)
    pair.qa.post_write(data, 0, RKEY)
    loop = Loopback([pair.a, pair.b], rate_bps=1e9)
    loop.ecn_paths.add(marked)
    loop.run(stop=done(pair.a))
    assert pair.mr.buf[:len(data)] == data
    snapshot = pair.qa.ev_snapshot()
    on_marked = [e for e in snapshot if e["path"] == marked]
    others = [e for e in snapshot if e["path"] != marked and e["packets_sent"]]
    assert sum(e["skips"] for e in on_marked) > 0
    assert sum(e["always_skips"] for e in on_marked) > 0
    assert not any(e["skips"] for e in others)
    mean_other = sum(e["packets_sent"] for e in others) / len(others)
    assert all(e["packets_sent"] < mean_other / 2 for e in on_marked)


def test_marks_on_every_path_are_congestion_not_a_bad_path() -> None:
    # Where all of a QP's paths meet (an incast's last hops) every EV is
    # marked: SKIP, but no EV is judged persistently bad and demoted.
    pair = make_pair(mr_size=4 << 20)
    data = payload(2 << 20, seed=7)
    pair.qa.post_write(data, 0, RKEY)
    loop = Loopback([pair.a, pair.b], rate_bps=1e9)
    loop.ecn_paths.update(p for paths in pair.paths_ab.values() for p in paths)
    loop.run(stop=done(pair.a))
    assert pair.mr.buf[:len(data)] == data
    snapshot = pair.qa.ev_snapshot()
    assert sum(e["skips"] for e in snapshot) > 0
    assert sum(e["always_skips"] for e in snapshot) == 0
    assert pair.qa.stats()["ev_demotions"] == 0


def test_queueing_delay_on_one_path_earns_skip_verdicts() -> None:
    pair = make_pair(mr_size=2 << 20)
    slow = pair.paths_ab[1][2]
    data = payload(1 << 20, seed=7)
    pair.qa.post_write(data, 0, RKEY)
    loop = Loopback([pair.a, pair.b], rate_bps=1e9, path_delay={slow: 2e-3})
    loop.run(stop=done(pair.a))
    assert pair.mr.buf[:len(data)] == data
    snapshot = pair.qa.ev_snapshot()
    assert sum(e["skips"] for e in snapshot if e["path"] == slow) > 0
    assert not any(e["skips"] for e in snapshot if e["path"] != slow)


def test_verdict_counters_are_reported_by_name() -> None:
    pair = make_pair()
    pair.qa.post_write(payload(50 * P), 0, RKEY)
    loop = Loopback([pair.a, pair.b])
    loop.ecn_paths.update(pair.paths_ab[1])
    loop.run(stop=done(pair.a))
    sent = pair.qb.stats()["sack_verdicts_sent"]
    received = pair.qa.stats()["sack_verdicts_received"]
    assert set(sent) == {"NONE", "SKIP_ONCE", "ALWAYS_SKIP"}
    assert sent == received and sent["SKIP_ONCE"] > 0


def test_data_leaves_only_on_ports_with_room() -> None:
    # A NIC port that is still busy with what it holds takes no data: the
    # runtime says which are free, and the QP sprays over those only.
    pair = make_pair(mr_size=1 << 20)
    pair.qa.post_write(payload(64 * 1024, seed=8), 0, RKEY)
    assert pair.a.poll_tx(0.0, 64, free_planes=set()) == []
    only_two = pair.a.poll_tx(0.0, 8, free_planes={2})
    assert only_two and {out.plane for out in only_two} == {2}
    both = pair.a.poll_tx(0.0, 8)
    assert {out.plane for out in both} == {1, 2}
