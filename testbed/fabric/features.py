"""What this kernel and userspace offer the testbed, detected, never assumed.

`doctor` prints these; the fabric builder and later the scenario runner pick
their data path from the same answers, so a result always says what it was
measured with.
"""
from __future__ import annotations

import ctypes
import os
import platform
import shutil
import struct
import subprocess
from dataclasses import dataclass
from functools import cache

from testbed.fabric import host_decap
from testbed.fabric.bpf_maps import bpf_syscall_number


# Names shared with link_options, so a refusal names what doctor prints.
NETEM = 'netem'
RED_ECN = 'RED/ECN'


@dataclass(frozen=True)
class Feature:
    name: str
    present: bool
    detail: str
    without: str  # what the testbed does when it is missing


def _run(cmd: list[str], timeout: float = 5.0) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _kernel_module(name: str) -> bool:
    """Built in, already loaded, or loadable."""
    if os.path.isdir('/sys/module/' + name):
        return True
    if not shutil.which('modprobe'):
        return False
    return _run(['modprobe', '-q', name]).returncode == 0


@cache
def ovs_kernel_datapath() -> bool:
    return _kernel_module('openvswitch')


def ovs_datapath() -> str:
    """Mininet's OVSSwitch datapath option: 'kernel' where the module
    exists, else the userspace (netdev) datapath."""
    return 'kernel' if ovs_kernel_datapath() else 'user'


def _tc_qdisc_available(kind: str) -> bool:
    """Try the qdisc on a throwaway veth in a scratch namespace."""
    if os.geteuid() != 0 or not shutil.which('ip') or not shutil.which('tc'):
        return False
    ns = 'mrcprobe%d' % os.getpid()
    # A veth, not a dummy link: some kernels (this one) build no dummy driver.
    script = ('ip link add d0 type veth peer name d1 && ip link set d0 up && '
              'tc qdisc add dev d0 root %s' % kind)
    try:
        if _run(['ip', 'netns', 'add', ns]).returncode:
            return False
        return _run(['ip', 'netns', 'exec', ns, 'sh', '-c', script]
                    ).returncode == 0
    finally:
        _run(['ip', 'netns', 'del', ns])


@cache
def netem_available() -> bool:
    return _tc_qdisc_available('netem delay 1ms')


@cache
def red_ecn_available() -> bool:
    return _tc_qdisc_available(
        'red limit 400000 min 30000 max 90000 avpkt 1000 burst 55 ecn '
        'bandwidth 10mbit probability 0.1')


_BPF_MAP_CREATE, _BPF_MAP_TYPE_ARRAY = 0, 2
SWITCH_PORT_WITHOUT = ('no switch-port signalling: no ECN marks, no trimming and no '
                       'control class at switch ports, so MRC sees congestion as queueing '
                       'delay and loss only')


@cache
def bpf_syscall() -> tuple[bool, str]:
    """Whether bpf(2) works for us: create (and close) a one-entry array map."""
    number = bpf_syscall_number()
    if number is None:
        return False, 'no bpf syscall number known for %s' % platform.machine()
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.create_string_buffer(struct.pack('=IIII', _BPF_MAP_TYPE_ARRAY, 4, 4, 1), 64)
    fd = libc.syscall(number, _BPF_MAP_CREATE, attr, len(attr))
    if fd < 0:
        return False, 'bpf(BPF_MAP_CREATE): %s' % os.strerror(ctypes.get_errno())
    os.close(fd)
    return True, 'bpf(2) creates maps'


@cache
def tc_clsact_available() -> bool:
    """A clsact qdisc on a veth in a scratch namespace (no dummy links on some kernels)."""
    if os.geteuid() != 0 or not shutil.which('ip') or not shutil.which('tc'):
        return False
    ns = 'mrcprobe%d' % os.getpid()          # clean.py removes mrc* namespaces
    script = ('ip link add c0 type veth peer name c1 && tc qdisc add dev c0 clsact')
    try:
        if _run(['ip', 'netns', 'add', ns]).returncode:
            return False
        return _run(['ip', 'netns', 'exec', ns, 'sh', '-c', script]).returncode == 0
    finally:
        _run(['ip', 'netns', 'del', ns])


