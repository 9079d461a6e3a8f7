"""Each wait for a CPU of the threads that carry a trial's packets, as a histogram.

The health gate asks whether the scheduler, not the fabric, set the packets' timing. The
kernel's schedstat answers only with a sum: it cannot tell many microsecond wake-up
latencies (harmless next to a base RTT of milliseconds) from a few waits of a whole
scheduler slice. `run_queue_waits.c` (an eBPF program on the scheduler's raw tracepoints)
histograms every wait of the threads named here; this module builds it (clang, as the
switch-port program), loads and attaches it through libbpf for as long as a trial runs,
and reads it. The program is attached through file descriptors this process holds, never
pinned: whatever way the process ends, the kernel detaches it.
"""
from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from testbed.fabric import switch_port

SOURCE = Path(__file__).with_name('run_queue_waits.c')
BUILD_DIR = switch_port.BUILD_DIR      # build/bpf/, beside the switch-port program
GROUPS = 4                      # run_queue_waits.c: GROUPS
BUCKETS = 32                    # ... BUCKETS: bucket b holds waits of [2^b, 2^(b+1)) us
_HISTOGRAM = struct.Struct('=%dQ' % (2 * BUCKETS))


class RunQueueWaitsError(RuntimeError):
    """The program could not be built, loaded or attached here (and why)."""


@dataclass(frozen=True)
class WaitHistogram:
    """Waits by log2 bucket of microseconds: `count[b]` waits, `sum_ns[b]` their length."""
    count: tuple[int, ...] = (0,) * BUCKETS
    sum_ns: tuple[int, ...] = (0,) * BUCKETS

    def __sub__(self, earlier: 'WaitHistogram') -> 'WaitHistogram':
        return WaitHistogram(tuple(a - b for a, b in zip(self.count, earlier.count)),
                             tuple(a - b for a, b in zip(self.sum_ns, earlier.sum_ns)))

    def total_ns(self) -> int:
        return sum(self.sum_ns)

    def at_least_ns(self, wait_s: float) -> int:
        """Time spent in waits of `wait_s` or longer, counting the whole bucket that holds
        `wait_s` (so it may count waits down to half of it: never fewer)."""
        first = bucket_of(wait_s)
        return sum(self.sum_ns[first:])

    def longest_s(self) -> float:
        """An upper bound of the longest wait: the top of the highest bucket used."""
        used = [b for b, n in enumerate(self.count) if n]
        return (2 ** (used[-1] + 1)) / 1e6 if used else 0.0


def bucket_of(wait_s: float) -> int:
    """The bucket a wait of `wait_s` falls in (run_queue_waits.c: bucket())."""
    us = int(wait_s * 1e6)
    return min(max(us, 1).bit_length() - 1, BUCKETS - 1)


def build(build_dir: Path = BUILD_DIR) -> Path:
    """The compiled object (build/bpf/run_queue_waits-<hash>.o), built now only if this
    source and flags were never built."""
    try:
        return switch_port.build_plain(SOURCE, build_dir)
    except switch_port.SwitchPortError as err:
        raise RunQueueWaitsError(str(err)) from err


