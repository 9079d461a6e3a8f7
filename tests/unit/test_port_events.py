"""NIC port events: netlink link messages parsed by hand (testbed/nic/port_events.py), and
an endpoint taking a plane out when its port goes down and back when it returns
(Endpoint.port_down / port_up) on the in-process loopback."""

from __future__ import annotations

import socket
import struct

from testbed.nic.loopback import Loopback
from testbed.nic.port_events import (
    IFF_LOWER_UP,
    IFF_UP,
    RTM_DELLINK,
    RTM_GETLINK,
    RTM_NEWLINK,
    PortWatch,
    getlink_request,
    link_states,
)
from testbed.nic.qp_pair import RKEY, Pair, Trace, done, make_pair, payload
from testbed.nic.wire import EP_OP_QP, decode

RTM_NEWADDR = 20
IFF_RUNNING = 0x40
IFLA_IFNAME = 3


def link_message(kind: int, index: int, flags: int, attrs: bytes = b"") -> bytes:
    """One netlink message as the kernel writes it: nlmsghdr, ifinfomsg, attributes,
    padded to 4 bytes (the header's length leaves the padding out)."""
    body = struct.pack("=BBHiII", socket.AF_UNSPEC, 0, 1, index, flags, 0xFFFFFFFF) + attrs
    length = 16 + len(body)
    return struct.pack("=IHHII", length, kind, 0, 0, 0) + body + b"\0" * (-length % 4)


def ifname_attr(name: str) -> bytes:
    value = name.encode() + b"\0"
    return struct.pack("=HH", 4 + len(value), IFLA_IFNAME) + value


# ------------------------------------------------------------------------------ parsing

def test_a_port_is_up_only_when_admin_up_and_with_carrier() -> None:
    up = IFF_UP | IFF_RUNNING | IFF_LOWER_UP
    assert link_states(link_message(RTM_NEWLINK, 7, up)) == [(7, True)]
    # What the host end of a veth reads when the switch end goes admin-down (nic_port_down):
    # still IFF_UP, but neither running nor with carrier.
    assert link_states(link_message(RTM_NEWLINK, 7, IFF_UP)) == [(7, False)]
    assert link_states(link_message(RTM_NEWLINK, 7, IFF_LOWER_UP)) == [(7, False)]


def test_several_messages_with_attributes_and_padding_are_read_in_order() -> None:
    data = (link_message(RTM_NEWLINK, 3, IFF_UP, ifname_attr("h1-eth1"))      # 7+1 bytes
            + link_message(RTM_NEWADDR, 3, 0)                                 # not a link
            + link_message(RTM_NEWLINK, 4, IFF_UP | IFF_LOWER_UP, ifname_attr("h1-eth22"))
            + link_message(RTM_DELLINK, 5, IFF_UP | IFF_LOWER_UP))
    assert link_states(data) == [(3, False), (4, True), (5, False)]


def test_a_truncated_or_malformed_datagram_yields_what_came_before_it() -> None:
    good = link_message(RTM_NEWLINK, 2, IFF_UP | IFF_LOWER_UP)
    assert link_states(good + good[:20]) == [(2, True)]           # second message cut short
    bad_length = struct.pack("=IHHII", 8, RTM_NEWLINK, 0, 0, 0)   # shorter than its header
    assert link_states(bad_length + good) == []
    short = struct.pack("=IHHII", 20, RTM_NEWLINK, 0, 0, 0) + b"\0" * 4   # no ifinfomsg
    assert link_states(short + good) == [(2, True)]
    assert link_states(b"") == []


def test_the_state_request_names_one_interface() -> None:
    request = getlink_request(9, seq=5)
    length, kind, _flags, seq, _pid = struct.unpack_from("=IHHII", request)
    assert (length, kind, seq) == (len(request), RTM_GETLINK, 5) == (32, 18, 5)
    assert struct.unpack_from("=BBHiII", request, 16)[3] == 9


def test_a_watch_reports_its_ports_changes_once_and_ignores_other_interfaces() -> None:
    watch = PortWatch({socket.if_nametoindex("lo"): 1})
    try:
        index = socket.if_nametoindex("lo")
        assert watch.read() == []          # the kernel's answer: lo is up, as assumed
        down = link_states(link_message(RTM_NEWLINK, index, IFF_UP))
        other = link_states(link_message(RTM_NEWLINK, index + 1000, IFF_UP))
        assert watch.apply(other + down) == [(1, False)]
        assert watch.apply(down) == []     # no change
        assert watch.apply(link_states(link_message(RTM_NEWLINK, index, IFF_UP | IFF_LOWER_UP))
                           ) == [(1, True)]
    finally:
        watch.close()


