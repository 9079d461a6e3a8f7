"""Registered memory and reorder-free placement of arriving WRITE payloads.

Every MRC data packet carries a full RETH (rkey, remote offset of *this* packet's payload),
so the responder writes each payload into the registered region the moment it arrives, in
any order, with no reorder buffer [P1; 3P:expl]. Placement is bounds checked
before a single byte is copied: a packet aimed outside its region is refused whole.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(eq=False, slots=True)
class MemoryRegion:
    """A registered buffer that peers may WRITE into through `rkey`.

    Offsets in RETH are offsets into `buf` (the emulated region starts at 0; see
    docs/wire-format.md §4.3).
    """

    rkey: int
    buf: bytearray
    remote_write: bool = True

    def __post_init__(self) -> None:
        if not 0 <= self.rkey <= 0xFFFFFFFF:
            raise ValueError(f"rkey must be a u32, got {self.rkey}")
        if not isinstance(self.buf, bytearray):
            raise TypeError(f"a memory region wraps a bytearray, got {type(self.buf).__name__}")


class PlacementResult(enum.IntEnum):
    OK = 0
    UNKNOWN_RKEY = 1
    NO_WRITE_ACCESS = 2
    OUT_OF_BOUNDS = 3


_OK = PlacementResult.OK     # per packet: a module name, not an attribute of the enum class


class ReorderFreePlacement:
    """rkey -> region table of one endpoint (its protection domain), and the placement step."""

    def __init__(self) -> None:
        self._regions: dict[int, MemoryRegion] = {}

    def register(self, region: MemoryRegion) -> MemoryRegion:
        if region.rkey in self._regions:
            raise ValueError(f"rkey {region.rkey:#x} is already registered")
        self._regions[region.rkey] = region
        return region

    def region(self, rkey: int) -> MemoryRegion | None:
        return self._regions.get(rkey)

    def __contains__(self, rkey: int) -> bool:
        return rkey in self._regions

    def place(self, rkey: int, offset: int, payload: bytes) -> PlacementResult:
        """Copy `payload` to `offset` of region `rkey`, or refuse without touching memory."""
        region = self._regions.get(rkey)
        if region is None:
            return PlacementResult.UNKNOWN_RKEY
        if not region.remote_write:
            return PlacementResult.NO_WRITE_ACCESS
        end = offset + len(payload)
        if offset < 0 or end > len(region.buf):
            return PlacementResult.OUT_OF_BOUNDS
        region.buf[offset:end] = payload
        return _OK
