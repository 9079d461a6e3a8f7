"""The compiled endpoint core (testbed/native_core.py) against the Python sources it is
built from: the sources run when asked, a build matches only the sources it was built
from, and both cores move the same packets, to the counter, in the same transfers."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import native_core

ROOT = Path(__file__).resolve().parents[2]

# Seeded transfers on the in-process loopback (virtual time, no sockets): MRC spraying
# with NSCC over a lossy, jittery link, and RC's go-back-N. Everything they count is
# printed: two cores that differ anywhere in the packet path differ here.
TRANSFERS = r'''
import json, sys
from testbed import native_core
from testbed.nic.cc import NSCC_ALGORITHM, CcProfile, NsccConfig
from testbed.nic.loopback import Loopback
from testbed.nic.qp_pair import RKEY, done, make_pair, payload
import testbed.nic.requester as requester
out = {"status": native_core.status(), "requester": requester.__file__}
for transport, cc in (("mrc", CcProfile(NSCC_ALGORITHM, NsccConfig.defaults(
        100e9, 40e-6, 1500, True))), ("rc", CcProfile())):
    data = payload(300_000, seed=3)
    pair = make_pair(transport, mr_size=len(data), cc_profile=cc, seed=7)
    pair.qa.post_write(data, 0, RKEY)
    Loopback([pair.a, pair.b], seed=5, loss=0.02, jitter_s=15e-6).run(
        until=30.0, stop=done(pair.a))
    assert bytes(pair.mr.buf) == data, transport
    out[transport] = {"a": pair.qa.stats(), "b": pair.qb.stats()}
json.dump(out, sys.stdout, default=str)
'''


def run_transfers(**env: str) -> dict:
    done = subprocess.run([sys.executable, '-c', TRANSFERS], cwd=ROOT, check=True,
                          capture_output=True, text=True, env={**os.environ, **env})
    return json.loads(done.stdout)


def test_the_python_sources_run_when_asked():
    result = run_transfers(MRC_TESTBED_CORE='python')
    assert result['status'] == 'python: MRC_TESTBED_CORE=python'
    assert result['requester'].endswith('requester.py')


def test_the_compiled_core_moves_the_same_packets_as_the_sources():
    if native_core.status() != 'compiled':
        pytest.skip('no compiled core for these sources (%s)' % native_core.status())
    compiled = run_transfers()
    assert compiled.pop('status') == 'compiled'
    assert compiled.pop('requester').endswith(native_core.EXT_SUFFIX)
    python = run_transfers(MRC_TESTBED_CORE='python')
    del python['status'], python['requester']
    # The lossy MRC transfer recovered something, or the comparison proves little.
    assert compiled['mrc']['a']['retransmitted_packets'] > 0
    assert compiled == python


def test_a_build_matches_only_the_sources_it_was_built_from(tmp_path):
    nic = tmp_path / 'nic'
    shutil.copytree(native_core.NIC, nic, ignore=shutil.ignore_patterns('__pycache__'))
    before = native_core.digest(nic)
    assert before == native_core.digest(native_core.NIC)
    with open(nic / 'wire' / 'psn.py', 'a') as f:     # any file, even a comment
        f.write('# edited\n')
    assert native_core.digest(nic) != before


def test_every_compiled_module_has_a_source_and_the_excluded_exist():
    compiled = {native_core.module_name(p) for p in native_core.compiled_sources()}
    assert 'testbed.nic.requester' in compiled and 'testbed.nic.socket_runtime' in compiled
    for name in native_core.NOT_COMPILED:
        assert (native_core.NIC / name).is_file(), name
