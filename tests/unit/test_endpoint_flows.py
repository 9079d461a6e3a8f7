"""How a flow is split over a connection's QPs (the rest of EndpointFlows runs on
fabrics: tests/integration)."""
from __future__ import annotations

import pytest

from testbed.workload.endpoint_flows import split_sizes


@pytest.mark.parametrize('size, qps, parts', [
    (100, 1, [100]),
    (100, 4, [25, 25, 25, 25]),
    (10, 4, [3, 3, 2, 2]),        # the first ones a byte longer
    (3, 16, [1, 1, 1]),           # never an empty part
    (0, 4, [0]),
])
def test_a_flow_splits_into_contiguous_near_equal_parts(size, qps, parts):
    assert split_sizes(size, qps) == parts
    assert sum(parts) == size
