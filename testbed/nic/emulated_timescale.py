"""The QP profile for the emulated fabric's timescale.

The transport's defaults follow hardware: microsecond RTTs, a 1 ms queueing
target before a path is skipped, 1 ms probes. Here RTTs are milliseconds and
Python sockets plus the userspace OVS datapath add tens of milliseconds of
queueing under load, so those defaults read every path as congested or dead
(measured: a 2 MB write on a healthy 2-plane fat-tree ended in
RETRY_EXC_ERR after ~69k probe timeouts). These values fit the emulator;
`emulated_qp_profile` puts them on the QpProfile defaults, for `bring_up` /
`connect` or, as JSON, for an agent.

Every timer is a multiple of the fabric's base RTT, tuned on the default
scenario's fabric (a 10 Mbit/s fat-tree, base RTT 18 ms). A slower fabric
stretches every RTT, because each hop stores and forwards whole frames
(at 1.5 Mbit/s, timers fixed in seconds read busy paths as dead: 1,135
packet and 8,478 probe timeouts in one 8-host permutation), and a
hardware profile's delay stage stretches it further
(`hardware_profile`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from testbed.nic.cc import NSCC_ALGORITHM, CcProfile, NsccConfig
from testbed.nic.ev_table import EvTableConfig
from testbed.nic.hardware_profile import EmulatedTime, HardwareProfile, emulate
from testbed.nic.qp_profile import QpProfile
from testbed.nic.deployed_ack_timer import DEPLOYED_RC
from testbed.nic.qp_state import RetryConfig
from testbed.nic.transport_config import DEFAULT_CC, TransportConfig
from testbed.nic.wire import IMMDT_LEN, MPR_UNIT_PSNS, max_payload

# Every endpoint timer in base RTTs of the fabric it runs on. The multiples
# were tuned on the default scenario's fabric (TUNED_RTT_S, 18 ms), where
# they read 0.2 s (packet timeout), 0.1 s (probe timeout and interval) and
# 50 ms (SKIP's queueing target without CE).
PACKET_TIMEOUT_RTTS = 11.0
PROBE_TIMEOUT_RTTS = 5.5
PROBE_INTERVAL_RTTS = 5.5  # per ASSUMED_BAD EV: at 1.1 RTTs, 32 dead EVs
                           # took a fifth of a 10 Mbit/s port with probes
SKIP_QUEUEING_TARGET_RTTS = 2.8
# An ACK refresh (TransportConfig.ack_refresh_s) after 3 base RTTs of silence
# with packets in flight: past a loaded RTT (NSCC holds the queues near its
# target, a fraction of the base RTT) and the SACK coalescing delay, so a
# flowing QP never sends one, and its answer (one more RTT) arrives well
# before the packet timeout (11) would have resent and demoted.
ACK_REFRESH_RTTS = 3.0
# The QP's ACK (retry) timer runs at the packet timeout. At the hardware
# value, 16.8 ms, it fired whenever a QP went a few packet times without a
# SACK: 701 expiries in one 3 Mbit/s MRC permutation, each demoting a
# healthy EV, and RC, queued behind another flow, resent go-back-N over and
# over (22 MB retransmitted for 16 MB). Fewer backoff steps keep the time
# from last progress to RETRY_EXC_ERR where the hardware value put it: 22
# timeouts, 4.4 s on the tuned fabric.
RETRY = RetryConfig(linear_cnt=7, exp_cnt=3)
# An RC QP's retry count is the verbs one, retry_cnt 7 at the ACK timeout, no
# backoff; its timer stands for NCCL's deployed one, whose budget it spends
# on the timers' clock (deployed_ack_timer, `_give_up`).
RC_RETRY = RetryConfig.verbs()
MPR_UNITS = 2          # 256 PSNs in flight: the userspace datapath drops
                       # bursts much larger than its socket buffers
                       # (more only under a hardware profile: mpr_units)
ACTIVE_EVS = 32        # hardware keeps 128-256 EVs against a BDP of hundreds of packets;
                       # here the BDP is ~25 packets, and with 128 EVs a failure that
                       # kills a quarter of them cost more lost packets than the whole
                       # window, so NSCC's per-loss cut collapsed it to one packet and
                       # the dead EVs were then found one timeout at a time
PROCESSING_RTT_S = 0.01  # Python endpoints and the userspace datapath add
                         # milliseconds to every RTT even on an idle fabric
MTU = 1500               # a fabric's link MTU unless its spec says mtu= (IPv6 packet bytes)
ETHERNET_HEADER_LEN = 14
SACK_FRAME_BYTES = 158   # a SACK with its timestamp echo on the wire
_DEFAULTS = TransportConfig()   # the hardware-scale values this profile departs from


def data_frame_bytes(mtu: int = MTU) -> int:
    """A full MRC data packet on the wire of a link of `mtu`: the packet
    fills the MTU but for the ImmDt that only a WRITE's last packet carries
    (`max_payload` counts it so that every packet carries the same payload)."""
    return ETHERNET_HEADER_LEN + mtu - IMMDT_LEN


DATA_PAYLOAD_BYTES = max_payload(MTU)      # 1,368 bytes in a full MRC packet
DATA_FRAME_BYTES = data_frame_bytes(MTU)   # 1,510: that packet on the wire


def base_rtt_s(link_rate_bps: float | None, path_links: int,
               mtu: int = MTU) -> float:
    """NSCC's base RTT as UEC defines it: one full packet on the longest
    path, and its SACK back. On shaped links each hop stores and forwards
    the whole frame, so at 3 Mbit/s a fat-tree path (6 links) adds 27 ms
    to the emulator's own 10 ms (at the 1,500-byte MTU)."""
    if not link_rate_bps:
        return PROCESSING_RTT_S
    return PROCESSING_RTT_S + path_links * (
        data_frame_bytes(mtu) + SACK_FRAME_BYTES) * 8 / link_rate_bps


