"""NSCC's parameters on the emulated timescale (no root needed)."""
from dataclasses import replace

import pytest

from testbed.fabric.topo_spec import parse_topo_spec
from testbed.fabric.usid_plan import FabricPlan
from testbed.nic.emulated_timescale import (DATA_FRAME_BYTES, MPR_UNITS,
                                            PROCESSING_RTT_S, RETRY, base_rtt_s,
                                            data_frame_bytes, emulated_qp_profile,
                                            fabric_qp_profile, packet_time_s,
                                            qp_reach, reorder_guard_packets)
from testbed.nic.wire import max_payload
from testbed.nic.qp_profile import QpProfile


@pytest.mark.parametrize('spec, mbit', [
    ('fattree,k=4,planes=2', 3), ('fattree,k=4,planes=1', 10),
    ('leafspine,leaves=2,spines=2,hosts=1,planes=4', 20),
])
def test_the_window_covers_a_full_packet_on_every_link_of_the_longest_path(
        spec, mbit):
    # One QP must be able to keep every shaped port of every plane busy
    # while its packets are stored and forwarded hop by hop (sized on the
    # emulator's 10 ms alone it could not: at 3 Mbit/s a fat-tree path
    # stores and forwards a frame for 24 ms).
    plan = FabricPlan.from_topo(parse_topo_spec(spec).build())
    port_bps = mbit * 1e6
    qp_bps = port_bps * len(plan.planes)
    rtt = base_rtt_s(port_bps, plan.longest_path_links)
    nscc = emulated_qp_profile(qp_bps, rtt).cc_profile.config
    one_packet_rtt = PROCESSING_RTT_S + plan.longest_path_links * \
        DATA_FRAME_BYTES * 8 / port_bps
    assert nscc.max_cwnd >= qp_bps / 8 * one_packet_rtt
    # Queueing is what NSCC's target measures, not serialization.
    assert nscc.target_delay_s == pytest.approx(rtt)


def test_without_a_rate_the_base_rtt_is_the_emulator_floor():
    assert base_rtt_s(None, 6) == PROCESSING_RTT_S
    assert emulated_qp_profile().cc_profile.config is None


def timers(profile):
    c = profile.transport_config
    return (c.packet_timeout_s, c.probe_timeout_s, c.skip_queueing_target_s,
            profile.ev_table.probe_interval_s, profile.timeout_s, c.ack_refresh_s)


def test_timers_stretch_with_a_slower_fabric_and_only_then():
    tuned = timers(emulated_qp_profile(20e6, base_rtt_s(10e6, 6)))
    assert tuned == timers(emulated_qp_profile(40e6, base_rtt_s(20e6, 4)))
    # The packet timeout in base RTTs: 11 of the tuned fabric's 18 ms; the
    # ACK refresh 3 of them, an answer's RTT short of a third of it.
    assert tuned[0] == tuned[4] == pytest.approx(0.198, abs=1e-3)
    assert tuned[5] == pytest.approx(tuned[0] * 3 / 11)
    slow = timers(emulated_qp_profile(6e6, base_rtt_s(3e6, 6)))
    ratio = base_rtt_s(3e6, 6) / base_rtt_s(10e6, 6)
    assert ratio > 2
    assert slow == pytest.approx(tuple(t * ratio for t in tuned))


def test_a_pinned_qp_is_sized_on_one_port_mrc_on_every_plane():
    mrc = qp_reach('mrc', 3e6, 4, 6)
    for pinned in ('rc', 'ecmp'):
        assert qp_reach(pinned, 3e6, 4, 6) == (3e6, mrc[1])
    assert mrc == (12e6, base_rtt_s(3e6, 6))


def test_the_emulated_profile_is_the_defaults_with_the_emulator_s_values():
    profile = emulated_qp_profile(20e6, base_rtt_s(10e6, 6))
    same_elsewhere = replace(profile, cc_profile=QpProfile().cc_profile,
                             transport_config=QpProfile().transport_config,
                             ev_table=QpProfile().ev_table, mpr=8, mpr_dest=8,
                             timeout_s=None, retry=QpProfile().retry)
    assert same_elsewhere == QpProfile()
    assert (profile.mpr, profile.mpr_dest, profile.retry) == (MPR_UNITS, MPR_UNITS, RETRY)


def test_the_links_mtu_sizes_packets_their_time_and_the_base_rtt():
    # A mid-WRITE packet fills the MTU but for the ImmDt (4 bytes), plus
    # Ethernet's 14: 1,510 bytes on the wire at 1,500.
    assert data_frame_bytes(1500) == DATA_FRAME_BYTES == 1510
    assert data_frame_bytes(4096) == 4106
    assert packet_time_s(10e6, 4096) == pytest.approx(4106 * 8 / 10e6)
    # Each of the 6 hops stores and forwards the larger frame.
    assert base_rtt_s(10e6, 6, 4096) - base_rtt_s(10e6, 6) == pytest.approx(
        6 * (4106 - 1510) * 8 / 10e6)
    profile = fabric_qp_profile('mrc', 10e6, 2, 6, mtu=4096)
    assert profile.transport_config.mtu == 4096
    assert profile.cc_profile.config.mtu == 4096
    assert max_payload(profile.transport_config.mtu) == 3964
    # The SACK coalescing delay is the packets' time at the new size.
    config = profile.transport_config
    assert config.ack_delay_s == pytest.approx(config.ack_every * packet_time_s(10e6, 4096))


def test_the_reorder_guard_is_one_bdp_of_the_qp_in_packets():
    # MRC on 2 planes of 10 Mbit/s, 18 ms: 20 Mbit/s x 18 ms = 45 kB, 29.8
    # frames of 1,510 bytes -> 30; never below the default 3 (an unshaped or
    # tiny fabric), never above the adaptive bound.
    rate, rtt = qp_reach('mrc', 10e6, 2, 6)
    assert reorder_guard_packets(rate, rtt) == 30
    profile = fabric_qp_profile('mrc', 10e6, 2, 6)
    assert profile.transport_config.reorder_threshold == 30
    assert reorder_guard_packets(1e5, 0.01) == 3
    assert reorder_guard_packets(1e11, 1.0) == 256
    assert fabric_qp_profile('mrc', None, 2, 6).transport_config.reorder_threshold == 3


def test_a_delay_stage_leaves_the_reorder_guard_at_the_fabric_s_own_bdp():
    # A hardware profile's delay stage holds every packet for the same time,
    # so it adds RTT but no reordering: the guard stays the BDP of the shaped
    # links and endpoints (30 at 10 Mbit/s x 2 planes), not of the stretched
    # RTT (131 ms under mrc-8x100g would make it 217, most of the window).
    plain = fabric_qp_profile('mrc', 10e6, 2, 6)
    stretched = fabric_qp_profile('mrc', 10e6, 2, 6, base_rtt_override_s=0.131)
    assert stretched.transport_config.reorder_threshold == \
        plain.transport_config.reorder_threshold == 30
    # ... while every timer follows the stretched RTT.
    assert stretched.transport_config.packet_timeout_s == pytest.approx(11 * 0.131)
