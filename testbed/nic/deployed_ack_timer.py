"""An RC QP's ACK timer as deployed, and how the emulator stands in for a wait it cannot make.

Everything that relates RC's timer to the deployed one lives here.

Deployed: NCCL sets each RC QP's local ACK timeout exponent to NCCL_IB_TIMEOUT (default 20)
and its retry count to NCCL_IB_RETRY_CNT (default 7): `NCCL_PARAM(IbTimeout, "IB_TIMEOUT",
20)` and `NCCL_PARAM(IbRetryCnt, "IB_RETRY_CNT", 7)` in NCCL's IB transport
(https://github.com/NVIDIA/nccl, src/transport/net_ib; older releases had 18, and 14 before
that; https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html). The IBA timeout is
4.096 us x 2^exponent: 4.29 s; the QP moves to ERROR (IBV_WC_RETRY_EXC_ERR) after retry_cnt
retries without progress, 8 timeouts, 34.4 s after its last progress.

The emulator runs every timer on a stretched clock (`emulated_timescale.timer_scale`: ~12
emulated seconds per hardware second on the tuned fabric), the one its routed fabric's
convergence delay uses too (testbed/fabric/convergence.py). One deployed timeout is then 51 s
of emulated time, the budget 7 minutes: longer than any trial.

So the wait is compressed, and said so:

- The QP's timer fires one packet timeout T (11 base RTTs) after its last progress, and again
  every T while nothing progresses (a fixed interval: no backoff stretches the wait after the
  fabric has healed). A *stall* runs from the first expiry after progress to the next progress.
- In hardware the first retry leaves one deployed timeout after the last progress. Every
  change the emulated fabric makes within that time on its own clock (a fault undone,
  routes converged, OVS revalidating its flows) has happened by then, so a stall stands for
  one deployed timeout, with every later stall that begins before that retry would leave
  (the compressed retries met the fabric halfway through its repair; the deployed one
  would not), and for one more each time such a retry would find the QP still stalled:
  `hardware_timeouts`.
- The QP errors only once its time without progress passes the deployed budget on the
  stretched clock (`DeployedAckTimer.budget_s` x the scale): the verbs' retry count is spent
  where the deployed one would be, never sooner.

Results report each transport's stalls and the hardware time they stand for
(docs/transport.md, "RC's ACK timer as deployed"); the emulated completion times leave that
wait out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from testbed.nic.qp_state import RC_TIMEOUT_UNIT_S, VERBS_RETRY_CNT, timeout_seconds

NCCL_IB_TIMEOUT = 20        # NCCL's default local ACK timeout exponent (net_ib, above)
NCCL_IB_RETRY_CNT = VERBS_RETRY_CNT   # NCCL's default retry count, 7


@dataclass(frozen=True, slots=True)
class DeployedAckTimer:
    """A deployed RC QP's ACK timer: the verbs exponent and retry count."""

    exponent: int = NCCL_IB_TIMEOUT
    retry_cnt: int = NCCL_IB_RETRY_CNT

    @property
    def timeout_s(self) -> float:
        """One local ACK timeout, hardware seconds."""
        return timeout_seconds(self.exponent, RC_TIMEOUT_UNIT_S)

    @property
    def budget_s(self) -> float:
        """Last progress to the QP error on a dead path, hardware seconds."""
        return (self.retry_cnt + 1) * self.timeout_s

    def hardware_timeouts(self, stalls: Sequence[tuple[float, float]], scale: float) -> int:
        """Deployed timeouts one QP's stalls, (start, length) in emulated seconds, stand for
        on a clock that stretches a hardware second to `scale` emulated ones: a deployed
        retry leaves one stretched timeout after a stall begins, covers every stall begun
        before it, and is lost too (one more timeout) if the QP is still stalled then."""
        period = self.timeout_s * scale
        spans = sorted((start, start + length) for start, length in stalls)
        count, i = 0, 0
        while i < len(spans):
            retry = spans[i][0] + period
            count += 1
            while i < len(spans) and spans[i][0] < retry:
                if spans[i][1] > retry:          # still stalled when the retry leaves
                    retry += period
                    count += 1
                else:
                    i += 1
        return count

    def scale_of(self, give_up_s: float) -> float:
        """The timers' clock of a QP that gives up after `give_up_s` (the deployed budget
        stretched: emulated_timescale.fabric_qp_profile)."""
        return give_up_s / self.budget_s

    def counters(self, per_qp: Sequence[Sequence[tuple[float, float]]], running: int,
                 scale: float) -> dict[str, int]:
        """What results count of a transport's stalls, every QP's (start, length) in
        emulated seconds, of which `running` had not ended when the run did."""
        return {'ack_timer_stalls': sum(len(stalls) for stalls in per_qp),
                'ack_timer_stalled_qps': sum(bool(stalls) for stalls in per_qp),
                'ack_timer_hardware_timeouts': sum(self.hardware_timeouts(stalls, scale)
                                                   for stalls in per_qp),
                'ack_timer_stalled_at_end': running}

    def describe(self, scale: float) -> dict:
        """For results: the deployed timer and its length on this fabric's clock."""
        return {'nccl_ib_timeout': self.exponent, 'retry_cnt': self.retry_cnt,
                'timeout_s': round(self.timeout_s, 3),
                'emulated_timeout_s': round(self.timeout_s * scale, 1),
                'budget_s': round(self.budget_s, 1)}


DEPLOYED_RC = DeployedAckTimer()
