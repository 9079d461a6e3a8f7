"""tshark with the project's MRC dissector (wireshark/mrc.lua), and what it must read.

Shared by the unit test on encoder-made packets and the integration test on captures of the
real fabric: every field the dissector shows is held to what testbed.nic.wire decodes.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from testbed.nic import wire
from testbed.nic.wire import (
    Cnp,
    DataPacket,
    EvProbe,
    EvProbeReply,
    Nack,
    PortStatusUpdate,
    ReliabilityProbe,
    Sack,
    Trim,
)

DISSECTOR = Path(__file__).resolve().parents[2] / "wireshark" / "mrc.lua"
TSHARK = shutil.which("tshark")

# Fields compared on every packet that carries them; plus mrc.carrier.usid (a list).
FIELDS = (
    "mrc.opcode", "mrc.iba_byte1", "mrc.pkey", "mrc.version", "mrc.dest_qp",
    "mrc.flags.ack_req", "mrc.flags.retx", "mrc.flags.ts", "mrc.flags.trimmed",
    "mrc.flags.trimmed_lasthop", "mrc.psn", "mrc.cack_psn", "mrc.probe_id", "mrc.req_id",
    "mrc.ev", "mrc.reth.remote_offset", "mrc.reth.rkey", "mrc.reth.total_length", "mrc.immdt",
    "mrc.meth.msn", "mrc.meth.rqmsn", "mrc.tseth.tx_timestamp", "mrc.payload_length",
    "mrc.seth.sack_offset", "mrc.seth.verdict", "mrc.seth.probe_reply", "mrc.seth.mpr",
    "mrc.seth.bitmap", "mrc.reflected_ev", "mrc.seth.trigger_psn", "mrc.ts_echo",
    "mrc.service_time_ns", "mrc.cc.ooo_count", "mrc.cc.rcv_cwnd_pen", "mrc.cc.received_bytes",
    "mrc.neth.reason", "mrc.neth.cack_psn", "mrc.evp.ev", "mrc.evp.port", "mrc.evp.rx_port",
    "mrc.erth.ep_op", "mrc.psu.port_status", "mrc.psu.changed", "mrc.psu.port_count",
    "mrc.icrc", "mrc.icrc.good", "mrc.carrier.plane",
)


def _number(text: str) -> int:
    if text in ("True", "False"):
        return int(text == "True")
    return int(text, 0)


def tshark_fields(pcap: Path, fields: tuple[str, ...], *extra: str) -> list[dict[str, str]]:
    """One dict per frame: field name -> tshark's text ('' when the frame lacks it)."""
    out = subprocess.run(
        [TSHARK, "-n", "-X", f"lua_script:{DISSECTOR}", *extra, "-r", str(pcap), "-T", "fields",
         "-E", "occurrence=a", "-E", "aggregator=,", *(x for f in fields for x in ("-e", f))],
        capture_output=True, text=True, check=True, timeout=120,
    )
    assert "Lua" not in out.stderr, out.stderr   # the dissector loaded without errors
    return [dict(zip(fields, line.split("\t"))) for line in out.stdout.splitlines()]


def dissected(pcap: Path) -> list[dict[str, object]]:
    """Per frame, every MRC field the dissector showed, as ints (usid: a list of ints)."""
    frames = []
    for row in tshark_fields(pcap, FIELDS + ("mrc.carrier.usid",)):
        frame: dict[str, object] = {k: _number(v) for k, v in row.items()
                                    if v and k != "mrc.carrier.usid"}
        usids = row.get("mrc.carrier.usid", "")
        frame["mrc.carrier.usid"] = [int(u, 16) for u in usids.split(",")] if usids else []
        frames.append(frame)
    return frames


def _bth(opcode: int, flags: dict[str, bool], dest_qp: int, psn_field: str, psn: int,
         ev: int, mrc_bytes: bytes) -> dict[str, object]:
    return {
        "mrc.opcode": opcode, "mrc.iba_byte1": 0, "mrc.pkey": wire.BTH_PKEY,
        "mrc.version": wire.PROTOCOL_VERSION, "mrc.dest_qp": dest_qp,
        "mrc.flags.ack_req": int(flags.get("ack_req", False)),
        "mrc.flags.retx": int(flags.get("retx", False)),
        "mrc.flags.ts": int(flags.get("ts", False)),
        "mrc.flags.trimmed": int(flags.get("trimmed", False)),
        "mrc.flags.trimmed_lasthop": int(flags.get("trimmed_lasthop", False)),
        psn_field: psn, "mrc.ev": ev,
        "mrc.icrc": int.from_bytes(mrc_bytes[-4:], "big"), "mrc.icrc.good": 1,
    }


