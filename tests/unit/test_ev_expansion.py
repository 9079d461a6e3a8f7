"""EV expansion: golden vectors from the OCP reference sample, check_profs rules, properties.

Golden vectors come from compiling ``examples/ev_expansion/ev_expansion.c`` of
github.com/opencomputeproject/OCP-Multipath-Reliable-Connection (glibc, x86-64, the program's
own ``srandom(0)``) and recording, per scenario, the raw compact EV bytes the program expands,
its printed field values (``fldN=``) and its 32-byte expanded EV. Hex strings omit trailing
zero bytes. The differential vectors are the same C expansion run on random profiles (odd
masks, 32-bit masks, zero-width fields, format fields wider and narrower than profile fields).
"""

from __future__ import annotations

import errno
import ipaddress
from dataclasses import dataclass

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from testbed.mrc_ctl.ev_expansion import (
    EV_MAX_BITS,
    EvField,
    Expander,
    ProfileError,
    check_profs,
    compact_from_bits,
    compact_to_int,
    expand,
    gather_bits,
    low_mask,
    popcount,
    scatter_bits,
)

RawField = tuple[int, int, int, int, int]  # width, init_val, min_val, max_val, mask


@dataclass(frozen=True)
class GoldenScenario:
    name: str
    fmt_widths: tuple[int, ...]
    fields: tuple[RawField, ...]
    vectors: tuple[tuple[str, tuple[int, ...], str], ...]  # compact, field values, expanded


def ev_bytes(hex_text: str) -> bytes:
    return bytes.fromhex(hex_text).ljust(32, b"\0")


def make_fields(raw: tuple[RawField, ...]) -> tuple[EvField, ...]:
    return tuple(EvField(*values) for values in raw)


