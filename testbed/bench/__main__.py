"""`python -m testbed.bench`: the same as `mrc-testbed bench` (see testbed/bench/cli.py)."""
import sys

from testbed.bench.cli import main

sys.exit(main())
