"""constraints.txt, the lock scripts/setup.sh installs with: it is the environment the suite
runs in, it agrees with the pins of requirements*.txt, and what it leaves to the
distribution is what setup.sh installs from the distribution."""
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / 'scripts' / 'constraints.py'


def _script():
    spec = importlib.util.spec_from_file_location('constraints_script', SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_installed_environment_is_the_lock():
    """Every package the requirements pull in, transitive ones included, is installed at the
    version constraints.txt pins, and the lock pins nothing else: a dependency added or
    bumped without regenerating the lock fails here."""
    result = subprocess.run([sys.executable, str(SCRIPT), '--check'], capture_output=True,
                            text=True, cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr


def test_requirement_pins_agree_with_the_lock():
    script = _script()
    lock = script.pinned(script.CONSTRAINTS.read_text())
    for req in script.roots():
        key = canonicalize_name(req.name)
        exact = [s.version for s in req.specifier if s.operator == '==']
        if key in script.FROM_DISTRIBUTION:
            assert key not in lock
            continue
        assert key in lock, req
        assert req.specifier.contains(lock[key]), (req, lock[key])
        if exact:
            assert lock[key] == exact[0], (req, lock[key])


def test_lock_lines_are_exact_pins_and_leave_out_the_distribution_and_the_project():
    script = _script()
    lines = [line for line in script.CONSTRAINTS.read_text().splitlines()
             if line and not line.startswith('#')]
    assert lines
    for line in lines:
        req = Requirement(line)
        assert [s.operator for s in req.specifier] == ['=='], line
        assert not req.marker and not req.extras, line
    names = {canonicalize_name(Requirement(line).name) for line in lines}
    assert not names & set(script.FROM_DISTRIBUTION)
    assert script.PROJECT not in names


def test_what_the_lock_leaves_to_the_distribution_setup_installs_from_it():
    script = _script()
    setup = (REPO / 'scripts' / 'setup.sh').read_text()
    apt = re.search(r'^apt_packages=\((.*?)\)', setup, re.S | re.M).group(1).split()
    for debian_package in script.FROM_DISTRIBUTION.values():
        assert debian_package in apt, debian_package
