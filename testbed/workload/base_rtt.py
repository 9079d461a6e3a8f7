"""The fabric's base RTT, measured: one full MRC packet out on the longest
path and its acknowledgement back, on the idle fabric.

What the shaped links give an idle packet is less than store-and-forward at
the link rate suggests (an idle HTB class sends a packet at once, within
its burst), so the delay a hardware profile adds is made up from this
measurement, not from the formula (`emulated_timescale.base_rtt_s`), which
stays what sizes NSCC on a loaded fabric.
"""
from __future__ import annotations

import statistics
import time

from testbed.fabric.net import FabricNet
from testbed.nic.emulated_timescale import DATA_PAYLOAD_BYTES
from testbed.workload.endpoint_flows import EndpointFlows

WARM_UP = 3          # the first writes also set up the paths' state
WRITE_TIMEOUT_S = 1.0


def longest_path_pair(fab: FabricNet) -> tuple[str, str]:
    """Two hosts whose paths are the fabric's longest (first and last host:
    other pods, other leaves)."""
    hosts = fab.plan.hosts
    return hosts[0], hosts[-1]


def measure_base_rtt(fab: FabricNet, samples: int = 15,
                     pair: tuple[str, str] | None = None,
                     timescale=None) -> float:
    """Median time from posting a one-packet MRC write to its completion,
    one write at a time, on `fab` while nothing else runs. `timescale`: a
    hardware profile's EmulatedTime, to measure with its delay stage."""
    src, dst = pair or longest_path_pair(fab)
    flows = EndpointFlows(fab, 'mrc', seed=1, timescale=timescale)
    try:
        flows.prepare([(src, dst, DATA_PAYLOAD_BYTES)])
        times = []
        for i in range(samples + WARM_UP):
            t0 = time.monotonic()
            flows.start(i, src, dst, DATA_PAYLOAD_BYTES)
            while flows.status(i) == 'running' and \
                    time.monotonic() - t0 < WRITE_TIMEOUT_S:
                flows.poll()
            if flows.status(i) == 'done' and i >= WARM_UP:
                times.append(time.monotonic() - t0)
        if not times:
            raise RuntimeError('no one-packet write completed between %s and '
                               '%s: the fabric does not forward' % (src, dst))
        return statistics.median(times)
    finally:
        flows.close()
