"""QP attributes for the emulated fabric's timescale.

The transport's defaults follow hardware: microsecond RTTs, a 1 ms queueing
target before a path is skipped, 1 ms probes. Here RTTs are milliseconds and
Python sockets plus the userspace OVS datapath add tens of milliseconds of
queueing under load, so those defaults read every path as congested or dead
(measured: a 2 MB write on a healthy 2-plane fat-tree ended in
RETRY_EXC_ERR after ~69k probe timeouts). These values fit the emulator;
pass them to `bring_up` / `connect` (they are plain overrides).
"""
from __future__ import annotations

from typing import Any

from testbed.nic.ev_table import EvTableConfig
from testbed.nic.nscc import NSCC_ALGORITHM, CcProfile, NsccConfig
from testbed.nic.transport_config import TransportConfig

SKIP_QUEUEING_TARGET_S = 0.05
PACKET_TIMEOUT_S = 0.2
PROBE_TIMEOUT_S = 0.1
PROBE_INTERVAL_S = 0.1 # per ASSUMED_BAD EV: at 20 ms, 32 dead EVs took a fifth
                       # of a 10 Mbit/s port with probes
MPR_UNITS = 2          # 256 PSNs in flight: the userspace datapath drops
                       # bursts much larger than its socket buffers
ACTIVE_EVS = 32        # hardware keeps 128-256 EVs against a BDP of hundreds of packets;
                       # here the BDP is ~25 packets, and with 128 EVs a failure that
                       # kills a quarter of them cost more lost packets than the whole
                       # window, so NSCC's per-loss cut collapsed it to one packet and
                       # the dead EVs were then found one timeout at a time
BASE_RTT_S = 0.01      # NSCC's base RTT: Python endpoints and the userspace
                       # datapath add milliseconds even on an idle fabric


def emulated_qp_attrs(link_rate_bps: float | None = None) -> dict[str, Any]:
    """With `link_rate_bps` (what the QP can reach: planes x shaped rate),
    NSCC keeps the shaped links' queues short; without it there is no
    congestion control and only the MPR window bounds what is in flight
    (measured on 1 plane x 20 Mbit/s: 63% of line rate with 36% of packets
    retransmitted after queue-induced timeouts, against 91% and none with
    NSCC)."""
    cc = CcProfile() if link_rate_bps is None else CcProfile(
        NSCC_ALGORITHM, NsccConfig.defaults(link_rate_bps, BASE_RTT_S, 1500,
                                            trimming=False))
    return dict(
        cc_profile=cc,
        config=TransportConfig(skip_queueing_target_s=SKIP_QUEUEING_TARGET_S,
                               packet_timeout_s=PACKET_TIMEOUT_S,
                               probe_timeout_s=PROBE_TIMEOUT_S),
        ev_profile=EvTableConfig(active_count=ACTIVE_EVS,
                                 probe_interval_s=PROBE_INTERVAL_S),
        mpr=MPR_UNITS, mpr_dest=MPR_UNITS)
