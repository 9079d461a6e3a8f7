"""The CRC-32 of the ICRC: one function, `crc32(data, value=0)`, for every MRC packet sent and
received (encode, decode, trims).

The ICRC is zlib's CRC-32 (docs/wire-format.md); the values never depend on which
implementation computes them. Intel ISA-L's, from the `isal` package, uses carry-less
multiplication: measured on this project's machine (x86_64, Python 3.11) on 1,400 bytes,
0.075 us a call against zlib's 0.30 us. Every data packet is summed twice, once by each end,
so that is about a tenth of the endpoint core's work per packet (bench endpoint_core). Where
`isal` is not installed (it is a dependency; a platform without its wheel), zlib's serves.
"""

from __future__ import annotations

try:
    from isal.isal_zlib import crc32
except ImportError:                     # pragma: no cover - the same values, slower
    from zlib import crc32

__all__ = ["crc32"]
