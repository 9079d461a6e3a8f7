"""Open vSwitch and root-namespace link housekeeping, batched.

Every root-namespace link of ours (switch ports, and the tap OVS makes for
each userspace bridge) is put in one link group, so a single netlink call
deletes them all in one kernel batch, and `clean` can find them after a
crash. Our bridges carry ``external_ids:mrc-testbed=1`` for the same reason.

Deleting userspace-datapath bridges through ovs-vswitchd costs ~12 ms per
port (the netdev datapath reconfigures itself after every port), 6 s for a
k=4 x 4-plane fabric. When every bridge on this OVS is ours, it is much
faster to stop ovs-vswitchd, drop the bridges from the database, delete the
taps in one batch and start ovs-vswitchd again.
"""
from __future__ import annotations

import ctypes
import os
import re
import signal
import socket
import subprocess
import tempfile
import time

from mininet.node import OVSSwitch
from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from testbed.fabric.vswitchd_sockets import (VSWITCHD_PIDFILE, copied_fds, packet_sockets,
                                             socket_fds, vswitchd_pid)

OVS_CTL = '/usr/share/openvswitch/scripts/ovs-ctl'
LINK_GROUP = 0x6D7263          # "mrc"
OWNER_KEY = 'mrc-testbed'
OVSDB_PIDFILE = '/var/run/openvswitch/ovsdb-server.pid'
ANSWER_WAIT_S = 60.0


class FabricSwitch(OVSSwitch):
    """An OVS bridge marked as ours in OVSDB, its ports of `port_type`
    (PORT_TYPES; an AF_XDP one in native XDP mode: testbed.fabric.port_stage)
    from the start: re-opening a port later flaps it, and a routed fabric's
    controller would take the flap for a link failure."""

    def __init__(self, name: str, port_type: str = 'system', **params) -> None:
        if port_type not in PORT_TYPES:
            raise ValueError('port type %r: one of %s' % (port_type, ', '.join(PORT_TYPES)))
        self.port_type = port_type
        super().__init__(name, **params)

    def bridgeOpts(self) -> str:
        return super().bridgeOpts() + ' external-ids:%s=1' % OWNER_KEY

    def intfOpts(self, intf) -> str:
        opts = super().intfOpts(intf)
        if self.port_type == 'system':
            return opts
        return (opts or ' -- set Interface %s' % intf) + \
            ' type=%s options:xdp-mode=native' % self.port_type


def _vsctl(*args: str, timeout: int = 30) -> subprocess.CompletedProcess:
    return subprocess.run(['ovs-vsctl', '--timeout=%d' % timeout, *args],
                          capture_output=True, text=True)


def alive() -> bool:
    """Both daemons' processes exist (their pidfiles name live pids)."""
    for pidfile in (OVSDB_PIDFILE, VSWITCHD_PIDFILE):
        try:
            os.kill(int(open(pidfile).read().strip()), 0)
        except (OSError, ValueError):
            return False
    return True


def running() -> bool:
    """Both daemons, and answering: ovs-vsctl alone answers with only
    ovsdb-server up, and then waits forever for ovs-vswitchd to apply a
    change. A daemon busy past the timeout is not answering (yet): one still
    opening a killed run's AF_XDP ports took over 10 s to answer."""
    try:
        vswitchd = subprocess.run(['ovs-appctl', '-t', 'ovs-vswitchd', 'version'],
                                  capture_output=True, timeout=10)
    except subprocess.TimeoutExpired:
        return False
    return vswitchd.returncode == 0 and \
        _vsctl('show', timeout=10).returncode == 0


def ensure_running() -> None:
    """Start ovsdb-server and ovs-vswitchd when they are not (no systemd
    here, so the distribution's ovs-ctl script does it). Daemons that are
    alive but slow to answer (a busy machine) are waited for, never
    started again: that would pull the datapath from under a running
    fabric."""
    if alive():
        _wait_answering('ovs-vswitchd is running but does not answer')
        return
    _start(['start', '--system-id=random'])


def _start(ctl_args: list[str]) -> None:
    # A file, not pipes: the daemons inherit the descriptors and would keep
    # a pipe open, so reading it to its end would never return.
    with tempfile.TemporaryFile('w+') as log:
        subprocess.run([OVS_CTL, *ctl_args], stdout=log, stderr=log,
                       check=False)
        log.seek(0)
        said = log.read().strip()[-500:]
    _wait_answering('Open vSwitch did not start (%s %s: %s)' % (
        OVS_CTL, ' '.join(ctl_args), said))