# Scenarios in the order main() runs them after srandom(0).
C_SCENARIOS = (
    GoldenScenario(
        name='Structured EV Explicit',
        fmt_widths=(16, 16),
        fields=((16, 0x0, 0x0, 0x0, 0xffff), (16, 0x0, 0x0, 0x0, 0xffff),),
        vectors=(
            ('f3b04256', (0xf3b0, 0x4256), 'f3b04256'),
            ('a6fca7ae', (0xa6fc, 0xa7ae), 'a6fca7ae'),
            ('03514976', (0x351, 0x4976), '03514976'),
            ('33bf42bb', (0x33bf, 0x42bb), '33bf42bb'),
            ('b842b6c3', (0xb842, 0xb6c3), 'b842b6c3'),
            ('d6952b28', (0xd695, 0x2b28), 'd6952b28'),
            ('a470b360', (0xa470, 0xb360), 'a470b360'),
            ('c7238d56', (0xc723, 0x8d56), 'c7238d56'),
        ),
    ),
    GoldenScenario(
        name='Structured EV Generated 1',
        fmt_widths=(16, 16),
        fields=((16, 0x0, 0x0, 0x0, 0xffff), (16, 0x0, 0x0, 0x0, 0xffff),),
        vectors=(
            ('dc5193be', (0xdc51, 0x93be), 'dc5193be'),
            ('751aaa75', (0x751a, 0xaa75), '751aaa75'),
            ('32250009', (0x3225, 0x9), '32250009'),
            ('78df7daa', (0x78df, 0x7daa), '78df7daa'),
            ('8523ad58', (0x8523, 0xad58), '8523ad58'),
            ('cc095180', (0xcc09, 0x5180), 'cc095180'),
            ('11428ff3', (0x1142, 0x8ff3), '11428ff3'),
            ('72060373', (0x7206, 0x373), '72060373'),
        ),
    ),
    GoldenScenario(
        name='Structured EV Generated 2',
        fmt_widths=(32,),
        fields=((32, 0x0, 0x0, 0x0, 0xffffffff),),
        vectors=(
            ('67fb6a4e', (0x67fb6a4e,), '67fb6a4e'),
            ('335de425', (0x335de425,), '335de425'),
            ('0e509b51', (0xe509b51,), '0e509b51'),
            ('b8d71b43', (0xb8d71b43,), 'b8d71b43'),
            ('32ba2d3f', (0x32ba2d3f,), '32ba2d3f'),
            ('59e4837c', (0x59e4837c,), '59e4837c'),
            ('a4307125', (0xa4307125,), 'a4307125'),
            ('5bd9bb62', (0x5bd9bb62,), '5bd9bb62'),
        ),
    ),
    GoldenScenario(
        name='Structured EV Generated w/ Fixed',
        fmt_widths=(16, 16),
        fields=((16, 0x100, 0x1, 0xf, 0xf), (16, 0x200, 0x1, 0xf, 0xf),),
        vectors=(
            ('a4', (0x10a, 0x204), '010a0204'),
            ('7f', (0x107, 0x20f), '0107020f'),
            ('f8', (0x10f, 0x208), '010f0208'),
            ('9f', (0x109, 0x20f), '0109020f'),
            ('61', (0x106, 0x201), '01060201'),
            ('92', (0x109, 0x202), '01090202'),
            ('26', (0x102, 0x206), '01020206'),
            ('c4', (0x10c, 0x204), '010c0204'),
        ),
    ),
    GoldenScenario(
        name='Structured EV Generated w/ Fixed & Weird Mask',
        fmt_widths=(16, 16),
        fields=((16, 0x1000, 0x1, 0xff, 0xf0f), (16, 0x2000, 0x1, 0xff, 0xf0f),),
        vectors=(
            ('3312', (0x1303, 0x2102), '13032102'),
            ('e33e', (0x1e03, 0x230e), '1e03230e'),
            ('b5b5', (0x1b05, 0x2b05), '1b052b05'),
            ('d05a', (0x1d00, 0x250a), '1d00250a'),
            ('24cf', (0x1204, 0x2c0f), '12042c0f'),
            ('283e', (0x1208, 0x230e), '1208230e'),
            ('a8e0', (0x1a08, 0x2e00), '1a082e00'),
            ('97fa', (0x1907, 0x2f0a), '19072f0a'),
        ),
    ),
    GoldenScenario(
        name='SRv6 Explicit',
        fmt_widths=(32, 16, 16, 16, 16),
        fields=(
            (32, 0xcafecafe, 0x0, 0x0, 0x0),
            (16, 0x0, 0x0, 0x0, 0xffff),
            (16, 0x0, 0x0, 0x0, 0xffff),
            (16, 0x0, 0x0, 0x0, 0xffff),
            (16, 0x0, 0x0, 0x0, 0xffff),
        ),
        vectors=(
            (
                '43ba48d6a43de086',
                (0xcafecafe, 0x43ba, 0x48d6, 0xa43d, 0xe086),
                'cafecafe43ba48d6a43de086',
            ),
            (
                '4ede65a95725e8a4',
                (0xcafecafe, 0x4ede, 0x65a9, 0x5725, 0xe8a4),
                'cafecafe4ede65a95725e8a4',
            ),
            (
                '9c2f77b9b290d1be',
                (0xcafecafe, 0x9c2f, 0x77b9, 0xb290, 0xd1be),
                'cafecafe9c2f77b9b290d1be',
            ),
            (
                '10adf9a68af15679',
                (0xcafecafe, 0x10ad, 0xf9a6, 0x8af1, 0x5679),
                'cafecafe10adf9a68af15679',
            ),
            (
                '0bc79524ab07adda',
                (0xcafecafe, 0xbc7, 0x9524, 0xab07, 0xadda),
                'cafecafe0bc79524ab07adda',
            ),
            (
                '0fde02891fb8a21a',
                (0xcafecafe, 0xfde, 0x289, 0x1fb8, 0xa21a),
                'cafecafe0fde02891fb8a21a',
            ),
            (
                '032c65b093d0df2f',
                (0xcafecafe, 0x32c, 0x65b0, 0x93d0, 0xdf2f),
                'cafecafe032c65b093d0df2f',
            ),
            (
                'be7e9b424d580239',
                (0xcafecafe, 0xbe7e, 0x9b42, 0x4d58, 0x239),
                'cafecafebe7e9b424d580239',
            ),
        ),
    ),
    GoldenScenario(
        name='SRv6 Explicit (subset)',
        fmt_widths=(32, 16, 16, 16, 16),
        fields=(
            (32, 0xdeaddead, 0x0, 0x0, 0x0),
            (16, 0x0, 0x0, 0x0, 0xffff),
            (16, 0x0, 0x0, 0x0, 0xffff),
        ),
        vectors=(
            ('e298f115', (0xdeaddead, 0xe298, 0xf115), 'deaddeade298f11500000000'),
            ('e13f3177', (0xdeaddead, 0xe13f, 0x3177), 'deaddeade13f317700000000'),
            ('553f36e5', (0xdeaddead, 0x553f, 0x36e5), 'deaddead553f36e500000000'),
            ('191cefee', (0xdeaddead, 0x191c, 0xefee), 'deaddead191cefee00000000'),
            ('ae9eca2c', (0xdeaddead, 0xae9e, 0xca2c), 'deaddeadae9eca2c00000000'),
            ('c02dbdcb', (0xdeaddead, 0xc02d, 0xbdcb), 'deaddeadc02dbdcb00000000'),
            ('c3d34a1f', (0xdeaddead, 0xc3d3, 0x4a1f), 'deaddeadc3d34a1f00000000'),
            ('12c5ce9a', (0xdeaddead, 0x12c5, 0xce9a), 'deaddead12c5ce9a00000000'),
        ),
    ),
    GoldenScenario(
        name='SRv6 Generated',
        fmt_widths=(32, 16, 16, 16, 16),
        fields=(
            (32, 0x42424242, 0x0, 0x0, 0x0),
            (4, 0x0, 0x1, 0xf, 0xf),
            (4, 0x0, 0x1, 0xf, 0xf),
            (4, 0x0, 0x1, 0xf, 0xf),
            (4, 0x0, 0x1, 0xf, 0xf),
        ),
        vectors=(
            ('78ba', (0x42424242, 0x7, 0x8, 0xb, 0xa), '4242424200070008000b000a'),
            ('76dc', (0x42424242, 0x7, 0x6, 0xd, 0xc), '4242424200070006000d000c'),
            ('d2a8', (0x42424242, 0xd, 0x2, 0xa, 0x8), '42424242000d0002000a0008'),
            ('7634', (0x42424242, 0x7, 0x6, 0x3, 0x4), '424242420007000600030004'),
            ('ff29', (0x42424242, 0xf, 0xf, 0x2, 0x9), '42424242000f000f00020009'),
            ('3fe7', (0x42424242, 0x3, 0xf, 0xe, 0x7), '424242420003000f000e0007'),
            ('144f', (0x42424242, 0x1, 0x4, 0x4, 0xf), '42424242000100040004000f'),
            ('bae6', (0x42424242, 0xb, 0xa, 0xe, 0x6), '42424242000b000a000e0006'),
        ),
    ),
    GoldenScenario(
        name='SRv6 Generated w/ Fixed',
        fmt_widths=(32, 16, 16, 16, 16),
        fields=(
            (32, 0x13131313, 0x0, 0x0, 0x0),
            (16, 0x100, 0x1, 0xf, 0xf),
            (16, 0x200, 0x1, 0xf, 0xf),
            (16, 0x300, 0x1, 0xf, 0xf),
            (16, 0x400, 0x1, 0xf, 0xf),
        ),
        vectors=(
            ('9b79', (0x13131313, 0x109, 0x20b, 0x307, 0x409), '131313130109020b03070409'),
            ('26c7', (0x13131313, 0x102, 0x206, 0x30c, 0x407), '1313131301020206030c0407'),
            ('f9fe', (0x13131313, 0x10f, 0x209, 0x30f, 0x40e), '13131313010f0209030f040e'),
            ('eb26', (0x13131313, 0x10e, 0x20b, 0x302, 0x406), '13131313010e020b03020406'),
            ('a5f5', (0x13131313, 0x10a, 0x205, 0x30f, 0x405), '13131313010a0205030f0405'),
            ('473c', (0x13131313, 0x104, 0x207, 0x303, 0x40c), '13131313010402070303040c'),
            ('a23b', (0x13131313, 0x10a, 0x202, 0x303, 0x40b), '13131313010a02020303040b'),
            ('3e8c', (0x13131313, 0x103, 0x20e, 0x308, 0x40c), '131313130103020e0308040c'),
        ),
    ),
    GoldenScenario(
        name='SRv6+SRH Explicit',
        fmt_widths=(32, 16, 16, 16, 16, 16, 16, 32, 16, 16),
        fields=(
            (32, 0xcafecafe, 0x0, 0x0, 0x0),
            (16, 0x0, 0x0, 0x0, 0xffff),
            (16, 0x0, 0x0, 0x0, 0xffff),
            (16, 0x0, 0x0, 0x0, 0xffff),
            (16, 0x0, 0x0, 0x0, 0xffff),
            (16, 0x0, 0x0, 0x0, 0xffff),
            (16, 0x0, 0x0, 0x0, 0xffff),
            (32, 0xdecafbad, 0x0, 0x0, 0x0),
            (16, 0x0, 0x0, 0x0, 0xffff),
            (16, 0x0, 0x0, 0x0, 0xffff),
        ),
        vectors=(
            (
                'b8a7310e14c80962ae4b9dd6587a4c16',
                (
                    0xcafecafe, 0xb8a7, 0x310e, 0x14c8, 0x962, 0xae4b, 0x9dd6, 0xdecafbad, 0x587a,
                    0x4c16,
                ),
                'cafecafeb8a7310e14c80962ae4b9dd6decafbad587a4c16',
            ),
            (
                'c496626fa3b0d56027fa9733c0ca89da',
                (
                    0xcafecafe, 0xc496, 0x626f, 0xa3b0, 0xd560, 0x27fa, 0x9733, 0xdecafbad, 0xc0ca,
                    0x89da,
                ),
                'cafecafec496626fa3b0d56027fa9733decafbadc0ca89da',
            ),
            (
                '5796da93bdf5faf412ab716a4bfc273e',
                (
                    0xcafecafe, 0x5796, 0xda93, 0xbdf5, 0xfaf4, 0x12ab, 0x716a, 0xdecafbad, 0x4bfc,
                    0x273e,
                ),
                'cafecafe5796da93bdf5faf412ab716adecafbad4bfc273e',
            ),
            (
                '62840e0062eca1080d1ba279ec43c442',
                (
                    0xcafecafe, 0x6284, 0xe00, 0x62ec, 0xa108, 0xd1b, 0xa279, 0xdecafbad, 0xec43,
                    0xc442,
                ),
                'cafecafe62840e0062eca1080d1ba279decafbadec43c442',
            ),
            (
                'd287ff8bcd2480d39be2249fcb695f79',
                (
                    0xcafecafe, 0xd287, 0xff8b, 0xcd24, 0x80d3, 0x9be2, 0x249f, 0xdecafbad, 0xcb69,
                    0x5f79,
                ),
                'cafecafed287ff8bcd2480d39be2249fdecafbadcb695f79',
            ),
            (
                '858e6e1a335aac0804cef3a435e35ae4',
                (
                    0xcafecafe, 0x858e, 0x6e1a, 0x335a, 0xac08, 0x4ce, 0xf3a4, 0xdecafbad, 0x35e3,
                    0x5ae4,
                ),
                'cafecafe858e6e1a335aac0804cef3a4decafbad35e35ae4',
            ),
            (
                'ccb8f2585459dde36343a0550522c447',
                (
                    0xcafecafe, 0xccb8, 0xf258, 0x5459, 0xdde3, 0x6343, 0xa055, 0xdecafbad, 0x522,
                    0xc447,
                ),
                'cafecafeccb8f2585459dde36343a055decafbad0522c447',
            ),
            (
                'ad55668e6450b8f009084f147d33da0f',
                (
                    0xcafecafe, 0xad55, 0x668e, 0x6450, 0xb8f0, 0x908, 0x4f14, 0xdecafbad, 0x7d33,
                    0xda0f,
                ),
                'cafecafead55668e6450b8f009084f14decafbad7d33da0f',
            ),
        ),
    ),
)

