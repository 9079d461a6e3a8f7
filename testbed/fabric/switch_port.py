"""The congestion-signalling switch port: switch_port.c built, loaded, attached and read.

The program (switch_port.c has the mechanism and its sources) keeps a virtual queue per
switch port and, from it, sets ECN CE, trims MRC data packets to their headers and steers
trimmed and control packets into a strict-priority HTB class. This module:

- builds the object with clang, passing the wire constants of testbed/nic/wire.py as -D
  definitions, cached under build/bpf/ by a hash of the source and the flags (`build`);
- loads it once and pins it, program and maps, under /sys/fs/bpf/mrc-testbed-<tag>/
  (`SwitchPortProgram`), so every port of a fabric shares one program and one pair of maps;
- attaches it to ports on tc clsact egress and writes their configuration into the maps
  (`attach`, `attach_many`, `configure`, `set_rate`), reads their counters
  (`counters`, `all_counters`) and takes it all away again (`detach`, `unload`);
- sets up the HTB with a strict-priority control class that the program's priority is meant
  for (`setup_priority_htb`);
- removes what a killed run left (`clean_pins`, for `mrc-testbed clean`).

Writes go through `tc` and `bpftool`, batched (`tc -batch`, `bpftool batch`) because a fabric
has hundreds of ports and each process start costs milliseconds; reads of links, qdiscs and
filters go through pyroute2's netlink, which needs no process at all.
"""
from __future__ import annotations

import argparse
import glob
import hashlib
import json
import os
import platform
import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

from pyroute2 import IPRoute, NetNS

from testbed import checkout
from testbed.fabric.bpf_maps import PinnedMap
from testbed.nic import wire

SOURCE = Path(__file__).with_name('switch_port.c')
REPO = Path(__file__).resolve().parents[2]
BUILD_DIR = checkout.build_dir() / 'bpf'
CFLAGS = ('-O2', '-g', '-Wall', '-Werror', '-target', 'bpf')

BPFFS = Path('/sys/fs/bpf')
PIN_PREFIX = 'mrc-testbed-'          # clean_pins() removes every /sys/fs/bpf/mrc-testbed-*
PROG_NAME = 'mrc_switch_port'        # the C function's name, as bpftool and tc show it
CONFIG_MAP, STATE_MAP = 'port_config', 'port_state'
TAG = re.compile(r'^[A-Za-z0-9_.-]{1,64}$')
# Our place on clsact egress: before the gray-loss fault's filter (faults.TC_GRAY_PREF = 49),
# because a switch queues a packet before the wire can lose it. The program passes with
# TC_ACT_UNSPEC, so the chain goes on to that filter.
TC_PREF, TC_HANDLE = '40', '1'
TC_EGRESS, TC_INGRESS = 0xFFFFFFF3, 0xFFFFFFF2   # TC_H_CLSACT | TC_H_MIN_{EGRESS,INGRESS}
COMMAND_TIMEOUT_S = 60.0

# port_config.flags (switch_port.c PORT_*).
FLAG_MARK, FLAG_TRIM, FLAG_LAST_HOP = 0x1, 0x2, 0x4
# struct port_config and struct port_state of switch_port.c, native byte order. A unit test
# compares these field lists with the BTF the compiler wrote, so they cannot drift apart.
CONFIG_FIELDS = ('rate_bps', 'mark_bytes', 'trim_bytes', 'limit_bytes', 'flags',
                 'ctrl_priority', 'reserved')
_CONFIG = struct.Struct('=QIIIIII')
STATE_FIELDS = ('backlog', 'last_ns', 'drain_rem', 'packets', 'bytes', 'ce_marked', 'trimmed',
                'not_ect_over', 'prioritized', 'trim_errors')
_STATE = struct.Struct('=II' + 'Q' * len(STATE_FIELDS))   # bpf_spin_lock, reserved, fields
_KEY = struct.Struct('=I')
U32_MAX = 2 ** 32 - 1
# bpf_ktime_get_ns() never reaches this in a machine's uptime, and the program drains
# nothing while now <= last_ns: writing it freezes a port's virtual queue (tests do).
FROZEN_NS = 2 ** 63

# The priority HTB (setup_priority_htb). Major 5 as Mininet's TCLink (root 5:0, class 5:1),
# so the rate-change fault still finds class 5:1 where it expects it.
HTB_MAJOR = 5
HTB_ROOT, HTB_PARENT, HTB_CONTROL, HTB_DATA = '5:0', '5:1', '5:2', '5:3'
# HTB reads skb->priority as a class id when its major equals the qdisc's
# (net/sched/sch_htb.c htb_classify()): this value sends a packet to 5:2.
CONTROL_PRIORITY = HTB_MAJOR << 16 | 2
HTB_BURST_BYTES = 15000              # TCLink's burst (15k)
HTB_QUANTUM = 1514                   # one full frame at the 1,500-byte MTU (a fabric of
                                     # another MTU passes its own): HTB serves a class at
                                     # least a frame a round
