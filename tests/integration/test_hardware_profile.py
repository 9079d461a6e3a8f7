"""The hardware profile on a real fabric: the delay stage makes the measured
base RTT the profile's, and without it the fabric has its own.

The base RTT, as NSCC defines it, is one full packet out on the longest path
and its acknowledgement back; a one-packet WRITE on an idle fabric completes
after exactly that, so the time from posting it to its completion is the
measurement (the median of several, one at a time)."""
from __future__ import annotations

import statistics
import time

import pytest

from testbed.nic.emulated_timescale import (DATA_PAYLOAD_BYTES, base_rtt_s,
                                            fabric_time)
from testbed.nic.hardware_profile import PAPER_FABRIC
from testbed.workload.endpoint_flows import EndpointFlows


SPEC = 'fattree,k=4,planes=2,bw=10'
RATE_BPS = 10e6
SRC, DST = 'h1', 'h16'          # other pods: every path has 6 links
WRITES = 15


def one_packet_rtts(fab, timescale) -> list[float]:
    driver = EndpointFlows(fab, 'mrc', seed=1, timescale=timescale)
    try:
        driver.prepare([(SRC, DST, DATA_PAYLOAD_BYTES)])
        rtts = []
        for flow_id in range(WRITES):
            posted = time.monotonic()
            driver.start(flow_id, SRC, DST, DATA_PAYLOAD_BYTES)
            while driver.status(flow_id) == 'running':
                assert time.monotonic() - posted < 5, 'a one-packet write hung'
                driver.poll()
            assert driver.status(flow_id) == 'done'
            rtts.append(time.monotonic() - posted)
        return rtts[1:]             # the first pays for warming up the path
    finally:
        driver.close()


def test_the_delay_stage_gives_the_profile_s_base_rtt(fabric_factory):
    fab = fabric_factory(SPEC)
    links = fab.plan.longest_path_links
    timescale = fabric_time(PAPER_FABRIC, RATE_BPS, links)
    assert timescale.rx_delay_s > 0          # this fabric needs the stage
    own = statistics.median(one_packet_rtts(fab, None))
    held = statistics.median(one_packet_rtts(fab, timescale))
    # Within 10 % of what each should be: the fabric's own base RTT
    # (store-and-forward of one packet and its SACK over 6 links, plus the
    # emulator's processing) and the profile's (the same plus the stage).
    assert own == pytest.approx(base_rtt_s(RATE_BPS, links), rel=0.10), own
    assert held == pytest.approx(timescale.base_rtt_s, rel=0.10), held