# (fmt_widths, fields, compact, expanded) from the C expansion on random profiles.
C_DIFFERENTIAL_VECTORS: tuple[tuple[tuple[int, ...], tuple[RawField, ...], str, str], ...] = (
    (
        (32, 0, 8),
        (
            (31, 0x287224c7, 0x170eb, 0x1e81b, 0x587b3b6d),
            (0, 0x0, 0x0, 0x0, 0x0),
        ),
        'bae8c0',
        '6869368e00',
    ),
    (
        (8, 8, 32, 16, 16, 31, 8),
        (
            (8, 0x3, 0x0, 0x0, 0x0),
            (3, 0x0, 0x0, 0x1, 0x6),
            (31, 0x74c38183, 0x5704, 0x5da0, 0x245166fe),
            (16, 0xe185, 0x0, 0x2, 0x8188),
            (16, 0x45eb, 0x8eaa, 0xefcf, 0xffff),
            (32, 0x3cbb33a7, 0x2695, 0x1e014, 0xcb176b72),
        ),
        'a2d17a02179f8a',
        '03047083a58be1858085f97ee1aa00',
    ),
    (
        (15, 16, 16, 32, 8),
        (
            (16, 0xf073, 0x7, 0xf, 0x8109),
            (20, 0x347bf, 0x28b, 0xc56, 0xbd1be),
            (16, 0x3531, 0xbe, 0x341, 0xe8ed),
            (32, 0xd69279d2, 0x1fe0, 0x382e, 0xba219b2a),
        ),
        '6e24e5dc2e80',
        'e2f40e27ab79e925d7b000',
    ),
    (
        (18, 8, 12, 8, 8),
        (
            (16, 0x5609, 0x9c, 0x123, 0xe877),
            (8, 0xd9, 0x3, 0x18, 0xab),
            (0, 0x0, 0x0, 0x0, 0x0),
        ),
        '341e',
        '0f8a1ec0000000',
    ),
    (
        (1, 0, 20, 12, 8),
        (
            (1, 0x1, 0x1, 0x1, 0x1),
            (0, 0x0, 0x0, 0x0, 0x0),
            (20, 0xa9e37, 0x5ae, 0x1e46, 0xdf4f8),
            (12, 0x6d4, 0x4, 0x11, 0x78c),
            (1, 0x1, 0x0, 0x0, 0x0),
        ),
        '549b60',
        '5a71bb6c0080',
    ),
    (
        (32, 29, 9, 12, 8, 16, 8, 8),
        (
            (32, 0xeb24f782, 0x136cd, 0x1b529, 0x5698fce1),
            (32, 0x145f3c90, 0x6778843a, 0x8b432fda, 0xffffffff),
            (12, 0xdf6, 0x2e, 0x3f, 0x45e),
            (12, 0x8ae, 0x1, 0x5, 0x0),
            (8, 0x60, 0x5, 0x5, 0x0),
            (16, 0x47df, 0x1f, 0x4d, 0x8d1a),
            (8, 0x67, 0x5, 0x8, 0x75),
        ),
        '0e1aa67955156c08e0',
        'a9bc0f4367955157b22b9810b345c000',
    ),
    (
        (7, 4, 0, 14, 16, 4, 17, 19, 8, 16),
        (
            (7, 0x30, 0x0, 0x0, 0x0),
            (4, 0x3, 0x1, 0x1, 0x9),
            (1, 0x0, 0x0, 0x0, 0x0),
            (4, 0x6, 0x1, 0x1, 0x5),
            (16, 0x18ff, 0x143, 0x48e, 0xddb9),
            (4, 0x7, 0x2, 0x5, 0x0),
            (16, 0x7e85, 0x6f1f, 0x90ce, 0xffff),
            (20, 0x5ce56, 0x13, 0x14, 0x86a2e),
        ),
        'd63d8df8fb',
        '616001a87f3b1bf2f73b00000000',
    ),
    (
        (14, 32, 32, 8),
        (
            (7, 0x1a, 0x0, 0x0, 0x0),
            (32, 0x9022570c, 0xe8f, 0x1282, 0x500d3d19),
        ),
        'a560',
        '006b00a9ac500000000000',
    ),
    (
        (20, 0, 12, 32, 16),
        (
            (16, 0x6983, 0x648, 0xc29, 0xffff),
            (0, 0x0, 0x0, 0x0, 0x0),
            (12, 0xee7, 0x208, 0x291, 0xfff),
        ),
        '0b54a210',
        '00b54a21000000000000',
    ),
    (
        (32, 8, 12, 1, 16, 7, 4, 31, 32, 16),
        (
            (32, 0xafdce862, 0x5f, 0x3fb, 0xc99a8b44),
            (8, 0xb4, 0x1, 0x6, 0x74),
            (16, 0xbed, 0x0, 0x0, 0x0),
            (1, 0x0, 0x0, 0x0, 0x0),
            (16, 0xdae9, 0xf2, 0x14a, 0xdb0d),
            (7, 0x6e, 0x7, 0xa, 0x72),
            (4, 0x3, 0x0, 0x0, 0x0),
            (16, 0x7f17, 0x1aa, 0x34a, 0xa3bd),
        ),
        'b5ee3fc34180',
        'af56ea66c0bed6df60e30001bc0e000000000000',
    ),
    (
        (32, 30, 16, 32, 31, 8),
        (
            (32, 0xdf7ec0c, 0x506a, 0x9a3d, 0x68bb125b),
            (16, 0x7a62, 0xa217, 0xf007, 0xffff),
            (16, 0xff07, 0xcb1e, 0xd5ab, 0xffff),
            (32, 0xd289d66f, 0x1b5, 0x9a6, 0xb4304db0),
            (31, 0x1597e625, 0x0, 0x0, 0x0),
        ),
        '6b972f85a49e1c38',
        '2d6fec4f0000be1692791ae64bfcacbf312800',
    ),
    (
        (32, 32, 8, 16, 32),
        (
            (32, 0x656e1f7f, 0x4e89b9a1, 0x53dc37bc, 0xffffffff),
            (32, 0xc21d3329, 0x2de9d, 0x7434c, 0x2d53fd7b),
            (8, 0xd2, 0x14, 0x18, 0xff),
        ),
        '20093515307b1428',
        '20093515c70c7b4285000000000000',
    ),
    (
        (5, 32, 3, 32, 7, 32),
        (
            (4, 0x8, 0x2, 0x2, 0xf),
            (32, 0x8e071387, 0x27c7, 0x728f, 0xc4b946a6),
            (3, 0x6, 0x0, 0x0, 0x6),
            (32, 0xe562440d, 0x670d5373, 0xaa0563ed, 0xffffffff),
            (7, 0x4f, 0x0, 0x0, 0x0),
            (32, 0x11dc2eda, 0x4e91, 0x1f488, 0x958f9f0d),
        ),
        '8086b197b2a8f8b6b0',
        '405130b91c32f6551f9e02bb57a4',
    ),
    (
        (1, 16, 30, 0, 10, 1, 32, 32, 16),
        (
            (1, 0x1, 0x0, 0x0, 0x0),
            (16, 0xcc8e, 0x0, 0x0, 0x0),
            (32, 0x4c874556, 0xc5, 0xd1, 0x3c6a11),
            (0, 0x0, 0x0, 0x5, 0x0),
            (0, 0x0, 0x0, 0x0, 0x0),
            (1, 0x1, 0x0, 0x1, 0x1),
            (32, 0x560f4b98, 0x330fa, 0x6e26e, 0xf95f6c72),
            (32, 0x549b781f, 0x11fb34db, 0x2fb6d12c, 0xffffffff),
        ),
        'ad70b5eefd8382bc',
        'e6471956ce8e0061c69bee9fb07057800000',
    ),
    (
        (4, 0, 28, 29, 12, 32, 8, 32),
        (
            (4, 0x0, 0x0, 0x0, 0x6),
            (0, 0x0, 0x0, 0x0, 0x0),
            (20, 0x85f68, 0x1669, 0x1adc5, 0xfffff),
            (20, 0x50db1, 0x10d, 0x197, 0x35a59),
            (12, 0x9cc, 0xc, 0xf, 0x9a9),
            (32, 0x85ec4342, 0x12b, 0x1569, 0x5f37803),
        ),
        '216eee206819f0',
        '00085bbb00306d00e6400f1da1800000000000',
    ),
)


