"""How fast the sans-IO core runs on one CPU core: sender and receiver in one loopback, no loss.

Every data packet is encoded, decoded, placed and acknowledged, and every SACK encoded and
decoded, all in this one process; the loopback's own event handling is included, so this is
a floor for what a per-host runtime (one side each) gets. Run with -s to see the figure.
"""

from __future__ import annotations

import time

from testbed.nic.ev_table import EvTableConfig
from testbed.nic.loopback import Loopback

from testbed.nic.qp_pair import RKEY, done, make_pair, payload

SIZE = 8 << 20


def test_core_throughput(record_property) -> None:
    pair = make_pair(mr_size=SIZE, ev_table=EvTableConfig(active_count=128, backup_per_plane=8))
    data = payload(SIZE)
    pair.qa.post_write(data, 0, RKEY)
    loop = Loopback([pair.a, pair.b])
    started = time.perf_counter()
    loop.run(stop=done(pair.a))
    elapsed = time.perf_counter() - started
    assert bytes(pair.mr.buf) == data
    data_packets = pair.qa.counters.packets_sent
    sacks = pair.qb.counters.sacks_sent
    pps = data_packets / elapsed
    mib_s = SIZE / elapsed / 2**20
    record_property("data_packets_per_s", round(pps))
    record_property("payload_MiB_per_s", round(mib_s, 1))
    print(f"\nsans-IO core, one CPU core, sender+receiver: {data_packets} data packets + "
          f"{sacks} SACKs in {elapsed:.3f} s = {pps:,.0f} data packets/s "
          f"({(data_packets + sacks) / elapsed:,.0f} packets/s), {mib_s:.1f} MiB/s payload")
    assert pps > 5_000          # loose floor: CI machines vary; the figure is what matters
