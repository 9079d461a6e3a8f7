"""Frames for the switch-port program tests, made with testbed.nic.wire, and a way to run
the loaded program on them with BPF_PROG_TEST_RUN (`bpftool prog run`)."""
from __future__ import annotations

import json
import socket
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from testbed.fabric import switch_port as sp
from testbed.fabric.run_lock import RunLock
from testbed.nic import wire

ETH_HLEN = 14
IPV6_HLEN = 40
ETH_P_IPV6, ETH_P_IP = 0x86DD, 0x0800
IPPROTO_IPV6, IPPROTO_ROUTING = 41, 43
NOT_ECT, ECT1, ECT0, CE = 0, 1, 2, 3          # RFC 3168 ECN codepoints
OUTER_SRC, CARRIER = 'fc00:0:9::1', 'fc00:0:1:2:3::'
INNER_SRC, INNER_DST = 'fd00::1', 'fd00::2'
MAC_DST, MAC_SRC = bytes.fromhex('020000000002'), bytes.fromhex('020000000001')
# struct __sk_buff (linux/bpf.h): the test-run context the kernel takes in and gives back.
SKB_PRIORITY_OFF, SKB_IFINDEX_OFF, SKB_CTX_IN_LEN = 32, 40, 44


def ethernet(payload: bytes, ethertype: int = ETH_P_IPV6) -> bytes:
    return MAC_DST + MAC_SRC + struct.pack('>H', ethertype) + payload


def srh(next_header: int, segments: list[str]) -> bytes:
    """A segment routing header (RFC 8754): type 4, SL = last index, no TLVs."""
    body = b''.join(socket.inet_pton(socket.AF_INET6, s) for s in segments)
    return struct.pack('>BBBBBBH', next_header, len(body) // 8, 4, len(segments) - 1,
                       len(segments) - 1, 0, 0) + body


def encapsulate(inner: bytes, *, outer_tc: int = ECT0, with_srh: bool = False) -> bytes:
    """Outer IPv6 (carrier DA, next header 41, or an SRH first) + inner, in an Ethernet frame:
    what the sender's kernel makes of what the endpoint writes to its protocol-41 socket."""
    ext = srh(IPPROTO_IPV6, [CARRIER]) if with_srh else b''
    outer = wire.ipv6_header(OUTER_SRC, CARRIER, 0xABCDE, len(ext) + len(inner),
                             traffic_class=outer_tc,
                             next_header=IPPROTO_ROUTING if with_srh else IPPROTO_IPV6)
    return ethernet(outer + ext + inner)


def mrc_frame(mrc: bytes, *, outer_tc: int = ECT0, inner_tc: int | None = None,
              ev: int = 0x12345678, dport: int = wire.UDP_PORT, with_srh: bool = False) -> bytes:
    inner = wire.build_inner(INNER_SRC, INNER_DST, ev, mrc,
                             traffic_class=outer_tc if inner_tc is None else inner_tc,
                             dport=dport)
    return encapsulate(inner, outer_tc=outer_tc, with_srh=with_srh)


def routed_frame(mrc: bytes, *, tc: int = ECT0, ev: int = 0x12345678) -> bytes:
    """What an endpoint sends on the routed fabric: its IPv6 + UDP + MRC bytes as they are,
    no outer header (testbed/nic/socket_runtime.py)."""
    return ethernet(wire.build_inner(INNER_SRC, INNER_DST, ev, mrc, traffic_class=tc))