# ------------------------------------------------------------------------------ endpoint

FAULT_S = 0.02      # the port dies 20 ms into a ~80 ms transfer...
HEARD_S = 0.0201    # ...and the runtime hears it 0.1 ms later (in a loop turn)
RATE_BPS = 100e6


def plane_timeouts(pair: Pair, plane: int) -> int:
    """The sender's packets on `plane` that a timer declared lost."""
    return pair.qa.counters.timeout_losses_by_plane.get(plane, 0)


def kill_port(pair: Pair, loop: Loopback, plane: int) -> None:
    """A's port on `plane` loses its link: nothing leaves or arrives on it."""
    loop.kill_path(*pair.paths_ab[plane], *pair.paths_ba[plane])


def test_port_down_takes_the_plane_out_and_the_write_completes_intact() -> None:
    pair = make_pair()
    data = payload(1 << 20, seed=4)
    pair.qa.post_write(data, 0, RKEY)
    loop = Loopback([pair.a, pair.b], rate_bps=RATE_BPS)
    trace = Trace().attach(loop)
    timeouts_at: list[int] = []
    changed: list[int] = []
    loop.at(FAULT_S, lambda: kill_port(pair, loop, 1))
    loop.at(HEARD_S, lambda: (timeouts_at.append(plane_timeouts(pair, 1)),
                              changed.append(pair.a.port_down(1, loop.now))))
    assert loop.run(stop=done(pair.a), until=5.0) < 5.0
    assert changed == [1]
    assert bytes(pair.mr.buf[:len(data)]) == data
    sent_a = [d for d in trace.data if d.src == "A"]
    assert any(d.path in pair.paths_ab[1] for d in sent_a if d.time < FAULT_S)
    assert [d for d in sent_a if d.time >= HEARD_S and d.path in pair.paths_ab[1]] == []
    # What the port swallowed was resent at once, on plane 2: no timeout found it.
    assert pair.qa.counters.port_down_resends > 0
    assert plane_timeouts(pair, 1) == timeouts_at[0] == 0
    assert pair.qa.ev_table.planes_up == {2}


def test_port_up_brings_the_plane_back() -> None:
    pair = make_pair()
    loop = Loopback([pair.a, pair.b], rate_bps=RATE_BPS)
    trace = Trace().attach(loop)
    kill_port(pair, loop, 1)
    assert pair.a.port_down(1, 0.0) == 1
    first = payload(200_000, seed=5)
    pair.qa.post_write(first, 0, RKEY)
    assert loop.run(stop=done(pair.a))
    assert not any(d.path in pair.paths_ab[1] for d in trace.data if d.src == "A")
    pair.a.poll_cq()
    loop.revive_path(*pair.paths_ab[1], *pair.paths_ba[1])
    back_at = loop.now
    assert pair.a.port_up(1, back_at) == 1
    assert pair.a.port_up(1, back_at) == 0           # already up: no change
    second = payload(200_000, seed=6)
    pair.qa.post_write(second, 0, RKEY)
    assert loop.run(stop=done(pair.a))
    assert bytes(pair.mr.buf[:len(second)]) == second
    after = [d for d in trace.data if d.src == "A" and d.time >= back_at]
    on_plane_1 = [d for d in after if d.path in pair.paths_ab[1]]
    # The EV table alternates planes: about half of the packets go back to plane 1.
    assert 0.3 * len(after) <= len(on_plane_1) <= 0.7 * len(after)


def test_pinned_qps_and_unknown_planes_are_left_alone() -> None:
    for transport in ("rc", "ecmp"):
        pair = make_pair(transport)
        route = pair.qa.pinned_route
        assert pair.a.port_down(route.plane, 0.0) == 0
        pair.qa.post_write(payload(10_000), 0, RKEY)
        # The QP's own packets (not the Port Status Update to the peer, QP 0x2).
        sent = [out for out in pair.a.poll_tx(0.0)
                if getattr(decode(out.data), "dest_qp", EP_OP_QP) != EP_OP_QP]
        assert sent and {out.plane for out in sent} == {route.plane}
    pair = make_pair()
    assert pair.a.port_down(3, 0.0) == 0 and pair.a.port_up(3, 0.0) == 0
    assert pair.qa.ev_table.planes_up == {1, 2}
