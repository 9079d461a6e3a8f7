"""Examples, hypothesis strategies and byte tampering shared by the wire package's tests."""

from __future__ import annotations

import struct
import zlib

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from testbed.nic import wire
from testbed.nic.wire import (
    Cnp,
    DataPacket,
    EvProbe,
    EvProbeReply,
    Nack,
    NackReason,
    Opcode,
    PortStatusUpdate,
    ReliabilityProbe,
    Sack,
    Trim,
    Verdict,
)

FUZZ = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
ROUND_TRIP = settings(max_examples=200, deadline=None)

SRC = "fd00:1::1"
DST = "fd00:2::1"


def reseal(buf: bytes) -> bytes:
    """Give tampered bytes a valid ICRC so the decoder reaches the check under test."""
    return buf[:-4] + struct.pack(">I", zlib.crc32(buf[:-4]))


u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u24 = st.integers(0, 0xFFFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
u64 = st.integers(0, (1 << 64) - 1)
qpn = u24.filter(lambda q: q != wire.EP_OP_QP)
optional_u32 = st.none() | u32


@st.composite
def data_packets(draw: st.DrawFn) -> DataPacket:
    opcode = draw(st.sampled_from(sorted(wire.DATA_OPCODES)))
    trim = draw(st.sampled_from(list(Trim)))
    if trim is not Trim.NONE:
        payload, total_length = b"", draw(u32)
    elif opcode in wire.ONLY_OPCODES:
        payload = draw(st.binary(max_size=96))
        total_length = len(payload)
    else:
        payload = draw(st.binary(min_size=1, max_size=96))
        total_length = draw(st.integers(len(payload) + 1, 0xFFFFFFFF))
    return DataPacket(
        opcode=opcode,
        dest_qp=draw(qpn),
        psn=draw(u24),
        msn=draw(u16),
        rqmsn=draw(u16),
        remote_offset=draw(u64),
        rkey=draw(u32),
        total_length=total_length,
        payload=payload,
        imm=draw(u32) if opcode in wire.IMM_OPCODES else None,
        tx_timestamp=draw(optional_u32),
        retransmit=draw(st.booleans()),
        ack_request=draw(st.booleans()),
        trim=trim,
    )


sacks = st.builds(
    Sack,
    dest_qp=qpn,
    cack_psn=u24,
    ev=u32,
    sack_offset=u16,
    bitmap=u64,
    verdict=st.sampled_from(list(Verdict)),
    mpr=u8,
    trigger_psn=u24,
    probe_reply=st.booleans(),
    ts_echo=optional_u32,
    service_time_ns=u32,
    ooo_count=u16,
    rcv_cwnd_pen=st.integers(0, 127),
    received_bytes=u64,
)
nacks = st.builds(
    Nack,
    dest_qp=qpn,
    psn=u24,
    reason=st.sampled_from(list(NackReason)),
    ev=u32,
    cack_psn=u24,
    ts_echo=optional_u32,
)
reliability_probes = st.builds(
    ReliabilityProbe, dest_qp=qpn, probe_id=u24, tx_timestamp=optional_u32
)
ev_probes = st.builds(EvProbe, req_id=u16, ev=u32, port=u8, tx_timestamp=u32)
ev_probe_replies = st.builds(
    EvProbeReply, req_id=u16, ev=u32, port=u8, rx_port=u8, ts_echo=u32, service_time_ns=u32
)
cnps = st.builds(Cnp, dest_qp=qpn)


@st.composite
def port_status_updates(draw: st.DrawFn) -> PortStatusUpdate:
    count = draw(st.integers(1, wire.MAX_PORTS))
    mask = st.integers(0, (1 << count) - 1)
    return PortStatusUpdate(draw(u16), draw(mask), draw(mask), count)


packets = st.one_of(
    data_packets(), sacks, nacks, reliability_probes, ev_probes, ev_probe_replies, cnps,
    port_status_updates(),
)

# One hand-written example of every kind, for the example-based tests.
EXAMPLES = {
    "write_first": DataPacket(Opcode.WRITE_FIRST, 0x10, 0, 0, 0, 0x1000, 0xAB, 3000, b"x" * 1368,
                              tx_timestamp=77),
    "write_middle": DataPacket(Opcode.WRITE_MIDDLE, 0x10, 1, 0, 0, 0x1558, 0xAB, 3000, b"y" * 1368),
    "write_last": DataPacket(Opcode.WRITE_LAST, 0x10, 2, 0, 0, 0x1AB0, 0xAB, 3000, b"z" * 264,
                             retransmit=True),
    "write_last_imm": DataPacket(Opcode.WRITE_LAST_WITH_IMM, 0x10, 3, 1, 0, 0x1AB0, 0xAB, 3000,
                                 b"z" * 264, imm=0xCAFE, ack_request=True),
    "write_only": DataPacket(Opcode.WRITE_ONLY, 0x10, 0xFFFFFF, 2, 1, 0, 0xAB, 5, b"hello"),
    "write_only_imm": DataPacket(Opcode.WRITE_ONLY_WITH_IMM, 0x10, 5, 3, 1, 0, 0xAB, 0, b"",
                                 imm=1, tx_timestamp=0xFFFFFFFF),
    "write_trimmed": DataPacket(Opcode.WRITE_MIDDLE, 0x10, 6, 0, 0, 0x1558, 0xAB, 3000,
                                trim=Trim.TRIMMED_LASTHOP),
    "sack": Sack(0x20, 4, 0xDEADBEEF, 1, 0b1110110, Verdict.SKIP_ONCE, 8, 11, False, 1234,
                 5000, 5, 64, 10 * 1368),
    "sack_probe_reply": Sack(0x20, 4, 7, probe_reply=True, trigger_psn=99,
                             verdict=Verdict.ALWAYS_SKIP),
    "nack": Nack(0x20, 5, NackReason.TRIMMED, 0x12345678, 4, ts_echo=42),
    "nack_no_ts": Nack(0x20, 5, NackReason.UNEXP_EVENT, 1, 4),
    "reliability_probe": ReliabilityProbe(0x20, 17, tx_timestamp=900),
    "reliability_probe_no_ts": ReliabilityProbe(0x20, 18),
    "ev_probe": EvProbe(0xBEEF, 0x00030201, 3, 1000),
    "ev_probe_reply": EvProbeReply(0xBEEF, 0x00030201, 3, 4, 1000, 2500),
    "cnp": Cnp(0x20),
    "port_status_update": PortStatusUpdate(0xBEEF, 0b10, 0b01, 2),
}

ONLY = EXAMPLES["write_only"].encode()
SACK = EXAMPLES["sack"].encode()
NACK = EXAMPLES["nack"].encode()
EVP = EXAMPLES["ev_probe"].encode()


def patched(buf: bytes, offset: int, value: bytes) -> bytes:
    return reseal(buf[:offset] + value + buf[offset + len(value):])


mutations = st.lists(
    st.tuples(
        st.sampled_from(["flip", "set", "truncate", "insert", "delete"]),
        st.integers(0, 2000),
        u8,
    ),
    min_size=1,
    max_size=4,
)


def mutate(buf: bytes, steps: list[tuple[str, int, int]]) -> bytes:
    out = bytearray(buf)
    for kind, position, value in steps:
        i = position % (len(out) + 1)
        if kind == "flip" and i < len(out):
            out[i] ^= 1 << (value % 8)
        elif kind == "set" and i < len(out):
            out[i] = value
        elif kind == "truncate":
            del out[i:]
        elif kind == "insert":
            out[i:i] = bytes([value])
        elif kind == "delete" and i < len(out):
            del out[i]
    return bytes(out)
