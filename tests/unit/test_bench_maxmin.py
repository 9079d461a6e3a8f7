"""The max-min fair fluid model (testbed/bench/maxmin.py) on cases worked by
hand."""
from __future__ import annotations

import pytest

from testbed.bench.maxmin import Flow, completion_times, max_min_rates


def test_flows_sharing_a_link_split_it_and_a_flow_alone_takes_its_own():
    capacity = {'a': 10.0, 'b': 10.0}
    flows = [Flow(1, ('a',)), Flow(1, ('a',)), Flow(1, ('b',))]
    assert max_min_rates(flows, capacity) == [5.0, 5.0, 10.0]


def test_a_flow_held_back_elsewhere_leaves_the_rest_of_a_link_to_the_others():
    # x crosses a (capacity 2) and b (10); y and z cross b only. a fixes x at 2,
    # b's remaining 8 goes to y and z: 4 each, not 10/3.
    capacity = {'a': 2.0, 'b': 10.0}
    flows = [Flow(1, ('a', 'b')), Flow(1, ('b',)), Flow(1, ('b',))]
    assert max_min_rates(flows, capacity) == pytest.approx([2.0, 4.0, 4.0])


def test_a_flow_that_ends_frees_its_share_for_the_rest():
    # Both at 4 bit/s over one 8 bit/s link: the 1-byte flow ends at 2 s with
    # the 2-byte one half done, which then has the link: 1 s more.
    capacity = {'a': 8.0}
    flows = [Flow(1, ('a',)), Flow(2, ('a',))]
    assert completion_times(flows, capacity) == pytest.approx([2.0, 3.0])


def test_a_path_through_a_link_of_unknown_capacity_is_refused():
    with pytest.raises(ValueError, match='without a capacity'):
        max_min_rates([Flow(1, ('a', 'z'))], {'a': 1.0})
