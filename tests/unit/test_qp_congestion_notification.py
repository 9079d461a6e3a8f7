"""DCQCN on a QP pair: the responder's notification point sends CNPs on CE, the
requester's reaction point cuts its rate and paces its packets at it (loopback, real
packets through the wire encoder and decoder)."""

from __future__ import annotations

import pytest

from testbed.nic.cc import DCQCN_ALGORITHM, NSCC_ALGORITHM, CcProfile
from testbed.nic.loopback import Loopback
from testbed.nic.qp_pair import RKEY, done, make_pair, payload
from testbed.nic.wire import Opcode, max_payload

P = max_payload(1500)
LINE = 10e6                   # the QP's DCQCN line rate
RTT = 1e-3                    # what its defaults are scaled to
DELAY = RTT / 2               # loopback one-way delay: the base RTT the config assumes


def dcqcn_pair(transport: str = "rc", algorithm: str = DCQCN_ALGORITHM):
    profile = CcProfile.for_fabric(algorithm, LINE, RTT, 1500, trimming=False)
    return make_pair(transport, mr_size=4 << 20, cc_profile=profile, timeout_s=1.0)


def test_ce_marks_bring_cnps_at_most_one_per_interval_and_rate_cuts() -> None:
    pair = dcqcn_pair()
    data = payload(200 * P)
    pair.qa.post_write(data, 0, RKEY)
    loop = Loopback([pair.a, pair.b], delay_s=DELAY)
    loop.ecn_paths.add(pair.qa.pinned_route.path)      # every data packet arrives CE
    cnps = []
    loop.on_send = lambda now, src, out: cnps.append(now) if out.data[0] == Opcode.CNP else None
    loop.run(stop=done(pair.a))
    assert bytes(pair.mr.buf[:len(data)]) == data
    interval = pair.qa.cc.config.cnp_interval_s
    assert cnps and min(b - a for a, b in zip(cnps, cnps[1:])) >= interval - 1e-12
    sent, got = pair.qb.counters.cnps_sent, pair.qa.counters.cnps_received
    assert sent == got == len(cnps)
    stats = pair.qa.stats()["cc"]
    assert stats["rate_cuts"] >= 1 and stats["rate_bps"] < LINE


def test_no_cnps_without_marks_or_for_a_controller_that_reads_none() -> None:
    for algorithm, marked in ((DCQCN_ALGORITHM, False), (NSCC_ALGORITHM, True)):
        pair = dcqcn_pair("ecmp", algorithm)
        pair.qa.post_write(payload(50 * P), 0, RKEY)
        loop = Loopback([pair.a, pair.b], delay_s=DELAY)
        if marked:
            loop.ecn_paths.add(pair.qa.pinned_route.path)
        loop.run(stop=done(pair.a))
        assert pair.qb.counters.cnps_sent == 0 == pair.qa.counters.cnps_received


def test_the_requester_paces_at_the_dcqcn_rate() -> None:
    # The loopback has no line rate of its own: only the pacing spaces the packets.
    pair = dcqcn_pair()
    count = 100
    pair.qa.post_write(payload(count * P), 0, RKEY)
    loop = Loopback([pair.a, pair.b], delay_s=DELAY)
    sent = []
    loop.on_send = lambda now, src, out: sent.append(now) if src is pair.a else None
    loop.run(stop=done(pair.a))
    wire_bits = (P + pair.qa.cc.config.frame_overhead_bytes) * 8
    # At the line rate (no marks, so no cut) packet i leaves at i packet times.
    assert sent[-1] - sent[0] == pytest.approx((count - 1) * wire_bits / LINE, rel=1e-6)


def test_a_cut_slows_the_pacing_by_its_factor() -> None:
    # The NIC's profile: its rate timer (25 base RTTs) lets two packets leave at
    # the cut rate before the first increase; the paper's (4.6) does not here.
    pair = dcqcn_pair(algorithm='dcqcn-nic')
    cc = pair.qa.cc
    cc.on_cnp(0.0)
    rate = cc.rate_bps
    pair.qa.post_write(payload(3 * P), 0, RKEY)
    loop = Loopback([pair.a, pair.b], delay_s=DELAY)
    sent = []
    loop.on_send = lambda now, src, out: sent.append(now) if src is pair.a else None
    loop.run(until=cc.config.rate_timer_s / 2)        # before any increase
    gap = (P + cc.config.frame_overhead_bytes) * 8 / rate
    assert sent[1] - sent[0] == pytest.approx(gap, rel=1e-6)
