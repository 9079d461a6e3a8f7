"""Who decapsulates the carriers that reach a host port: everything that decides it lives here.

A host port's SID (`<block>:<host uSID>::/48`) is decapsulated into the host's local
table, as the MRC NIC does in hardware. Two ways, same behaviour (docs/host-decap.md):

- `kernel`: a seg6local End.DT6 route (testbed.fabric.host_plumbing), where the kernel
  has seg6local (CONFIG_IPV6_SEG6_LWTUNNEL): what every fabric used first;
- `ebpf`: host_decap.c on the port's tc clsact ingress, for kernels built without it.
  It is loaded by `tc` from the object file per port, unpinned: the program goes with the
  port, and so with the host's namespace, so a killed run leaves nothing of it.

`HOST_DECAP_MODES` are FabricNet's `decap=` choices; `auto` takes the kernel's where it
has seg6local, else eBPF. `kernel_seg6local()` finds out by trying. The kernel transports
follow the choice for their carriers (testbed.kernel.seg6_encap).
"""
from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

from testbed.fabric import switch_port

SOURCE = Path(__file__).with_name('host_decap.c')
BUILD_DIR = switch_port.BUILD_DIR
KERNEL, EBPF, AUTO = 'kernel', 'ebpf', 'auto'
HOST_DECAP_MODES = (AUTO, KERNEL, EBPF)
# The ingress filter's place; nothing else of ours filters a host port's ingress.
TC_PREF = 10
TC_HANDLE = 1
PROBE_TIMEOUT_S = 10.0


class HostDecapError(RuntimeError):
    """The decapsulation asked for cannot be set up here."""


def build(build_dir: Path = BUILD_DIR) -> Path:
    """The compiled object (build/bpf/host_decap-<hash>.o), built now only if this source
    and flags were never built."""
    try:
        return switch_port.build_plain(SOURCE, build_dir)
    except switch_port.SwitchPortError as err:
        raise HostDecapError(str(err)) from err


@cache
def kernel_seg6local() -> bool:
    """Whether this kernel installs a seg6local End.DT6 route, tried in a namespace of
    its own (the seg6 sysctls exist on kernels that lack seg6local, so they prove
    nothing)."""
    try:
        return subprocess.run(
            ['unshare', '--net', 'ip', '-6', 'route', 'add', 'fc00:0:1::/48', 'encap',
             'seg6local', 'action', 'End.DT6', 'table', '255', 'dev', 'lo'],
            capture_output=True, timeout=PROBE_TIMEOUT_S).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def choose(asked: str) -> str:
    """`kernel` or `ebpf` for a topology's `decap=` option."""
    if asked not in HOST_DECAP_MODES:
        raise HostDecapError('decap=%s: one of %s' % (asked, ', '.join(HOST_DECAP_MODES)))
    if asked == AUTO:
        return KERNEL if kernel_seg6local() else EBPF
    if asked == KERNEL and not kernel_seg6local():
        raise HostDecapError('decap=kernel: this kernel has no seg6local End.DT6 '
                             '(CONFIG_IPV6_SEG6_LWTUNNEL); decap=ebpf works without it')
    return asked


def attach_commands(intf: str, obj: Path) -> list[str]:
    """`tc -batch` lines that put the program on `intf`'s ingress (run in its namespace,
    which has no clsact qdisc of ours yet)."""
    return ['qdisc add dev %s clsact' % intf,
            'filter add dev %s ingress pref %d handle %d bpf da obj %s sec tc' % (
                intf, TC_PREF, TC_HANDLE, obj)]


def main() -> None:
    """`python -m testbed.fabric.host_decap`: build the object (scripts/setup.sh)."""
    print(build())


if __name__ == '__main__':
    main()