MIN_HTB_RATE_BPS = 1000              # tc's rate resolution is 1 kbit/s
DATA_MIN_SHARE = 100                 # the data class is assured 1/100 of the link


class SwitchPortError(RuntimeError):
    """A tool failed, or the request makes no sense (the message says which)."""


# --------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------


def run_tool(cmd: list[str], *, stdin: str | None = None, check: bool = True) -> str:
    result = subprocess.run(cmd, input=stdin, capture_output=True, text=True,
                            timeout=COMMAND_TIMEOUT_S)
    if check and result.returncode:
        detail = (result.stderr.strip() or result.stdout.strip())[-2000:]
        raise SwitchPortError('%s failed (%d): %s' % (' '.join(cmd[:4]), result.returncode,
                                                       detail))
    return result.stdout


def _netns_path(netns: str) -> str:
    """A namespace as a path: names are `ip netns` ones, paths are e.g. /proc/PID/ns/net."""
    return netns if netns.startswith('/') else '/var/run/netns/' + netns


def _in_netns(netns: str | None, cmd: list[str]) -> list[str]:
    # nsenter enters the network namespace only. `ip netns exec` would also remount /sys,
    # hiding /sys/fs/bpf and so our pinned program from tc.
    return cmd if netns is None else ['nsenter', '--net=' + _netns_path(netns), *cmd]


def _netlink(netns: str | None) -> IPRoute | NetNS:
    return IPRoute() if netns is None else NetNS(netns)


@cache
def clang() -> str | None:
    """clang, or the newest versioned clang-NN (Ubuntu installs those side by side)."""
    found = shutil.which('clang')
    if found:
        return found
    versioned = sorted(glob.glob('/usr/bin/clang-[0-9]*'),
                       key=lambda p: int(re.sub(r'\D', '', Path(p).name) or 0))
    return versioned[-1] if versioned else None


@cache
def bpftool() -> str | None:
    """A bpftool that runs. Ubuntu 24.04's /usr/sbin/bpftool (linux-tools-common) is a
    wrapper that fails unless linux-tools-$(uname -r) is installed; the real binaries live
    in /usr/lib/linux-tools/<kernel>/ and are not tied to the running kernel."""
    candidates = [shutil.which('bpftool')] + sorted(
        glob.glob('/usr/lib/linux-tools/*/bpftool') + glob.glob('/usr/lib/linux-tools-*/bpftool'),
        reverse=True)
    for path in filter(None, candidates):
        try:
            if subprocess.run([path, 'version'], capture_output=True,
                              timeout=10).returncode == 0:
                return path
        except (OSError, subprocess.TimeoutExpired):
            continue
    return None


def need_tool(tool: str | None, name: str) -> str:
    if tool is None:
        raise SwitchPortError('%s not found: run scripts/setup.sh' % name)
    return tool


@cache
def arch_include_dir() -> str | None:
    """The directory with asm/types.h, which linux/bpf.h needs: Debian and Ubuntu keep
    it under the multiarch triplet, which -target bpf does not search."""
    for path in sorted(glob.glob('/usr/include/%s-linux-*/asm/types.h' % platform.machine())
                       + glob.glob('/usr/include/*-linux-*/asm/types.h')):
        return str(Path(path).parents[1])
    return '/usr/include' if os.path.exists('/usr/include/asm/types.h') else None


def headers_present() -> bool:
    return os.path.exists('/usr/include/bpf/bpf_helpers.h') and arch_include_dir() is not None


# --------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------


# Control opcodes in two 64-opcode sets: RoCEv2's own (the CNP, 0x81) from
# ROCE_OPCODE_BASE, and MRC's, in IBA's manufacturer-specific range.
ROCE_OPCODE_BASE = 0x80
MRC_OPCODE_BASE = 0xC0


def _opcode_mask(opcodes: Iterable[int], base: int = 0) -> str:
    """The program's set of opcodes: bit i stands for opcode base + i."""
    values = [int(op) - base for op in opcodes]
    if any(not 0 <= op < 64 for op in values):   # the program tests a 64-bit mask
        raise SwitchPortError('opcodes beyond base + 63 need a wider mask in switch_port.c')
    return '0x%xULL' % sum(1 << op for op in values)


