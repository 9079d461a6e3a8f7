"""24-bit PSN arithmetic.

Everything that compares or advances packet sequence numbers lives here: PSNs wrap at
2**24, so "before" and "after" are the shortest way round the ring, never a plain
integer comparison.
"""

from __future__ import annotations

PSN_BITS = 24
PSN_SPACE = 1 << PSN_BITS
PSN_MASK = PSN_SPACE - 1
_PSN_HALF = PSN_SPACE >> 1


def psn_add(psn: int, delta: int) -> int:
    return (psn + delta) & PSN_MASK


def psn_diff(a: int, b: int) -> int:
    """a - b as a signed distance in [-2**23, 2**23): the shortest way round the PSN ring."""
    d = (a - b) & PSN_MASK
    return d - PSN_SPACE if d >= _PSN_HALF else d


def psn_lt(a: int, b: int) -> bool:
    return psn_diff(a, b) < 0


def psn_le(a: int, b: int) -> bool:
    return psn_diff(a, b) <= 0
