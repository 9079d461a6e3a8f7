"""htsim's inputs made from ours, and its printed results read back."""
from __future__ import annotations

from pathlib import Path

import pytest

from testbed.fabric.topo_spec import parse_topo_spec
from testbed.reference.htsim import (HtsimError, parse_output, run_htsim, scaled_matrix,
                                     tiers_of, topo_text)
from testbed.workload.connection_matrix import ConnectionMatrix
from testbed.workload.model import CmConnection, Flow, Workload

# What htsim_uec printed for three flows on our fat-tree k=4 (`topo_text` at
# 100 Gbit/s): two into node 0, one from node 2 to node 1 started at 5 us
# (lines cut after the fields we read).
OUTPUT = '''Starting simulation
Flow Uec_5_0 flowId 1 uecSrc 0 starting at 0
Flow Uec_6_0 flowId 2 uecSrc 1 starting at 0
Flow Uec_2_1 flowId 3 uecSrc 2 starting at 5
Flow Uec_2_1 flowId 3 uecSrc 2 finished at 24.9485 total messages 1 total packets 25 RTS 0
Flow Uec_5_0 flowId 1 uecSrc 0 finished at 29.1227 total messages 1 total packets 25 RTS 0
Flow Uec_6_0 flowId 2 uecSrc 1 finished at 29.9467 total messages 1 total packets 25 RTS 0
.Done
New: 75 Rtx: 3 RTS: 0 Bounced: 0 ACKs: 22 NACKs: 0 Pulls: 0 sleek_pkts: 0
'''


def test_a_fat_tree_is_three_tiers_of_k_over_2():
    # For this file htsim printed: 4 pods, 4 hosts a pod, 2 ToR and 2 aggregation
    # switches a pod, 4 cores: the k=4 fat-tree.
    text = topo_text(parse_topo_spec('fattree,k=4,planes=1'), 100)
    assert text.splitlines()[:3] == ['Nodes 16', 'Tiers 3', 'Podsize 4']
    assert 'Radix_Down 2\nRadix_Up 2' in text and 'Radix_Down 4\nDownlink' in text
    assert text.count('Downlink_speed_Gbps 100') == 3


def test_a_leaf_spine_is_two_tiers_with_one_pod():
    spec = parse_topo_spec('leafspine,leaves=4,spines=2,hosts=4,planes=1')
    nodes, podsize, tiers = tiers_of(spec)
    assert (nodes, podsize) == (16, 16)
    # A leaf: its hosts down, one link to each spine up; a spine: one link to each leaf.
    assert [(t.radix_down, t.radix_up) for t in tiers] == [(4, 2), (4, None)]
    # Four hosts on two uplinks: htsim wants the ratio stated.
    assert 'Radix_Up 2\nOversubscribed 2\n' in topo_text(spec, 100)


def test_a_leaf_spine_htsim_cannot_state_is_refused():
    # htsim's Oversubscribed is a whole number: three hosts on two uplinks have none.
    with pytest.raises(HtsimError, match='whole multiple'):
        tiers_of(parse_topo_spec('leafspine,leaves=4,spines=2,hosts=3,planes=1'))


def test_a_speed_htsim_would_truncate_is_refused():
    # It reads Downlink_speed_Gbps with stoi: 7.5 would silently be 7.
    with pytest.raises(HtsimError, match='whole Gbit/s'):
        topo_text(parse_topo_spec('fattree,k=4,planes=1'), 7.5)


def test_more_than_one_plane_is_refused():
    with pytest.raises(HtsimError, match='one plane'):
        tiers_of(parse_topo_spec('fattree,k=4,planes=2'))


def test_the_printed_flows_and_totals_are_read():
    run = parse_output(OUTPUT)
    assert sorted(run.flows) == [1, 2, 3]
    third = run.flows[3]
    assert (third.src, third.dst) == ('h3', 'h2')        # node i is h<i+1>
    assert third.start_us == 5 and third.fct_us == pytest.approx(19.9485)
    assert (run.new_packets, run.resent_packets) == (75, 3)
    assert run.resent_share == pytest.approx(0.04)


def test_sizes_and_starts_scale_and_phases_keep_their_barriers():
    flows = (Flow(1, 'h2', 'h1', 1000, 'incast', 0.5), Flow(2, 'h3', 'h1', 1000, 'incast'))
    later = (Flow(3, 'h1', 'h2', 3000, 'step'),)
    matrix = scaled_matrix(Workload('w', (flows, later), (range(2),)), 16, 2.5, 1e-3)
    assert [(c.size, c.start_us) for c in matrix.connections] == [
        (2500, 500.0), (2500, 0.0), (7500, None)]
    assert matrix.connections[2].trigger == 1 and len(matrix.triggers) == 1


def test_a_missing_binary_says_how_to_get_one(tmp_path: Path):
    matrix = ConnectionMatrix(16, (CmConnection(0, 1, 100, 1, start_us=0),))
    with pytest.raises(HtsimError, match='uet-htsim'):
        run_htsim(tmp_path / 'htsim_uec', 'Nodes 16\n', matrix, 100, 1, 100)