def wire_defines() -> dict[str, str]:
    """The program's view of the wire format, from wire.py itself (the normative encoder):
    change the layout there and the program follows, or its tests fail."""
    control = set(wire.Opcode) - set(wire.DATA_OPCODES)
    return {
        'MRC_UDP_PORT': str(wire.UDP_PORT),
        'MRC_PROTOCOL_VERSION': str(wire.PROTOCOL_VERSION),
        'MRC_BTH_VERSION_OFFSET': str(wire.BTH_VERSION_OFFSET),
        'MRC_BTH_FLAGS_OFFSET': str(wire.BTH_FLAGS_OFFSET),
        'MRC_BTH_LEN': str(wire.BTH_LEN),
        'MRC_METH_LEN': str(wire.METH_LEN),
        'MRC_TSETH_LEN': str(wire.TSETH_LEN),
        'MRC_RETH_LEN': str(wire.RETH_LEN),
        'MRC_IMMDT_LEN': str(wire.IMMDT_LEN),
        'MRC_ICRC_LEN': str(wire.ICRC_LEN),
        'MRC_FLAG_TIMESTAMP': '0x%02x' % wire.FLAG_TIMESTAMP,
        'MRC_FLAG_TRIMMED': '0x%02x' % wire.FLAG_TRIMMED,
        'MRC_FLAG_TRIMMED_LASTHOP': '0x%02x' % wire.FLAG_TRIMMED_LASTHOP,
        'MRC_DATA_OPCODES': _opcode_mask(wire.DATA_OPCODES),
        'MRC_IMM_OPCODES': _opcode_mask(wire.IMM_OPCODES),
        'MRC_CONTROL_OPCODE_BASE': '0x%02x' % MRC_OPCODE_BASE,
        'MRC_CONTROL_OPCODES': _opcode_mask(
            (op for op in control if op >= MRC_OPCODE_BASE), MRC_OPCODE_BASE),
        'MRC_ROCE_OPCODE_BASE': '0x%02x' % ROCE_OPCODE_BASE,
        'MRC_ROCE_CONTROL_OPCODES': _opcode_mask(
            (op for op in control if op < MRC_OPCODE_BASE), ROCE_OPCODE_BASE),
    }


def compile_args() -> list[str]:
    include = arch_include_dir()
    if include is None:
        raise SwitchPortError('no asm/types.h: install linux-libc-dev (scripts/setup.sh)')
    return [*CFLAGS, '-I' + include,
            *('-D%s=%s' % kv for kv in sorted(wire_defines().items()))]


def object_path(build_dir: Path = BUILD_DIR) -> Path:
    """Where the object for this source and these flags is, built or not."""
    return object_path_for(SOURCE, compile_args(), build_dir)


def build(build_dir: Path = BUILD_DIR) -> Path:
    """The compiled object, built now only if this source and flags were never built."""
    return build_object(SOURCE, compile_args(), build_dir)


def object_path_for(source: Path, args: list[str], build_dir: Path) -> Path:
    """Where `source` compiled with `args` is: named by a hash of both."""
    digest = hashlib.sha256(source.read_bytes())
    digest.update(json.dumps(args).encode())
    return build_dir / ('%s-%s.o' % (source.stem, digest.hexdigest()[:16]))


def build_plain(source: Path, build_dir: Path = BUILD_DIR) -> Path:
    """`source`, an eBPF program that needs no wire constants (the hosts' SRv6 ones, the
    run-queue wait one), compiled with CFLAGS: built now only if never built."""
    include = arch_include_dir()
    if include is None:
        raise SwitchPortError('no asm/types.h: install linux-libc-dev (scripts/setup.sh)')
    return build_object(source, [*CFLAGS, '-I' + include], build_dir)


def build_object(source: Path, args: list[str], build_dir: Path) -> Path:
    """`source` compiled by clang with `args`, built now only if never built; the objects
    of earlier versions of it removed (a loaded program needs no file)."""
    obj = object_path_for(source, args, build_dir)
    if obj.exists():
        return obj
    build_dir.mkdir(parents=True, exist_ok=True)
    tmp = obj.with_name('%s.%d.tmp' % (obj.name, os.getpid()))
    try:
        run_tool([need_tool(clang(), 'clang'), *args, '-c', str(source), '-o', str(tmp)])
        os.replace(tmp, obj)       # atomic: a concurrent build never sees half an object
    finally:
        tmp.unlink(missing_ok=True)
    for old in build_dir.glob('%s-*.o' % source.stem):
        if old != obj:
            old.unlink(missing_ok=True)
    return obj


