"""MRC wire format: the inner IPv6 + UDP headers and the MRC packets behind them.

docs/wire-format.md is the human form of this package: byte layouts, opcode numbers,
flag bits and every project convention where the public MRC record is silent. Keep the
two in step.

One module per topic, and the per-packet code split by direction:

    layout       lengths, opcodes, flag bits, enums, header structs, max_payload()
    checks       WireError and the field checks both directions share
    psn          24-bit PSN arithmetic
    timestamps   u32 microsecond TX timestamps
    sack_bitmap  SETH's bitmap <-> received PSNs and holes
    inner        inner IPv6 + UDP headers; EV id <-> UDP source port + flow label
    packets      the packet kinds (RoCEv2's CNP among them) (frozen dataclasses) and their receive-path twins
    encode       the writers: field values -> MRC bytes
    decode       the readers, including the endpoint's fast receive path
    trim         what a trimming switch makes of a data packet

This is the per-packet path of the endpoint, so headers are packed with precompiled
``struct.Struct`` objects and decoding builds no per-packet dictionaries. Everything
callers use is re-exported here: ``from testbed.nic.wire import X`` is the public way in.
"""

from __future__ import annotations

from testbed.nic.wire.checks import WireError
from testbed.nic.wire.decode import decode, decode_received
from testbed.nic.wire.encode import encode_data, encode_port_status_update, encode_sack
from testbed.nic.wire.inner import (
    EV_MASK,
    Address,
    build_inner,
    ev_to_sport_flowlabel,
    ipv6_header,
    parse_inner,
    sport_flowlabel_to_ev,
    udp_header,
)
from testbed.nic.wire.layout import (
    BTH_FLAGS_OFFSET,
    BTH_LEN,
    BTH_PKEY,
    BTH_VERSION_OFFSET,
    CC_STATE_LEN,
    CNP_PACKET_LEN,
    DATA_OPCODES,
    EP_OP_QP,
    EV_PROBE_LEN,
    EV_PROBE_PACKET_LEN,
    EV_PROBE_REPLY_LEN,
    EV_PROBE_REPLY_PACKET_LEN,
    EETH_LEN,
    EP_OP_PORT_STATUS,
    ERTH_LEN,
    FLAG_ACK_REQUEST,
    FLAG_RETRANSMIT,
    FLAG_TIMESTAMP,
    FLAG_TRIMMED,
    FLAG_TRIMMED_LASTHOP,
    ICRC_LEN,
    IMM_OPCODES,
    IMM_PLACEMENT,
    IMMDT_LEN,
    INNER_HEADERS_LEN,
    IPV6_HEADER_LEN,
    MAX_PORTS,
    MAX_RCV_CWND_PEN,
    METH_LEN,
    MPR_UNIT_PSNS,
    NACK_LEN,
    NETH_LEN,
    ONLY_OPCODES,
    PORT_STATUS_PACKET_LEN,
    PROTOCOL_VERSION,
    REQ_ID_MASK,
    RETH_LEN,
    SACK_BITMAP_BITS,
    SACK_LEN,
    SACK_PROBE_REPLY,
    SACK_VERDICT_MASK,
    SETH_LEN,
    SRH_FIXED_LEN,
    SRH_SEGMENT_LEN,
    TSETH_LEN,
    UDP_HEADER_LEN,
    UDP_PORT,
    NackReason,
    Opcode,
    Trim,
    Verdict,
    max_payload,
)
from testbed.nic.wire.packets import (
    AnyData,
    AnySack,
    Cnp,
    DataPacket,
    EvProbe,
    EvProbeReply,
    Nack,
    Packet,
    PortStatusUpdate,
    ReliabilityProbe,
    RxData,
    RxSack,
    Sack,
)
from testbed.nic.wire.psn import PSN_BITS, PSN_MASK, PSN_SPACE, psn_add, psn_diff, psn_le, psn_lt
from testbed.nic.wire.sack_bitmap import sack_bitmap, sack_holes, sack_received_psns
from testbed.nic.wire.timestamps import TIMESTAMP_MASK, timestamp_elapsed_us, timestamp_us
from testbed.nic.wire.trim import trim_data_packet

__all__ = [
    "BTH_FLAGS_OFFSET", "BTH_PKEY", "BTH_VERSION_OFFSET", "IMM_PLACEMENT",
    "Address", "AnyData", "AnySack", "CC_STATE_LEN", "CNP_PACKET_LEN", "Cnp", "DATA_OPCODES", "DataPacket", "EP_OP_QP",
    "EV_PROBE_LEN", "EV_PROBE_REPLY_LEN", "EvProbe", "EvProbeReply", "FLAG_ACK_REQUEST",
    "FLAG_RETRANSMIT", "FLAG_TIMESTAMP", "FLAG_TRIMMED", "FLAG_TRIMMED_LASTHOP", "ICRC_LEN",
    "IMMDT_LEN", "IMM_OPCODES", "INNER_HEADERS_LEN", "IPV6_HEADER_LEN", "MAX_RCV_CWND_PEN",
    "METH_LEN", "MPR_UNIT_PSNS", "NACK_LEN", "NETH_LEN", "Nack", "NackReason", "ONLY_OPCODES",
    "Opcode", "PROTOCOL_VERSION", "PSN_BITS", "PSN_MASK", "PSN_SPACE", "Packet", "RETH_LEN",
    "ReliabilityProbe", "SACK_BITMAP_BITS", "SACK_LEN", "SETH_LEN", "Sack", "TSETH_LEN",
    "TIMESTAMP_MASK", "Trim", "UDP_HEADER_LEN", "UDP_PORT", "Verdict", "WireError", "BTH_LEN",
    "RxData", "RxSack", "build_inner", "decode", "decode_received", "encode_data", "encode_sack",
    "ev_to_sport_flowlabel", "ipv6_header", "max_payload", "parse_inner", "psn_add", "psn_diff",
    "psn_le", "psn_lt", "sack_bitmap", "sack_holes", "sack_received_psns", "sport_flowlabel_to_ev",
    "timestamp_elapsed_us", "timestamp_us", "trim_data_packet", "udp_header",
    # Public constants the flat wire.py had outside its __all__.
    "EV_MASK", "EV_PROBE_PACKET_LEN", "EV_PROBE_REPLY_PACKET_LEN", "REQ_ID_MASK",
    "SACK_PROBE_REPLY", "SACK_VERDICT_MASK", "SRH_FIXED_LEN", "SRH_SEGMENT_LEN",
    # The Port Status Update endpoint operation (docs/wire-format.md §6.4).
    "EETH_LEN", "EP_OP_PORT_STATUS", "ERTH_LEN", "MAX_PORTS", "PORT_STATUS_PACKET_LEN",
    "PortStatusUpdate", "encode_port_status_update",
]
