"""The Port Status Update endpoint operation: its wire form (docs/wire-format.md §6.4, a
[CONV] layout) and what it does to the two endpoints (Endpoint.port_down / port_up send
it; the peer's QPs take the plane out, QueuePair.peer_port_status), on the in-process
loopback (virtual time, no sockets)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given

from testbed.nic import wire
from testbed.nic.endpoint import Endpoint, connect
from testbed.nic.loopback import Loopback, make_paths
from testbed.nic.outgoing import Outgoing
from testbed.nic.qp_pair import RKEY, Pair, done, is_data, make_pair, payload
from testbed.nic.wire import (
    EP_OP_QP,
    PORT_STATUS_PACKET_LEN,
    Opcode,
    PortStatusUpdate,
    Sack,
    WireError,
)
from tests.unit.wire_examples import (
    EXAMPLES,
    FUZZ,
    ROUND_TRIP,
    mutate,
    mutations,
    patched,
)
from tests.unit.wire_examples import port_status_updates as updates

EXAMPLE = EXAMPLES["port_status_update"]
ENCODED = EXAMPLE.encode()


# ------------------------------------------------------------------------------ wire

def test_layout_matches_the_docs() -> None:
    assert len(ENCODED) == PORT_STATUS_PACKET_LEN == 12 + 16 + 36 + 4 == 68
    opcode, zero, pkey, word1, word2 = struct.unpack_from(">BBHII", ENCODED)
    assert (opcode, zero, pkey) == (Opcode.PORT_STATUS_UPDATE, 0, 0xFFFF) == (0xC5, 0, 0xFFFF)
    assert (word1 >> 24, word1 & 0xFFFFFF) == (1, EP_OP_QP)     # version 1, QP 0x2
    assert (word2 >> 24, word2 & 0xFFFFFF) == (0, 0xBEEF)       # no flags, request id
    assert ENCODED[12] == wire.EP_OP_PORT_STATUS == 1           # ERTH: the operation
    assert ENCODED[13:28] == bytes(15)                          # ERTH: reserved
    assert struct.unpack_from(">IIB", ENCODED, 28) == (0b10, 0b01, 2)   # EETH
    assert ENCODED[37:64] == bytes(27)                          # EETH: reserved


def test_example_round_trip() -> None:
    assert wire.decode(ENCODED) == EXAMPLE
    assert wire.decode_received(ENCODED) == EXAMPLE
    assert wire.decode(bytearray(ENCODED)) == EXAMPLE
    assert wire.decode(memoryview(ENCODED)) == EXAMPLE


@ROUND_TRIP
@given(updates())
def test_round_trip(update: PortStatusUpdate) -> None:
    encoded = update.encode()
    assert wire.decode(encoded) == update == wire.decode_received(encoded)
    assert wire.decode(encoded).encode() == encoded
    assert wire.encode_port_status_update(*(update.req_id, update.port_status,
                                            update.changed, update.port_count)) == encoded


@pytest.mark.parametrize("offset", [13, 14, 15, 16, 20, 27, 37, 38, 40, 48, 56, 63])
def test_rejects_reserved_bits(offset: int) -> None:
    for bit in (0x01, 0x80):
        with pytest.raises(WireError, match="reserved bits set in port status update"):
            wire.decode(patched(ENCODED, offset, bytes([bit])))


def test_rejects_an_unknown_endpoint_operation() -> None:
    for op in (0x00, 0x02, 0xFF):
        with pytest.raises(WireError, match="unknown endpoint operation"):
            wire.decode(patched(ENCODED, 12, bytes([op])))


@pytest.mark.parametrize("status, changed, count", [
    (0b100, 0, 2),                 # a port beyond the count
    (0, 0b100, 2),
    (1 << 31, 0, 31),
    (0, 0, 0),                     # no port at all
    (0, 0, 33),                    # more than the mask holds
])
def test_rejects_masks_that_do_not_fit_the_port_count(status: int, changed: int,
                                                       count: int) -> None:
    bad = patched(ENCODED, 28, struct.pack(">IIB", status, changed, count))
    with pytest.raises(WireError, match="port"):
        wire.decode(bad)
    with pytest.raises(WireError, match="port"):
        PortStatusUpdate(1, status, changed, count).encode()


def test_rejects_bad_lengths_crc_flags_and_addressing() -> None:
    for n in (16, 28, 67):
        with pytest.raises(WireError, match="truncated"):
            wire.decode(patched(ENCODED[:n - 4] + bytes(4), 0, ENCODED[:1]))
    with pytest.raises(WireError, match="inconsistent length"):
        wire.decode(patched(ENCODED[:-4] + bytes(4) + bytes(4), 0, ENCODED[:1]))
    with pytest.raises(WireError, match="ICRC"):
        wire.decode(ENCODED[:-1] + bytes([ENCODED[-1] ^ 1]))
    with pytest.raises(WireError, match="not valid for opcode"):
        wire.decode(patched(ENCODED, 8, bytes([0x20])))         # TS flag
    with pytest.raises(WireError, match="not 0x2"):
        wire.decode(patched(ENCODED, 5, b"\x00\x01\x00"))       # to QP 0x100
    with pytest.raises(WireError, match="request id"):
        wire.decode(patched(ENCODED, 9, b"\x01"))               # PSN bits 23..16


@pytest.mark.parametrize("update", [
    PortStatusUpdate(-1, 0, 0, 1), PortStatusUpdate(1 << 16, 0, 0, 1),
    PortStatusUpdate(0, -1, 0, 1), PortStatusUpdate(0, 0, -1, 1),
])
def test_encode_rejects_out_of_range_fields(update: PortStatusUpdate) -> None:
    with pytest.raises(WireError):
        update.encode()


@FUZZ
@given(updates(), mutations)
def test_fuzz_mutated_updates(update: PortStatusUpdate, steps: Any) -> None:
    """Strict decoding: a mutated update is refused, or it decodes to a packet that
    re-encodes to the very same bytes."""
    buf = mutate(update.encode(), steps)
    for fixed in (buf, patched(buf, 0, buf[:1]) if len(buf) >= 4 else buf):
        try:
            packet = wire.decode(fixed)
        except WireError:
            continue
        assert packet.encode() == bytes(fixed)
        assert wire.decode_received(fixed) == packet


# ------------------------------------------------------------------------------ endpoints

FAULT_S = 0.02      # B's port dies 20 ms into a ~80 ms transfer (1 MiB at 2 x 100 Mbit/s)...
HEARD_S = 0.0201    # ...and B's runtime hears it 0.1 ms later (in a loop turn)
RATE_BPS = 100e6


@dataclass
class Sent:
    """Every packet the loopback carried, with the plane it went on."""
    packets: list[tuple[float, Any, int, Any]] = field(default_factory=list)

    def attach(self, loop: Loopback) -> Sent:
        loop.on_send = lambda now, src, out: self.packets.append(
            (now, src.addr, out.plane, wire.decode(out.data)))
        return self

    def of(self, src: Any, kind: type, since: float = 0.0) -> list[tuple[float, int, Any]]:
        return [(t, plane, p) for t, s, plane, p in self.packets
                if s == src and isinstance(p, kind) and t >= since]


def kill_port(pair: Pair, loop: Loopback, host: str, plane: int) -> None:
    """`host`'s port on `plane` loses its link: nothing leaves or arrives on it. Every
    path of the plane, either way, starts or ends at it."""
    loop.kill_path(*pair.paths_ab[plane], *pair.paths_ba[plane])


def heard_at(peer: Endpoint) -> float:
    """When `peer` took in the first Port Status Update it accepted."""
    return peer.peer_port_events[0][0]


def test_a_port_event_sends_an_update_on_the_live_planes_only() -> None:
    pair = make_pair()
    assert pair.b.port_down(1, 0.0) == 1
    out = pair.b.poll_tx(0.0)
    updates_sent = [(o.plane, o.path, o.dst_addr, wire.decode(o.data)) for o in out
                    if o.data[0] == Opcode.PORT_STATUS_UPDATE]
    # Two copies, on two distinct paths of plane 2 (a single loss or broken link spares
    # one), none on the dead plane 1.
    assert [plane for plane, *_ in updates_sent] == [2, 2]
    assert len({path for _, path, _, _ in updates_sent}) == 2
    # On the paths B's SACKs take to A (its reverse routes), the ones known to work.
    assert {path for _, path, _, _ in updates_sent} == {
        r.path for r in pair.qb.responder.reverse_routes.routes if r.plane == 2}
    assert {dst for _, _, dst, _ in updates_sent} == {"A"}
    assert {p for *_, p in updates_sent} == {PortStatusUpdate(1, 0b10, 0b01, 2)}
    assert pair.b.port_status_sent == 2
    assert pair.b.port_down(1, 0.0) == 0 and pair.b.poll_tx(0.0) == []   # no change, no update
    assert pair.b.port_up(1, 0.0) == 1
    back = [wire.decode(o.data) for o in pair.b.poll_tx(0.0)]
    assert back == [PortStatusUpdate(2, 0b11, 0b01, 2)] * 4            # 2 copies x 2 planes
    assert pair.b.port_status_sent == 6


def test_receiver_port_down_the_sender_stops_using_the_plane_and_resends() -> None:
    """B, the receiver, loses its plane-1 port: A hears B's update on plane 2 and sends
    nothing more on plane 1, resends what was in flight there, and no timer finds it."""
    pair = make_pair()
    data = payload(1 << 20, seed=4)
    pair.qa.post_write(data, 0, RKEY)
    loop = Loopback([pair.a, pair.b], rate_bps=RATE_BPS)
    sent = Sent().attach(loop)
    loop.at(FAULT_S, lambda: kill_port(pair, loop, "B", 1))
    loop.at(HEARD_S, lambda: pair.b.port_down(1, loop.now))
    assert loop.run(stop=done(pair.a), until=5.0) < 5.0
    assert bytes(pair.mr.buf[:len(data)]) == data
    assert [plane for _, plane, _ in sent.of("B", PortStatusUpdate)] == [2, 2]
    heard = heard_at(pair.a)
    assert HEARD_S < heard < HEARD_S + 1e-3
    assert pair.a.port_status_received == 1 and pair.a.port_status_stale == 1   # the copy
    assert [event[1:] for event in pair.a.peer_port_events] == [("B", 1, False)]
    data_a = sent.of("A", wire.DataPacket)
    assert any(plane == 1 for t, plane, _ in data_a if t < FAULT_S)     # it was in use
    assert [t for t, plane, _ in data_a if plane == 1 and t >= heard] == []
    assert pair.qa.counters.port_down_resends > 0
    assert pair.qa.counters.timeout_losses_by_plane.get(1, 0) == 0
    assert pair.qa.ev_table.planes_up == {2} and pair.qa.peer_planes_down == {1}


def test_sender_port_down_the_receiver_stops_sacking_on_the_plane() -> None:
    """A, the sender, loses its plane-1 port: B hears A's update and its responder sends
    no more SACK (or NACK) on plane 1, where it would be lost."""
    pair = make_pair()
    data = payload(1 << 20, seed=4)
    pair.qa.post_write(data, 0, RKEY)
    loop = Loopback([pair.a, pair.b], rate_bps=RATE_BPS)
    sent = Sent().attach(loop)
    loop.at(FAULT_S, lambda: kill_port(pair, loop, "A", 1))
    loop.at(HEARD_S, lambda: pair.a.port_down(1, loop.now))
    assert loop.run(stop=done(pair.a), until=5.0) < 5.0
    assert bytes(pair.mr.buf[:len(data)]) == data
    heard = heard_at(pair.b)
    feedback = sent.of("B", Sack) + sent.of("B", wire.Nack)
    assert any(plane == 1 for t, plane, _ in feedback if t < FAULT_S)
    after = [plane for t, plane, _ in feedback if t >= heard]
    assert after and set(after) == {2}
    assert pair.b.port_status_received == 1
    assert pair.qb.responder.reverse_routes.planes_down == {1}


def test_peer_port_up_brings_the_plane_back_for_data_and_sacks() -> None:
    pair = make_pair()
    loop = Loopback([pair.a, pair.b], rate_bps=RATE_BPS)
    sent = Sent().attach(loop)
    kill_port(pair, loop, "B", 1)
    pair.b.port_down(1, 0.0)
    loop.kick()
    loop.run(until=1e-3)                           # the update reaches A
    assert pair.qa.peer_planes_down == {1}
    first = payload(200_000, seed=5)
    pair.qa.post_write(first, 0, RKEY)
    assert loop.run(stop=done(pair.a))
    assert {plane for _, plane, _ in sent.of("A", wire.DataPacket)} == {2}
    assert {plane for _, plane, _ in sent.of("B", Sack)} == {2}
    pair.a.poll_cq()
    loop.revive_path(*pair.paths_ab[1], *pair.paths_ba[1])
    up_at = loop.now
    assert pair.b.port_up(1, up_at) == 1
    second = payload(200_000, seed=6)
    loop.at(up_at + 1e-3, lambda: pair.qa.post_write(second, 0, RKEY))
    assert loop.run(stop=done(pair.a))
    assert bytes(pair.mr.buf[:len(second)]) == second
    assert pair.a.peer_port_events[-1][1:] == ("B", 1, True)
    assert pair.qa.ev_table.planes_up == {1, 2} and pair.qa.peer_planes_down == set()
    after = [plane for _, plane, _ in sent.of("A", wire.DataPacket, since=up_at)]
    # The EV table alternates planes: about half of the packets go back to plane 1.
    assert 0.3 * len(after) <= after.count(1) <= 0.7 * len(after)
    assert 1 in {plane for _, plane, _ in sent.of("B", Sack, since=up_at)}


def test_a_plane_is_back_only_when_both_ends_are_up() -> None:
    pair = make_pair()
    pair.a.port_down(1, 0.0)                       # A's own port
    pair.b.port_down(1, 0.0)                       # and B's, which A hears
    for out in pair.b.poll_tx(0.0):
        pair.a.on_packet(0.0, out.data, out.ev_id, out.plane, "B")
    assert pair.qa.local_planes_down == {1} and pair.qa.peer_planes_down == {1}
    assert pair.a.port_up(1, 0.1) == 0             # B's port is still down
    assert pair.qa.ev_table.planes_up == {2}
    pair.b.poll_tx(0.1)
    assert pair.b.port_up(1, 0.2) == 1
    for out in pair.b.poll_tx(0.2):
        pair.a.on_packet(0.2, out.data, out.ev_id, out.plane, "B")
    assert pair.qa.ev_table.planes_up == {1, 2}


def test_stale_copies_and_strangers_are_ignored() -> None:
    pair = make_pair()
    pair.b.port_down(1, 0.0)
    down = pair.b.poll_tx(0.0)
    pair.b.port_up(1, 0.1)
    up = pair.b.poll_tx(0.1)
    deliver = lambda out, now: pair.a.on_packet(now, out.data, out.ev_id, out.plane, "B")  # noqa: E731
    deliver(up[0], 0.2)                            # the newer update overtakes the older
    deliver(down[0], 0.3)
    deliver(up[1], 0.3)
    assert (pair.a.port_status_received, pair.a.port_status_stale) == (1, 2)
    assert pair.qa.ev_table.planes_up == {1, 2} and pair.a.peer_port_events == []
    pair.a.on_packet(0.4, down[0].data, 0, 2, "C")  # no QP with C
    assert pair.a.port_status_unknown_peer == 1
    stats = pair.a.stats()
    assert (stats["port_status_received"], stats["port_status_stale"]) == (1, 2)


def test_every_peer_hears_it_once_per_event() -> None:
    """An endpoint with QPs to two peers (and two QPs to one) sends each peer its copies."""
    a, b, c = Endpoint("A", seed=1), Endpoint("B", seed=2), Endpoint("C", seed=3)
    for peer in (b, b, c):
        connect(a, peer, make_paths("A", peer.addr, 2, 4), make_paths(peer.addr, "A", 2, 4))
    a.port_down(2, 0.0)
    out: list[Outgoing] = a.poll_tx(0.0)
    assert sorted((o.dst_addr, o.plane) for o in out) == [("B", 1)] * 2 + [("C", 1)] * 2
    assert not any(is_data(o) for o in out)
    for o in out:
        {"B": b, "C": c}[o.dst_addr].on_packet(0.0, o.data, o.ev_id, o.plane, "A")
    assert (b.port_status_received, c.port_status_received) == (1, 1)
    assert [qp.ev_table.planes_up for qp in b.qps + c.qps] == [{1}] * 3
    assert [qp.peer_planes_down for qp in b.qps + c.qps] == [{2}] * 3
