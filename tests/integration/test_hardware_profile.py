"""The hardware profile on a real fabric: the delay stage, made up from the
fabric's measured idle base RTT, gives the profile's base RTT."""
from __future__ import annotations

import statistics

import pytest

from testbed.nic.emulated_timescale import fabric_time
from testbed.nic.hardware_profile import PAPER_FABRIC
from testbed.workload.base_rtt import measure_base_rtt

SPEC = 'fattree,k=4,planes=2,bw=10'
ROUNDS = 7           # own and held RTTs, measured in turns
PER_ROUND = 5        # one-packet writes a measurement takes the median of


# Whether the held RTT is bounded above too: where the stage is most of the
# profile's RTT (4 KB packets: 2 x ~50 ms against the fabric's 13-38 ms),
# not with 1,500-byte frames (below).
@pytest.mark.parametrize('mtu,bounded_above', [(1500, False), (PAPER_FABRIC.mtu, True)])
def test_the_delay_stage_gives_the_profile_s_base_rtt(fabric_factory, mtu, bounded_above):
    fab = fabric_factory('%s,mtu=%d' % (SPEC, mtu))
    own = measure_base_rtt(fab)
    timescale = fabric_time(PAPER_FABRIC, fab.link_rate_bps, own, fab.mtu)
    # The profile's 40 packets in flight per port take 48 ms at 10 Mbit/s
    # (131 ms in 4 KB packets); the idle fabric gives a few ms (an idle HTB
    # class sends at once), so the stage makes up most of it.
    assert timescale.rx_delay_s > own / 2
    # The stage holds every received packet (data one way, its SACK the
    # other) for rx_delay: it adds exactly 2 rx_delay to the fabric's own RTT
    # of the moment, which the profile took to be `own`. The fabric's own RTT
    # does not hold still on a busy 2-core machine (one write's took 9.5 to
    # 28.5 ms on this fat-tree's system ports, and a median of 15 moved from
    # 13.9 to 21.2 ms between two measurements), so own and held RTTs are
    # measured in turns, each ROUNDS times, and their medians compared: both
    # then sample the same moments of the machine.
    owns, helds = [], []
    for _ in range(ROUNDS):
        helds.append(measure_base_rtt(fab, samples=PER_ROUND, timescale=timescale))
        owns.append(measure_base_rtt(fab, samples=PER_ROUND))
    own_now, held = statistics.median(owns), statistics.median(helds)
    added = 2 * timescale.rx_delay_s
    print('own %.1f ms, with the stage %.1f ms, own in turns with it %.1f ms; '
          'profile %.1f ms' % (own * 1e3, held * 1e3, own_now * 1e3,
                               timescale.base_rtt_s * 1e3))
    # Within 10 % of the own RTT of those moments plus the stage, and so
    # within 10 % of the profile's base RTT whenever the fabric's own RTT
    # held still. Never under: the stage releases no packet early.
    assert held >= 0.9 * (own_now + added), (owns, helds)
    # Not over, where the stage dominates. With 1,500-byte frames (a stage
    # of 2 x ~15 ms, about twice the fabric's own RTT) the own RTT measured
    # back to back is not the one of the held writes: traced write by write
    # on Dec 7, the stage released each packet 0.4-1.3 ms after rx_delay,
    # but the fabric's own one-way crossings took 11-12 ms between 15 ms
    # holds against 6-9 ms back to back (system ports: an idle machine wakes
    # ovs-vswitchd later), and held came out 9-11.5 % over in three runs.
    # Open until own RTTs are measured with the stage's idle gaps.
    if bounded_above:
        assert held <= 1.1 * (own_now + added), (owns, helds)
