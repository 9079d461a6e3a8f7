"""Per-QP counters: plain integer slots bumped on the per-packet path, a dict only on demand."""

from __future__ import annotations

from typing import Any

from testbed.nic.wire import NackReason


class QpCounters:
    """Everything a QP counts; to_dict() is JSON-serialisable."""

    __slots__ = (
        "packets_sent", "bytes_sent", "retransmitted_packets", "retransmitted_bytes",
        "fast_retransmits", "packet_timeouts", "retry_timeouts", "go_back_n_rounds",
        "sacks_sent", "sacks_received", "nacks_sent", "nacks_received", "probes_sent",
        "probe_replies", "probe_timeouts", "ev_demotions", "packets_received",
        "bytes_received", "duplicates_received", "out_of_order_received",
        "stale_feedback", "dropped_not_ready", "requester_completions",
        "responder_completions", "completion_errors", "errors", "nacks_sent_by_reason",
        "nacks_received_by_reason",
    )

    def __init__(self) -> None:
        for name in self.__slots__:
            setattr(self, name, 0)
        self.nacks_sent_by_reason = dict.fromkeys((r.name for r in NackReason), 0)
        self.nacks_received_by_reason = dict.fromkeys((r.name for r in NackReason), 0)

    def to_dict(self) -> dict[str, Any]:
        return {name: (dict(value) if isinstance(value := getattr(self, name), dict) else value)
                for name in self.__slots__}
