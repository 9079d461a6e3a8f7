"""The interactive CLI's flap, loss, rate, write --imm and scenario commands,
down to the call each makes (no fabric: a recording injector and transfers).
What those calls do to a real fabric is tested in tests/integration."""
import threading
from pathlib import Path

import pytest

from testbed.fabric.net import FabricNet
from testbed.fabric.usid_plan import FabricPlan
from testbed.shell import mrc_cli
from testbed.shell.text import CliError
from testbed.workload import run_scenario
from testbed.workload.runner import fabric_spec

# The default scenario's fabric.
SPEC = fabric_spec('fattree,k=4,planes=2,mtu=3500,afxdp=auto', 10)
LINK = {'a': 'p1a0x0', 'b': 'p1c0'}
DEFAULT = Path(__file__).resolve().parents[2] / 'scenarios/link_failure_allreduce.yaml'


class Injector:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict]] = []

    def apply(self, fault: str, **params):
        self.calls.append((fault, params))
        if fault == 'link_flap':
            return [(0.0, 'link_down'), (1.2, 'link_up')]
        return {'detail': 'did %s' % fault}


class Fab:
    def __init__(self) -> None:
        self.spec = SPEC
        self.plan = FabricPlan.from_topo(SPEC.build())
        self.convergence_delay_s = 1.0
        self.signals = None


class Transfers:
    def __init__(self) -> None:
        self.writes: list[tuple] = []
        self.resets = 0

    def write(self, *args):
        self.writes.append(args)
        raise LookupError('recorded')    # the summary needs a real result

    def reset(self) -> None:
        self.resets += 1


@pytest.fixture
def cli(monkeypatch):
    def never(*_args, **_kwargs):
        raise AssertionError('a unit test must not build a fabric')
    monkeypatch.setattr(FabricNet, '__init__', never)
    printed: list[str] = []
    monkeypatch.setattr(mrc_cli, 'output', printed.append)
    shell = mrc_cli.MrcCLI.__new__(mrc_cli.MrcCLI)   # no command loop
    shell.fab = Fab()
    shell.plan = shell.fab.plan
    shell.injector, shell.transfers = Injector(), Transfers()
    shell.fault_lock = threading.Lock()
    monkeypatch.setattr(shell, 'isatty', lambda: False, raising=False)
    shell.printed = printed
    return shell


def test_flap_queues_the_cycles_with_an_optional_down_time(cli):
    cli.do_flap('p1a0x0-p1c0 0.4 3')
    cli.do_flap('p1a0x0 p1c0 0.4 3 0.1')
    assert cli.injector.calls == [
        ('link_flap', dict(LINK, period_s=0.4, count=3, down_s=None)),
        ('link_flap', dict(LINK, period_s=0.4, count=3, down_s=0.1))]
    assert 'up for good at +1.2 s' in cli.printed[0]


def test_loss_sets_gray_loss_and_zero_clears_it(cli):
    cli.do_loss('p1a0x0-p1c0 5')
    cli.do_loss('p1a0x0-p1c0 0')
    assert cli.injector.calls == [('gray_failure', dict(LINK, loss_pct=5.0)),
                                  ('gray_clear', LINK)]


def test_rate_shapes_the_link(cli):
    cli.do_rate('p1a0x0-p1c0 2.5')
    assert cli.injector.calls == [('link_rate', dict(LINK, mbit=2.5))]


@pytest.mark.parametrize('command,line,words', [
    ('do_loss', 'p1a0x0-p1c0', 'expected 1 to 1 numbers'),
    ('do_rate', 'p1a0x0-p1c9 3', "no host or switch named 'p1c9'"),
    ('do_flap', 'p1a0x0-p1c0 0.4', 'expected 2 to 3 numbers'),
    ('do_flap', 'p1a0x0-p1c0 0.4 x', 'argument'),
])
def test_bad_arguments_are_refused_before_any_fault(cli, command, line, words):
    with pytest.raises(CliError, match=words):
        getattr(cli, command)(line)
    assert cli.injector.calls == []


def test_write_imm_asks_for_a_write_with_immediate(cli):
    for line in ('h1 h16 1M --imm', 'h1 h16 1M'):
        with pytest.raises(LookupError):
            cli.do_write(line)
    (src, dst, size, transport, imm, _), plain = cli.transfers.writes
    assert (src, dst, size, transport, imm) == ('h1', 'h16', 1 << 20, 'mrc', True)
    assert plain[4] is False


def test_scenario_runs_on_this_fabric_or_says_which_to_start(cli, monkeypatch):
    ran = []

    def fake_run(scenario, out, transports, quick, progress, shared):
        # the scenario's transports share this fabric (shared_fabric)
        ran.append((scenario.name, transports, quick, shared.given))
        return out / 'x', {}
    monkeypatch.setattr(run_scenario, 'run_scenario', fake_run)
    monkeypatch.setattr('testbed.workload.report.table', lambda summary: '')
    cli.do_scenario('%s --quick --transport mrc' % DEFAULT)
    assert ran == [('link_failure_allreduce', ('mrc',), True, cli.fab)]
    assert cli.transfers.resets == 1     # the agents stop: the port is needed
    cli.fab.spec = fabric_spec('fattree,k=4,planes=2', 20)
    with pytest.raises(CliError, match=r'mrc-testbed cli --topo '
                       r'fattree,afxdp=auto,k=4,mtu=3500,planes=2 --bw 10'):
        cli.do_scenario(str(DEFAULT))
    assert len(ran) == 1
