"""DCQCN on a real fabric: the switch ports mark CE, the RC responders answer
with CNPs through the fabric, and the RC requesters cut their rate. On the
routed fabric, where the RoCE baselines run: the CNPs and ACKs go plain
IPv6, and the switch ports still give them the control class."""
from __future__ import annotations

import time

from testbed.nic.cc import DCQCN_ALGORITHM
from testbed.workload.endpoint_flows import EndpointFlows

# Four RC flows leave leaf 0 for leaf 1 over its two 5 Mbit/s uplinks (each
# QP pinned to one): twice what they carry, so the uplinks queue and mark.
SPEC = 'leafspine,leaves=2,spines=2,hosts=4,planes=1,bw=5'
FLOWS = [('h1', 'h5'), ('h2', 'h6'), ('h3', 'h7'), ('h4', 'h8')]
SIZE = 1 << 20
TIMEOUT_S = 90


def test_incast_of_rc_flows_brings_cnps_and_rate_cuts(fabric_factory):
    fab = fabric_factory(SPEC)
    assert fab.signals is not None and fab.congestion_signals.ecn
    driver = EndpointFlows(fab, 'rc', seed=5, fabric_mode='routed',
                           cc=DCQCN_ALGORITHM)
    lowest: dict[tuple[str, str], float] = {}
    try:
        driver.prepare([(a, b, SIZE) for a, b in FLOWS])
        for i, (a, b) in enumerate(FLOWS):
            driver.start(i, a, b, SIZE)
        t0 = time.monotonic()
        while any(driver.status(i) == 'running' for i in range(len(FLOWS))):
            elapsed = time.monotonic() - t0
            assert elapsed < TIMEOUT_S
            driver.poll()
            for pair, conn in driver.connections.items():
                rate = conn.requester.cc.rate_bps
                lowest[pair] = min(rate, lowest.get(pair, rate))
        for i in range(len(FLOWS)):
            assert driver.status(i) == 'done' and driver.corrupt_bytes(i) == 0
        counters = driver.transport_counters()
        conns = list(driver.connections.values())
        line = conns[0].requester.cc.config.line_rate_bps
        interval = conns[0].requester.cc.config.cnp_interval_s
        prioritized = sum(c['prioritized']
                          for c in fab.signals.counters().values())
    finally:
        driver.close()
    assert counters['cnps_sent'] > 0 and counters['rate_cuts'] > 0
    # CNPs ride the switch ports' control class, which is never trimmed.
    assert 0 < counters['cnps_received'] <= counters['cnps_sent']
    # Every CNP and ACK took the control class at each switch port it left
    # (two or three on a leaf-spine): at least one per CNP received.
    assert prioritized >= counters['cnps_received']
    # One CNP per QP per interval at most, over the whole transfer.
    assert counters['cnps_sent'] <= len(FLOWS) * (elapsed / interval + 1)
    # The first cut alone halves a rate (alpha starts at 1023/1024): some QP
    # that was marked went down to about half its line rate or below.
    assert min(lowest.values()) <= 0.51 * line