# --------------------------------------------------------------------------
# Port configuration
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class PortConfig:
    """One port's signalling. Thresholds are bytes of virtual backlog; None turns the
    signal off. A packet is over a threshold when the backlog it finds on arrival, not
    counting itself, exceeds it.

    rate_bps should be the port's link rate (the HTB rate); the virtual queue drains at it.
    HULL drains its phantom queue slightly slower than the link, to mark before a real queue
    builds: pass e.g. 0.95 x the link rate for that. The public record says ECN is "enabled
    on all but the last hop" (Araujo et al., arXiv:2605.04333 §2.1), so a fabric gives
    last-hop ports mark_threshold=None and last_hop=True (trims there are TRIMMED_LASTHOP).
    limit_bytes caps the virtual backlog as a finite buffer would (the real drops happen in
    the HTB queue behind the program); by default four times the largest threshold.
    control_priority is the skb->priority given to trimmed and control packets; the default
    selects setup_priority_htb's control class; 0 leaves skb->priority alone.
    """

    rate_bps: int
    mark_threshold: int | None = None
    trim_threshold: int | None = None
    last_hop: bool = False
    control_priority: int = CONTROL_PRIORITY
    limit_bytes: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.rate_bps < 2 ** 64:
            raise SwitchPortError('rate_bps out of range: %r' % self.rate_bps)
        for name in ('mark_threshold', 'trim_threshold', 'limit_bytes'):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= U32_MAX:
                raise SwitchPortError('%s must be 0..%d bytes, not %r' % (name, U32_MAX, value))
        if not 0 <= self.control_priority <= U32_MAX:
            raise SwitchPortError('control_priority out of range: %r' % self.control_priority)

    @property
    def flags(self) -> int:
        return ((FLAG_MARK if self.mark_threshold is not None else 0)
                | (FLAG_TRIM if self.trim_threshold is not None else 0)
                | (FLAG_LAST_HOP if self.last_hop else 0))

    @property
    def effective_limit(self) -> int:
        if self.limit_bytes is not None:
            return self.limit_bytes
        largest = max(self.mark_threshold or 0, self.trim_threshold or 0)
        return min(4 * largest, U32_MAX)   # 0 (no cap) when no signal is on

    def pack(self) -> bytes:
        return _CONFIG.pack(self.rate_bps, self.mark_threshold or 0, self.trim_threshold or 0,
                            self.effective_limit, self.flags, self.control_priority, 0)


def pack_state(backlog: int = 0, last_ns: int = 0, **counters: int) -> bytes:
    values = {'backlog': backlog, 'last_ns': last_ns, **counters}
    unknown = set(values) - set(STATE_FIELDS)
    if unknown:
        raise SwitchPortError('no such state fields: %s' % sorted(unknown))
    return _STATE.pack(0, 0, *(values.get(name, 0) for name in STATE_FIELDS))


def unpack_state(raw: bytes) -> dict[str, int]:
    return dict(zip(STATE_FIELDS, _STATE.unpack(raw)[2:]))


def _hex(raw: bytes) -> str:
    return ' '.join('%02x' % b for b in raw)


def _key_hex(ifindex: int) -> str:
    return _hex(_KEY.pack(ifindex))


def _value_bytes(entry: dict) -> bytes:
    """bpftool -j prints keys and values as lists of "0x.." byte strings."""
    return bytes(int(b, 16) for b in entry['value'])


# --------------------------------------------------------------------------
# The program
# --------------------------------------------------------------------------


@dataclass
class _Port:
    intf: str
    ifindex: int
    netns: str | None
    config: PortConfig
    added_clsact: bool          # we made the clsact qdisc, so we remove it if we leave it empty


