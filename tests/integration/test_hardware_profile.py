"""The hardware profile on a real fabric: the delay stage, made up from the
fabric's measured idle base RTT, gives the profile's base RTT."""
from __future__ import annotations

import pytest

from testbed.nic.emulated_timescale import fabric_time
from testbed.nic.hardware_profile import PAPER_FABRIC
from testbed.workload.base_rtt import measure_base_rtt

SPEC = 'fattree,k=4,planes=2,bw=10'


@pytest.mark.parametrize('mtu', [1500, PAPER_FABRIC.mtu])
def test_the_delay_stage_gives_the_profile_s_base_rtt(fabric_factory, mtu):
    fab = fabric_factory('%s,mtu=%d' % (SPEC, mtu))
    own = measure_base_rtt(fab)
    timescale = fabric_time(PAPER_FABRIC, fab.link_rate_bps, own, fab.mtu)
    # The profile's 40 packets in flight per port take 48 ms at 10 Mbit/s
    # (131 ms in 4 KB packets); the idle fabric gives a few ms (an idle HTB
    # class sends at once), so the stage makes up most of it.
    assert timescale.rx_delay_s > own / 2
    held = measure_base_rtt(fab, timescale=timescale)
    # Within 10 % of the profile's: a second measurement, with the stage
    # holding every received packet (data one way, its SACK the other).
    assert held == pytest.approx(timescale.base_rtt_s, rel=0.10), (own, held)
