"""Per-QP counters: plain integer slots bumped on the per-packet path, a dict only on demand."""

from __future__ import annotations

from typing import Any

from testbed.nic.wire import NackReason, Verdict


class QpCounters:
    """Everything a QP counts; to_dict() is JSON-serialisable.

    Every counter is a declared attribute (not a loop over names): the compiled
    endpoint core (testbed/native_core.py) turns each into a native integer slot."""

    def __init__(self) -> None:
        self.packets_sent: int = 0
        self.bytes_sent: int = 0
        self.retransmitted_packets: int = 0
        self.retransmitted_bytes: int = 0
        self.fast_retransmits: int = 0
        self.spurious_retransmits: int = 0
        self.packet_timeouts: int = 0
        self.retry_timeouts: int = 0
        self.go_back_n_rounds: int = 0
        self.sacks_sent: int = 0
        self.sacks_received: int = 0
        self.nacks_sent: int = 0
        self.nacks_received: int = 0
        self.probes_sent: int = 0
        self.probe_replies: int = 0
        self.probe_timeouts: int = 0
        self.ack_refresh_probes: int = 0
        self.ack_refresh_replies: int = 0
        self.ev_demotions: int = 0
        self.packets_received: int = 0
        self.bytes_received: int = 0
        self.duplicates_received: int = 0
        self.trimmed_received: int = 0
        self.out_of_order_received: int = 0
        self.reverse_routes_replaced: int = 0
        self.port_down_resends: int = 0     # packets resent because their port went down
        self.cnps_sent: int = 0
        self.cnps_received: int = 0
        self.stale_feedback: int = 0
        self.dropped_not_ready: int = 0
        self.requester_completions: int = 0
        self.responder_completions: int = 0
        self.completion_errors: int = 0
        self.errors: int = 0
        self.nacks_sent_by_reason: dict[str, int] = dict.fromkeys(
            (r.name for r in NackReason), 0)
        self.nacks_received_by_reason: dict[str, int] = dict.fromkeys(
            (r.name for r in NackReason), 0)
        # Indexed by the verdict's wire value (a list: no hashing on the per-SACK path).
        self.sack_verdicts_sent: list[int] = [0] * len(Verdict)
        self.sack_verdicts_received: list[int] = [0] * len(Verdict)
        # Packets a timer (packet or retry) declared lost, by the plane they were sent on.
        self.timeout_losses_by_plane: dict[int, int] = {}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in FIELDS:
            value = getattr(self, name)
            if isinstance(value, list):
                value = {verdict.name: value[verdict] for verdict in Verdict}
            elif isinstance(value, dict):
                value = dict(value)
            out[name] = value
        return out


# Every counter, in the order to_dict() reports them.
FIELDS: tuple[str, ...] = (
    "packets_sent", "bytes_sent", "retransmitted_packets", "retransmitted_bytes",
    "fast_retransmits", "spurious_retransmits", "packet_timeouts", "retry_timeouts",
    "go_back_n_rounds", "sacks_sent", "sacks_received", "nacks_sent", "nacks_received",
    "probes_sent", "probe_replies", "probe_timeouts", "ack_refresh_probes",
    "ack_refresh_replies", "ev_demotions", "packets_received",
    "bytes_received", "duplicates_received", "trimmed_received", "out_of_order_received",
    "reverse_routes_replaced", "port_down_resends", "cnps_sent", "cnps_received", "stale_feedback",
    "dropped_not_ready", "requester_completions", "responder_completions",
    "completion_errors", "errors", "nacks_sent_by_reason", "nacks_received_by_reason",
    "sack_verdicts_sent", "sack_verdicts_received", "timeout_losses_by_plane",
)
