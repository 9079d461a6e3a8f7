"""A thread of this process named as Open vSwitch names its PMD threads, for tests that
let this process stand in for ovs-vswitchd."""
from __future__ import annotations

import ctypes
import threading
from collections.abc import Iterator
from contextlib import contextmanager

PR_SET_NAME = 15                # prctl(2): what OVS does to name its threads


@contextmanager
def pmd_thread(name: bytes = b'pmd-c00/id:9') -> Iterator[int]:
    """A sleeping thread named `name` for the `with`; yields its thread id."""
    named, stop = threading.Event(), threading.Event()

    def sleep_named() -> None:
        ctypes.CDLL(None).prctl(PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0)
        named.set()
        stop.wait()
    thread = threading.Thread(target=sleep_named)
    thread.start()
    try:
        named.wait()
        yield thread.native_id
    finally:
        stop.set()
        thread.join()