def qp_reach(transport: str, port_rate_bps: float, planes: int,
             path_links: int, mtu: int = MTU) -> tuple[float, float]:
    """(the rate one QP can reach, the fabric's base RTT): what NSCC is
    sized on. MRC sprays over every plane's NIC port; a pinned QP (RC,
    ECMP) has one, and sized for all of them its window would be `planes`
    times what its one path carries, all of it queued."""
    ports = planes if transport == 'mrc' else 1
    return port_rate_bps * ports, base_rtt_s(port_rate_bps, path_links, mtu)


@dataclass(frozen=True)
class CongestionSignals:
    """What the fabric tells the endpoints about congestion: CE marks (then
    CE, not queueing delay, is the SKIP verdict and NSCC's ECN input) and
    trimmed headers (then NSCC runs its trimming variant)."""
    ecn: bool = False
    trimming: bool = False


NO_SIGNALS = CongestionSignals()


def fabric_qp_profile(transport: str, link_rate_bps: float | None,
                      planes: int, path_links: int,
                      signals: CongestionSignals = NO_SIGNALS,
                      cc: str | None = None,
                      base_rtt_override_s: float | None = None,
                      mtu: int = MTU) -> QpProfile:
    """The profile of a `transport` QP on a fabric shaped to `link_rate_bps`
    (None: unshaped, no congestion control) with `planes` planes and
    `path_links` links on its longest path, links of `mtu` bytes, running
    congestion control `cc` (a registered algorithm; None: the transport's
    DEFAULT_CC).
    `base_rtt_override_s`: the fabric's base RTT where a hardware profile
    sets it (delay stage included, `hardware_profile.EmulatedTime`)."""
    retry = RC_RETRY if transport == 'rc' else RETRY
    if not link_rate_bps:
        profile = emulated_qp_profile(mtu=mtu)
        return replace(profile, retry=retry, transport_config=_give_up(
            transport, profile.transport_config, PROCESSING_RTT_S))
    rate, rtt = qp_reach(transport, link_rate_bps, planes, path_links, mtu)
    profile = emulated_qp_profile(rate, base_rtt_override_s or rtt,
                                  signals=signals,
                                  cc=cc or DEFAULT_CC[transport], mtu=mtu,
                                  queueing_rtt_s=rtt)
    config = profile.transport_config
    # A coalesced SACK waits at most as long as the packets it waits for
    # take at the port's rate; the hardware's 50 us is a twentieth of one
    # packet time here, so every SACK would leave alone.
    config = replace(config, ack_delay_s=config.ack_every * packet_time_s(link_rate_bps, mtu))
    return replace(profile, retry=retry, transport_config=_give_up(
        transport, config, base_rtt_override_s or rtt))


