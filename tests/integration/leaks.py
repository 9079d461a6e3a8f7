"""What a test left on the machine, judged while holding the run lock: with
it, no fabric of anyone's is up (another test session's, a user's run), so
whatever of ours is there was leaked."""
from testbed.fabric.clean import leftovers
from testbed.fabric.run_lock import RunLock


def leaked() -> dict:
    """Our leftovers by kind, only the kinds with any."""
    lock = RunLock()
    lock.acquire()
    try:
        return {kind: found for kind, found in leftovers().items() if found}
    finally:
        lock.release()
