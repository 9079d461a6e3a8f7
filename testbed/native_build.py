"""Building the compiled endpoint core (what it is and how it loads: testbed/native_core.py).

    python -m testbed.native_build           # build for the current sources, if not built
    python -m testbed.native_build status    # which core this interpreter runs

scripts/setup.sh runs the first. mypyc (from mypy, requirements-build.txt) and a C compiler
with the interpreter's headers (python3-dev) are what it needs.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from testbed import native_core
from testbed.native_core import (
    EXT_SUFFIX, NIC, build_path, compiled_sources, extension, module_name)


class NativeCoreError(RuntimeError):
    """The compiled core could not be built."""


def build(progress: Callable[[str], None] = print) -> Path:
    """Compile the core for these sources unless that build exists; returns its folder."""
    target = build_path()
    if target.is_dir():
        return target
    try:
        import mypyc  # noqa: F401  (only for the check: the build runs it as a command)
    except ImportError:
        raise NativeCoreError('mypy is not installed (pip install -r '
                              'requirements-build.txt)') from None
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix='native-', dir=target.parent))
    try:
        progress('compiling the endpoint core (%d modules, about a minute)'
                 % len(compiled_sources()))
        _compile(work)
        staged = work / 'out'
        _collect(work, staged)
        try:
            os.replace(staged, target)      # atomic: no process sees half a build
        except OSError:
            if not target.is_dir():         # else another build of these sources won
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    for old in target.parent.iterdir():     # earlier sources' builds
        if old != target and not old.name.startswith('native-'):
            shutil.rmtree(old, ignore_errors=True)
    return target


def _compile(work: Path) -> None:
    """mypyc over a copy of the package (it writes beside the sources it compiles)."""
    shutil.copytree(NIC.parent, work / 'testbed',
                    ignore=shutil.ignore_patterns('__pycache__', '*.so'))
    files = [str(Path('testbed/nic') / p.relative_to(NIC)) for p in compiled_sources()]
    done = subprocess.run([sys.executable, '-m', 'mypyc', *files], cwd=work,
                          capture_output=True, text=True)
    if done.returncode:
        tail = '\n'.join((done.stdout + done.stderr).strip().splitlines()[-20:])
        raise NativeCoreError('mypyc failed:\n' + tail)


def _collect(work: Path, staged: Path) -> None:
    """The extension modules mypyc left in the copy, laid out as their import names."""
    for name in (module_name(p) for p in compiled_sources()):
        dest = extension(staged, name)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(extension(work, name), dest)
    for shared in work.glob('*__mypyc' + EXT_SUFFIX):
        shutil.move(shared, staged / shared.name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog='python -m testbed.native_build',
                                     description='Build the compiled endpoint core, or '
                                     'say which core runs.')
    parser.add_argument('action', nargs='?', default='build', choices=('build', 'status'))
    args = parser.parse_args(argv)
    if args.action == 'status':
        print(native_core.status())
        return 0
    try:
        print(build(progress=lambda m: print(m, file=sys.stderr)))
    except NativeCoreError as exc:
        print('error: %s' % exc, file=sys.stderr)
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(main())
