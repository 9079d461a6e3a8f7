"""getsockopt(2) on a bare descriptor, into a caller's buffer: what Python's
socket objects cannot do for the kernel options this project reads (MPTCP's,
which take a request header in the buffer; and any option of an AF_XDP
socket, which Python refuses to wrap: it has no address to report)."""
from __future__ import annotations

import ctypes
import os

_libc = ctypes.CDLL(None, use_errno=True)


def getsockopt_into(fd: int, level: int, option: int, buf: ctypes.Array) -> int:
    """The option into `buf` (its initial bytes are what the kernel reads);
    returns the length the kernel wrote."""
    size = ctypes.c_uint32(ctypes.sizeof(buf))
    if _libc.getsockopt(fd, level, option, buf, ctypes.byref(size)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return size.value