# ------------------------------------------------------------------ golden vectors


def test_all_ten_c_scenarios_are_present() -> None:
    assert len(C_SCENARIOS) == 10
    assert sum(len(s.vectors) for s in C_SCENARIOS) == 80


@pytest.mark.parametrize("scenario", C_SCENARIOS, ids=lambda s: s.name)
def test_c_scenario_expands_bit_exact(scenario: GoldenScenario) -> None:
    expander = Expander(scenario.fmt_widths, make_fields(scenario.fields))
    for compact, field_values, expanded in scenario.vectors:
        assert expander.field_values(ev_bytes(compact)) == field_values
        assert expander.expand(ev_bytes(compact)) == ev_bytes(expanded)


@pytest.mark.parametrize("scenario", C_SCENARIOS, ids=lambda s: s.name)
def test_c_scenario_round_trips_through_compress(scenario: GoldenScenario) -> None:
    expander = Expander(scenario.fmt_widths, make_fields(scenario.fields))
    for compact, _, expanded in scenario.vectors:
        assert expander.compress(ev_bytes(expanded)) == ev_bytes(compact)


@pytest.mark.parametrize(
    ("fmt_widths", "fields", "compact", "expanded"),
    C_DIFFERENTIAL_VECTORS,
    ids=[f"random-{i}" for i in range(len(C_DIFFERENTIAL_VECTORS))],
)
def test_c_differential_vector(
    fmt_widths: tuple[int, ...], fields: tuple[RawField, ...], compact: str, expanded: str
) -> None:
    assert expand(ev_bytes(compact), fmt_widths, make_fields(fields)) == ev_bytes(expanded)


