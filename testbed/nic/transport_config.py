"""Transport knobs of a queue pair that the public MRC record leaves to the implementation.

docs/transport.md lists every choice with its reasoning and points here. EV-table choices
(SKIP duration, probe interval, probes to resurrect, backup promotion) live in
`testbed.nic.ev_table.EvTableConfig`, which a QP receives as its EV profile; congestion-control
choices live in `testbed.nic.cc`. Everything else is here, so a scenario can change any of
them per QP without touching the code.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from testbed.nic.cc import DCQCN_ALGORITHM, NSCC_ALGORITHM

Transport = Literal["mrc", "rc", "ecmp"]
TRANSPORTS: tuple[Transport, ...] = ("mrc", "rc", "ecmp")
# Each transport's congestion control unless a scenario chooses another (a registered
# algorithm name, testbed.nic.cc): MRC's NSCC; DCQCN for the RoCE baselines, as deployed.
DEFAULT_CC: Mapping[str, str] = {"mrc": NSCC_ALGORITHM, "rc": DCQCN_ALGORITHM,
                                  "ecmp": DCQCN_ALGORITHM}


@dataclass(frozen=True, slots=True)
class TransportConfig:
    """Per-QP transport parameters (see docs/transport.md for the why of each default).

    Segmentation
      mtu: path MTU in bytes; payload per packet is wire.max_payload(mtu) (1368 B at 1500).

    Feedback (responder)
      ack_every: coalesce SACKs for in-order arrivals: one SACK per this many packets.
      ack_delay_s: a pending (coalesced) SACK leaves at most this long after the first
        packet it covers, so a trickle of packets is never left unacknowledged.
      sack_on_message_end: SACK at once on the LAST/ONLY packet of a WRITE.
      skip_queueing_target_s: one-way queueing delay (packet age at arrival minus the
        smallest age seen on the QP; hosts share a clock in emulation) above which the
        verdict for that packet's EV is SKIP_ONCE. None disables the delay signal; an ECN
        CE mark reported by the runtime always yields SKIP_ONCE.
      always_skip_after: this many consecutive SKIP_ONCE-worthy packets on one EV make the
        verdict ALWAYS_SKIP (the path is persistently bad, not merely busy)...
      always_skip_max_marked_share: ...unless at least this share of the QP's recent packets,
        on all its EVs, were marked too: then the congestion is where its paths meet (an
        incast's last hops), not on this path, and the verdict stays SKIP_ONCE.
      reverse_paths_per_plane: size of the responder's reverse EV set per plane.
      host_backpressure: SACKs carry a receiver window penalty (rcv_cwnd_pen) for the share
        of packets trimmed at the last hop into this host since the previous SACK, MRC's
        "responder host backpressure" [P2 §II-D]: the one signal of an incast at the
        receiver's own port where the last hop does not mark ECN.
      backpressure_hold_s: with host_backpressure, the SACKs sent within this long of a
        packet trimmed at the last hop carry at least rcv_cwnd_pen 1. NSCC grows no window on
        a SACK that carries a penalty, so while this host's port is an incast's bottleneck
        its senders hold their windows instead of growing them back into the port's trim
        threshold, one trim per growth step (the emulated profile: one base RTT). None: only
        the share above.
      trim_nacks: answer a trimmed packet with NACK TRIMMED / TRIMMED_LASTHOP (the TRIM_NACK
        device capability, on by default in mrc.h); False drops it silently, as a responder
        without the capability would, and recovery falls to SACK holes and timers.

    Recovery (requester)
      reorder_threshold: a PSN is declared lost once a PSN this far above it was SACKed
        (FACK-style duplicate threshold), once per hole; a retransmission, once this many
        packets sent after it were SACKed and it was not (RACK's rule, RFC 8985).
      max_reorder_threshold: the threshold adapts: when an echoed timestamp shows that the
        original of a fast-retransmitted packet arrived after all (a spurious retransmit),
        it grows to the reordering distance seen, up to this bound.
      inferred_losses_to_fail: a timeout is silence and demotes the EV at once; a loss
        inferred from SACK holes may be reordering, so the EV is demoted only after this many
        inferred losses on it with no SACK reflecting it in between.
      packet_timeout_s: per-packet timer (MRC and ECMP); None = the QP ACK timeout.
      retry_give_up_s: the QP's ACK timer fires at a fixed interval and the QP errors after
        this long without progress, not after its retry count: a deployed timer the trial
        cannot wait out, compressed (testbed/nic/deployed_ack_timer.py). None: the count.
      probe_timeout_s: a reliability probe unanswered this long failed; None = packet timeout.
      ack_refresh_s: an MRC requester with packets in flight that has sent nothing and heard
        no SACK or NACK for this long sends one reliability probe on a GOOD EV, whose SACK
        carries the responder's ACK state: a SACK lost on a dead reverse path then costs
        this wait instead of a packet timeout and a healthy EV demoted (only the last SACK
        of a burst matters: the next SACK repairs any other, being cumulative). The probe
        tells the responder that its last SACK did not arrive, and it swaps that SACK's
        reverse path. None: no such probes.
      timestamps: carry a TSETH TX timestamp in data packets and probes (RTT via ts_echo).
      ack_request_on_message_end: set ACK_REQUEST on the last packet of each WRITE.
    """

    mtu: int = 1500
    ack_every: int = 2
    ack_delay_s: float = 50e-6
    sack_on_message_end: bool = True
    skip_queueing_target_s: float | None = 1e-3
    always_skip_after: int = 8
    always_skip_max_marked_share: float = 0.5
    reverse_paths_per_plane: int = 2
    trim_nacks: bool = True
    host_backpressure: bool = True
    backpressure_hold_s: float | None = None
    reorder_threshold: int = 3
    max_reorder_threshold: int = 256
    inferred_losses_to_fail: int = 2
    packet_timeout_s: float | None = None
    retry_give_up_s: float | None = None
    probe_timeout_s: float | None = None
    ack_refresh_s: float | None = None
    timestamps: bool = True
    ack_request_on_message_end: bool = True

    def __post_init__(self) -> None:
        for problem in self._problems():
            raise ValueError(f"TransportConfig: {problem}")

    def _problems(self) -> Iterator[str]:
        if self.mtu < 200:
            yield f"mtu must be >= 200, got {self.mtu}"
        if self.ack_every < 1:
            yield f"ack_every must be >= 1, got {self.ack_every}"
        if not self.ack_delay_s >= 0:
            yield f"ack_delay_s must be >= 0, got {self.ack_delay_s}"
        if self.skip_queueing_target_s is not None and not self.skip_queueing_target_s > 0:
            yield f"skip_queueing_target_s must be > 0 or None, got {self.skip_queueing_target_s}"
        if self.always_skip_after < 1:
            yield f"always_skip_after must be >= 1, got {self.always_skip_after}"
        if not 0 < self.always_skip_max_marked_share <= 1:
            yield ("always_skip_max_marked_share must be in (0, 1], got "
                   f"{self.always_skip_max_marked_share}")
        if self.reverse_paths_per_plane < 1:
            yield f"reverse_paths_per_plane must be >= 1, got {self.reverse_paths_per_plane}"
        if not 1 <= self.reorder_threshold <= self.max_reorder_threshold:
            yield (f"reorder_threshold must be in 1..max_reorder_threshold "
                   f"({self.max_reorder_threshold}), got {self.reorder_threshold}")
        if self.inferred_losses_to_fail < 1:
            yield f"inferred_losses_to_fail must be >= 1, got {self.inferred_losses_to_fail}"
        for name in ("packet_timeout_s", "retry_give_up_s", "probe_timeout_s", "ack_refresh_s",
                     "backpressure_hold_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                yield f"{name} must be > 0 or None, got {value}"