@dataclass
class SwitchPortProgram:
    """switch_port.c loaded once and pinned under /sys/fs/bpf/mrc-testbed-<tag>/.

    Ports are keyed by ifindex in the maps, and an ifindex is only unique within a network
    namespace: every port one program serves should live in the same namespace (a fabric's
    switch ports all live in the root one). attach() refuses an ifindex already in use.
    Use as a context manager, or call unload(), which is idempotent.
    """

    tag: str
    obj: Path | None = None
    _ports: dict[str, _Port] = field(default_factory=dict, init=False, repr=False)
    _loaded: bool = field(default=False, init=False, repr=False)
    _state_map: PinnedMap | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not TAG.match(self.tag):
            raise SwitchPortError('tag must match %s, not %r' % (TAG.pattern, self.tag))
        self.obj = self.obj or build()
        self._load()

    # -- paths ---------------------------------------------------------------

    @property
    def pin_dir(self) -> Path:
        return BPFFS / (PIN_PREFIX + self.tag)

    @property
    def prog_pin(self) -> Path:
        return self.pin_dir / 'prog'

    def map_pin(self, name: str) -> Path:
        return self.pin_dir / 'maps' / name

    # -- loading -------------------------------------------------------------

    def _load(self) -> None:
        ensure_bpffs()
        try:
            self.pin_dir.mkdir(mode=0o700)
        except FileExistsError:
            raise SwitchPortError('%s exists: another run uses this tag, or a killed one left '
                                  'it (mrc-testbed clean removes it)' % self.pin_dir) from None
        try:
            run_tool([need_tool(bpftool(), 'bpftool'), 'prog', 'load', str(self.obj), str(self.prog_pin),
                  'type', 'classifier', 'pinmaps', str(self.pin_dir / 'maps')])
        except BaseException:
            shutil.rmtree(self.pin_dir, ignore_errors=True)
            raise
        self._loaded = True

    def prog_id(self) -> int:
        return json.loads(self._bpftool('prog', 'show', 'pinned', str(self.prog_pin)))['id']

    def _bpftool(self, *args: str) -> str:
        return run_tool([need_tool(bpftool(), 'bpftool'), '-j', *args])

    def _bpftool_batch(self, commands: list[str]) -> None:
        if commands:
            run_tool([need_tool(bpftool(), 'bpftool'), 'batch', 'file', '-'],
                 stdin='\n'.join(commands) + '\n')

    def _map_update(self, name: str, ifindex: int, value: bytes) -> str:
        return 'map update pinned %s key hex %s value hex %s' % (
            self.map_pin(name), _key_hex(ifindex), _hex(value))

    # -- ports ---------------------------------------------------------------

    @property
    def ports(self) -> list[str]:
        return list(self._ports)

    def attach(self, intf: str, config: PortConfig, *, netns: str | None = None) -> None:
        self.attach_many({intf: config}, netns=netns)

    def attach_many(self, configs: Mapping[str, PortConfig], *, netns: str | None = None) -> None:
        """Attach to every interface of `configs` (all in `netns`, None = this namespace):
        maps first, so the first packet the filter sees already has its configuration."""
        self._check_loaded()
        ports = [self._new_port(intf, cfg, netns, link)
                 for (intf, cfg), link in zip(configs.items(), _links(list(configs), netns))]
        self._bpftool_batch([line for port in ports for line in (
            self._map_update(STATE_MAP, port.ifindex, pack_state()),
            self._map_update(CONFIG_MAP, port.ifindex, port.config.pack()))])
        self._ports.update((port.intf, port) for port in ports)
        tc_batch(netns, [line for port in ports for line in (
            *(['qdisc add dev %s clsact' % port.intf] if port.added_clsact else []),
            'filter replace dev %s egress pref %s handle %s bpf da pinned %s' % (
                port.intf, TC_PREF, TC_HANDLE, self.prog_pin))])

    def _new_port(self, intf: str, config: PortConfig, netns: str | None,
                  link: tuple[int, bool] | None) -> _Port:
        if intf in self._ports:
            raise SwitchPortError('%s is attached already' % intf)
        if link is None:
            raise SwitchPortError('no interface %s in %s' % (intf, netns or 'this namespace'))
        ifindex, has_clsact = link
        clash = [p.intf for p in self._ports.values() if p.ifindex == ifindex]
        if clash:
            raise SwitchPortError('%s has ifindex %d, as attached %s has: one program per '
                                  'namespace' % (intf, ifindex, clash[0]))
        return _Port(intf, ifindex, netns, config, added_clsact=not has_clsact)

    def configure(self, intf: str, config: PortConfig) -> None:
        """Replace a port's configuration; its queue and counters carry on."""
        self.configure_many({intf: config})

    def configure_many(self, configs: Mapping[str, PortConfig]) -> None:
        """`configure` for several ports, in one bpftool batch."""
        ports = {intf: self._port(intf) for intf in configs}
        self._bpftool_batch([self._map_update(CONFIG_MAP, ports[intf].ifindex, config.pack())
                             for intf, config in configs.items()])
        for intf, config in configs.items():
            ports[intf].config = config

    def set_rate(self, intf: str, rate_bps: int) -> None:
        """The virtual queue's drain rate (a link-rate fault calls this with the HTB rate)."""
        self.configure(intf, replace(self._port(intf).config, rate_bps=rate_bps))

    def config(self, intf: str) -> PortConfig:
        return self._port(intf).config

    def set_state(self, intf: str, *, backlog: int, last_ns: int = 0) -> None:
        """Put `backlog` bytes in a port's virtual queue, last drained at `last_ns`
        (bpf_ktime_get_ns(), i.e. time.monotonic_ns()), and zero its counters.

        For tests: BPF_PROG_TEST_RUN passes no time between packets, so a test writes the
        backlog it wants each packet to find. last_ns=FROZEN_NS, a time the clock never
        reaches, stops the queue draining (the program drains nothing while now <= last_ns)
        until the next set_state; last_ns in the recent past drains a known amount."""
        port = self._port(intf)
        self._bpftool_batch([self._map_update(STATE_MAP, port.ifindex,
                                              pack_state(backlog, last_ns))])

    def counters(self, intf: str) -> dict[str, int]:
        """A port's state: backlog and last_ns, then the counters (packets, bytes as sent,
        ce_marked, trimmed, not_ect_over, prioritized, trim_errors)."""
        port = self._port(intf)
        entry = json.loads(self._bpftool('map', 'lookup', 'pinned', str(self.map_pin(STATE_MAP)),
                                         'key', 'hex', *_key_hex(port.ifindex).split()))
        return unpack_state(_value_bytes(entry))

    def all_counters(self) -> dict[str, dict[str, int]]:
        """counters() of every port in the map, by interface name ('ifindex<N>' for an
        entry no attached port owns, which only a race with detach could leave)."""
        names = {p.ifindex: p.intf for p in self._ports.values()}
        result = {}
        # In-process (bpf(2)), not bpftool: a run reads this twice a second
        # from the thread that drives the endpoints.
        if self._state_map is None:
            self._state_map = PinnedMap(str(self.map_pin(STATE_MAP)))
        for key, value in self._state_map.items():
            ifindex = _KEY.unpack(key)[0]
            result[names.get(ifindex, 'ifindex%d' % ifindex)] = unpack_state(value)
        return result

    def detach(self, intf: str) -> None:
        self.detach_many([intf])

    def detach_many(self, intfs: Iterable[str]) -> None:
        """Take the filter off each port (and the clsact qdisc, if we added it and nothing
        else uses it), then its map entries. Interfaces already gone are fine."""
        ports = [self._port(intf) for intf in intfs]
        by_netns: dict[str | None, list[_Port]] = {}
        for port in ports:
            by_netns.setdefault(port.netns, []).append(port)
        for netns, group in by_netns.items():
            _detach_filters(netns, group)
        self._bpftool_batch([
            'map delete pinned %s key hex %s' % (self.map_pin(name), _key_hex(port.ifindex))
            for port in ports for name in (CONFIG_MAP, STATE_MAP)])
        for port in ports:
            del self._ports[port.intf]

    def unload(self) -> None:
        """Detach from every port still attached and unpin everything. Idempotent; after
        it no filter and no pinned object of this program is left (the kernel frees the
        program once the last filter and pin are gone)."""
        try:
            if self._ports:
                self.detach_many(list(self._ports))
        finally:
            if self._state_map is not None:
                self._state_map.close()
                self._state_map = None
            self._ports.clear()
            shutil.rmtree(self.pin_dir, ignore_errors=True)
            self._loaded = False

    def _port(self, intf: str) -> _Port:
        self._check_loaded()
        try:
            return self._ports[intf]
        except KeyError:
            raise SwitchPortError('%s is not attached' % intf) from None

    def _check_loaded(self) -> None:
        if not self._loaded:
            raise SwitchPortError('the program %s is unloaded' % self.tag)

    def __enter__(self) -> SwitchPortProgram:
        return self

    def __exit__(self, *exc: object) -> None:
        self.unload()