def test_worked_example_a_odd_mask() -> None:
    fields = (EvField(16, 0x1000, 1, 0xFF, 0x0F0F), EvField(16, 0x2000, 1, 0xFF, 0x0F0F))
    expander = Expander((16, 16), fields)
    assert expander.expand_int(bytes.fromhex("3312")) == 0x13032102


def srv6_fields(usid_width: int) -> tuple[EvField, ...]:
    usid_init = (lambda k: k << 8) if usid_width == 16 else (lambda k: 0)
    return (EvField.fixed(32, 0x13131313),) + tuple(
        EvField(usid_width, usid_init(k), 1, 0xF, 0xF) for k in range(1, 5)
    )


def test_worked_example_b_srv6_destination_address() -> None:
    wire = expand(bytes.fromhex("9b79"), (32, 16, 16, 16, 16), srv6_fields(16))
    da = ipaddress.IPv6Address(wire[:16])
    assert da == ipaddress.IPv6Address("1313:1313:109:20b:307:409::")
    assert str(da) == "1313:1313:109:20b:307:409::"
    assert wire[16:] == bytes(16)


def test_worked_example_c_narrow_fields_zero_fill() -> None:
    expander = Expander((32, 16, 16, 16, 16), srv6_fields(4))
    assert expander.field_values(bytes.fromhex("78ba"))[1:] == (0x7, 0x8, 0xB, 0xA)
    assert expander.expand(bytes.fromhex("78ba"))[4:12] == bytes.fromhex("00070008000b000a")