def _wait_answering(failure: str) -> None:
    deadline = time.monotonic() + ANSWER_WAIT_S
    while time.monotonic() < deadline:
        if running():
            return
        time.sleep(0.1)
    raise RuntimeError(failure)


def list_bridges(ours_only: bool = False) -> list[str]:
    args = ['--bare', '--columns=name']
    if ours_only:
        args.append('find')
        args += ['Bridge', 'external_ids:%s=1' % OWNER_KEY]
    else:
        args += ['list', 'Bridge']
    out = _vsctl(*args, timeout=5)
    return out.stdout.split() if out.returncode == 0 else []


def tag_links(names: list[str]) -> None:
    """Put root-namespace links in our link group."""
    with IPRoute() as ipr:
        for name in names:
            try:
                ipr.link('set', ifname=name, group=LINK_GROUP)
            except NetlinkError:
                pass


def delete_tagged_links() -> None:
    """Delete every link in our group in one kernel batch (a veth's peer
    goes with it)."""
    subprocess.run(['ip', 'link', 'del', 'group', str(LINK_GROUP)],
                   capture_output=True, check=False)


def delete_bridges(names: list[str], datapath: str) -> None:
    if not names:
        return
    if datapath == 'user' and set(list_bridges()) <= set(names):
        # The links first: the kernel unbinds each AF_XDP socket as its
        # device goes, in one batch, and the exit that closes the sockets
        # then has less to do (the default AF_XDP fat-tree's teardown, three
        # of each in one sitting: 12.0-14.4 s with the exit first, 8.0-8.8 s
        # with the links first; the builds after were no slower).
        delete_tagged_links()
        _delete_bridges_offline(names)
    else:
        _vsctl(*_del_br_args(names))
    delete_tagged_links()  # switch ports, and the taps bridges leave behind


def _del_br_args(names: list[str]) -> list[str]:
    args: list[str] = []
    for name in names:
        args += ['--', '--if-exists', 'del-br', name]
    return args


EXIT_WAIT_S = 180.0


def _stop_vswitchd() -> None:
    """Ask ovs-vswitchd to exit and wait until it has: ovs-ctl refuses to
    start a second one while the first still holds its pidfile. (Exiting
    closes one AF_PACKET socket per port, each costing the kernel an RCU
    grace period; that, ~10 ms a port, is what teardown time is made of.)"""
    pid = vswitchd_pid()
    subprocess.run(['ovs-appctl', '-t', 'ovs-vswitchd', 'exit'],
                   capture_output=True, timeout=60, check=False)
    # ~10 ms a port: a k=8 four-plane fat-tree's 3,072 ports take 31 s
    deadline = time.monotonic() + EXIT_WAIT_S
    while pid and os.path.exists('/proc/%d' % pid):
        if time.monotonic() > deadline:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                break                    # it exited meanwhile
        time.sleep(0.02)


def _delete_bridges_offline(names: list[str]) -> None:
    _stop_vswitchd()
    _vsctl('--no-wait', *_del_br_args(names))
    _start(['--no-ovsdb-server', 'start', '--system-id=random'])


# -- the datapath's transmit buffer -------------------------------------------

# ovs-vswitchd's userspace datapath sends on every "system" port through ONE
# AF_PACKET socket (lib/netdev-linux.c, af_packet_sock()), made with the
# default send buffer (net.core.wmem_default, 208 KiB here). A packet waiting
# in a shaped port's HTB queue still counts against that buffer, so once the
# fabric's queues hold ~100 packets in all, every further send fails and OVS
# drops the packet without counting it anywhere: measured, 18 % of a 7->1
# incast's packets on a 5 Mbit/s fat-tree, with no qdisc, port or socket drop
# counter moving. The buffer is raised on OVS's own socket (duplicated with
# pidfd_getfd, set with SO_SNDBUFFORCE), once the socket exists: OVS opens it
# at its first transmit.
TX_SNDBUF_BYTES = 32 << 20          # the kernel doubles it: 64 MiB of queue
SO_SNDBUFFORCE = 32


def _unbound_packet_sockets() -> set[str]:
    """Inodes of this namespace's AF_PACKET sockets bound to no interface and
    no protocol: what af_packet_sock() makes (the ports' receive sockets are
    bound to their interface)."""
    return {s.inode for s in packet_sockets() if not s.protocol and not s.ifindex}