# -- tc and netlink helpers ---------------------------------------------------


def tc_batch(netns: str | None, commands: list[str], *, force: bool = False) -> str:
    if not commands:
        return ''
    return run_tool(_in_netns(netns, ['tc', *(['-force'] if force else []), '-batch', '-']),
                stdin='\n'.join(commands) + '\n', check=not force)


def _links(intfs: list[str], netns: str | None) -> list[tuple[int, bool] | None]:
    """For each interface: (ifindex, whether it has a clsact qdisc), None if it is not there.
    One dump of the qdiscs for all of them: get_qdiscs(index=) dumps and decodes every
    qdisc of the namespace each time (the kernel filters no qdisc dump), 30 ms on an afxdp
    2-plane k=4 fat-tree's 397 root-namespace links: 5.3 s for its 160 switch ports, 0.2 s so."""
    with _netlink(netns) as nl:
        index = _ifindexes(nl)
        clsact = {q['index'] for q in nl.get_qdiscs() if q.get_attr('TCA_KIND') == 'clsact'}
    return [(index[intf], index[intf] in clsact) if intf in index else None
            for intf in intfs]


def _ifindexes(nl: IPRoute | NetNS) -> dict[str, int]:
    """Every link of the namespace by name, in one dump."""
    return {link.get_attr('IFLA_IFNAME'): link['index'] for link in nl.get_links()}