def test_compact_ev_is_a_big_endian_bit_string() -> None:
    # The C generator stored 0xba78 little-endian; bytes 78 ba are what gets expanded.
    expander = Expander((32, 16, 16, 16, 16), srv6_fields(4))
    swapped = expander.field_values(bytes.fromhex("ba78"))[1:]
    assert swapped == (0xB, 0xA, 0x7, 0x8)


# ------------------------------------------------------------------ check_profs rules


def test_check_profs_accepts_every_c_scenario() -> None:
    for scenario in C_SCENARIOS:
        check_profs(scenario.fmt_widths, make_fields(scenario.fields))


def expect_einval(fmt_widths: tuple[int, ...], fields: tuple[EvField, ...], name: str) -> None:
    with pytest.raises(ProfileError) as caught:
        check_profs(fmt_widths, fields)
    assert caught.value.code == errno.EINVAL
    assert caught.value.field == name
    assert name in str(caught.value)


def test_rule_more_fields_than_format_fields() -> None:
    expect_einval((16,), (EvField(8), EvField(8)), "fields")


def test_rule_total_width_exceeds_format() -> None:
    expect_einval((16, 8), (EvField(16), EvField(16)), "fields")


def test_rule_field_wider_than_32_bits() -> None:
    expect_einval((33,), (EvField(33),), "fields[0].width")


