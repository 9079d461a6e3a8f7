"""Read a pinned eBPF map from this process, through the bpf(2) syscall.

The switch ports' counters are read twice a second during a run, from the
same thread that drives the endpoints. `bpftool map dump` costs a process
and tens of milliseconds each time, a stall the endpoints would feel; here
a whole map is a few system calls (BPF_OBJ_GET, then GET_NEXT_KEY and
LOOKUP_ELEM per entry). Entries are written and deleted the same way (kernel
flows set up their carriers while a run goes on: testbed.kernel.seg6_encap).
No creation: the maps are the loaded programs'.
"""
from __future__ import annotations

import ctypes
import os
import platform
import struct
from collections.abc import Iterator

# bpf(2) syscall numbers (asm/unistd.h).
_NR_BPF = {'x86_64': 321, 'aarch64': 280, 'riscv64': 280, 'ppc64le': 361, 's390x': 351}
BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM, BPF_MAP_DELETE_ELEM = 1, 2, 3
BPF_MAP_GET_NEXT_KEY, BPF_OBJ_GET = 4, 7
BPF_OBJ_GET_INFO_BY_FD = 15
ATTR_SIZE = 128                     # room for every bpf_attr variant we use
# struct bpf_map_info up to name[16]: type, id, key_size, value_size,
# max_entries, map_flags, name.
_MAP_INFO = struct.Struct('=IIIIII16s')
_libc = ctypes.CDLL(None, use_errno=True)


class BpfError(OSError):
    """A bpf(2) call failed (errno and what was asked)."""


def bpf_syscall_number() -> int | None:
    """This machine's bpf(2) syscall number, None where we do not know it."""
    return _NR_BPF.get(platform.machine())


def _bpf(cmd: int, attr: bytes) -> int:
    number = bpf_syscall_number()
    if number is None:
        raise BpfError('no bpf syscall number known for %s' % platform.machine())
    buf = ctypes.create_string_buffer(attr, ATTR_SIZE)
    result = _libc.syscall(number, cmd, buf, ATTR_SIZE)
    if result < 0:
        err = ctypes.get_errno()
        raise BpfError(err, 'bpf(%d): %s' % (cmd, os.strerror(err)))
    return result


class PinnedMap:
    """A pinned map opened once; read it whole with `items()`."""

    def __init__(self, path: str) -> None:
        name = ctypes.create_string_buffer(os.fsencode(path))
        self._keep = name                     # the kernel reads it during the call
        self.fd = _bpf(BPF_OBJ_GET, struct.pack('=QIIi', ctypes.addressof(name),
                                                0, 0, 0))
        info = ctypes.create_string_buffer(_MAP_INFO.size)
        _bpf(BPF_OBJ_GET_INFO_BY_FD, struct.pack(
            '=IIQ', self.fd, _MAP_INFO.size, ctypes.addressof(info)))
        _, _, self.key_size, self.value_size, *_ = _MAP_INFO.unpack(info.raw)

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, value), as raw bytes in the map's own layout."""
        key = ctypes.create_string_buffer(self.key_size)
        value = ctypes.create_string_buffer(self.value_size)
        nxt = ctypes.create_string_buffer(self.key_size)
        first = True
        while True:
            try:
                _bpf(BPF_MAP_GET_NEXT_KEY, struct.pack(
                    '=I4xQQ', self.fd, 0 if first else ctypes.addressof(key),
                    ctypes.addressof(nxt)))
            except BpfError as err:
                if err.errno == 2:            # ENOENT: past the last key
                    return
                raise
            first = False
            ctypes.memmove(key, nxt, self.key_size)
            try:
                _bpf(BPF_MAP_LOOKUP_ELEM, struct.pack(
                    '=I4xQQQ', self.fd, ctypes.addressof(key),
                    ctypes.addressof(value), 0))
            except BpfError as err:
                if err.errno == 2:            # deleted meanwhile
                    continue
                raise
            yield key.raw, value.raw

    def update(self, key: bytes, value: bytes) -> None:
        """Write one entry (made or replaced)."""
        k, v = self._buffer(key, self.key_size), self._buffer(value, self.value_size)
        _bpf(BPF_MAP_UPDATE_ELEM, struct.pack('=I4xQQQ', self.fd, ctypes.addressof(k),
                                              ctypes.addressof(v), 0))

    def delete(self, key: bytes) -> bool:
        """Remove one entry; False if there was none."""
        k = self._buffer(key, self.key_size)
        try:
            _bpf(BPF_MAP_DELETE_ELEM, struct.pack('=I4xQ', self.fd, ctypes.addressof(k)))
        except BpfError as err:
            if err.errno == 2:                # ENOENT
                return False
            raise
        return True

    @staticmethod
    def _buffer(raw: bytes, size: int) -> ctypes.Array:
        if len(raw) != size:
            raise ValueError('%d bytes where the map has %d' % (len(raw), size))
        return ctypes.create_string_buffer(raw, size)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> PinnedMap:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
