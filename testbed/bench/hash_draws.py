"""Which links the routed fabric's ECMP gives a flow: its 5-tuple sent a few
times from the source host and the switch ports that transmitted them, read
from their counters. On the routed mode a single-path QP's path is the
switches' hash of its 5-tuple (testbed.controller.ofp_groups), so this is the
same draw the QP had: what the bench's max-min model (maxmin.py) runs on.

It reads the transmit counters of the switches' interfaces in the root
namespace, which count what ovs-vswitchd sends through `system` ports; run
it on a quiet fabric (after a trial, not during one).
"""
from __future__ import annotations

import socket
import time

from testbed.bench.harness import tx_packets
from testbed.fabric.net import FabricNet
from testbed.fabric.netns import inside
from testbed.nic.wire.layout import UDP_PORT

PACKETS = 5
SETTLE_S = 0.05        # the last probe through the userspace datapath

Link = tuple[str, str]     # (from node, to node): one direction of a link


def switch_egress(fab: FabricNet) -> dict[Link, str]:
    """(switch, neighbour) -> the switch's interface toward it, hosts included."""
    assert fab.net is not None
    plan, out = fab.plan, {}
    for switch in plan.switches:
        for neighbour, port in plan.neighbours(switch).items():
            out[(switch, neighbour)] = fab.net[switch].intfs[port].name
        for host_port in plan.hosts_on(switch):
            out[(switch, host_port.host)] = fab.net[switch].intfs[host_port.switch_port].name
    return out


def links_taken(fab: FabricNet, src: str, dst: str, plane: int, sport: int,
                egress: dict[Link, str] | None = None) -> tuple[Link, ...]:
    """The directed links a RoCEv2 5-tuple (src's and dst's addresses on
    `plane`, UDP `sport` -> 4791) crosses, the source host's uplink first."""
    if fab.afxdp:
        raise ValueError('hash draws are read from system ports\' counters')
    egress = egress or switch_egress(fab)
    ports = fab.plan.host_ports
    before = {link: tx_packets(intf) for link, intf in egress.items()}
    with inside(fab.host_pid(src)):
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    with inside(fab.host_pid(dst)):
        # Taken in: no ICMPv6 error comes back over the reverse path's links.
        sink = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    with sock, sink:
        sink.bind((ports[(dst, plane)].address, UDP_PORT))
        sock.bind((ports[(src, plane)].address, sport))
        for _ in range(PACKETS):
            sock.sendto(b'hash draw', (ports[(dst, plane)].address, UDP_PORT))
        time.sleep(SETTLE_S)
    crossed = tuple(link for link, intf in egress.items()
                    if tx_packets(intf) - before[link] >= PACKETS)
    return ((src, ports[(src, plane)].switch),) + crossed