def test_rule_init_val_wider_than_field() -> None:
    expect_einval((8, 8), (EvField(8), EvField(4, init_val=0x10)), "fields[1].init_val")


def test_rule_mask_outside_field_width() -> None:
    expect_einval((8,), (EvField(4, mask=0x10),), "fields[0].mask")


def test_rule_max_val_wider_than_mask_bits() -> None:
    expect_einval((16,), (EvField(16, mask=0x0F0F, max_val=0x100),), "fields[0].max_val")


def test_max_val_unchecked_when_mask_is_zero() -> None:
    # check_profs() skips the bound for fixed fields; so do we.
    check_profs((16,), (EvField(16, max_val=0xFFFF),))


def test_boundaries_are_accepted() -> None:
    check_profs((32,), (EvField(32, init_val=0xFFFFFFFF, max_val=0xFFFFFFFF, mask=0xFFFFFFFF),))
    check_profs((8, 8), (EvField(8, init_val=0xFF, mask=0x81, max_val=3), EvField(8)))


def test_evfield_refuses_values_outside_uint32() -> None:
    with pytest.raises(ProfileError, match="EvField.mask"):
        EvField(8, mask=1 << 32)
    with pytest.raises(ProfileError, match="EvField.init_val"):
        EvField(8, init_val=-1)


# ------------------------------------------------------------------ expansion details


def test_compact_bits_beyond_profile_width_are_refused() -> None:
    expander = Expander((16, 16), (EvField(16, mask=0xF), EvField(16, mask=0xF)))
    expander.expand(bytes.fromhex("ab"))
    with pytest.raises(ProfileError, match="beyond the 8 bits") as caught:
        expander.expand(bytes.fromhex("ab80"))
    assert caught.value.code == errno.EINVAL


def test_compact_longer_than_32_bytes_is_refused() -> None:
    with pytest.raises(ProfileError, match="33 bytes"):
        Expander((16,), (EvField(16, mask=0xFFFF),)).expand(bytes(33))


def test_format_wider_than_ev_buffer_is_e2big() -> None:
    with pytest.raises(ProfileError) as caught:
        Expander((128, 128, 8), ())
    assert caught.value.code == errno.E2BIG


def test_format_fields_beyond_profile_stay_zero() -> None:
    expander = Expander((16, 16, 16), (EvField(16, init_val=0xFFFF),))
    assert expander.expand(b"").hex().rstrip("0") == "ffff"


def test_wider_format_field_zero_fills_and_narrower_keeps_low_bits() -> None:
    wide = Expander((24,), (EvField(16, init_val=0xABCD),))
    assert wide.expand_int(b"") == 0x00ABCD
    narrow = Expander((8, 8), (EvField(12, init_val=0xABC), EvField(4, init_val=0x5)))
    assert narrow.expand_int(b"") == 0xBC05


def test_format_field_wider_than_32_bits_zero_fills() -> None:
    # Undefined behaviour in the C packer; mrc_ctl.h says the extra bits are zero-filled.
    assert Expander((64,), (EvField(32, init_val=0xDEADBEEF),)).expand_int(b"") == 0xDEADBEEF


