"""What the integration tests do in a child process before it runs."""
import signal


def default_sigint() -> None:
    """SIGINT back to its default. A shell that starts pytest in the background
    (`nohup pytest ... &`, or `.ci/run &`) makes it ignored, the children inherit
    that, and a Python started with SIGINT ignored never turns it into
    KeyboardInterrupt: a Ctrl-C the test types or sends would not land."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