def _give_up(transport: str, config: TransportConfig, rtt_s: float) -> TransportConfig:
    """An RC QP's ACK timer stands for the deployed one (deployed_ack_timer): it errors
    once the deployed budget has passed on this fabric's timers' clock."""
    if transport != 'rc':
        return config
    return replace(config, retry_give_up_s=DEPLOYED_RC.budget_s * timer_scale(rtt_s))


def fabric_time(profile: HardwareProfile, link_rate_bps: float,
                measured_rtt_s: float, mtu: int = MTU) -> EmulatedTime:
    """How a fabric shaped to `link_rate_bps` with links of `mtu` bytes,
    whose idle base RTT was measured at `measured_rtt_s`, stands for
    `profile`."""
    return emulate(profile, packet_time_s(link_rate_bps, mtu), measured_rtt_s, mtu)


def packet_time_s(link_rate_bps: float, mtu: int = MTU) -> float:
    """One full MRC data packet's time on a link of `mtu` bytes."""
    return data_frame_bytes(mtu) * 8 / link_rate_bps


def nscc_target_s(link_rate_bps: float, path_links: int,
                  trimming: bool, mtu: int = MTU) -> float:
    """NSCC's target queueing delay on this fabric (UEC: a fraction of the
    base RTT), which the switch ports' thresholds are set from."""
    return NsccConfig.defaults(link_rate_bps, base_rtt_s(link_rate_bps,
                                                          path_links, mtu),
                               mtu, trimming).target_delay_s


def bdp_packets(qp_rate_bps: float, rtt_s: float, mtu: int = MTU) -> float:
    """Full data packets a QP reaching `qp_rate_bps` keeps in flight over `rtt_s`."""
    return qp_rate_bps * rtt_s / (data_frame_bytes(mtu) * 8)


def reorder_guard_packets(qp_rate_bps: float, rtt_s: float, mtu: int = MTU) -> int:
    """How far above a hole a SACKed PSN must be before the hole is read as
    lost: one bandwidth-delay product of the QP in packets, the reordering
    guard of the ns-3 MRC model (docs/transport.md, item 21). Sprayed packets on
    paths whose queues differ arrive up to about a queue's worth out of
    order; at the hardware-like guard of 3 PSNs, the first steps of a job on
    a fault-free fat-tree read that reordering as loss and demoted 8-16
    healthy EVs per run (measured in link_failure_allreduce, quick form).

    `rtt_s` is the RTT of the shaped links and endpoints alone, never one a
    hardware profile's delay stage lengthened: the stage holds every packet
    for the same time, so it reorders nothing, and a guard sized on its RTT
    (80 PSNs under mrc-8x100g, the whole window in flight) often found a
    dead EV's holes only once its packet timer fired: link-failure recovery
    took up to 20 base RTTs in 10 draws, against 6.6 with this guard."""
    return max(_DEFAULTS.reorder_threshold, min(
        _DEFAULTS.max_reorder_threshold, math.ceil(bdp_packets(qp_rate_bps, rtt_s, mtu))))


def mpr_units(qp_rate_bps: float, rtt_s: float, mtu: int = MTU) -> int:
    """The QP's PSN window in MPR units: MPR_UNITS, or room for twice the
    QP's bandwidth-delay product where a hardware profile's RTT holds more
    (an RC QP on roce-800g's one port keeps 320 packets in flight; 256 PSNs
    would cap it below line rate). Those packets wait in the receiving
    endpoint's delay stage, not in the datapath's socket buffers, so the
    burst limit behind MPR_UNITS is not theirs."""
    return max(MPR_UNITS, math.ceil(
        2 * bdp_packets(qp_rate_bps, rtt_s, mtu) / MPR_UNIT_PSNS))