def _clsact_empty(nl: IPRoute | NetNS, ifindex: int) -> bool:
    return not any(nl.get_filters(index=ifindex, parent=parent)
                   for parent in (TC_EGRESS, TC_INGRESS))


def _detach_filters(netns: str | None, ports: list[_Port]) -> None:
    """Our filter off each port; the clsact qdisc too where we added it and it is now empty
    (another filter on it, the gray-loss fault's say, keeps it)."""
    try:
        nl = _netlink(netns)
    except OSError:            # the namespace is gone, and the ports with it
        return
    with nl:
        index = _ifindexes(nl)
        alive = [p for p in ports if index.get(p.intf) == p.ifindex]
        tc_batch(netns, ['filter del dev %s egress pref %s handle %s bpf' % (
            p.intf, TC_PREF, TC_HANDLE) for p in alive], force=True)
        empty = [p for p in alive if p.added_clsact and _clsact_empty(nl, p.ifindex)]
    tc_batch(netns, ['qdisc del dev %s clsact' % p.intf for p in empty], force=True)


def ensure_bpffs() -> None:
    """Pins need a BPF file system at /sys/fs/bpf; minimal machines do not mount one."""
    with open('/proc/mounts') as mounts:
        if any(line.split()[1:3] == [str(BPFFS), 'bpf'] for line in mounts):
            return
    run_tool(['mount', '-t', 'bpf', 'bpf', str(BPFFS)])


# --------------------------------------------------------------------------
# The priority HTB
# --------------------------------------------------------------------------


