"""Reading an AF_XDP receive ring's counters while their two owners move them
(testbed/fabric/vswitchd_sockets.XskRxRing; the rings of a real fabric:
tests/integration/test_unread_backlog.py)."""
from __future__ import annotations

from testbed.fabric.vswitchd_sockets import XskRxRing

PRODUCER, CONSUMER = 0, 8        # where the counters sit in the ring's head


class Ring(XskRxRing):
    """A ring's two counters without the mapping; with `busy`, between any two
    reads the kernel puts `busy` frames in and the PMD thread takes all there are,
    as they do on a loaded fabric while the sampler reads."""

    def __init__(self, produced: int, consumed: int, busy: int = 0) -> None:
        self.producer, self.consumer = PRODUCER, CONSUMER
        self.counters = {PRODUCER: produced, CONSUMER: consumed}
        self.busy = busy

    def counter(self, offset: int) -> int:
        value = self.counters[offset]
        if self.busy:
            self.counters[PRODUCER] = (self.counters[PRODUCER] + self.busy) & 0xFFFFFFFF
            self.counters[CONSUMER] = self.counters[PRODUCER]
        return value


def test_frames_waiting_are_the_producer_less_the_consumer_across_the_wrap():
    assert Ring(produced=1_005, consumed=1_000).waiting() == 5
    assert Ring(produced=3, consumed=0xFFFFFFFE).waiting() == 5      # free-running u32s


def test_counters_moved_between_two_reads_never_read_as_billions_of_frames():
    # An empty ring: read producer then consumer, the PMD thread's consumer would be
    # 3 past the producer read and the difference wrap to 2**32 - 3.
    ring = Ring(produced=1_000, consumed=1_000, busy=3)
    assert ring.waiting() == 3       # at most what arrived between the two reads
