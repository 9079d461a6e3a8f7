import pytest

from testbed.workload.metrics import (jain_index, percentile, recovery_time,
                                      smoothed)


def test_jain():
    assert jain_index([5, 5, 5, 5]) == pytest.approx(1.0)
    assert jain_index([1, 0, 0, 0]) == pytest.approx(0.25)
    assert jain_index([]) is None and jain_index([0, 0]) is None


def test_percentile_nearest_rank():
    values = list(range(1, 101))
    assert percentile(values, 50) == 50 and percentile(values, 99) == 99
    assert percentile([7], 99) == 7 and percentile([], 50) is None


def test_smoothed_is_a_trailing_mean():
    assert smoothed([0, 10, 10, 10], 0.05, 0.1) == [0, 5, 10, 10]


def test_recovery_after_a_dip():
    bin_s = 0.01
    series = [10.0] * 200 + [0.0] * 30 + [10.0] * 200   # fault at 2.0 s
    t = recovery_time(series, bin_s, 2.0)
    assert 0.3 <= t <= 0.45


def test_a_return_shorter_than_the_hold_is_not_the_recovery():
    # a blip 0.05 s after the fault, back for 0.2 s, then the real outage
    # (the sender's window spent) until 3.0 s
    series = [10.0] * 205 + [0.0] * 10 + [10.0] * 20 + [0.0] * 65 + [10.0] * 200
    assert recovery_time(series, 0.01, 2.0) < 0.3   # the blip, smoothed
    t = recovery_time(series, 0.01, 2.0, hold_s=0.5)
    assert 1.0 <= t <= 1.15


def test_no_dip_is_zero_and_no_return_is_none():
    flat = [10.0] * 400
    assert recovery_time(flat, 0.01, 2.0) == 0.0
    dead = [10.0] * 200 + [0.0] * 200
    assert recovery_time(dead, 0.01, 2.0) is None
    assert recovery_time([0.0] * 400, 0.01, 2.0) is None


def test_health_flags_packets_the_datapath_left_unread() -> None:
    """The userspace datapath's thread falling behind shows only as kernel
    drops at its packet sockets: the machine may look idle, no upcall lost."""
    from testbed.workload.emulation_health import HealthSample, health_between
    start = HealthSample(0.0, 0.0, (1000, 500), 0, packets=0, unread=0)
    calm = HealthSample(1.0, 0.2, (2000, 1000), 0, packets=50_000, unread=20)
    busy = HealthSample(1.0, 0.2, (2000, 1000), 0, packets=50_000, unread=900)
    assert health_between(start, calm, [])['trusted']
    verdict = health_between(start, busy, [])
    assert verdict['saturated'] and not verdict['trusted']
    assert verdict['datapath_unread_drops'] == 900
    assert 'left 900 of 50900 packets unread' in verdict['reasons'][0]
