"""The SACK bitmap: which PSNs beyond the cumulative ACK a receiver holds.

Everything that turns a set of received PSNs into SETH's 64-bit bitmap, or a bitmap back
into received PSNs and holes, lives here. Bit i stands for PSN
cack_psn + sack_offset + i.
"""

from __future__ import annotations

from collections.abc import Iterable

from testbed.nic.wire.layout import SACK_BITMAP_BITS
from testbed.nic.wire.psn import PSN_MASK, psn_add, psn_lt


def sack_bitmap(cack_psn: int, received: Iterable[int], sack_offset: int = 1) -> int:
    """Bitmap of ``received`` PSNs: bit i stands for PSN cack_psn + sack_offset + i.

    PSNs outside the 64-PSN window (including those at or before cack_psn) are
    ignored, so the receiver can pass its whole out-of-order set.
    """
    base = psn_add(cack_psn, sack_offset)
    bitmap = 0
    for psn in received:
        i = (psn - base) & PSN_MASK
        if i < SACK_BITMAP_BITS:
            bitmap |= 1 << i
    return bitmap


def sack_received_psns(cack_psn: int, sack_offset: int, bitmap: int) -> list[int]:
    """PSNs beyond cack_psn that the bitmap reports as received, oldest first."""
    base = psn_add(cack_psn, sack_offset)
    psns = []
    for i in range(bitmap.bit_length()):
        psn = psn_add(base, i)
        if bitmap >> i & 1 and psn_lt(cack_psn, psn):
            psns.append(psn)
    return psns


def sack_holes(cack_psn: int, sack_offset: int, bitmap: int) -> list[int]:
    """PSNs the SACK proves missing, oldest first.

    cack_psn + 1 is missing by definition of the cumulative PSN; beyond it, only
    zero bits below the highest set bit are holes. With sack_offset > 1 the PSNs
    between cack_psn + 2 and the bitmap base are unreported, not missing, so they
    are left to the retransmission timer rather than resent on a guess.
    """
    if not bitmap:
        return []
    base = psn_add(cack_psn, sack_offset)
    holes = [psn_add(cack_psn, 1)] if sack_offset > 1 else []
    for i in range(bitmap.bit_length() - 1):
        psn = psn_add(base, i)
        if not bitmap >> i & 1 and psn_lt(cack_psn, psn):
            holes.append(psn)
    return holes