def bpf_jit() -> tuple[bool, str]:
    try:
        with open('/proc/sys/net/core/bpf_jit_enable') as f:
            value = f.read().strip()
    except OSError:
        return False, 'no /proc/sys/net/core/bpf_jit_enable: kernel built without the JIT'
    return value != '0', 'net.core.bpf_jit_enable = %s' % value


def _bpf_features() -> list[Feature]:
    from testbed.fabric import switch_port
    syscall_ok, syscall_detail = bpf_syscall()
    jit_ok, jit_detail = bpf_jit()
    compiler = switch_port.clang()
    headers = switch_port.headers_present()
    tool = switch_port.bpftool()
    return [
        Feature('eBPF (bpf syscall)', syscall_ok, syscall_detail, SWITCH_PORT_WITHOUT),
        Feature('tc clsact', tc_clsact_available(), 'clsact qdisc: tc hooks before the '
                'root qdisc', SWITCH_PORT_WITHOUT + '; gray loss only by nftables '
                "(gray_failure method='nft')"),
        Feature('BPF JIT', jit_ok, jit_detail, 'the switch-port program runs in the '
                'kernel\'s BPF interpreter: same signals, more CPU per packet'),
        Feature('BPF compiler', bool(compiler and headers),
                '%s; libbpf and kernel headers %s' % (compiler or 'no clang',
                                                      'present' if headers else 'missing'),
                'the switch-port program cannot be built (an object already under '
                'build/bpf/ still loads); otherwise ' + SWITCH_PORT_WITHOUT),
        Feature('bpftool', tool is not None, tool or 'not found (or a wrapper that does '
                'not run)', 'the switch-port program cannot be loaded, configured or '
                'read: ' + SWITCH_PORT_WITHOUT),
    ]


def switch_port_missing() -> list[str]:
    """What the switch-port program needs and this machine lacks (the JIT is
    not needed: the interpreter gives the same signals)."""
    return [f.name for f in _bpf_features() if not f.present and f.name != 'BPF JIT']


def _sysctl_exists(path: str) -> bool:
    return os.path.exists('/proc/sys/' + path.replace('.', '/'))


def _ovs_status() -> Feature:
    if not shutil.which('ovs-vsctl'):
        return Feature('Open vSwitch', False, 'ovs-vsctl not installed',
                       'nothing can be built; run the set-up script')
    running = _run(['ovs-vsctl', '--timeout=3', 'show']).returncode == 0
    path = 'kernel datapath' if ovs_kernel_datapath() else \
        'userspace (netdev) datapath: no openvswitch kernel module'
    return Feature('Open vSwitch', running,
                   ('running, ' if running else 'installed but not running, ')
                   + path,
                   'the fabric starts OVS itself (ovs-ctl start)')


