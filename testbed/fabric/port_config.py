"""Everything that sets an OpenFlow port's config bits on our bridges lives here.

`set_forwarding` turns OFPPC_NO_FWD on or off for many ports at once: a port
with it set drops inside OVS whatever the flows output to it. It speaks
OpenFlow 1.3 itself, over each bridge's management socket (what
`ovs-ofctl mod-port` connects to), instead of running one ovs-ofctl per port:
those cost ~6 ms each, so a plane of a k=4 fat-tree (80 switch ports) took
0.46 s to cut, and its hosts saw their ports go down that much after the
fault's time (port_stage.cut is what needs it); this takes ~20 ms, and ~40 ms with
the purge of cached flows a cut needs (`_purge_cached_flows`).

OpenFlow 1.3 (https://opennetworking.org/wp-content/uploads/2014/10/openflow-spec-v1.3.0.pdf):
HELLO (§A.5.1), PORT_MOD (§A.3.4.3: OVS refuses one whose hw_addr is not the
port's), BARRIER (§A.3.8) to know OVS has applied them, ERROR (§A.4.4).
"""
from __future__ import annotations

import os
import socket
import struct
import subprocess
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager

MGMT_SOCKET = '/var/run/openvswitch/%s.mgmt'
OFP_VERSION = 0x04                      # OpenFlow 1.3
OFPT_HELLO, OFPT_ERROR = 0, 1
OFPT_PORT_MOD = 16
OFPT_BARRIER_REQUEST, OFPT_BARRIER_REPLY = 20, 21
OFPPC_NO_FWD = 1 << 5
HEADER = struct.Struct('!BBHI')         # version, type, length, xid
PORT_MOD = struct.Struct('!I4x6s2xIII4x')   # port_no, hw_addr, config, mask, advertise
BARRIER_XID = 0xB0B
REPLY_TIMEOUT_S = 10.0


class PortConfigError(RuntimeError):
    """OVS refused a port change, or did not answer."""


def set_forwarding(ports: Iterable[tuple[str, str]], forward: bool) -> None:
    """Each (bridge, port) forwards what its flows output to it, or drops it
    (NO_FWD); returns once OVS has applied every change (dropping: its
    datapath's cached flows included). Every bridge's changes are sent before
    any answer is read: ovs-vswitchd then applies them in a few turns of its
    loop, not one bridge per turn (80 ports of 20 bridges: 20 ms, against 190
    bridge by bridge)."""
    by_bridge: dict[str, list[str]] = {}
    for bridge, port in ports:
        by_bridge.setdefault(bridge, []).append(port)
    if not by_bridge:
        return
    numbers = _port_numbers([p for names in by_bridge.values() for p in names])
    with ExitStack() as stack:
        sent = []
        for bridge, names in by_bridge.items():
            sock = stack.enter_context(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
            sock.settimeout(REPLY_TIMEOUT_S)
            mods = [_port_mod(numbers[name], _mac(name), forward) for name in names]
            with _guarded(bridge):
                _send(sock, bridge, mods)
            sent.append((bridge, sock))
        for bridge, sock in sent:
            with _guarded(bridge):
                _wait_barrier(sock, bridge)
    if not forward:
        purge_cached_flows()


def purge_cached_flows() -> None:
    """Drop the datapath's cached flows, so every packet from now on is forwarded by
    the new port config. The barrier says OpenFlow has it, but a cached flow still
    outputs to the port until a revalidator has been through it: on an `afxdp=1`
    link cut (port_stage.cut), probes sent in that window sat in the port's transmit
    ring and arrived once the link came back (1 run in 6 of tests/integration/
    test_faults.py::test_what_is_sent_over_a_down_link_is_lost_not_delivered_late).
    `revalidator/wait` closes the window too but returns only after the next
    revalidation pass, ~500 ms later (max-revalidator), when a cut takes ~20 ms;
    `revalidator/purge` is synchronous. It purges every bridge's cached flows
    (others' too, where ovs-vswitchd has any): they are translated again at their
    next packet, nothing else changes."""
    out = subprocess.run(['ovs-appctl', 'revalidator/purge'], capture_output=True,
                         text=True, timeout=REPLY_TIMEOUT_S)
    if out.returncode:
        raise PortConfigError('ovs-appctl revalidator/purge: %s' % out.stderr.strip())


def _port_mod(port_no: int, mac: bytes, forward: bool) -> bytes:
    body = PORT_MOD.pack(port_no, mac, 0 if forward else OFPPC_NO_FWD, OFPPC_NO_FWD, 0)
    return HEADER.pack(OFP_VERSION, OFPT_PORT_MOD, HEADER.size + len(body), 0) + body


def _send(sock: socket.socket, bridge: str, mods: list[bytes]) -> None:
    """HELLO, the port mods, then a BARRIER."""
    sock.connect(MGMT_SOCKET % bridge)
    sock.sendall(HEADER.pack(OFP_VERSION, OFPT_HELLO, HEADER.size, 1) + b''.join(mods)
                 + HEADER.pack(OFP_VERSION, OFPT_BARRIER_REQUEST, HEADER.size, BARRIER_XID))


def _wait_barrier(sock: socket.socket, bridge: str) -> None:
    """Read until the barrier's reply, refusing any ERROR before it."""
    for kind, xid, body in _messages(sock):
        if kind == OFPT_ERROR:
            err_type, code = struct.unpack_from('!HH', body)
            raise PortConfigError('%s: OVS refused a port change (OpenFlow error '
                                  'type %d code %d)' % (bridge, err_type, code))
        if kind == OFPT_BARRIER_REPLY and xid == BARRIER_XID:
            return
    raise PortConfigError('%s: the connection closed before the barrier reply' % bridge)


@contextmanager
def _guarded(bridge: str) -> Iterator[None]:
    """A socket's error as this module's, naming the bridge."""
    try:
        yield
    except OSError as err:
        raise PortConfigError('%s: %s' % (bridge, err)) from err


def _messages(sock: socket.socket) -> Iterator[tuple[int, int, bytes]]:
    """(type, xid, body) of each OpenFlow message received, until the peer closes."""
    buf = b''
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return
        buf += chunk
        while len(buf) >= HEADER.size:
            _, kind, length, xid = HEADER.unpack_from(buf)
            if len(buf) < length:
                break
            yield kind, xid, buf[HEADER.size:length]
            buf = buf[length:]


def _port_numbers(names: list[str]) -> dict[str, int]:
    """The OpenFlow port number of each interface, from OVSDB in one call."""
    out = subprocess.run(['ovs-vsctl', '--columns=name,ofport', '--format=csv', '--data=bare',
                          '--no-headings', 'list', 'interface', *names],
                         capture_output=True, text=True, timeout=REPLY_TIMEOUT_S)
    if out.returncode:
        raise PortConfigError('ovs-vsctl: %s' % out.stderr.strip())
    numbers = {name: int(ofport) for name, ofport in
               (line.split(',') for line in out.stdout.splitlines())}
    if missing := set(names) - set(numbers):
        raise PortConfigError('no OpenFlow port for %s' % ', '.join(sorted(missing)))
    return numbers


def _mac(interface: str) -> bytes:
    """The port's hardware address as OVS knows it: the device's own."""
    path = '/sys/class/net/%s/address' % interface
    if not os.path.exists(path):
        raise PortConfigError('%s: no such interface' % interface)
    with open(path) as f:
        return bytes.fromhex(f.read().strip().replace(':', ''))
