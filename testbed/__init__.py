"""mrc-testbed: an emulation testbed for MRC over multi-plane SRv6 fabrics."""

# The one place of the version: pyproject.toml and `mrc-testbed --version`
# read it.
__version__ = '0.1.0'