def all_features() -> list[Feature]:
    root = os.geteuid() == 0
    return [
        Feature('root', root, 'euid %d' % os.geteuid(),
                'nothing can be built: namespaces, veths, OVS and routes '
                'need root'),
        _ovs_status(),
        Feature('OVS kernel datapath', ovs_kernel_datapath(),
                'openvswitch module', 'userspace datapath: one ovs-vswitchd thread '
                'forwards the whole fabric; `mrc-testbed bench --sections '
                'emulator_scale` measures what it carries (BENCHMARKS.md), and '
                'with MRC traffic link rates stay at a few Mbit/s per host port'),
        Feature('OVS AF_XDP ports', afxdp_ports(), 'afxdp interfaces: topology '
                'option afxdp=1 builds PMD-polled AF_XDP switch ports, each link '
                'staged so its queue stays in the kernel (testbed/fabric/'
                'port_stage.py; capacity in BENCHMARKS.md §6); afxdp=auto (the '
                'default scenario) where their locked memory fits: %.1f GB for '
                "the default fat-tree's %d ports, %.1f GB available now"
                % (DEFAULT_FABRIC_PORTS * AFXDP_PORT_BYTES / 1e9, DEFAULT_FABRIC_PORTS,
                   memory_available() / 1e9), 'system ports only; afxdp=1 is refused'),
        Feature('SRv6 seg6 routes', host_decap.kernel_seg6local(),
                'seg6local End.DT6 and seg6 encap: the kernel decapsulates at the '
                'hosts and carries kernel TCP and MPTCP into the carriers',
                'the kernel has no seg6local (CONFIG_IPV6_SEG6_LWTUNNEL): eBPF '
                'does both on the host ports (docs/host-decap.md; the BPF lines '
                'below must be yes), and the CLI cannot add seg6 routes by hand'),
        Feature('SRv6 seg6local NEXT-C-SID', host_decap.kernel_seg6local() and _next_csid(),
                'iproute2 knows "flavors next-csid"', 'switch uSID shifting is '
                'done in OVS flows, so only host-side NEXT-C-SID is missing'),
        Feature(NETEM, netem_available(),
                'sch_netem: link delay (topology delay=<ms>) and loss',
                'topologies asking for delay= are refused before anything is '
                'built; random loss (gray_failure) comes from a tc classic-BPF '
                'filter, not netem'),
        Feature(RED_ECN, red_ecn_available(),
                'sch_red with ecn: ECN marking (topology ecn=1)',
                'topologies asking for ecn=1 are refused; MRC sees congestion '
                'from queueing delay only'),
        Feature('nftables', bool(shutil.which('nft')), 'nft binary',
                "no gray_failure method='nft'; the default method (tc) needs no "
                'nftables'),
        Feature('MPTCP', _sysctl_exists('net.mptcp.enabled'),
                'net.mptcp.enabled', 'the mptcp baseline cannot run: a run that '
                'asks for it fails when it enables MPTCP in the hosts'),
        *_bpf_features(),
    ]


def afxdp_ports() -> bool:
    from testbed.fabric import ovs      # Mininet's OVS class: only when asked
    return bool(shutil.which('ovs-vsctl')) and 'afxdp' in ovs.interface_types()


# What one AF_XDP switch port costs in memory: ovs-vswitchd had 12,450,072 kB locked
# (VmLck; it runs with --mlockall) with the 160 `afxdp` ports of fattree,k=4,planes=2
# (OVS 3.1: its packet buffers, a fixed size per port): 76 MiB a port, 12.7 GB in all.
AFXDP_PORT_BYTES = 76 << 20
DEFAULT_FABRIC_PORTS = 160      # fattree,k=4,planes=2's switch ports
MEMORY_LEFT_BYTES = 2 << 30     # ... and what everything else on the machine keeps


def afxdp_misfit(switch_ports: int) -> str | None:
    """Why a fabric of `switch_ports` AF_XDP ports cannot be built here; None if it can."""
    if not afxdp_ports():
        return 'Open vSwitch here has no AF_XDP ports'
    need, free = switch_ports * AFXDP_PORT_BYTES, memory_available()
    if need + MEMORY_LEFT_BYTES > free:
        return ('%d AF_XDP ports need %.1f GB of locked memory; %.1f GB is available'
                % (switch_ports, need / 1e9, free / 1e9))
    return None


def memory_available() -> int:
    """The kernel's estimate of memory available without swapping, in bytes."""
    with open('/proc/meminfo') as f:
        for line in f:
            if line.startswith('MemAvailable:'):
                return int(line.split()[1]) * 1024
    return 0


def _next_csid() -> bool:
    if not shutil.which('ip'):
        return False
    out = _run(['ip', 'route', 'help']).stderr
    return 'next-csid' in out or _iproute2_version() >= (6, 1)


def _iproute2_version() -> tuple[int, ...]:
    out = _run(['ip', '-V']).stdout
    digits = out.split('iproute2-')[-1].split('-')[0].lstrip('v').split('.')
    try:
        return tuple(int(d) for d in digits[:2])
    except ValueError:
        return (0,)