def _libbpf() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL('libbpf.so.1', use_errno=True)
    except OSError as err:
        raise RunQueueWaitsError('no libbpf.so.1: install libbpf1 (scripts/setup.sh)') from err
    ptr, c_int = ctypes.c_void_p, ctypes.c_int
    for name, restype, argtypes in (
            ('bpf_object__open_file', ptr, [ctypes.c_char_p, ptr]),
            ('bpf_object__load', c_int, [ptr]),
            ('bpf_object__close', None, [ptr]),
            ('bpf_object__find_map_fd_by_name', c_int, [ptr, ctypes.c_char_p]),
            ('bpf_object__next_program', ptr, [ptr, ptr]),
            ('bpf_program__attach', ptr, [ptr]),
            ('bpf_program__fd', c_int, [ptr]),
            ('bpf_obj_get_info_by_fd', c_int, [c_int, ptr, ctypes.POINTER(ctypes.c_uint32)]),
            ('bpf_link__destroy', c_int, [ptr]),
            ('bpf_map_update_elem', c_int, [c_int, ptr, ptr, ctypes.c_uint64]),
            ('bpf_map_lookup_elem', c_int, [c_int, ptr, ptr]),
            ('libbpf_set_print', ptr, [ptr])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    lib.libbpf_set_print(None)          # its warnings would land in the run's output
    return lib


def _failed(what: str) -> RunQueueWaitsError:
    err = ctypes.get_errno()
    return RunQueueWaitsError('%s: %s' % (what, os.strerror(err) if err else 'failed'))


class RunQueueWaits:
    """The program attached, watching `groups` (group name -> thread ids, at most GROUPS
    names); `read()` gives each group's histogram so far. Close it (or use `with`)."""

    def __init__(self, groups: Mapping[str, list[int]]) -> None:
        if len(groups) > GROUPS:
            raise ValueError('at most %d groups' % GROUPS)
        self.names = list(groups)
        self._lib = _libbpf()
        obj = build()
        self._obj = self._lib.bpf_object__open_file(os.fsencode(obj), None)
        if not self._obj:
            raise _failed('opening %s' % obj)
        self._links: list[int] = []
        self.program_ids: list[int] = []     # the kernel's ids of the programs attached
        try:
            if self._lib.bpf_object__load(self._obj) != 0:
                raise _failed('loading the run-queue wait program')
            self._watch(groups)
            self._attach()
        except BaseException:
            self.close()
            raise

    def _watch(self, groups: Mapping[str, list[int]]) -> None:
        fd = self._lib.bpf_object__find_map_fd_by_name(self._obj, b'watched')
        for group, tids in enumerate(groups.values()):
            value = ctypes.c_uint32(group)
            for tid in tids:
                key = ctypes.c_uint32(tid)
                if self._lib.bpf_map_update_elem(fd, ctypes.byref(key),
                                                 ctypes.byref(value), 0) != 0:
                    raise _failed('watching thread %d' % tid)
        self._waits_fd = self._lib.bpf_object__find_map_fd_by_name(self._obj, b'waits')

    def _attach(self) -> None:
        prog = self._lib.bpf_object__next_program(self._obj, None)
        while prog:
            link = self._lib.bpf_program__attach(prog)
            if not link:
                raise _failed('attaching to the scheduler tracepoints')
            self._links.append(link)
            self.program_ids.append(self._program_id(prog))
            prog = self._lib.bpf_object__next_program(self._obj, prog)

    def _program_id(self, prog: int) -> int:
        info = ctypes.create_string_buffer(8)       # struct bpf_prog_info: type, id
        size = ctypes.c_uint32(len(info))
        if self._lib.bpf_obj_get_info_by_fd(self._lib.bpf_program__fd(prog), info,
                                            ctypes.byref(size)) != 0:
            raise _failed('reading a program id')
        return struct.unpack('=II', info.raw)[1]

    def read(self) -> dict[str, WaitHistogram]:
        found = {}
        raw = ctypes.create_string_buffer(_HISTOGRAM.size)
        for group, name in enumerate(self.names):
            key = ctypes.c_uint32(group)
            if self._lib.bpf_map_lookup_elem(self._waits_fd, ctypes.byref(key), raw) != 0:
                raise _failed('reading the waits of %s' % name)
            values = _HISTOGRAM.unpack(raw.raw)
            found[name] = WaitHistogram(values[:BUCKETS], values[BUCKETS:])
        return found

    def close(self) -> None:
        for link in self._links:
            self._lib.bpf_link__destroy(link)
        self._links = []
        if self._obj:
            self._lib.bpf_object__close(self._obj)
            self._obj = None

    def __enter__(self) -> 'RunQueueWaits':
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def status() -> tuple[bool, str]:
    """Whether the program builds, loads and attaches here (attached for a moment to this
    thread), and what stopped it if not."""
    try:
        with RunQueueWaits({'doctor': [os.getpid()]}):
            pass
    except (RunQueueWaitsError, OSError) as err:
        return False, str(err)
    return True, 'eBPF on the scheduler tracepoints: each wait for a CPU, %s' % build().name


if __name__ == '__main__':          # scripts/setup.sh builds it once
    print(build())