def test_full_32_bit_mask_takes_the_ev_bits_verbatim() -> None:
    expander = Expander((32,), (EvField(32, init_val=0x12345678, mask=0xFFFFFFFF),))
    assert expander.expand_int(bytes.fromhex("cafef00d")) == 0xCAFEF00D


def test_scatter_puts_lowest_ev_bit_on_lowest_mask_bit() -> None:
    assert scatter_bits(0x1000, 0x33, 0x0F0F) == 0x1303
    assert scatter_bits(0xFFFF, 0b01, 0x8001) == 0x7FFF
    assert gather_bits(0x1303, 0x0F0F) == 0x33


def test_compress_refuses_wire_ev_with_wrong_fixed_bits() -> None:
    expander = Expander((32, 16, 16, 16, 16), srv6_fields(16))
    wire = bytearray(expander.expand(bytes.fromhex("9b79")))
    wire[0] ^= 0x01  # locator no longer 0x13131313
    with pytest.raises(ProfileError, match="not an expansion"):
        expander.compress(bytes(wire))


def test_compact_from_field_values() -> None:
    expander = Expander((32, 16, 16, 16, 16), srv6_fields(16))
    compact = expander.compact_from_field_values([0x109, 0x20B, 0x307, 0x409])
    assert compact == ev_bytes("9b79")
    with pytest.raises(ProfileError, match=r"values\[1\]"):
        expander.compact_from_field_values([0x109, 0x30B, 0x307, 0x409])
    with pytest.raises(ProfileError, match="4 fields"):
        expander.compact_from_field_values([0x109])


def test_compact_helpers() -> None:
    assert compact_from_bits(0x3312, 16) == ev_bytes("3312")
    assert compact_to_int(bytes.fromhex("80")) == 1 << (EV_MAX_BITS - 1)
    with pytest.raises(ProfileError):
        compact_from_bits(0x1FF, 8)


# ------------------------------------------------------------------ properties


@st.composite
def profiles_with_compact(draw: st.DrawFn) -> tuple[list[int], list[EvField], bytes]:
    fmt_widths: list[int] = []
    fields: list[EvField] = []
    for _ in range(draw(st.integers(1, 8))):
        width = draw(st.integers(0, 32))
        mask = draw(st.integers(0, low_mask(width)))
        init_val = draw(st.integers(0, low_mask(width)))
        fields.append(EvField(width, init_val, mask=mask))
        fmt_widths.append(width + draw(st.integers(0, 32 - width)))
    fmt_widths += draw(st.lists(st.integers(1, 32), max_size=2))
    assume(sum(fmt_widths) <= EV_MAX_BITS)
    nbits = sum(popcount(f.mask) for f in fields)
    value = draw(st.integers(0, low_mask(nbits)))
    return fmt_widths, fields, compact_from_bits(value, nbits)


def reextract_masked_bits(
    wire: bytes, fmt_widths: list[int], fields: list[EvField]
) -> tuple[int, int]:
    """Read every expanded field back and concatenate the bits under its mask."""
    wire_value = int.from_bytes(wire, "big")
    cursor = packed = nbits = 0
    for ev_field, width in zip(fields, fmt_widths):
        field_value = (wire_value >> (EV_MAX_BITS - cursor - width)) & low_mask(width)
        packed = (packed << popcount(ev_field.mask)) | gather_bits(field_value, ev_field.mask)
        nbits += popcount(ev_field.mask)
        cursor += width
    return packed, nbits


@settings(max_examples=300, deadline=None)
@given(profiles_with_compact())
def test_expansion_then_reextraction_gives_back_the_compact_ev(
    case: tuple[list[int], list[EvField], bytes],
) -> None:
    fmt_widths, fields, compact = case
    expander = Expander(tuple(fmt_widths), tuple(fields))
    wire = expander.expand(compact)
    packed, nbits = reextract_masked_bits(wire, fmt_widths, fields)
    assert compact_from_bits(packed, nbits) == compact
    assert expander.compress(wire) == compact


@settings(max_examples=200, deadline=None)
@given(profiles_with_compact())
def test_expansion_keeps_fixed_bits_and_zero_fill(
    case: tuple[list[int], list[EvField], bytes],
) -> None:
    fmt_widths, fields, compact = case
    expander = Expander(tuple(fmt_widths), tuple(fields))
    for ev_field, value in zip(fields, expander.field_values(compact)):
        assert value & ~ev_field.mask == ev_field.init_val & ~ev_field.mask
        assert value <= low_mask(ev_field.width)
    assert expander.expand_int(compact) < 1 << expander.expanded_width
