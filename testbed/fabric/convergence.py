"""How long the routed fabric takes to move traffic off a dead link.

In a BGP-routed Clos (RFC 7938, the design large AI back-end fabrics run)
a physical link-down is seen in milliseconds ("fast fallover"), and RFC 7938
§7 argues that sub-second convergence is then achievable once withdrawals
propagate and every FIB is updated; with keepalive-based detection it takes
multiple seconds (hold timers of 3 s and more). The IETF draft on IP fast
reroute for AI/ML fabrics (draft-clad-rtgwg-ipfrr-aiml-00, 2026) describes
that control-plane convergence as far from what AI workloads need. The
default here is the sub-second case, 500 ms on hardware.

The emulated fabric runs on a slower clock: its RTTs are milliseconds, not
microseconds, and the transports' timers are stretched to match
(`testbed.nic.emulated_timescale`). What the comparison needs preserved is
the race between convergence and an RC QP's retry budget, so convergence is
scaled by the same factor as the QP's ACK timer: the emulated packet timeout
over the hardware one it stands for (16.8 ms, mrc.h timeout 14, what
`testbed.nic.emulated_timescale` calls the hardware value): about 12x, so
500 ms on hardware is about 6 s here. A fabric whose base RTT is longer than
the tuned one (slower links, longer paths, larger packets) stretches its
timers further, and its convergence with them (`delay_for`): 3,500-byte
packets on the default fat-tree (27.6 ms against 18.0) make it 9.05 s.
"""
from __future__ import annotations

from testbed.nic.emulated_timescale import TUNED_RTT_S, timer_scale

HARDWARE_CONVERGENCE_S = 0.5
# The packet timeout on the fabric the timers were tuned on (0.2 s) over the
# hardware ACK timer (16.8 ms).
TIMER_SCALE = timer_scale()
DEFAULT_CONVERGENCE_DELAY_S = round(HARDWARE_CONVERGENCE_S * TIMER_SCALE, 2)


def emulated_delay(hardware_s: float, base_rtt_s: float = TUNED_RTT_S) -> float:
    """A hardware convergence time on the emulated timescale of a fabric whose
    base RTT is `base_rtt_s` (its timers' scale: emulated_timescale.timer_scale)."""
    return hardware_s * timer_scale(base_rtt_s)


def delay_for(base_rtt_s: float | None) -> float:
    """The default convergence delay of a fabric with that base RTT (None:
    unshaped links, the tuned fabric's)."""
    if base_rtt_s is None:
        return DEFAULT_CONVERGENCE_DELAY_S
    return round(emulated_delay(HARDWARE_CONVERGENCE_S, base_rtt_s), 2)
