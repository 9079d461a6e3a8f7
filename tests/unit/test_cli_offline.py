"""The `mrc-testbed` commands that need neither root nor a fabric, run as a
user runs them (`python -m testbed.cli`): --version, check, plan, -v/-q."""
import json
import os
import pwd
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

import testbed
from testbed.fabric import verbosity
from testbed.fabric.topo_spec import parse_topo_spec
from testbed.fabric.usid_plan import FabricPlan, carrier_usids

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, '-m', 'testbed.cli']
DEFAULT = 'scenarios/link_failure_allreduce.yaml'


def as_user(user: pwd.struct_passwd) -> list[str]:
    return ['setpriv', '--reuid', str(user.pw_uid), '--regid',
            str(user.pw_gid), '--clear-groups']


def run(*args, user=None):
    """The command in the checkout; `user`: as that user (setpriv)."""
    prefix = as_user(user) if user else []
    return subprocess.run(prefix + CLI + list(args), capture_output=True,
                          text=True, cwd=REPO, timeout=60)


def test_version_is_the_package_version_and_pyproject_reads_it():
    result = run('--version')
    assert result.returncode == 0
    assert result.stdout == 'mrc-testbed %s\n' % testbed.__version__
    project = tomllib.loads((REPO / 'pyproject.toml').read_text())
    assert 'version' in project['project']['dynamic']
    assert project['tool']['setuptools']['dynamic']['version'] == {
        'attr': 'testbed.__version__'}


