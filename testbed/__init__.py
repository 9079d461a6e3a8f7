"""mrc-testbed: an emulation testbed for MRC over multi-plane SRv6 fabrics."""

# The one place of the version: pyproject.toml and `mrc-testbed --version`
# read it.
__version__ = '0.1.0'

# The compiled endpoint core, when a build matches the sources (testbed/native_core.py):
# installed here, before anything can import testbed.nic.
from testbed import native_core as _native_core  # noqa: E402

_native_core.install()
