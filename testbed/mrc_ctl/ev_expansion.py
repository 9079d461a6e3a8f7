"""EV expansion: compact entropy value -> wire EV, bit-exact with the OCP reference sample.

Sources (github.com/opencomputeproject/OCP-Multipath-Reliable-Connection):

- ``examples/ev_expansion/ev_expansion.c`` -- the reference algorithm and ``check_profs()``;
- ``mrc_ctl.h`` -- ``struct mrc_ctl_ev_field`` and the expansion steps documented on
  ``struct mrc_ctl_ev_profile_attr``.

Expansion, per EV profile field ``i`` in order:

1. ``value = init_val``.
2. If ``mask != 0``: read ``n = popcount(mask)`` bits from the compact EV at the read cursor,
   most significant first, giving an n-bit number ``x``; scatter ``x`` into the set mask bits,
   the lowest set mask bit receiving the lowest bit of ``x``; advance the cursor by ``n``.
3. Append ``value`` right-aligned in format field ``i``'s width.

Format fields beyond the profile's field count stay zero, compact bits beyond the read cursor
must be zero, and the result is a 32-byte buffer (``MRC_CTL_EV_MAX_BYTES``).

Where this module deliberately departs from the literal C text:

- The compact EV is a **big-endian bit string**: bit 0 is the MSB of byte 0, as the C reader
  (``ev_extract_bits``) treats it. The sample's generators write their EVs with host-endian
  ``uint16_t``/``uint32_t`` stores, so on x86 the nibble order they meant differs from what
  is expanded; golden vectors therefore hold the raw bytes the C program expands.
- ``apply_mask_to_value`` short-cuts a full mask with ``(1 << width) - 1``, undefined in C for
  ``width == 32``. Either outcome returns ``x`` for a full mask, so we always scatter.
- ``pack_value_into_ev`` evaluates ``1 << (width - 1 - bit)``, undefined for format fields
  wider than 32 bits. We zero-fill the upper bits, as ``mrc_ctl.h`` prescribes ("the extra
  bits are left zero-filled"). For format fields of at most 32 bits the results are identical.
- A profile field wider than its format field is not refused by ``check_profs()``; the C
  packer keeps the low format-width bits and so do we.
- ``check_profs()`` asserts; here it raises :class:`ProfileError` naming the field.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Sequence

EV_MAX_BYTES = 32
EV_MAX_BITS = EV_MAX_BYTES * 8
FIELD_MAX_WIDTH = 32
_UINT32_MAX = (1 << 32) - 1


class ProfileError(ValueError):
    """A refused profile or EV operation.

    ``field`` names what was wrong, ``problem`` says why, ``code`` is the errno value the
    MRC control API would return (EINVAL, EBUSY, E2BIG, ENOENT). ``needed`` carries the
    required array size for E2BIG answers to queries.
    """

    def __init__(
        self, field: str, problem: str, code: int = errno.EINVAL, *, needed: int | None = None
    ) -> None:
        self.field = field
        self.problem = problem
        self.code = code
        self.needed = needed
        super().__init__(f"{field}: {problem} [{self.code_name}]")

    @property
    def code_name(self) -> str:
        return errno.errorcode.get(self.code, str(self.code))


def low_mask(nbits: int) -> int:
    """All-ones value of ``nbits`` bits."""
    return (1 << nbits) - 1


def popcount(value: int) -> int:
    return bin(value).count("1")


def scatter_bits(base: int, bits: int, mask: int) -> int:
    """Overlay ``bits`` onto ``base`` at the set positions of ``mask``, lowest first."""
    result = base & ~mask
    source_bit = 0
    remaining = mask
    while remaining:
        lowest = remaining & -remaining
        if (bits >> source_bit) & 1:
            result |= lowest
        source_bit += 1
        remaining ^= lowest
    return result


def gather_bits(value: int, mask: int) -> int:
    """Inverse of :func:`scatter_bits`: collect the bits of ``value`` under ``mask``."""
    result = 0
    target_bit = 0
    remaining = mask
    while remaining:
        lowest = remaining & -remaining
        if value & lowest:
            result |= 1 << target_bit
        target_bit += 1
        remaining ^= lowest
    return result


@dataclass(frozen=True)
class EvField:
    """One EV profile field (``struct mrc_ctl_ev_field``).

    A fixed part has ``init_val`` = the value and ``min_val = max_val = mask = 0``.
    """

    width: int
    init_val: int = 0
    min_val: int = 0
    max_val: int = 0
    mask: int = 0

    def __post_init__(self) -> None:
        for name in ("width", "init_val", "min_val", "max_val", "mask"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ProfileError(f"EvField.{name}", f"{value!r} is not an integer")
            if not 0 <= value <= _UINT32_MAX:
                raise ProfileError(f"EvField.{name}", f"{value:#x} is not a uint32")

    @classmethod
    def fixed(cls, width: int, value: int) -> EvField:
        return cls(width=width, init_val=value)

    @property
    def ev_bits(self) -> int:
        """Number of compact-EV bits this field consumes."""
        return popcount(self.mask)


def check_profs(fmt_widths: Sequence[int], fields: Sequence[EvField]) -> None:
    """``check_profs()`` of ev_expansion.c; raises :class:`ProfileError` (EINVAL)."""
    if len(fields) > len(fmt_widths):
        raise ProfileError(
            "fields", f"{len(fields)} fields but the format profile has {len(fmt_widths)}"
        )
    field_total = sum(field.width for field in fields)
    fmt_total = sum(fmt_widths)
    if field_total > fmt_total:
        raise ProfileError(
            "fields", f"total width {field_total} exceeds the format's total width {fmt_total}"
        )
    for index, field in enumerate(fields):
        _check_field(index, field)


def _check_field(index: int, field: EvField) -> None:
    name = f"fields[{index}]"
    if field.width > FIELD_MAX_WIDTH:
        raise ProfileError(f"{name}.width", f"{field.width} exceeds {FIELD_MAX_WIDTH} bits")
    width_limit = low_mask(field.width)
    if field.init_val > width_limit:
        raise ProfileError(
            f"{name}.init_val", f"{field.init_val:#x} is wider than {field.width} bits"
        )
    if field.mask & ~width_limit:
        raise ProfileError(
            f"{name}.mask", f"{field.mask:#x} has bits outside the {field.width}-bit field"
        )
    # The C sample only bounds max_val when the field takes EV bits.
    if field.mask and field.max_val > low_mask(field.ev_bits):
        raise ProfileError(
            f"{name}.max_val",
            f"{field.max_val:#x} does not fit in the {field.ev_bits} mask bits",
        )


def check_fmt_widths(fmt_widths: Sequence[int]) -> None:
    """Format widths must be non-negative and fit the 32-byte EV buffer."""
    for index, width in enumerate(fmt_widths):
        if isinstance(width, bool) or not isinstance(width, int) or width < 0:
            raise ProfileError(f"fmt_widths[{index}]", f"{width!r} is not a bit width")
    total = sum(fmt_widths)
    if total > EV_MAX_BITS:
        raise ProfileError(
            "fmt_widths", f"total width {total} exceeds {EV_MAX_BITS} bits", errno.E2BIG
        )


def compact_to_int(compact: bytes) -> int:
    """The compact EV as a 256-bit integer, byte 0 most significant."""
    if len(compact) > EV_MAX_BYTES:
        raise ProfileError("ev", f"{len(compact)} bytes exceed {EV_MAX_BYTES}")
    return int.from_bytes(bytes(compact).ljust(EV_MAX_BYTES, b"\0"), "big")


def int_to_ev_bytes(value: int) -> bytes:
    return value.to_bytes(EV_MAX_BYTES, "big")


def compact_from_bits(value: int, nbits: int) -> bytes:
    """Place an ``nbits``-wide number at the start of a 32-byte compact EV."""
    if not 0 <= nbits <= EV_MAX_BITS:
        raise ProfileError("ev", f"{nbits} bits do not fit {EV_MAX_BITS}")
    if not 0 <= value <= low_mask(nbits):
        raise ProfileError("ev", f"{value:#x} is wider than {nbits} bits")
    return int_to_ev_bytes(value << (EV_MAX_BITS - nbits))


def compact_bits(compact: bytes, nbits: int) -> int:
    """The first ``nbits`` bits of a compact EV as a number."""
    return compact_to_int(compact) >> (EV_MAX_BITS - nbits)


def _read_bits(buffer: int, offset: int, nbits: int) -> int:
    """``nbits`` bits at bit ``offset`` (from the MSB) of a 256-bit EV buffer."""
    return (buffer >> (EV_MAX_BITS - offset - nbits)) & low_mask(nbits)


@dataclass(frozen=True)
class Expander:
    """A validated (format widths, profile fields) pair that expands compact EVs."""

    fmt_widths: tuple[int, ...]
    fields: tuple[EvField, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "fmt_widths", tuple(self.fmt_widths))
        object.__setattr__(self, "fields", tuple(self.fields))
        check_fmt_widths(self.fmt_widths)
        check_profs(self.fmt_widths, self.fields)

    @property
    def compact_width(self) -> int:
        """Bits of the compact EV consumed by the profile."""
        return sum(field.ev_bits for field in self.fields)

    @property
    def expanded_width(self) -> int:
        return sum(self.fmt_widths)

    @property
    def masked_fields(self) -> tuple[EvField, ...]:
        return tuple(field for field in self.fields if field.mask)

    def check_compact(self, compact: bytes) -> int:
        """Return the compact EV as an integer; refuse bits beyond the profile's width."""
        value = compact_to_int(compact)
        if value & low_mask(EV_MAX_BITS - self.compact_width):
            raise ProfileError(
                "ev", f"bits set beyond the {self.compact_width} bits the profile consumes"
            )
        return value

    def field_values(self, compact: bytes) -> tuple[int, ...]:
        """The expanded value of every profile field (the C sample's ``fldN=``)."""
        source = self.check_compact(compact)
        cursor = 0
        values = []
        for field in self.fields:
            value = field.init_val
            if field.mask:
                taken = _read_bits(source, cursor, field.ev_bits)
                value = scatter_bits(value, taken, field.mask)
                cursor += field.ev_bits
            values.append(value)
        return tuple(values)

    def expand_int(self, compact: bytes) -> int:
        """The expanded EV as a number ``expanded_width`` bits wide."""
        return self._pack(self.field_values(compact)) >> (EV_MAX_BITS - self.expanded_width)

    def expand(self, compact: bytes) -> bytes:
        """The expanded EV in a 32-byte buffer, as the C sample's ``exp_ev``."""
        return int_to_ev_bytes(self._pack(self.field_values(compact)))

    def _pack(self, values: Sequence[int]) -> int:
        packed = 0
        cursor = 0
        for value, width in zip(values, self.fmt_widths):
            # Narrow format field keeps the low bits, as the C packer does.
            packed |= (value & low_mask(width)) << (EV_MAX_BITS - cursor - width)
            cursor += width
        return packed

    def compact_from_field_values(self, values: Sequence[int]) -> bytes:
        """Compact EV whose masked fields expand to ``values`` (one per masked field).

        Each value is a full field value; its bits outside the mask must equal the field's
        ``init_val`` since expansion cannot change them.
        """
        masked = self.masked_fields
        if len(values) != len(masked):
            raise ProfileError(
                "values", f"{len(values)} values for {len(masked)} fields that take EV bits"
            )
        chunks = []
        for index, (value, field) in enumerate(zip(values, masked)):
            if not 0 <= value <= low_mask(field.width):
                raise ProfileError(
                    f"values[{index}]", f"{value:#x} is wider than {field.width} bits"
                )
            if (value ^ field.init_val) & ~field.mask & low_mask(field.width):
                raise ProfileError(
                    f"values[{index}]",
                    f"{value:#x} differs from init_val {field.init_val:#x} "
                    f"outside mask {field.mask:#x}",
                )
            chunks.append(gather_bits(value, field.mask))
        return self.compact_from_field_bits(chunks)

    def compact_from_field_bits(self, bits: Sequence[int]) -> bytes:
        return compact_from_field_bits(self.fields, bits)

    def compress(self, expanded: bytes) -> bytes:
        """Inverse of :meth:`expand`: recover the compact EV from a wire EV.

        Refuses (EINVAL) a wire EV that no compact EV expands to, e.g. one whose fixed
        bits differ from the profile's ``init_val`` values.
        """
        wire = compact_to_int(expanded)
        packed = 0
        cursor = 0
        for field, width in zip(self.fields, self.fmt_widths):
            value = _read_bits(wire, cursor, width)
            if field.mask:
                packed = (packed << field.ev_bits) | gather_bits(value, field.mask)
            cursor += width
        compact = compact_from_bits(packed, self.compact_width)
        if self.expand(compact) != int_to_ev_bytes(wire):
            raise ProfileError("ev", "wire EV is not an expansion under this profile")
        return compact


def compact_from_field_bits(fields: Sequence[EvField], bits: Sequence[int]) -> bytes:
    """Concatenate per-field EV bits (one number per field with a mask), MSB first."""
    masked = [field for field in fields if field.mask]
    if len(bits) != len(masked):
        raise ProfileError(
            "bits", f"{len(bits)} values for {len(masked)} fields that take EV bits"
        )
    packed = 0
    for index, (chunk, field) in enumerate(zip(bits, masked)):
        if not 0 <= chunk <= low_mask(field.ev_bits):
            raise ProfileError(f"bits[{index}]", f"{chunk:#x} is wider than {field.ev_bits} bits")
        packed = (packed << field.ev_bits) | chunk
    return compact_from_bits(packed, sum(field.ev_bits for field in masked))


def expand(compact: bytes, fmt_widths: Sequence[int], fields: Sequence[EvField]) -> bytes:
    """One-shot expansion (validates the profile every call; build an Expander to reuse)."""
    return Expander(tuple(fmt_widths), tuple(fields)).expand(compact)
