"""`python -m bench`: the same as `mrc-testbed bench` (see bench/cli.py)."""
import sys

from bench.cli import main

sys.exit(main())