def test_check_accepts_a_good_scenario_in_one_line():
    result = run('check', DEFAULT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count('\n') == 1 and result.stderr == ''
    assert result.stdout.startswith(DEFAULT + ': ok: link_failure_allreduce, '
                                    'fattree,afxdp=auto,k=4,mtu=3500,planes=2 at 10 Mbit/s')


def unprivileged_user() -> pwd.struct_passwd | None:
    """A user with no root who can read the checkout and the interpreter."""
    if os.geteuid() != 0 or not shutil.which('setpriv'):
        return None
    try:
        user = pwd.getpwnam('nobody')
    except KeyError:
        return None
    probe = subprocess.run(as_user(user) + [sys.executable, '-c', 'import yaml'],
                           cwd=REPO, capture_output=True)
    return user if probe.returncode == 0 else None


def test_check_needs_no_root():
    user = unprivileged_user()
    if user is None:
        pytest.skip('no unprivileged user who can run this interpreter here')
    result = run('check', DEFAULT, user=user)
    assert result.returncode == 0, result.stderr
    assert ': ok: ' in result.stdout


@pytest.mark.parametrize('text,where', [
    ('faults:\n  - {at: 3, type: link_down, link: [p1a0x0, p1c9]}\n',
     'faults[0].link[1]'),
    ('transports: [mrc, quic]\n', 'transports[1]'),
])
def test_check_refuses_as_run_does(tmp_path, text, where):
    base = (REPO / DEFAULT).read_text()
    key = text.split(':')[0]
    bad = tmp_path / 'bad.yaml'        # the default with one key replaced
    bad.write_text(base.replace(_block(base, key), text))
    checked, ran = run('check', str(bad)), run('run', str(bad), '--out',
                                               str(tmp_path / 'results'))
    assert checked.returncode == ran.returncode == 2
    assert checked.stderr == ran.stderr
    assert checked.stderr.startswith('mrc-testbed: error: %s: %s: ' % (bad, where))
    assert checked.stdout == ''
    assert not (tmp_path / 'results').exists()


def _block(text: str, key: str) -> str:
    """The lines of one top-level key (the key's line and its indented ones)."""
    lines = text.split('\n')
    start = next(i for i, l in enumerate(lines) if l.startswith(key + ':'))
    end = next(i for i in range(start + 1, len(lines))
               if lines[i] and not lines[i].startswith(' '))
    return '\n'.join(lines[start:end]) + '\n'


def test_check_of_a_missing_file():
    result = run('check', 'scenarios/no_such.yaml')
    assert result.returncode == 2
    assert 'scenarios/no_such.yaml: cannot read: No such file' in result.stderr


def test_plan_text_lists_switches_ports_and_every_path():
    result = run('plan', '--topo', 'leafspine,leaves=2,spines=2,hosts=1,planes=2')
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith('leafspine,hosts=1,leaves=2,planes=2,spines=2: planes '
                          '1 2, 8 switches, 2 hosts (4 ports), 8 links\n')
    assert 'p1l0    1      leaf   1000  0000000101000000  1:p1s0 2:p1s1 3:h1' in out
    assert 'h2    2      h2-p2  8002  fd00:0:0:2::2  fcbb:bb02:8002::  p2l1:3' in out
    paths = out.split('\npaths (')[1].strip().split('\n')[2:]
    # Each of the 2 ordered pairs crosses one spine of each plane: 2 x 2 x 2.
    assert len(paths) == 8
    assert 'h1   h2   1      fcbb:bb01:1000:2001:1001:8002::  p1l0 p1s1 p1l1' in out


def test_plan_json_is_the_controllers_plan_and_every_path():
    spec = 'fattree,k=4,planes=2'
    result = run('plan', '--topo', spec, '--json')
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc['topology'] == spec and doc['planes'] == [1, 2]
    expected = FabricPlan.from_topo(parse_topo_spec(spec).build())
    assert FabricPlan.from_json(result.stdout) == expected
    # Per host and plane, k=4: 1 peer on its edge switch (1 path), 2 in its
    # pod (k/2 = 2 paths each), 12 in other pods ((k/2)^2 = 4 each): 53.
    assert len(doc['paths']) == 16 * 53 * 2
    usid = {s['name']: s['usid'] for s in doc['switches']}
    ports = {(p['host'], p['plane']): p['usid'] for p in doc['host_ports']}
    for path in doc['paths']:
        plane, usids = carrier_usids(path['carrier'])
        assert plane == path['plane']
        assert usids == [usid[s] for s in path['switches']] + [
            ports[(path['dst'], plane)]]


def test_plan_into_a_pipe_that_closes_early():
    proc = subprocess.run(' '.join(CLI + ['plan', '|', 'head', '-1']),
                          shell=True, capture_output=True, text=True, cwd=REPO)
    assert proc.stdout.startswith('fattree,k=4,planes=2: planes 1 2')
    assert proc.stderr == ''


@pytest.mark.parametrize('spec,message', [
    ('fattree,k=3', 'k must be even'),
    ('mesh', "unknown topology 'mesh'"),
    ('leafspine,leaves=2,colour=red', "unknown parameter 'colour=red'"),
])
def test_plan_refuses_a_bad_spec(spec, message):
    result = run('plan', '--topo', spec)
    assert result.returncode == 2 and result.stdout == ''
    assert result.stderr.startswith('mrc-testbed: error: ')
    assert message in result.stderr


def test_verbosity_flags_are_mininets_levels():
    assert verbosity.level_for(0, 0) == 'warning'
    assert [verbosity.level_for(v, 0) for v in (1, 2, 3)] == [
        'info', 'debug', 'debug']
    assert [verbosity.level_for(0, q) for q in (1, 2, 3)] == [
        'error', 'critical', 'critical']
    from mininet.log import LEVELS
    assert set(verbosity.LEVELS) <= set(LEVELS)
    assert sorted(verbosity.LEVELS, key=LEVELS.get) == list(verbosity.LEVELS)


def test_verbose_and_quiet_together_are_refused():
    result = run('-v', '-q', 'check', DEFAULT)
    assert result.returncode == 2
    assert 'not allowed with argument' in result.stderr


def test_quiet_check_still_says_ok_and_errors():
    assert run('-qq', 'check', DEFAULT).stdout.startswith(DEFAULT + ': ok')
    assert 'cannot read' in run('-q', 'check', 'nope.yaml').stderr


def test_commands_that_need_root_say_so():
    """Every command that builds anything refuses at once without root
    (exit 2, saying why). Run as an unprivileged user, who could not build
    anything even if the check were gone."""
    user = unprivileged_user()
    if user is None:
        pytest.skip('no unprivileged user who can run this interpreter and '
                    'read the checkout here (a clone under /root, say)')
    for args in (['verify'], ['run', '--quick'], ['clean'], ['cli'],
                 ['bench', '--out', '/nonexistent'],
                 ['crosscheck', 'scenarios/incast_7to1_victim.yaml', '--htsim', '/bin/true']):
        result = run(*args, user=user)
        assert result.returncode == 2, (args, result.stderr)
        assert 'needs root' in result.stderr, (args, result.stderr)


@pytest.mark.parametrize('args, message', [
    (['scenarios/incast_7to1_victim.yaml', '--htsim', '/nonexistent/htsim_uec'],
     'uet-htsim'),                                  # says how to get htsim
    (['scenarios/link_failure_allreduce.yaml', '--htsim', '/bin/true'], 'has faults'),
])
def test_crosscheck_refuses_before_anything_is_built(args, message):
    result = run('crosscheck', *args)
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_run_exits_1_when_a_result_is_not_trusted(monkeypatch, capsys):
    """`run` prints the table and exits 1 when any transport's result is not
    trusted, 0 when all are. The run itself is replaced (no fabric): what is
    checked is the command's verdict on the summary it gets back."""
    from testbed import cli
    from testbed.fabric import link_options, signals
    from testbed.fabric.net import FabricNet
    from testbed.workload import report, run_scenario

    def never(*_args, **_kwargs):
        raise AssertionError('a unit test must not build a fabric')
    monkeypatch.setattr(FabricNet, '__init__', never)
    monkeypatch.setattr(cli.os, 'geteuid', lambda: 0)
    monkeypatch.setattr(link_options, 'resolve', lambda kwargs: None)
    monkeypatch.setattr(signals, 'resolve', lambda kwargs, links: None)
    monkeypatch.setattr(report, 'table', lambda summary: 'TABLE')
    verdicts = {}

    def fake_run(scenario, out, transports, quick, seed, progress):
        return Path(out) / 'x', {t: {'trusted': ok} for t, ok in verdicts.items()}
    monkeypatch.setattr(run_scenario, 'run_scenario', fake_run)
    args = cli._parser().parse_args(['run', '--quick'])
    verdicts.update(mrc=True, rc=True)
    assert args.func(args) == cli.EXIT_OK
    verdicts.update(rc=False)
    assert args.func(args) == cli.EXIT_FAILED == 1
    assert capsys.readouterr().out.count('TABLE') == 2
