"""The compiled endpoint core: `testbed/nic` built with mypyc, and loaded in its place.

Everything that decides whether the endpoint runs compiled or as Python lives here. The
sans-IO core (`testbed/nic`) is typed Python; mypyc compiles those same sources to C
extension modules, about twice the packets per core (`mrc-testbed bench --sections
emulator_scale`), with no second implementation to keep in step. `scripts/setup.sh`
builds it once per state of the sources; a checkout without a build, an installed copy (`pip install .`) or
`MRC_TESTBED_CORE=python` run the Python sources, which stay the reference and are tested
as such (tests/unit/test_native_core.py runs both and compares them).

A build is keyed by a digest of every source file of `testbed/nic` and the interpreter's
ABI: an edit to any of them, or another Python, makes the build not match, and the
Python sources run until `scripts/setup.sh` (or `python -m testbed.native_build`, the
build's module) builds again. Nothing compiled can ever run stale code.

Modules left out of the build (NOT_COMPILED; everything else in testbed/nic is compiled),
and why:
- `__init__.py` files: a package's `__path__` must stay the source folder.
- `cc/base.py`, `cc/null.py`: the registry and the controller mixins; mypyc's native classes
  do not mix (NullCc inherits two), and nothing there is per packet.
- `cc/nscc_config.py`, `wire/packets.py`: configurations and public packet classes whose own
  checks name a wrong-typed field; typed native attributes would refuse it first.
- `agent.py`, `loopback.py`, `qp_pair.py`, `scapy_mrc.py`, `qp_profile.py`,
  `hardware_profile.py`, `emulated_timescale.py`: set-up, tools and tests, not the packet path.
"""
from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
from pathlib import Path

from testbed import checkout

NIC = Path(__file__).resolve().parent / 'nic'
ENV = 'MRC_TESTBED_CORE'           # "python": run the sources even when a build matches
EXT_SUFFIX = sysconfig.get_config_var('EXT_SUFFIX') or '.so'
NOT_COMPILED = frozenset({
    'cc/base.py', 'cc/null.py', 'cc/nscc_config.py', 'wire/packets.py', 'agent.py',
    'loopback.py', 'qp_pair.py', 'scapy_mrc.py', 'qp_profile.py', 'hardware_profile.py',
    'emulated_timescale.py'})


def sources(nic: Path = NIC) -> list[Path]:
    """Every source file of testbed/nic, in a fixed order."""
    return sorted(nic.rglob('*.py'))


def compiled_sources() -> list[Path]:
    return [p for p in sources() if p.name != '__init__.py'
            and p.relative_to(NIC).as_posix() not in NOT_COMPILED]


def module_name(path: Path) -> str:
    return 'testbed.nic.' + '.'.join(path.relative_to(NIC).with_suffix('').parts)


def digest(nic: Path = NIC) -> str:
    """What a build is keyed by: all of testbed/nic (a compiled module trusts the types of
    the Python ones it calls) and the interpreter's ABI."""
    h = hashlib.sha256(EXT_SUFFIX.encode() + sys.version.encode())
    for path in sources(nic):
        h.update(path.relative_to(nic).as_posix().encode() + b'\0')
        h.update(path.read_bytes() + b'\0')
    return h.hexdigest()[:16]


def build_root() -> Path:
    return checkout.build_dir() / 'native'


def build_path() -> Path:
    """Where the build for these sources is, built or not."""
    return build_root() / digest()


def extension(root: Path, name: str) -> Path:
    return root.joinpath(*name.split('.')).with_name(name.rsplit('.', 1)[-1] + EXT_SUFFIX)


# --------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------


class _CompiledFinder(importlib.abc.MetaPathFinder):
    """Finds the compiled core's modules in a build folder, before the sources."""

    def __init__(self, root: Path, names: frozenset[str]) -> None:
        self.root, self.names = root, names

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.names:
            return None
        location = extension(self.root, fullname)
        loader = importlib.machinery.ExtensionFileLoader(fullname, str(location))
        return importlib.util.spec_from_file_location(fullname, location, loader=loader)


_status = 'python: not loaded yet'


def status() -> str:
    """'compiled' or 'python: <why>' — which endpoint core this process runs."""
    return _status


def install() -> None:
    """Load the compiled core for this process if a build matches the sources (called
    once, by `import testbed`, before anything imports testbed.nic)."""
    global _status
    if os.environ.get(ENV) == 'python':
        _status = 'python: %s=python' % ENV
        return
    try:
        root = build_path()
    except OSError as exc:                  # an unreadable source: the import will say
        _status = 'python: %s' % exc
        return
    names = frozenset(module_name(p) for p in compiled_sources())
    if not all(extension(root, n).is_file() for n in names):
        _status = 'python: not built for these sources (bash scripts/setup.sh builds it)'
        return
    sys.path.append(str(root))              # the modules' shared library sits at the top
    sys.meta_path.insert(0, _CompiledFinder(root, names))
    _status = 'compiled'