def _data(p: DataPacket) -> dict[str, object]:
    fields: dict[str, object] = {
        "mrc.reth.remote_offset": p.remote_offset, "mrc.reth.rkey": p.rkey,
        "mrc.reth.total_length": p.total_length, "mrc.meth.msn": p.msn,
        "mrc.meth.rqmsn": p.rqmsn, "mrc.payload_length": len(p.payload),
    }
    if p.imm is not None:
        fields["mrc.immdt"] = p.imm
    if p.tx_timestamp is not None:
        fields["mrc.tseth.tx_timestamp"] = p.tx_timestamp
    return fields


def _sack(p: Sack) -> dict[str, object]:
    return {
        "mrc.seth.sack_offset": p.sack_offset, "mrc.seth.verdict": p.verdict,
        "mrc.seth.probe_reply": int(p.probe_reply), "mrc.seth.mpr": p.mpr,
        "mrc.seth.bitmap": p.bitmap, "mrc.reflected_ev": p.ev,
        "mrc.seth.trigger_psn": p.trigger_psn, "mrc.ts_echo": p.ts_echo or 0,
        "mrc.service_time_ns": p.service_time_ns, "mrc.cc.ooo_count": p.ooo_count,
        "mrc.cc.rcv_cwnd_pen": p.rcv_cwnd_pen, "mrc.cc.received_bytes": p.received_bytes,
    }


def _nack(p: Nack) -> dict[str, object]:
    return {"mrc.neth.reason": p.reason, "mrc.reflected_ev": p.ev,
            "mrc.neth.cack_psn": p.cack_psn, "mrc.ts_echo": p.ts_echo or 0}


def expected(packet: wire.Packet, ev: int, mrc_bytes: bytes) -> dict[str, object]:
    """Every MRC field the dissector must show for a packet the project's decoder read."""
    if isinstance(packet, DataPacket):
        flags = {"ack_req": packet.ack_request, "retx": packet.retransmit,
                 "ts": packet.tx_timestamp is not None,
                 "trimmed": packet.trim is not Trim.NONE,
                 "trimmed_lasthop": packet.trim is Trim.TRIMMED_LASTHOP}
        return _bth(packet.opcode, flags, packet.dest_qp, "mrc.psn", packet.psn, ev,
                    mrc_bytes) | _data(packet)
    if isinstance(packet, Sack):
        return _bth(wire.Opcode.SACK, {"ts": packet.ts_echo is not None}, packet.dest_qp,
                    "mrc.cack_psn", packet.cack_psn, ev, mrc_bytes) | _sack(packet)
    if isinstance(packet, Nack):
        return _bth(wire.Opcode.NACK, {"ts": packet.ts_echo is not None}, packet.dest_qp,
                    "mrc.psn", packet.psn, ev, mrc_bytes) | _nack(packet)
    if isinstance(packet, ReliabilityProbe):
        fields = _bth(wire.Opcode.RELIABILITY_PROBE, {"ts": packet.tx_timestamp is not None},
                      packet.dest_qp, "mrc.probe_id", packet.probe_id, ev, mrc_bytes)
        if packet.tx_timestamp is not None:
            fields["mrc.tseth.tx_timestamp"] = packet.tx_timestamp
        return fields
    if isinstance(packet, EvProbe):
        return _bth(wire.Opcode.EV_PROBE, {}, wire.EP_OP_QP, "mrc.req_id", packet.req_id, ev,
                    mrc_bytes) | {"mrc.evp.ev": packet.ev, "mrc.evp.port": packet.port,
                                  "mrc.tseth.tx_timestamp": packet.tx_timestamp}
    if isinstance(packet, Cnp):
        return _bth(wire.Opcode.CNP, {}, packet.dest_qp, "mrc.psn", 0, ev, mrc_bytes)
    if isinstance(packet, PortStatusUpdate):
        return _bth(wire.Opcode.PORT_STATUS_UPDATE, {}, wire.EP_OP_QP, "mrc.req_id",
                    packet.req_id, ev, mrc_bytes) | {
            "mrc.erth.ep_op": wire.EP_OP_PORT_STATUS, "mrc.psu.port_status": packet.port_status,
            "mrc.psu.changed": packet.changed, "mrc.psu.port_count": packet.port_count}
    assert isinstance(packet, EvProbeReply)
    return _bth(wire.Opcode.EV_PROBE_REPLY, {}, wire.EP_OP_QP, "mrc.req_id", packet.req_id, ev,
                mrc_bytes) | {"mrc.evp.ev": packet.ev, "mrc.evp.port": packet.port,
                              "mrc.evp.rx_port": packet.rx_port, "mrc.ts_echo": packet.ts_echo,
                              "mrc.service_time_ns": packet.service_time_ns}


def mrc_fields(frame: dict[str, object]) -> dict[str, object]:
    """The frame's fields expected() speaks of (the carrier is checked on its own)."""
    return {k: v for k, v in frame.items() if not k.startswith("mrc.carrier.")}
