"""Where the source checkout is, when the code runs from one.

From a clone (or an editable install) the package sits in the checkout,
beside `pyproject.toml` and `scenarios/`; `pip install .` puts only the
package in site-packages. What the code writes beside its source (built
objects, BENCHMARKS.md) goes to the checkout when there is one, and
elsewhere (or nowhere, with a message saying why) when there is not.
"""
from __future__ import annotations

import os
from pathlib import Path

# The directory holding the `testbed` package: the checkout or site-packages.
PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def checkout() -> Path | None:
    """The source checkout the code runs from, or None for an installed copy."""
    markers = (PACKAGE_ROOT / 'pyproject.toml', PACKAGE_ROOT / 'scenarios')
    return PACKAGE_ROOT if all(m.exists() for m in markers) else None


def build_dir() -> Path:
    """Where built artefacts go: `MRC_TESTBED_BUILD_DIR` if set (a read-only
    checkout, say), else the checkout's `build/` (gitignored), else the
    user's cache (`$XDG_CACHE_HOME/mrc-testbed`)."""
    if 'MRC_TESTBED_BUILD_DIR' in os.environ:
        return Path(os.environ['MRC_TESTBED_BUILD_DIR'])
    source = checkout()
    if source is not None:
        return source / 'build'
    cache = os.environ.get('XDG_CACHE_HOME') or str(Path.home() / '.cache')
    return Path(cache) / 'mrc-testbed'
