"""The endpoint-core benchmark's figures (testbed/bench/endpoint_core.py)."""
from testbed.bench.endpoint_core import run_once
from testbed.nic.qp_pair import payload

SIZE = 256 << 10


def test_a_timed_run_counts_only_the_time_inside_the_endpoints():
    data = payload(SIZE)
    plain, timed = run_once(SIZE, data), run_once(SIZE, data, timed=True)
    assert plain['core_s'] == plain['elapsed_s']       # untimed: the whole run
    assert 0 < timed['core_s'] < timed['elapsed_s']     # the loopback's heap is left out
    assert timed['core_pps'] > timed['total_pps']
    # the same WRITE either way: every data packet and SACK counted once
    assert (timed['data_packets'], timed['sacks']) == (plain['data_packets'], plain['sacks'])
