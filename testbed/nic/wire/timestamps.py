"""The u32 microsecond TX timestamps of TSETH and their echoes.

Everything that turns a clock reading into a wire timestamp, or two wire timestamps into
a duration, lives here: the field is 32 bits of microseconds, so it wraps every
~71.6 minutes and every subtraction must go round the wrap.
"""

from __future__ import annotations

TIMESTAMP_MASK = 0xFFFFFFFF


def timestamp_us(monotonic_ns: int) -> int:
    """The u32 microsecond TX timestamp for a clock reading in nanoseconds."""
    return (monotonic_ns // 1000) & TIMESTAMP_MASK


def timestamp_elapsed_us(now: int, then: int) -> int:
    """Microseconds from ``then`` to ``now``, across one u32 wrap."""
    return (now - then) & TIMESTAMP_MASK
