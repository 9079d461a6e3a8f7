"""Enter a Mininet host's (unnamed) network namespace from this thread.

Sockets and netlink handles keep the namespace they were created in, so one
process can plumb and probe every host without forking a helper per host.
"""
from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, 'setns: ' + os.strerror(err))


@contextmanager
def inside(pid: int) -> Iterator[None]:
    """Run the body in the network namespace of process `pid`."""
    home = os.open('/proc/thread-self/ns/net', os.O_RDONLY)
    target = os.open('/proc/%d/ns/net' % pid, os.O_RDONLY)
    try:
        _setns(target)
        try:
            yield
        finally:
            _setns(home)
    finally:
        os.close(target)
        os.close(home)


def write_sysctl(name: str, value: str | int) -> None:
    """Write a sysctl of the current thread's network namespace."""
    with open('/proc/sys/' + name.replace('.', '/'), 'w') as f:
        f.write(str(value))
