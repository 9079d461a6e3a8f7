"""The capacity sweep's search for its loss-free knee and its reading of repeated rounds
(testbed/bench/emulator_scale.py)."""
from testbed.bench.emulator_scale import (FIDELITY_TOPOLOGY, LOSSLESS, STAGED, afxdp_note,
                                         fabric_rounds, find_the_knee, median_lossless)
from testbed.bench.emulator_scale import staged as staged_spec


def point(rate: int | None, loss: float) -> dict:
    return {'offered_pps': rate, 'loss': loss}


def test_the_knee_is_halved_between_the_last_loss_free_rate_and_the_first_lossy_one():
    knee = 63_000                          # a datapath that loses above this rate
    points = [point(40_000, 0.0), point(80_000, 0.15), point(None, 0.6)]
    measured = []

    def measure(rate: int) -> dict:
        measured.append(rate)
        points.append(point(rate, 0.0 if rate <= knee else 2 * LOSSLESS))
        return points[-1]

    find_the_knee(points, measure)
    assert measured == [60_000, 70_000, 65_000]


def test_no_knee_is_sought_where_every_rate_lost_or_none_did():
    for loss in (0.0, 0.5):
        points = [point(5_000, loss), point(10_000, loss)]
        find_the_knee(points, lambda rate: points.append(point(rate, 0.0)) or points[-1])
        assert len(points) == 2


def fabric(spec: str, port_type: str, round_: int, loss_free_pps: int, hops: int = 5) -> dict:
    """A capacity sweep of one fabric whose last loss-free row is `loss_free_pps`."""
    rows = [(loss_free_pps, 0.0), (2 * loss_free_pps, 0.3)]
    return {'spec': spec, 'port_type': port_type, 'round': round_, 'hops': hops,
            'points': [{'offered_pps': rate, 'entered_pps': rate, 'loss': loss,
                        'delivered_pps': rate * (1 - loss), 'vswitchd_cpu': 0.5,
                        'packet_hops_per_s': rate * (1 - loss) * hops}
                       for rate, loss in rows]}


def test_the_ratio_of_two_port_kinds_is_the_median_of_the_rounds_side_by_side():
    # Round by round (system, afxdp=1) in pkt/s: ratios 2.0, 3.0 and 4.0, median 3.0. The
    # ratio of each fabric's own median (40k / 20k) would be 2.0: it pairs rounds that were
    # not measured side by side.
    rounds = [(20_000, 40_000), (30_000, 90_000), (10_000, 40_000)]
    capacities = [c for n, (system, staged) in enumerate(rounds)
                  for c in (fabric(FIDELITY_TOPOLOGY, 'system', n, system),
                            fabric(staged_spec(FIDELITY_TOPOLOGY), STAGED, n, staged))]
    fabrics = fabric_rounds(capacities)
    assert [len(f) for f in fabrics] == [3, 3]
    assert median_lossless(fabrics[0]) == 20_000 * 5
    note = afxdp_note(capacities)
    assert '**3.0×** (median of 3 rounds; per round 2.0×, 3.0×, 4.0×)' in note
    assert '~200,000 packet-hops/s against ~100,000' in note


def test_a_fabric_that_lost_at_every_rate_counts_zero_loss_free():
    lossy = fabric(FIDELITY_TOPOLOGY, 'system', 0, 10_000)
    lossy['points'][0]['loss'] = 0.5
    assert median_lossless([lossy]) == 0.0