def raise_tx_buffer(size: int = TX_SNDBUF_BYTES) -> int | None:
    """Raise the send buffer of ovs-vswitchd's transmit socket; its new size
    (as the kernel reports it), or None when the socket is not there (yet)."""
    pid = vswitchd_pid()
    inodes = _unbound_packet_sockets()
    if pid is None or not inodes:
        return None
    for inode, fd in socket_fds(pid).items():
        if inode in inodes:
            return _set_sndbuf(pid, fd, size)
    return None


def _set_sndbuf(pid: int, fd: int, size: int) -> int:
    local = copied_fds(pid, [fd])
    if not local:
        raise OSError(ctypes.get_errno(), 'pidfd_getfd(ovs-vswitchd fd %d)' % fd)
    sock = socket.socket(fileno=local[0])   # a second handle on OVS's socket
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_SNDBUFFORCE, size)
        return sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
    finally:
        sock.close()                        # OVS's own descriptor stays open


# Interface types of the userspace datapath a switch port can be. `system`
# ports are read through one AF_PACKET socket each, polled one after another
# by ovs-vswitchd's main thread; `afxdp-nonpmd` ports through an AF_XDP ring
# the same thread checks without a system call. AF_XDP sends past the port's
# qdisc and tc egress hook (in generic mode the kernel's xsk transmit calls
# the driver directly), so on a shaped fabric neither the HTB nor the
# switch-port program would see what the switch sends: BENCHMARKS.md §6
# measures both. `afxdp` ports are polled by a PMD thread instead of the main
# thread; a fabric built with afxdp=1 gives them a queue in front
# (testbed.fabric.port_stage).
PORT_TYPES = ('system', 'afxdp-nonpmd', 'afxdp')
XDP_MODES = ('generic', 'native')
# A PMD thread polls flat out unless told it may sleep when its ports are
# idle (OVS >= 3.1, `other_config:pmd-maxsleep`, microseconds): 50 us keeps
# a queue's wait far below a link's serialisation time here (~2.4 ms for a
# full frame at 5 Mbit/s) and lets the PMD thread give the core back.
PMD_MAX_SLEEP_US = 50
# Modules that log a line per AF_XDP port each time a port comes or goes: the netdev
# datapath re-places every port's receive queue on the PMD threads after each port add
# or delete (dpif_netdev, one INFO line per port), and each port's XDP set-up
# (netdev_afxdp, libbpf's notes). Measured, building and tearing down
# fattree,k=4,planes=2,afxdp=1 logged 31,795 lines (4.4 MB); the file reached 2.5 GB
# in a day of runs. A fabric with AF_XDP ports keeps them at WARN.
CHATTY_AFXDP_MODULES = ('dpif_netdev', 'netdev_afxdp')


def interface_types() -> list[str]:
    """What this ovs-vswitchd can make a port of."""
    out = _vsctl('get', 'Open_vSwitch', '.', 'iface_types').stdout
    return [t.strip(' "') for t in out.strip().strip('[]').split(',') if t.strip()]


def set_port_type(ports: list[str], port_type: str, timeout_s: float = 60.0,
                  xdp_mode: str = 'generic') -> None:
    """Re-open every one of `ports` (switch ports of a running fabric) as
    `port_type`, in one transaction, and wait until OVS has them all.
    `xdp_mode` for AF_XDP ports: veths have no zero-copy mode; `native` is
    what a staged port needs (testbed.fabric.port_stage)."""
    if port_type not in PORT_TYPES:
        raise ValueError('port type %r: one of %s' % (port_type, ', '.join(PORT_TYPES)))
    if xdp_mode not in XDP_MODES:
        raise ValueError('xdp mode %r: one of %s' % (xdp_mode, ', '.join(XDP_MODES)))
    args: list[str] = []
    for port in ports:
        args += ['--', 'set', 'interface', port, 'type=%s' % port_type]
        if port_type.startswith('afxdp'):
            args.append('options:xdp-mode=%s' % xdp_mode)
    result = _vsctl(*args, timeout=int(timeout_s))
    if result.returncode:
        raise RuntimeError('ovs-vsctl could not make the ports %s: %s'
                           % (port_type, result.stderr.strip()))
    wait_ports_open(ports, port_type, timeout_s)