def data_packet(opcode: wire.Opcode = wire.Opcode.WRITE_ONLY, payload_len: int = 1000, *,
                timestamp: bool = False, trim: wire.Trim = wire.Trim.NONE) -> bytes:
    only = opcode in wire.ONLY_OPCODES
    payload = bytes(range(256)) * (payload_len // 256 + 1)
    return wire.DataPacket(
        opcode=opcode, dest_qp=0x123, psn=0xABCDE, msn=7, rqmsn=3, remote_offset=0x10000,
        rkey=0xBEEF, total_length=payload_len if only else payload_len + 4096,
        payload=b'' if trim != wire.Trim.NONE else payload[:payload_len],
        imm=0xC0FFEE if opcode in wire.IMM_OPCODES else None,
        tx_timestamp=123456 if timestamp else None, trim=trim).encode()


def control_packets() -> dict[str, bytes]:
    """One MRC control packet of each kind."""
    return {
        'sack': wire.Sack(dest_qp=0x123, cack_psn=10, ev=0x55, sack_offset=1, bitmap=0x76,
                          verdict=wire.Verdict.SKIP_ONCE).encode(),
        'nack': wire.Nack(dest_qp=0x123, psn=11, reason=wire.NackReason.TRIMMED, ev=0x55,
                          cack_psn=10).encode(),
        'reliability_probe': wire.ReliabilityProbe(dest_qp=0x123, probe_id=9).encode(),
        'ev_probe': wire.EvProbe(req_id=4, ev=0x55, port=1, tx_timestamp=77).encode(),
        'ev_probe_reply': wire.EvProbeReply(req_id=4, ev=0x55, port=1, rx_port=2,
                                            ts_echo=77, service_time_ns=5).encode(),
        'cnp': wire.Cnp(dest_qp=0x123).encode(),
    }


def mrc_offset(frame: bytes) -> int:
    """Where the BTH starts: after Ethernet, the outer IPv6, an SRH if any, inner IPv6, UDP."""
    off = ETH_HLEN + IPV6_HLEN
    if frame[ETH_HLEN + 6] == IPPROTO_ROUTING:
        off += (frame[off + 1] + 1) * 8
    return off + wire.INNER_HEADERS_LEN


def inner_offset(frame: bytes) -> int:
    return mrc_offset(frame) - wire.INNER_HEADERS_LEN


def ecn(frame: bytes, ip_off: int) -> int:
    return frame[ip_off + 1] >> 4 & 3


def traffic_class(frame: bytes, ip_off: int) -> int:
    return (struct.unpack_from('>I', frame, ip_off)[0] >> 20) & 0xFF


def expected_trim(frame: bytes, *, last_hop: bool) -> bytes:
    """The frame a trimming switch must send: every header kept, lengths fixed, and the MRC
    bytes exactly wire.trim_data_packet()'s."""
    mrc_off, inner_off = mrc_offset(frame), inner_offset(frame)
    mrc = wire.trim_data_packet(frame[mrc_off:], last_hop=last_hop)
    out = bytearray(frame[:mrc_off] + mrc)
    struct.pack_into('>H', out, ETH_HLEN + 4, len(out) - ETH_HLEN - IPV6_HLEN)
    inner_len = len(out) - inner_off - IPV6_HLEN
    struct.pack_into('>H', out, inner_off + 4, inner_len)
    struct.pack_into('>HH', out, inner_off + IPV6_HLEN + 4, inner_len, 0)
    return bytes(out)


@dataclass(frozen=True)
class RunResult:
    retval: int
    frame: bytes
    priority: int


def run_program(prog: sp.SwitchPortProgram, frame: bytes, *, ifindex: int,
                netns: str | None = None) -> RunResult:
    """BPF_PROG_TEST_RUN of the pinned program on one frame, as if `ifindex` sent it.
    The kernel looks the ifindex up in the caller's namespace, hence nsenter."""
    with tempfile.TemporaryDirectory(prefix='mrc-switch-port-') as tmp:
        d = Path(tmp)
        ctx = bytearray(SKB_CTX_IN_LEN)
        struct.pack_into('=I', ctx, SKB_IFINDEX_OFF, ifindex)
        (d / 'in').write_bytes(frame)
        (d / 'ctx').write_bytes(bytes(ctx))
        cmd = [sp.bpftool(), '-j', 'prog', 'run', 'pinned', str(prog.prog_pin),
               'data_in', str(d / 'in'), 'data_out', str(d / 'out'),
               'data_size_out', str(len(frame) + 64),
               'ctx_in', str(d / 'ctx'), 'ctx_out', str(d / 'ctx_out')]
        if netns:
            cmd = ['nsenter', '--net=/var/run/netns/' + netns, *cmd]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
        assert result.returncode == 0, result.stderr
        retval = json.loads(result.stdout)['retval']
        ctx_out = (d / 'ctx_out').read_bytes()
        return RunResult(retval=struct.unpack('=i', struct.pack('=I', retval))[0],
                         frame=(d / 'out').read_bytes(),
                         priority=struct.unpack_from('=I', ctx_out, SKB_PRIORITY_OFF)[0])


@pytest.fixture(scope='module')
def machine():
    """The run lock, held while our namespaces and pins exist: a test session starting
    meanwhile would otherwise take them for a crashed run's and clean them away."""
    lock = RunLock()
    lock.acquire()
    try:
        yield
    finally:
        lock.release()
