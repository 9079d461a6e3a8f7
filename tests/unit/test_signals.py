"""How a fabric's switch ports are told to signal: thresholds from NSCC's
target, the spec keys, and refusals before anything is built."""
import pytest

from testbed.fabric.link_options import FeatureMissing, LinkOptionError
from testbed.fabric.signals import (MARK_TARGET_FRACTION, TRIM_TARGET_MULTIPLE,
                                    default_thresholds, port_config, resolve,
                                    settings_from_spec)
from testbed.fabric.topo_spec import TopoSpecError, parse_topo_spec
from testbed.nic.emulated_timescale import base_rtt_s, nscc_target_s

FAT_TREE_LINKS = 6


def params(text):
    return parse_topo_spec(text).kwargs()


def test_thresholds_are_queues_at_fractions_of_nsccs_target():
    rate = 10e6
    target = nscc_target_s(rate, FAT_TREE_LINKS, trimming=True)
    # UEC: with trimming the target is 0.75 of the base RTT.
    assert target == pytest.approx(0.75 * base_rtt_s(rate, FAT_TREE_LINKS),
                                   rel=1e-6)
    mark, trim = default_thresholds(rate, FAT_TREE_LINKS)
    queue_at_target = rate / 8 * target
    assert mark == round(MARK_TARGET_FRACTION * queue_at_target)
    assert trim == round(TRIM_TARGET_MULTIPLE * queue_at_target)
    assert mark < trim
    slow_mark, _ = default_thresholds(rate / 2, FAT_TREE_LINKS)
    assert slow_mark < mark     # fewer bytes, though a longer RTT


def test_spec_keys_turn_signals_off_or_set_thresholds():
    assert settings_from_spec(params('fattree,k=4,planes=2'), 6) is None
    on = settings_from_spec(params('fattree,k=4,planes=2,bw=10'), 6)
    assert on.mark and on.trim and on.on
    assert (on.mark_bytes, on.trim_bytes) == default_thresholds(10e6, 6)
    off = settings_from_spec(params('fattree,k=4,planes=2,bw=10,mark=0,trim=0'),
                             6)
    assert not off.on
    set_ = settings_from_spec(params('fattree,k=4,bw=10,mark_kb=3,trim_kb=20'),
                              6)
    assert (set_.mark_bytes, set_.trim_bytes) == (3000, 20000)
    with pytest.raises(TopoSpecError):
        parse_topo_spec('fattree,k=4,trim=2')


def test_the_last_hop_marks_only_on_a_roce_fabric():
    mrc = settings_from_spec(params('fattree,k=4,bw=10'), 6)
    roce = settings_from_spec(params('fattree,k=4,bw=10,mark_last=1'), 6)
    assert port_config(mrc, 10_000_000, last_hop=True).mark_threshold is None
    assert port_config(mrc, 10_000_000, last_hop=False).mark_threshold == mrc.mark_bytes
    assert port_config(roce, 10_000_000, last_hop=True).mark_threshold == roce.mark_bytes
    # Trimming is the same on both.
    assert port_config(roce, 10_000_000, last_hop=True).trim_threshold == roce.trim_bytes


def test_a_signal_asked_for_where_it_cannot_run_is_refused():
    with pytest.raises(LinkOptionError, match='need bw='):
        resolve(params('fattree,k=4,trim=1'), 6, missing=lambda: [])
    with pytest.raises(FeatureMissing, match='tc clsact'):
        resolve(params('fattree,k=4,bw=10,mark=1'), 6,
                missing=lambda: ['tc clsact'])
    # Not asked for: the fabric is built without, and the result says why.
    settings, lacking = resolve(params('fattree,k=4,bw=10'), 6,
                                missing=lambda: ['tc clsact'])
    assert settings is None and lacking == ['tc clsact']
    settings, lacking = resolve(params('fattree,k=4,bw=10'), 6,
                                missing=lambda: [])
    assert settings.on and lacking == []
    assert resolve(params('fattree,k=4,bw=10,mark=0,trim=0'), 6,
                   missing=lambda: ['x'])[1] == []


def test_thresholds_scale_with_the_links_mtu():
    # A 4 KB frame takes 2.7x as long on every hop: the base RTT (its
    # hops' part; the emulator's own 10 ms stay), NSCC's target and so the
    # queue at its target grow with it.
    small = settings_from_spec(params('fattree,k=4,bw=10'), FAT_TREE_LINKS)
    large = settings_from_spec(params('fattree,k=4,bw=10,mtu=4096'), FAT_TREE_LINKS)
    assert (large.mark_bytes, large.trim_bytes) == default_thresholds(
        10e6, FAT_TREE_LINKS, mtu=4096)
    grown = base_rtt_s(10e6, FAT_TREE_LINKS, 4096) / base_rtt_s(10e6, FAT_TREE_LINKS)
    assert large.mark_bytes / small.mark_bytes == pytest.approx(grown, rel=1e-3)
    assert grown > 1.5
