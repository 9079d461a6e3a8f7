"""tshark on packets the wire package made: the MRC dissector reads every field of every
packet kind as testbed.nic.wire decodes it, and the stock RoCE dissector reads the IBA
fields of MRC's BTH, RETH and ImmDt right."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.nic import wire
from testbed.nic.wire import DataPacket, Opcode, Trim

from tests.unit import tshark_mrc
from tests.unit.wire_examples import DST, EXAMPLES, SRC

pytest.importorskip("scapy")
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402
from scapy.packet import Raw  # noqa: E402
from scapy.utils import wrpcap  # noqa: E402

pytestmark = pytest.mark.skipif(tshark_mrc.TSHARK is None, reason="tshark not installed")

EV = 0x01020007   # UDP source port 7: Echo's port, lower than MRC's, must not win
CARRIER = "fcbb:bb02:1001:2002:3000:8007::"   # plane 2: edge 1, agg 2, core 0, host h7
TRIMMED_LASTHOP = DataPacket(Opcode.WRITE_LAST, 0x10, 9, 1, 0, 0x2000, 0xAB, 3000, b"",
                             tx_timestamp=5, trim=Trim.TRIMMED_LASTHOP)
PACKETS = list(EXAMPLES.values()) + [TRIMMED_LASTHOP]


def frame(mrc: bytes, ev: int = EV) -> Ether:
    return (Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
            / IPv6(src="fd00:2::1", dst=CARRIER, nh=41) / Raw(wire.build_inner(SRC, DST, ev, mrc)))


def write_pcap(path: Path, packets: list[wire.Packet], ev: int = EV) -> list[bytes]:
    encoded = [p.encode() for p in packets]
    wrpcap(str(path), [frame(mrc, ev) for mrc in encoded])
    return encoded


def test_every_field_of_every_kind_reads_as_the_decoder_reads_it(tmp_path: Path) -> None:
    pcap = tmp_path / "examples.pcap"
    encoded = write_pcap(pcap, PACKETS)
    sack = EXAMPLES["sack"].encode()
    corrupted = sack[:20] + bytes([sack[20] ^ 1]) + sack[21:]
    wrpcap(str(pcap), [frame(corrupted)], append=True)   # one tshark run for both (slow start)
    *frames, flagged = tshark_mrc.dissected(pcap)
    assert len(frames) == len(PACKETS)
    for mrc, frame_fields in zip(encoded, frames):
        assert tshark_mrc.mrc_fields(frame_fields) == tshark_mrc.expected(
            wire.decode(mrc), EV, mrc)
        assert frame_fields["mrc.carrier.plane"] == 2
        assert frame_fields["mrc.carrier.usid"] == [0x1001, 0x2002, 0x3000, 0x8007]
    assert flagged["mrc.icrc.good"] == 0


def test_stock_roce_dissector_reads_the_iba_fields(tmp_path: Path) -> None:
    # With the MRC dissector off the port, UDP 4791 goes to Wireshark's InfiniBand/RoCEv2
    # dissector.
    data = [p for p in PACKETS if isinstance(p, DataPacket)]
    pcap = tmp_path / "stock.pcap"
    # A source port above 4791: Wireshark's UDP tries the lower port first, and the stock
    # dissector has no guard for that.
    write_pcap(pcap, data, ev=0x0102ABCD)
    fields = ("infiniband.bth.opcode", "infiniband.bth.a", "infiniband.bth.p_key",
              "infiniband.bth.padcnt", "infiniband.bth.tver", "infiniband.bth.se",
              "infiniband.bth.m", "infiniband.bth.destqp", "infiniband.bth.psn",
              "infiniband.reth.va", "infiniband.reth.r_key", "infiniband.reth.dmalen",
              "infiniband.immdt")
    rows = tshark_mrc.tshark_fields(pcap, fields, "-o", "mrc.udp_port:0")
    assert len(rows) == len(data)
    for packet, row in zip(data, rows):
        assert int(row["infiniband.bth.opcode"]) == packet.opcode
        assert row["infiniband.bth.a"] in (("1", "True") if packet.ack_request else ("0", "False"))
        assert int(row["infiniband.bth.p_key"]) == 0xFFFF
        assert [row[f] for f in fields[3:7]] in (["0", "0", "0", "0"],
                                                ["0", "0", "False", "False"])
        assert int(row["infiniband.bth.destqp"], 16) == packet.dest_qp
        assert int(row["infiniband.bth.psn"]) == packet.psn
        # IBA carries RETH on FIRST/ONLY (and ImmDt on *_WITH_IMM): there it reads right.
        if packet.opcode in (Opcode.WRITE_FIRST, Opcode.WRITE_ONLY, Opcode.WRITE_ONLY_WITH_IMM):
            assert int(row["infiniband.reth.va"], 16) == packet.remote_offset
            assert int(row["infiniband.reth.r_key"], 16) == packet.rkey
            assert int(row["infiniband.reth.dmalen"]) == packet.total_length
        if packet.imm is not None:
            assert row["infiniband.immdt"].split(",")[0] == "%08x" % packet.imm
