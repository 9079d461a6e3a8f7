"""The cross-check against htsim: htsim's own RTT read as ours is defined,
and `mrc-testbed crosscheck` on a small one-plane fabric, both sides'
figures within what the incast's shape allows.

htsim_uec is taken from MRC_HTSIM (.ci/run builds it with
scripts/htsim.sh where UEC's source is at hand); without it these skip and
say so."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.fabric.topo_spec import parse_topo_spec
from testbed.reference.htsim import DEFAULT_MTU, HEADER_BYTES, base_rtt_us
from tests.integration.time_limits import BASE_S, build_allowance, run_allowance

CLI = [sys.executable, '-m', 'testbed.cli']
UNTRUSTED_TRIES = 3
# Three leaves of two hosts, two spines, one plane: 18 switch ports.
TOPOLOGY = 'leafspine,leaves=3,spines=2,hosts=2,planes=1,mtu=3500,afxdp=auto'
SWITCH_PORTS = 18
RATE_MBIT, SIZE_MB, FAN_IN, DURATION_S = 10, 0.2, 3, 15


@pytest.fixture(scope='module')
def htsim_binary() -> Path:
    path = os.environ.get('MRC_HTSIM')
    if not path:
        pytest.skip('MRC_HTSIM unset: no htsim_uec to cross-check against '
                    '(bash scripts/htsim.sh SOURCE builds one)')
    return Path(path)


def test_htsim_s_base_rtt_is_one_packet_stored_and_forwarded_there_and_back(htsim_binary):
    # The fat-tree's longest path has 6 links of 1 us each way; every hop stores and
    # forwards the whole packet (4,150 bytes) out and its ACK back at 100 Gbit/s.
    hop_us = (DEFAULT_MTU + HEADER_BYTES) * 8 / 100e3     # the ACK is a bare header
    expected = 2 * 6 * 1.0 + 6 * hop_us
    assert base_rtt_us(htsim_binary, parse_topo_spec('fattree,k=4,planes=1'), 100) == \
        pytest.approx(expected, abs=1e-3)


def small_incast(tmp_path: Path) -> Path:
    """Three senders into h1, a victim h3 -> h2 beside them (h2 on h1's leaf)."""
    path = tmp_path / 'small_incast.yaml'
    path.write_text(yaml.safe_dump({
        'name': 'small_incast', 'description': "a test's incast on a small leaf-spine",
        'topology': TOPOLOGY, 'link_rate_mbit': RATE_MBIT, 'transports': ['mrc'],
        'workload': {'type': 'incast', 'fan_in': FAN_IN, 'receiver': 'h1',
                     'size_mb': SIZE_MB, 'victim': {'src': 'h3', 'dst': 'h2'}},
        'faults': [], 'duration_s': DURATION_S}))
    return path


@pytest.mark.parametrize('last_hop_ecn, seeds', [('on', 1), ('off', 2)])
@pytest.mark.time_limit(BASE_S + 2 * UNTRUSTED_TRIES * (
    build_allowance(SWITCH_PORTS, afxdp=True) + run_allowance(DURATION_S)),
                        why='up to two MRC runs of the small incast, up to UNTRUSTED_TRIES times')
def test_crosscheck_runs_both_sides_of_a_small_incast(tmp_path, htsim_binary, last_hop_ecn,
                                                      seeds):
    scenario = small_incast(tmp_path)
    for attempt in range(UNTRUSTED_TRIES):
        done = subprocess.run(CLI + ['crosscheck', str(scenario), '--htsim', str(htsim_binary),
                                     '--last-hop-ecn', last_hop_ecn, '--seeds', str(seeds),
                                     '--out', str(tmp_path / str(attempt))],
                              capture_output=True, text=True, timeout=900)
        if done.returncode == 0:
            break
        # 1: the emulation's side was not trusted (its table says NOT TRUSTED)
        assert done.returncode == 1 and 'NOT TRUSTED' in done.stdout, done.stderr[-3000:]
    else:
        pytest.fail('NOT TRUSTED %d times: %s' % (UNTRUSTED_TRIES, done.stdout[-2000:]))
    assert '| incast victim kept |' in done.stdout
    root = next((tmp_path / str(attempt)).glob('small_incast-crosscheck/*'))
    runs = json.loads((root / 'crosscheck.json').read_text())['seeds']
    assert [r['seed'] for r in runs] == list(range(1, seeds + 1))
    for result in runs:
        check_seed(result, last_hop_ecn)


def check_seed(result: dict, last_hop_ecn: str) -> None:
    """One seed's both sides: as asked, every flow done, within the incast's bounds."""
    assert result['emulation_run']['trusted']
    out = Path(result['emulation_run']['results'])
    # Both sides' last hop as asked: our fabric's spec, htsim's flags.
    summary = json.loads((out / 'summary.json').read_text())
    assert ('mark_last=1' in summary['topology']) == (last_hop_ecn == 'on')
    assert 'planes=1' in summary['topology'] and summary['seed'] == result['seed']
    assert ('-receiver_cc' in result['htsim_run']['command']) == (last_hop_ecn == 'off')
    rtt_s = summary['transports']['mrc']['base_rtt_ms'] / 1e3
    for side in ('emulation', 'htsim'):
        f = result[side]
        assert f['flows'] == f['flows_done'] == FAN_IN + 1, (side, f)
        # The receiver's port carries every incast byte: the makespan is at least their
        # payload at line rate (headers only add), in base RTTs the same on both sides
        # (htsim's sizes are scaled to the same number of BDPs).
        ideal_rtts = FAN_IN * SIZE_MB * 8 / RATE_MBIT / rtt_s
        assert f['makespan_rtts'] >= ideal_rtts, (side, f, ideal_rtts)
        assert 0 < f['min_ideal_over_fct'] <= f['mean_ideal_over_fct'] < 1
        assert 0 < f['victim_kept'] < 1 and f['incast_spread_rtts'] >= 0
    # htsim ran the same flows, scaled to the same BDPs.
    cm = (out / 'htsim.cm').read_text().splitlines()
    assert cm[:2] == ['Nodes 6', 'Connections %d' % (FAN_IN + 1)]
    scale = result['htsim_run']['size_scale']
    assert {int(line.split(' size ')[1].split()[0]) for line in cm[2:]} == \
        {round(SIZE_MB * 1e6 * scale)}
