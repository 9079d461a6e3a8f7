"""The integration tests' time limit (tests/integration/time_limits.py):
the alarm fails the test in its main thread, a grant moves it, a pause
(a teardown, the run lock's wait) defers it; no fabric needed."""
import time

import pytest

from tests.integration import time_limits
from tests.integration.time_limits import TimeLimitExceeded, Watchdog

STEP_S = 0.2


@pytest.fixture
def watchdog(monkeypatch):
    monkeypatch.setattr(time_limits, 'diagnostics', lambda: 'what was up')
    dog = Watchdog()
    yield dog
    dog.stop()


def test_past_its_limit_a_test_fails_with_what_was_up(watchdog):
    watchdog.start('t', STEP_S, 'base')
    with pytest.raises(TimeLimitExceeded, match=r'(?s)limit of 0 s \(base 0 s\).*what was up'):
        time.sleep(10 * STEP_S)


def test_a_grant_moves_the_limit(watchdog):
    watchdog.start('t', STEP_S, 'base')
    watchdog.grant('build', 3 * STEP_S)
    time.sleep(2 * STEP_S)                  # within base + grant
    with pytest.raises(TimeLimitExceeded, match='build'):
        time.sleep(10 * STEP_S)


def test_an_alarm_in_a_pause_waits_for_its_end(monkeypatch, watchdog):
    monkeypatch.setattr(time_limits, 'PAUSE_GRACE_S', 4 * STEP_S)
    watchdog.start('t', STEP_S, 'base')
    with watchdog.pause():
        time.sleep(2 * STEP_S)     # the alarm fell in here: the teardown went on
    with pytest.raises(TimeLimitExceeded):     # ... and it fails after the grace
        time.sleep(10 * STEP_S)


def test_a_stopped_watchdog_never_fires(watchdog):
    watchdog.start('t', STEP_S, 'base')
    watchdog.stop()
    time.sleep(2 * STEP_S)
