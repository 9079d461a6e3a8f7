"""Kernel flows into uSID carriers by eBPF, where the kernel has no seg6 encap routes.

seg6_encap.c (which has the mechanism) on the tc egress of every host port of a fabric,
one program and one `flows` map for them all, pinned under
/sys/fs/bpf/mrc-testbed-encap-<pid>-<n>/ while the kernel transports run (`mrc-testbed
clean` removes what a killed run left: every /sys/fs/bpf/mrc-testbed-*; the filters go
with the hosts' namespaces). testbed.kernel.routes writes a flow's carrier with `add()`
when it sets up the flow's rule and removes it with `remove()`.
"""
from __future__ import annotations

import ipaddress
import itertools
import os
import shutil
import struct
from collections.abc import Mapping
from pathlib import Path

from testbed.fabric import switch_port
from testbed.fabric.bpf_maps import PinnedMap

SOURCE = Path(__file__).with_name('seg6_encap.c')
BUILD_DIR = switch_port.BUILD_DIR
MAP_NAME = 'flows'
# Bytes the carrier adds: an outer IPv6 header, and in mode `encap` an SRH of one segment.
OUTER_LEN = {'encap': 40 + 24, 'encap.red': 40}
# The egress filter's place on a host port; nothing else of ours filters it there.
TC_PREF = 10
TC_HANDLE = 1
_KEY = struct.Struct('!16s16sHH')      # seg6_encap.c struct flow_key
_PATH = struct.Struct('=16sI')         # struct flow_path
_instances = itertools.count()


class Seg6EncapError(RuntimeError):
    """The program could not be built, loaded or attached."""


def build(build_dir: Path = BUILD_DIR) -> Path:
    """The compiled object (build/bpf/seg6_encap-<hash>.o), built now only if never built."""
    try:
        return switch_port.build_plain(SOURCE, build_dir)
    except switch_port.SwitchPortError as err:
        raise Seg6EncapError(str(err)) from err


def flow_key(src: str | None, dst: str | None, sport: int | None,
             dport: int | None) -> bytes:
    """A `flows` key; None (the rule does not select on it) is zero, which matches any."""
    def addr(a: str | None) -> bytes:
        return ipaddress.IPv6Address(a).packed if a else bytes(16)
    return _KEY.pack(addr(src), addr(dst), sport or 0, dport or 0)


def flow_path(carrier: str, mode: str) -> bytes:
    if mode not in OUTER_LEN:
        raise Seg6EncapError('mode must be one of %s, not %r' % (tuple(OUTER_LEN), mode))
    return _PATH.pack(ipaddress.IPv6Address(carrier).packed, int(mode == 'encap'))


class Seg6Encap:
    """The program loaded, pinned and attached to the egress of `ports` (namespace path ->
    its host ports). close() detaches and unpins; idempotent."""

    def __init__(self, ports: Mapping[str, list[str]]) -> None:
        self.pin_dir = switch_port.BPFFS / ('%sencap-%d-%d' % (
            switch_port.PIN_PREFIX, os.getpid(), next(_instances)))
        self.ports = {netns: list(intfs) for netns, intfs in ports.items()}
        self._map: PinnedMap | None = None
        switch_port.ensure_bpffs()
        self.pin_dir.mkdir(mode=0o700)
        try:
            bpftool = switch_port.need_tool(switch_port.bpftool(), 'bpftool')
            switch_port.run_tool([bpftool, 'prog', 'load', str(build()),
                                  str(self.pin_dir / 'prog'), 'type', 'classifier',
                                  'pinmaps', str(self.pin_dir / 'maps')])
            self._map = PinnedMap(str(self.pin_dir / 'maps' / MAP_NAME))
            for netns, intfs in self.ports.items():
                switch_port.tc_batch(netns, [line for intf in intfs for line in (
                    'qdisc replace dev %s clsact' % intf,    # keeps the decap's filter
                    'filter add dev %s egress pref %d handle %d bpf da pinned %s' % (
                        intf, TC_PREF, TC_HANDLE, self.pin_dir / 'prog'))])
        except BaseException:
            self.close()
            raise

    def add(self, key: bytes, path: bytes) -> None:
        assert self._map is not None, 'closed'
        self._map.update(key, path)

    def remove(self, key: bytes) -> None:
        if self._map is not None:
            self._map.delete(key)

    def close(self) -> None:
        """Filters off every port still there (a host whose namespace is gone took its
        own), then the pins."""
        ports, self.ports = self.ports, {}
        for netns, intfs in ports.items():
            if os.path.exists(netns):
                switch_port.tc_batch(netns, [
                    'filter del dev %s egress pref %d handle %d bpf' % (intf, TC_PREF, TC_HANDLE)
                    for intf in intfs], force=True)
        if self._map is not None:
            self._map.close()
            self._map = None
        shutil.rmtree(self.pin_dir, ignore_errors=True)


def main() -> None:
    """`python -m testbed.kernel.seg6_encap`: build the object (scripts/setup.sh)."""
    print(build())


if __name__ == '__main__':
    main()
