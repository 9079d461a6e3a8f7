"""switch_port.py without the kernel: configuration packing, HTB rates, the wire defines,
and the object build (when clang is there)."""
from __future__ import annotations

import struct

import pytest

from testbed.fabric import switch_port as sp
from testbed.nic import wire


def test_flags_follow_the_thresholds():
    assert sp.PortConfig(rate_bps=1).flags == 0
    assert sp.PortConfig(rate_bps=1, mark_threshold=0).flags == sp.FLAG_MARK
    assert sp.PortConfig(rate_bps=1, trim_threshold=5, last_hop=True).flags == (
        sp.FLAG_TRIM | sp.FLAG_LAST_HOP)


def test_pack_matches_struct_port_config():
    config = sp.PortConfig(rate_bps=10**10, mark_threshold=3000, trim_threshold=9000,
                           control_priority=0x50002)
    assert struct.unpack('=QIIIIII', config.pack()) == (
        10**10, 3000, 9000, 4 * 9000, sp.FLAG_MARK | sp.FLAG_TRIM, 0x50002, 0)
    assert sp.PortConfig(rate_bps=1).effective_limit == 0          # no signal, no cap
    assert sp.PortConfig(rate_bps=1, mark_threshold=10, limit_bytes=7).effective_limit == 7


@pytest.mark.parametrize('bad', [
    dict(rate_bps=-1), dict(rate_bps=1, mark_threshold=-1),
    dict(rate_bps=1, trim_threshold=2**32), dict(rate_bps=1, control_priority=2**32)])
def test_out_of_range_refused(bad):
    with pytest.raises(sp.SwitchPortError):
        sp.PortConfig(**bad)


def test_state_round_trip():
    raw = sp.pack_state(backlog=5, last_ns=sp.FROZEN_NS, trimmed=2)
    assert sp.unpack_state(raw) == {**dict.fromkeys(sp.STATE_FIELDS, 0),
                                    'backlog': 5, 'last_ns': sp.FROZEN_NS, 'trimmed': 2}
    with pytest.raises(sp.SwitchPortError):
        sp.pack_state(nonsense=1)


def test_control_priority_selects_the_control_class():
    major, minor = sp.HTB_CONTROL.split(':')
    assert sp.CONTROL_PRIORITY == int(major) << 16 | int(minor)


@pytest.mark.parametrize('rate', [2000, 1_000_000, 10**10])
def test_htb_rates_add_up_to_the_link(rate):
    control, data = sp.priority_htb_rates(rate)
    assert control + data == rate
    assert data >= sp.MIN_HTB_RATE_BPS and control >= data


def test_htb_rate_too_low_refused():
    with pytest.raises(sp.SwitchPortError):
        sp.priority_htb_rates(1500)


def test_defines_follow_wire_py():
    defines = sp.wire_defines()
    assert defines['MRC_UDP_PORT'] == str(wire.UDP_PORT)
    assert int(defines['MRC_FLAG_TIMESTAMP'], 16) == wire.FLAG_TIMESTAMP
    imm = int(defines['MRC_IMM_OPCODES'].removesuffix('ULL'), 16)
    assert {op for op in range(64) if imm >> op & 1} == set(wire.IMM_OPCODES)


@pytest.mark.skipif(sp.clang() is None or not sp.headers_present(),
                    reason='no clang or no BPF headers (scripts/setup.sh installs them)')
def test_build_is_cached_by_source_and_flags(tmp_path):
    obj = sp.build(tmp_path)
    assert obj.exists() and obj == sp.object_path(tmp_path)
    mtime = obj.stat().st_mtime_ns
    assert sp.build(tmp_path) == obj and obj.stat().st_mtime_ns == mtime
