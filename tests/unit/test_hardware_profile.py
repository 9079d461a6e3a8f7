"""The hardware profile's derivation: packets in flight kept, timers in its RTTs."""
from __future__ import annotations

import pytest

from testbed.nic.emulated_timescale import (PACKET_TIMEOUT_RTTS, base_rtt_s,
                                            fabric_qp_profile, packet_time_s)
from testbed.nic.hardware_profile import (HARDWARE_PROFILES, PAPER_FABRIC, ROCE_400G,
                                          ROCE_800G, ROCE_FABRICS, emulate)
from testbed.nic.wire import MPR_UNIT_PSNS


def test_the_paper_fabric_keeps_about_forty_packets_per_port_in_flight():
    # 100 Gb/s, 4 KB: 0.33 us a packet; 13.1 us of RTT hold 40 of them.
    assert PAPER_FABRIC.packet_s == pytest.approx(0.328e-6, rel=0.01)
    assert PAPER_FABRIC.bdp_packets == pytest.approx(40, rel=0.01)
    assert HARDWARE_PROFILES[PAPER_FABRIC.name] is PAPER_FABRIC


def test_the_emulated_rtt_holds_the_profile_s_packets_and_the_delay_makes_up_the_rest():
    rate, links = 10e6, 6
    structural = base_rtt_s(rate, links)
    t = emulate(PAPER_FABRIC, packet_time_s(rate), structural)
    assert t.base_rtt_s / packet_time_s(rate) == pytest.approx(PAPER_FABRIC.bdp_packets)
    assert structural + 2 * t.rx_delay_s == pytest.approx(t.base_rtt_s)
    assert t.dilation == pytest.approx(t.base_rtt_s / PAPER_FABRIC.base_rtt_s)
    # A duration of one emulated base RTT is one hardware base RTT.
    assert t.hardware_us(t.base_rtt_s) == pytest.approx(13.1)
    assert t.rtts(2 * t.base_rtt_s) == pytest.approx(2)


def test_a_fabric_already_slower_than_the_profile_gets_no_delay():
    rate = 1e6       # 12 ms a packet: 6 hops of store-and-forward alone
    structural = base_rtt_s(rate, 6) * 100
    t = emulate(PAPER_FABRIC, packet_time_s(rate), structural)
    assert t.rx_delay_s == 0 and t.base_rtt_s == structural


def test_timers_follow_the_profile_s_rtt():
    rate, links = 10e6, 6
    t = emulate(PAPER_FABRIC, packet_time_s(rate), base_rtt_s(rate, links))
    plain = fabric_qp_profile('mrc', rate, 2, links)
    held = fabric_qp_profile('mrc', rate, 2, links, base_rtt_override_s=t.base_rtt_s)
    assert held.transport_config.packet_timeout_s == pytest.approx(
        PACKET_TIMEOUT_RTTS * t.base_rtt_s)
    assert held.cc_profile.config.base_rtt_s == pytest.approx(t.base_rtt_s)
    ratio = t.base_rtt_s / base_rtt_s(rate, links)
    assert held.ev_table.probe_interval_s == pytest.approx(
        plain.ev_table.probe_interval_s * ratio)
    # SACK coalescing is counted in packet times, which the delay does not change.
    assert held.transport_config.ack_delay_s == plain.transport_config.ack_delay_s


def test_the_roce_nics_keep_four_and_eight_times_the_mrc_port_s_packets():
    # One 400G or 800G port, 4 KB, the same 13.1 us: 160 and 320 packets.
    assert ROCE_400G.bdp_packets == pytest.approx(4 * PAPER_FABRIC.bdp_packets)
    assert ROCE_800G.bdp_packets == pytest.approx(8 * PAPER_FABRIC.bdp_packets)
    assert [HARDWARE_PROFILES[p.name] for p in ROCE_FABRICS] == [ROCE_400G, ROCE_800G]


@pytest.mark.parametrize('profile, units', [(PAPER_FABRIC, 2), (ROCE_400G, 3),
                                            (ROCE_800G, 5)])
def test_an_rc_qp_s_psn_window_holds_twice_its_profile_s_packets(profile, units):
    # RC is pinned to one port: its bandwidth-delay product is the port's
    # (40, 160, 320 packets). The window never shrinks below the emulator's
    # 2 units (256 PSNs), and grows to 2 x BDP where the profile holds more,
    # or a QP could not reach line rate (256 < 320 on roce-800g).
    rate, links = 10e6, 6
    mtu = profile.mtu
    t = emulate(profile, packet_time_s(rate, mtu), base_rtt_s(rate, links, mtu), mtu)
    rc = fabric_qp_profile('rc', rate, 2, links, base_rtt_override_s=t.base_rtt_s,
                           mtu=mtu)
    assert rc.mpr == rc.mpr_dest == units
    assert rc.mpr * MPR_UNIT_PSNS >= 2 * profile.bdp_packets * 0.99
    assert fabric_qp_profile('rc', rate, 2, links, mtu=mtu).mpr == 2
