"""The capacity sweep's search for its loss-free knee (testbed/bench/emulator_scale.py)."""
from testbed.bench.emulator_scale import LOSSLESS, find_the_knee


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
