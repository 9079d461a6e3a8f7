"""SRv6 plumbing of one emulated host, done with pyroute2 inside its netns.

Per NIC port (one per plane): the plan's MAC and address, an End.DT6 SID so
the kernel decapsulates carriers addressed to this port into the local table
(table 254 does not deliver to local addresses; 255 does) or, on a kernel
without seg6local, the eBPF program that does the same on the port's ingress
(testbed.fabric.host_decap), a route for the
plane's uSID block through a static gateway neighbour on that port, a route
for the plane's host prefix through the same gateway (the routed fabric mode:
plain IPv6 to a peer goes to the first switch, which routes it; the address
gets no on-link prefix route, or the kernel would look for peers by neighbour
discovery, which no switch answers), seg6 and
forwarding sysctls, and TX checksum offload off (with the userspace OVS
datapath, offloaded checksums are never filled in and TCP stalls).
"""
from __future__ import annotations

import ctypes
import ipaddress
import fcntl
import socket
import struct
from pathlib import Path

from pyroute2 import IPRoute

from testbed.fabric import host_decap, switch_port
from testbed.fabric.netns import inside, write_sysctl
from testbed.fabric.usid_plan import (GATEWAY_LL, GATEWAY_MAC, HostPort,
                                      block)

SIOCETHTOOL = 0x8946
ETHTOOL_STXCSUM = 0x17
RT_TABLE_LOCAL = 255
NUD_PERMANENT = 0x80
IFA_F_NODAD = 0x02
IFA_F_NOPREFIXROUTE = 0x200
HOST_PREFIX_LEN = 64

# Set as the namespace's defaults before its ports exist, so that ports come
# up as routers with no DAD, router solicitation or late multicast-listener
# chatter: per-plane packet counters then move only for traffic we send.
# The multicast-listener reports that adding an address triggers still go
# out, but within milliseconds instead of spread over a second.
PORT_DEFAULTS = {'forwarding': 1, 'seg6_enabled': 1, 'accept_ra': 0,
                 'router_solicitations': 0, 'accept_dad': 0,
                 'dad_transmits': 0, 'mldv1_unsolicited_report_interval': 1,
                 'mldv2_unsolicited_report_interval': 1}


TCP_ECN_ON = 1           # request ECN on outgoing connections, accept it


def prepare_namespace(pid: int) -> None:
    """Call before the host's links are made."""
    with inside(pid):
        for key, value in PORT_DEFAULTS.items():
            write_sysctl('net.ipv6.conf.default.' + key, value)
            write_sysctl('net.ipv6.conf.all.' + key, value)
        # Kernel TCP and MPTCP ask for ECN, as MRC's packets are ECT: every
        # transport meets the same marking fabric (ipv4 in name only: the
        # knob is TCP's, over IPv6 too).
        write_sysctl('net.ipv4.tcp_ecn', TCP_ECN_ON)


def plumb_host(pid: int, ports: list[HostPort], decap_obj: Path | None = None) -> None:
    """Plumb the host's ports; their SIDs decapsulated by the kernel's End.DT6, or by
    `decap_obj` (host_decap.build()) on each port's ingress."""
    with inside(pid), IPRoute() as ipr:
        for port in ports:
            _plumb_port(ipr, port, kernel_decap=decap_obj is None)
    if decap_obj is not None:
        _attach_decap(pid, [port.intf for port in ports], decap_obj)


def _attach_decap(pid: int, intfs: list[str], obj: Path) -> None:
    try:
        switch_port.tc_batch('/proc/%d/ns/net' % pid, [
            line for intf in intfs for line in host_decap.attach_commands(intf, obj)])
    except switch_port.SwitchPortError as err:
        raise host_decap.HostDecapError('decapsulation on %s: %s'
                                        % (', '.join(intfs), err)) from err


def _plumb_port(ipr: IPRoute, port: HostPort, kernel_decap: bool = True) -> None:
    idx = ipr.link_lookup(ifname=port.intf)[0]
    ipr.link('set', index=idx, address=port.mac, state='up')
    ipr.addr('add', index=idx, address=port.address, prefixlen=HOST_PREFIX_LEN,
             flags=IFA_F_NODAD | IFA_F_NOPREFIXROUTE)
    ipr.neigh('add', dst=GATEWAY_LL, lladdr=GATEWAY_MAC, ifindex=idx,
              state=NUD_PERMANENT)
    ipr.route('add', dst='%s/32' % _block_prefix(port.plane),
              gateway=GATEWAY_LL, oif=idx)
    ipr.route('add', dst=host_prefix(port), gateway=GATEWAY_LL, oif=idx)
    if kernel_decap:
        ipr.route('add', dst='%s/48' % port.sid, oif=idx, encap={
            'type': 'seg6local', 'action': 'End.DT6', 'table': RT_TABLE_LOCAL})
    tx_checksum_off(port.intf)


def host_prefix(port: HostPort) -> str:
    """The plane's host prefix, which the routed fabric routes."""
    return str(ipaddress.IPv6Network('%s/%d' % (port.address, HOST_PREFIX_LEN),
                                     strict=False))


def _block_prefix(plane: int) -> str:
    b = block(plane)
    return '%x:%x::' % (b >> 16, b & 0xFFFF)


def tx_checksum_off(ifname: str) -> None:
    """ethtool -K <ifname> tx off, as one ioctl in the current netns."""
    cmd = ctypes.create_string_buffer(struct.pack('II', ETHTOOL_STXCSUM, 0))
    ifreq = struct.pack('16sP', ifname.encode(), ctypes.addressof(cmd))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s.fileno(), SIOCETHTOOL, ifreq)


def main(argv: list[str] | None = None) -> None:
    """``python -m testbed.fabric.host_plumbing prepare --pid P`` (before
    the host's links exist) and ``... plumb --topo SPEC --host H --pid P``:
    the same two steps for a host that another program (stock `mn --host
    mrc`) made."""
    import argparse
    parser = argparse.ArgumentParser(prog='python -m testbed.fabric.host_plumbing')
    parser.add_argument('step', choices=('prepare', 'plumb'))
    parser.add_argument('--pid', type=int, required=True,
                        help="a process in the host's network namespace")
    parser.add_argument('--topo', help='topology spec (plumb)')
    parser.add_argument('--host', help='host name in it (plumb)')
    args = parser.parse_args(argv)
    if args.step == 'prepare':
        prepare_namespace(args.pid)
        return
    if not (args.topo and args.host):
        parser.error('plumb needs --topo and --host')
    from testbed.fabric.topo_spec import parse_topo_spec
    from testbed.fabric.usid_plan import FabricPlan
    plan = FabricPlan.from_topo(parse_topo_spec(args.topo).build())
    if args.host not in plan.hosts:
        parser.error('%s has no host %s' % (args.topo, args.host))
    decap_obj = None if host_decap.choose(host_decap.AUTO) == host_decap.KERNEL \
        else host_decap.build()
    plumb_host(args.pid, [plan.host_ports[(args.host, p)] for p in plan.planes], decap_obj)


if __name__ == '__main__':
    main()
