"""The live receive path under hostile input: while a real WRITE runs over
the loopback, both endpoints are fed truncated, corrupted, unknown-opcode,
unknown-QP, out-of-window, out-of-bounds and duplicate packets, and SACKs and
NACKs for PSNs never sent. Nothing may raise, the target buffer may only
ever hold zeros or the right bytes, and the write must complete whole: none of
these packets is a reason to fail it (a NACK UNEXP_EVENT is, so none is
forged; a resource NACK charges the retry counter only for a PSN in flight,
which a random 24-bit PSN all but never is)."""
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testbed.nic.loopback import Loopback
from testbed.nic.wire import (PSN_MASK, DataPacket, Nack, NackReason, Opcode,
                              Sack, Verdict)
from testbed.nic.qp_pair import RKEY, make_pair

SIZE = 64 << 10
KINDS = ('random', 'truncated', 'bitflip', 'duplicate', 'unknown_qp',
         'out_of_window', 'out_of_bounds', 'forged_sack', 'forged_nack')


def hostile(kind, rnd, pair, captured):
    """One hostile packet: (endpoint to feed, bytes)."""
    real = rnd.choice(captured) if captured else None
    if kind == 'random':
        return pair.b, rnd.randbytes(rnd.randrange(0, 200))
    if kind == 'truncated' and real:
        return pair.b, real[:rnd.randrange(len(real))]
    if kind == 'bitflip' and real:
        i = rnd.randrange(len(real))
        return pair.b, real[:i] + bytes([real[i] ^ (1 << rnd.randrange(8))]) + real[i + 1:]
    if kind == 'duplicate' and real:
        return pair.b, real
    psn = rnd.getrandbits(24)
    if kind == 'unknown_qp':
        return pair.b, _data(0xABCDE, psn, 0, rnd)
    if kind == 'out_of_window':
        far = (pair.qa.local_info()['psn'] + (1 << 22)) & PSN_MASK
        return pair.b, _data(pair.qb.qpn, far, 0, rnd)
    if kind == 'out_of_bounds':
        return pair.b, _data(pair.qb.qpn, psn, 1 << 40, rnd)
    if kind == 'forged_sack':
        return pair.a, Sack(pair.qa.qpn, psn, rnd.getrandbits(16),
                            bitmap=rnd.getrandbits(64),
                            verdict=rnd.choice(list(Verdict))).encode()
    reason = rnd.choice([r for r in NackReason if r != NackReason.UNEXP_EVENT])
    return pair.a, Nack(pair.qa.qpn, psn, reason, rnd.getrandbits(16),
                        rnd.getrandbits(24)).encode()


def _data(qpn, psn, offset, rnd):
    payload = rnd.randbytes(64)
    return DataPacket(Opcode.WRITE_ONLY, qpn, psn, 0, 0, offset, RKEY,
                      len(payload), payload).encode()


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 32 - 1),
       kinds=st.lists(st.sampled_from(KINDS), min_size=1, max_size=60))
def test_hostile_packets_never_crash_or_corrupt(seed, kinds):
    rnd = random.Random(seed)
    pair = make_pair(mr_size=SIZE)
    # 100 Mbit/s: the write takes ~5 ms, over which the injections spread.
    lb = Loopback([pair.a, pair.b], seed=seed, jitter_s=50e-6, rate_bps=100e6)
    captured = []
    lb.on_send = lambda now, src, out: captured.append(out.data)
    data = rnd.randbytes(SIZE)
    pair.qa.post_write(data, 0, RKEY, wr_id=1)
    for i, kind in enumerate(kinds):
        def inject(kind=kind):
            ep, raw = hostile(kind, rnd, pair, captured)
            peer = 'A' if ep is pair.b else 'B'
            ep.on_packet(lb.now, raw, rnd.getrandbits(16), 1, peer)
        lb.at(i * 80e-6, inject)
    done = []
    lb.run(until=5.0, stop=lambda: done.extend(pair.a.poll_cq()) or bool(done))
    region = pair.mr.buf
    assert all(got in (0, want) for got, want in zip(region, data))
    assert done, 'the write neither completed nor failed'
    assert done[0].ok, done[0]
    assert bytes(region) == data
