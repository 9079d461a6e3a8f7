"""Per-QP counters: plain integer slots bumped on the per-packet path, a dict only on demand."""

from __future__ import annotations

from typing import Any

from testbed.nic.wire import NackReason, Verdict


class QpCounters:
    """Everything a QP counts; to_dict() is JSON-serialisable."""

    __slots__ = (
        "packets_sent", "bytes_sent", "retransmitted_packets", "retransmitted_bytes",
        "fast_retransmits", "spurious_retransmits", "packet_timeouts", "retry_timeouts",
        "go_back_n_rounds",
        "sacks_sent", "sacks_received", "nacks_sent", "nacks_received", "probes_sent",
        "probe_replies", "probe_timeouts", "ev_demotions", "packets_received",
        "bytes_received", "duplicates_received", "trimmed_received", "out_of_order_received",
        "reverse_routes_replaced", "cnps_sent", "cnps_received",
        "stale_feedback", "dropped_not_ready", "requester_completions",
        "responder_completions", "completion_errors", "errors", "nacks_sent_by_reason",
        "nacks_received_by_reason", "sack_verdicts_sent", "sack_verdicts_received",
    )

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)
        self.nacks_sent_by_reason = dict.fromkeys((r.name for r in NackReason), 0)
        self.nacks_received_by_reason = dict.fromkeys((r.name for r in NackReason), 0)
        # Indexed by the verdict's wire value (a list: no hashing on the per-SACK path).
        self.sack_verdicts_sent = [0] * len(Verdict)
        self.sack_verdicts_received = [0] * len(Verdict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in self.__slots__:
            value = getattr(self, name)
            if isinstance(value, list):
                value = {verdict.name: value[verdict] for verdict in Verdict}
            elif isinstance(value, dict):
                value = dict(value)
            out[name] = value
        return out