# The fabric the timers above were tuned on: 10 Mbit/s, 6-link paths.
TUNED_RTT_S = base_rtt_s(10e6, 6)
# The hardware ACK timer the packet timeout stands for: mrc.h timeout 14, 16.8 ms.
HARDWARE_ACK_TIMEOUT_S = 1.024e-6 * 2 ** 14


def timer_rtt_s(rtt_s: float) -> float:
    """The base RTT a fabric's timers are set in: its own, but not below the
    tuned fabric's; under it, the Python endpoints' and the userspace
    datapath's own milliseconds of jitter dominate."""
    return max(rtt_s, TUNED_RTT_S)


def timer_scale(rtt_s: float = TUNED_RTT_S) -> float:
    """Emulated seconds per hardware second on the timers' clock of a fabric
    whose base RTT is `rtt_s`: its packet timeout over the hardware ACK
    timer it stands for (about 12 on the tuned fabric). Waits that race the
    timers (the routed fabric's convergence, RC's deployed ACK timeout) are
    stretched by it."""
    return PACKET_TIMEOUT_RTTS * timer_rtt_s(rtt_s) / HARDWARE_ACK_TIMEOUT_S


def emulated_qp_profile(link_rate_bps: float | None = None,
                        rtt_s: float = PROCESSING_RTT_S,
                        signals: CongestionSignals = NO_SIGNALS,
                        cc: str = NSCC_ALGORITHM,
                        mtu: int = MTU,
                        queueing_rtt_s: float | None = None) -> QpProfile:
    """The QP profile for a fabric whose base RTT is `rtt_s` (`base_rtt_s`)
    and whose links carry `mtu`-byte packets. `queueing_rtt_s`: the part of
    it that shaped links and endpoints make, where a hardware profile's delay
    stage added the rest (the reordering guard is sized on it); None: all of it.

    With `link_rate_bps` (what the QP can reach, `qp_reach`) congestion
    control `cc` (NSCC unless told) keeps the shaped links' queues short,
    with its defaults for that rate and RTT; without it there is no congestion
    control and only the MPR window bounds what is in flight (measured on 1
    plane x 20 Mbit/s: 63% of line rate with 36% of packets retransmitted
    after queue-induced timeouts, against 91% and none with NSCC).

    Where the fabric marks CE, a SKIP verdict comes from CE alone; where it
    does not, a one-way queueing delay above SKIP_QUEUEING_TARGET_S stands
    in for the mark (the only congestion signal such a fabric gives)."""
    rtt = timer_rtt_s(rtt_s)
    packet_timeout = PACKET_TIMEOUT_RTTS * rtt
    cc_profile = CcProfile() if link_rate_bps is None else \
        CcProfile.for_fabric(cc, link_rate_bps, rtt_s, mtu, signals.trimming,
                             ack_timeout_s=packet_timeout)
    skip_target = None if signals.ecn else SKIP_QUEUEING_TARGET_RTTS * rtt
    reorder = _DEFAULTS.reorder_threshold if link_rate_bps is None \
        else reorder_guard_packets(link_rate_bps, queueing_rtt_s or rtt_s, mtu)
    mpr = MPR_UNITS if link_rate_bps is None else mpr_units(link_rate_bps, rtt_s, mtu)
    return replace(
        QpProfile(),
        cc_profile=cc_profile,
        transport_config=TransportConfig(
            mtu=mtu,
            skip_queueing_target_s=skip_target,
            packet_timeout_s=packet_timeout,
            probe_timeout_s=PROBE_TIMEOUT_RTTS * rtt,
            ack_refresh_s=ACK_REFRESH_RTTS * rtt,
            backpressure_hold_s=rtt,
            reorder_threshold=reorder),
        ev_table=EvTableConfig(active_count=ACTIVE_EVS,
                               probe_interval_s=PROBE_INTERVAL_RTTS * rtt),
        mpr=mpr, mpr_dest=mpr, timeout_s=packet_timeout,
        retry=RETRY)
