"""OpenFlow 1.5 select groups that hash the 5-tuple, UDP ports included.

Open vSwitch's default select-group method since 2.10 is ``dp_hash`` with a
symmetric L3/L4 hash that includes ports for TCP and SCTP only (the OVS FAQ,
"How does OVS divide flows among buckets in an OpenFlow select group?", and
the dp_hash default commit on ovs-dev, Scheurich 2018): every RoCEv2 packet
between two hosts would take the same bucket, whatever its UDP source port.
A RoCE ECMP hash covers the UDP source port, so the groups ask for the
``hash`` method over explicit fields with the Netronome selection-method
group property (experimenter 0x154d, OVS
Documentation/group-selection-method-property.txt). OVS honours it only in
an OpenFlow 1.5 group mod (an OF1.3 one drops it silently: checked with
``ovs-ofctl -O OpenFlow13 add-group`` on OVS 3.1), which is why the
controller speaks OpenFlow 1.5. A field whose prerequisites a packet does
not meet (udp_src on TCP) is left out of that packet's hash.

Each switch hashes with a basis of its own, as real switches seed their ECMP
hash per device: with one basis everywhere, the 5-tuple is the same at every
hop, so an edge switch and the aggregation switch after it pick the same
bucket index and a k=4 fat-tree's traffic reaches two of its four cores
("hash polarization": Cisco, "Troubleshoot CEF polarization",
https://www.cisco.com/c/en/us/support/docs/ip/express-forwarding-cef/116376-technote-cef-00.html,
whose fix is a unique ID per router in the hash). OVS starts the ``hash``
method's hash from the group's ``selection_method_param``
(ofproto-dpif-xlate.c, xlate_hash_fields_select_group) and picks the live
bucket with the best score for it (highest random weight), so a basis per
switch gives each switch an independent choice.
"""
from __future__ import annotations

import struct
import zlib

NTR_VENDOR_ID = 0x0000154D
NTRT_SELECTION_METHOD = 1
OFPGPT_EXPERIMENTER = 0xFFFF
SELECTION_METHOD = b'hash'
METHOD_FIELD_BYTES = 16

# (OXM field number in class OFPXMC_OPENFLOW_BASIC, value bytes): the
# 5-tuple of IPv6 with UDP or TCP. The value of each TLV is its mask.
OXM_OPENFLOW_BASIC = 0x8000
HASH_FIELDS: tuple[tuple[int, int], ...] = (
    (26, 16),   # ipv6_src
    (27, 16),   # ipv6_dst
    (10, 1),    # ip_proto
    (15, 2),    # udp_src
    (16, 2),    # udp_dst
    (13, 2),    # tcp_src
    (14, 2),    # tcp_dst
)


def hash_basis(switch: str) -> int:
    """A switch's own ECMP hash basis: fixed by its name, so a fabric hashes
    the same way on every build (results can be re-run), and different from
    its neighbours'."""
    return zlib.crc32(switch.encode())


class SelectionMethodProperty:
    """The group property that selects ``hash`` over HASH_FIELDS from
    `basis`; os-ken has no class for it, and its group mod only needs
    `serialize()`."""

    def __init__(self, basis: int) -> None:
        self.basis = basis

    def serialize(self) -> bytes:
        fields = b''.join(struct.pack('!HBB', OXM_OPENFLOW_BASIC, number << 1, size)
                          + b'\xff' * size for number, size in HASH_FIELDS)
        length = 40 + len(fields)
        head = struct.pack('!HHII4x%dsQ' % METHOD_FIELD_BYTES, OFPGPT_EXPERIMENTER,
                           length, NTR_VENDOR_ID, NTRT_SELECTION_METHOD,
                           SELECTION_METHOD, self.basis)
        return head + fields + b'\0' * (-length % 8)


def select_group_mod(dp, group_id: int, ports: tuple[int, ...], command: int,
                     basis: int):
    """An OF1.5 group mod: one equal-weight bucket per next-hop port, hashed
    from the switch's `basis` (hash_basis)."""
    parser, ofp = dp.ofproto_parser, dp.ofproto
    buckets = [parser.OFPBucket(
        bucket_id=i, actions=[parser.OFPActionOutput(port)],
        properties=[parser.OFPGroupBucketPropWeight(type_=ofp.OFPGBPT_WEIGHT,
                                                   weight=1)])
        for i, port in enumerate(ports)]
    return parser.OFPGroupMod(dp, command=command, type_=ofp.OFPGT_SELECT,
                              group_id=group_id, buckets=buckets,
                              properties=[SelectionMethodProperty(basis)])
