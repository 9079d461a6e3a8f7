"""The ICRC's CRC-32 (testbed/nic/wire/icrc.py): whichever implementation computes it, the
values are zlib's, the wire format's definition (docs/wire-format.md)."""

from __future__ import annotations

import random
import zlib

from testbed.nic.wire import icrc


def test_the_fast_crc_is_in_use_where_isal_is_installed() -> None:
    # isal is a dependency (requirements.txt): the slower fallback is for platforms
    # without its wheel, not for the test machine.
    assert icrc.crc32.__module__.startswith("isal")


def test_values_and_chaining_are_zlibs() -> None:
    rng = random.Random(7)
    for size in (0, 1, 3, 40, 1368, 1400, 3368, 9000):
        data = rng.randbytes(size)
        assert icrc.crc32(data) == zlib.crc32(data)
        head, tail = data[: size // 3], data[size // 3:]
        assert icrc.crc32(tail, icrc.crc32(head)) == zlib.crc32(data)
        assert icrc.crc32(memoryview(data)[1:]) == zlib.crc32(data[1:])