def priority_htb_rates(rate_bps: int) -> tuple[int, int]:
    """(control class rate, data class rate) under a parent at rate_bps.

    HTB serves, at each level, the classes that may send by their own rate in priority
    order (net/sched/sch_htb.c htb_dequeue()), so the prio-0 control class goes first as
    long as it is within its own rate. That rate is nearly the whole link, so control
    traffic is never held back by data; the data class is assured a 1/100 share so a
    control flood cannot starve it, and borrows the rest of the link (ceil = rate)."""
    data = max(rate_bps // DATA_MIN_SHARE, MIN_HTB_RATE_BPS)
    if rate_bps < 2 * data:
        raise SwitchPortError('an HTB rate of %d bit/s is too low for two classes' % rate_bps)
    return rate_bps - data, data


def _htb_class_commands(verb: str, intf: str, rate_bps: int, burst_bytes: int,
                        quantum_bytes: int) -> list[str]:
    control, data = priority_htb_rates(rate_bps)
    common = 'ceil %dbit burst %d cburst %d' % (rate_bps, burst_bytes, burst_bytes)
    return [
        'class %s dev %s parent %s classid %s htb rate %dbit %s' % (
            verb, intf, HTB_ROOT, HTB_PARENT, rate_bps, common),
        'class %s dev %s parent %s classid %s htb rate %dbit %s prio 0 quantum %d' % (
            verb, intf, HTB_PARENT, HTB_CONTROL, control, common, quantum_bytes),
        'class %s dev %s parent %s classid %s htb rate %dbit %s prio 1 quantum %d' % (
            verb, intf, HTB_PARENT, HTB_DATA, data, common, quantum_bytes),
    ]


def setup_priority_htb(intf: str, rate_bps: int, *, netns: str | None = None,
                       burst_bytes: int = HTB_BURST_BYTES) -> int:
    """Root HTB 5:0 on `intf`: parent 5:1 at rate_bps, control class 5:2 (prio 0) and data
    class 5:3 (prio 1, the default for anything unclassified). Replaces the root qdisc;
    returns the skb->priority that selects the control class (PortConfig's default)."""
    return setup_priority_htb_many([intf], rate_bps, netns=netns, burst_bytes=burst_bytes)


def setup_priority_htb_many(intfs: Iterable[str], rate_bps: int, *,
                            netns: str | None = None,
                            burst_bytes: int = HTB_BURST_BYTES,
                            quantum_bytes: int = HTB_QUANTUM) -> int:
    """setup_priority_htb on many interfaces with two tc processes: whatever root qdisc
    they had goes first (TCLink's HTB has handle 5: too, and HTB cannot be changed into
    another HTB in place), then the priority layout is added."""
    intfs = list(intfs)
    minor = HTB_DATA.split(':')[1]
    tc_batch(netns, ['qdisc del dev %s root' % intf for intf in intfs], force=True)
    tc_batch(netns, [line for intf in intfs for line in (
        'qdisc add dev %s root handle %s htb default %s' % (intf, HTB_ROOT, minor),
        *_htb_class_commands('add', intf, rate_bps, burst_bytes, quantum_bytes))])
    return CONTROL_PRIORITY


def set_priority_htb_rate(intf: str, rate_bps: int, *, netns: str | None = None,
                          burst_bytes: int = HTB_BURST_BYTES,
                          quantum_bytes: int = HTB_QUANTUM) -> None:
    """Change all three classes to a new link rate (class 5:1 alone would leave the
    control class's own rate above the link)."""
    tc_batch(netns, _htb_class_commands('change', intf, rate_bps, burst_bytes,
                                         quantum_bytes))


def remove_priority_htb(intf: str, *, netns: str | None = None) -> None:
    tc_batch(netns, ['qdisc del dev %s root' % intf])


_HTB_CLASS = re.compile(r'^class htb (\S+) .*?\n\s*Sent (\d+) bytes (\d+) pkt \(dropped (\d+)'
                        r'.*?\n\s*backlog \S+ (\d+)p', re.S | re.M)


def htb_class_stats(intf: str, *, netns: str | None = None) -> dict[str, dict[str, int]]:
    """class id -> bytes, packets, dropped, queued (packets), from `tc -s class show`
    (iproute2 6.1 prints HTB classes as text even with -j)."""
    out = run_tool(_in_netns(netns, ['tc', '-s', 'class', 'show', 'dev', intf]))
    blocks = re.split(r'\n(?=class )', out)
    stats = {}
    for block in blocks:
        match = _HTB_CLASS.search(block)
        if match:
            handle, nbytes, packets, dropped, queued = match.groups()
            stats[handle] = {'bytes': int(nbytes), 'packets': int(packets),
                             'dropped': int(dropped), 'queued': int(queued)}
    return stats


# --------------------------------------------------------------------------
# Leftovers of killed runs (mrc-testbed clean)
# --------------------------------------------------------------------------


def leftover_pin_dirs() -> list[str]:
    return sorted(glob.glob(str(BPFFS / (PIN_PREFIX + '*'))))


def our_tc_filters() -> list[tuple[str, int, int]]:
    """(interface, pref, handle) of every tc filter running our program in this network
    namespace (by program name, whoever loaded it). Other namespaces of ours (Mininet
    hosts, test namespaces) are deleted whole by clean, filters and all."""
    tool = bpftool()
    if tool is None:
        return []
    names = {prog['id']: prog.get('name') for prog in
             json.loads(run_tool([tool, '-j', 'prog', 'show'], check=False) or '[]')}
    devices = {entry['devname'] for net in json.loads(
        run_tool([tool, '-j', 'net', 'show'], check=False) or '[]')
        for entry in net.get('tc', []) if names.get(entry.get('id')) == PROG_NAME}
    found = []
    for dev in sorted(devices):      # we attach on egress only
        out = run_tool(['tc', '-j', 'filter', 'show', 'dev', dev, 'egress'], check=False)
        for entry in json.loads(out or '[]'):
            prog = entry.get('options', {}).get('prog', {})
            if prog.get('name') == PROG_NAME:
                found.append((dev, entry['pref'], int(entry['options']['handle'], 0)))
    return found


def clean_pins() -> int:
    """Remove every filter of ours in this namespace and every pin dir of ours; returns
    how many pin dirs there were. For runs that died before unload()."""
    for dev, pref, handle in our_tc_filters():
        run_tool(['tc', 'filter', 'del', 'dev', dev, 'egress', 'pref', str(pref), 'handle',
              str(handle), 'bpf'], check=False)
    dirs = leftover_pin_dirs()
    for path in dirs:
        shutil.rmtree(path, ignore_errors=True)
    return len(dirs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog='python -m testbed.fabric.switch_port',
                                     description='Build the switch-port eBPF object, or '
                                     'remove what killed runs left.')
    parser.add_argument('action', choices=('build', 'clean'))
    args = parser.parse_args(argv)
    if args.action == 'build':
        print(build())
    else:
        print('removed %d pin dir(s)' % clean_pins())
    return 0


if __name__ == '__main__':
    sys.exit(main())