def wait_ports_open(ports: list[str], port_type: str, timeout_s: float = 60.0) -> None:
    """Wait until OVS has opened every one of `ports` (as `port_type`, for the error)."""
    deadline = time.monotonic() + timeout_s
    while (failing := _port_errors(ports)) and time.monotonic() < deadline:
        time.sleep(0.2)
    if failing:
        raise RuntimeError('%d ports are not %s ports: %s' % (
            len(failing), port_type, '; '.join(failing[:3])))


def _port_errors(ports: list[str]) -> list[str]:
    out = _vsctl('--columns=name,ofport,error', '--format=csv', '--data=bare',
                 '--no-headings', 'list', 'interface', *ports).stdout
    return ['%s: %s' % (name, error or 'no OpenFlow port')
            for name, ofport, error in (line.split(',', 2) for line in out.splitlines())
            if error or not ofport.strip().isdigit() or int(ofport) < 1]


# A setting a fabric changes in Open vSwitch keeps what it was in the Open_vSwitch table's
# external_ids under this prefix ('' for unset) until the fabric puts it back: so
# `mrc-testbed clean` restores it after a run that was killed. Two kinds: an other_config
# key (saved under its name), and a module's log file level (under LOG_KEY_PREFIX).
SAVED_PREFIX = 'mrc-testbed-saved-'
LOG_KEY_PREFIX = 'vlog-'


def set_for_fabric(key: str, value: str) -> None:
    """other_config:<key>=<value>, what it was saved."""
    _save(key, other_config(key, value) or '')


def log_less_for_fabric(module: str, level: str = 'warn') -> None:
    """ovs-vswitchd's log file takes `module`'s messages from `level` up while a
    fabric runs, what it took saved. Only the log's size is at stake: an ovs-vswitchd
    that does not answer leaves it as it was."""
    try:
        _save(LOG_KEY_PREFIX + module, file_log_levels().get(module, 'info'))
        set_file_log_level(module, level)
    except (OSError, subprocess.SubprocessError):
        pass


def _save(key: str, before: str) -> None:
    """A save left by a killed run is kept: it holds the value from before any of ours."""
    if key not in saved_settings():
        _vsctl('set', 'Open_vSwitch', '.',
               'external_ids:%s%s="%s"' % (SAVED_PREFIX, key, before))


def saved_settings() -> dict[str, str]:
    """Saved key -> the value it had before a fabric set it ('' for unset)."""
    out = _vsctl('--if-exists', 'get', 'Open_vSwitch', '.', 'external_ids', timeout=5)
    if out.returncode:
        return {}
    pairs = re.findall(r'"?%s([\w-]+)"?="?([^",}]*)"?' % re.escape(SAVED_PREFIX),
                       out.stdout)
    return dict(pairs)


def restore_settings() -> int:
    """Put back every setting a fabric changed; how many."""
    saved = saved_settings()
    for key, before in saved.items():
        if key.startswith(LOG_KEY_PREFIX):
            try:
                set_file_log_level(key[len(LOG_KEY_PREFIX):], before)
            except (OSError, subprocess.SubprocessError):
                pass        # not answering: a restarted ovs-vswitchd logs at its defaults
        else:
            other_config(key, before or None)
        _vsctl('remove', 'Open_vSwitch', '.', 'external_ids', SAVED_PREFIX + key)
    return len(saved)


def file_log_levels() -> dict[str, str]:
    """Module -> the level from which ovs-vswitchd's log file takes its messages,
    lower case (`ovs-appctl vlog/list`)."""
    rows = (line.split() for line in _appctl('vlog/list').splitlines())
    return {f[0]: f[3].lower() for f in rows if len(f) == 4}


def set_file_log_level(module: str, level: str) -> None:
    _appctl('vlog/set', '%s:file:%s' % (module, level))


def _appctl(*args: str) -> str:
    return subprocess.run(['ovs-appctl', '-t', 'ovs-vswitchd', *args], capture_output=True,
                          text=True, timeout=30, check=True).stdout


def other_config(key: str, value: str | None) -> str | None:
    """Set the Open_vSwitch table's `other_config:<key>` (None removes it); what it was
    before (None: unset), for the caller to put back."""
    out = _vsctl('--if-exists', 'get', 'Open_vSwitch', '.',
                 'other_config:' + key).stdout.strip().strip('"')
    before = out or None
    if value is None:
        _vsctl('remove', 'Open_vSwitch', '.', 'other_config', key)
    else:
        _vsctl('set', 'Open_vSwitch', '.', 'other_config:%s=%s' % (key, value))
    return before
