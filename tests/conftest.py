import os
import sys
from pathlib import Path

import pytest

# Tests import the repo's packages whether or not it is pip-installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault('HYPOTHESIS_STORAGE_DIRECTORY', '/tmp/mrc-hypothesis')


def pytest_configure(config):
    """CI runs everything: a `-m` that leaves the `slow` tests out is for a
    developer's quick loop (README, Tests), and refused where CI=true."""
    marks = config.getoption('markexpr') or ''
    if os.environ.get('CI') == 'true' and 'slow' in marks:
        raise pytest.UsageError(
            'CI=true runs every test: -m %r would leave out the slow ones '
            '(unset CI for a quick local loop)' % marks)
