"""The `mrc-testbed` command."""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from testbed import __version__
from testbed.fabric import verbosity
from testbed.workload.transports import NAMES as TRANSPORT_NAMES

if TYPE_CHECKING:
    from testbed.workload.model import Scenario

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
CLI_DEFAULT_BW = 10.0     # Mbit/s, the default scenario's link rate
DEFAULT_SCENARIO = 'scenarios/link_failure_allreduce.yaml'


class UsageError(Exception):
    """Bad input (a scenario, a spec): its message, and exit status 2."""


class Terminated(BaseException):
    """SIGTERM or SIGHUP (the terminal went away), raised where the process
    is so that every `with FabricNet` and `finally` on the way out tears
    down what it built. The exit status is the shell's for that signal."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__(signum)
        self.signum = signum


def _on_signal(signum: int, frame) -> None:
    raise Terminated(signum)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    verbosity.set_level(verbosity.level_for(args.verbose, args.quiet))
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    try:
        return args.func(args)
    except UsageError as err:
        return _usage_error(str(err))
    except BrokenPipeError:
        # The reader left (`plan | head`): say nothing more, as cat would.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED
    except KeyboardInterrupt:
        print('interrupted', file=sys.stderr)
        return 130
    except Terminated as stop:
        print('hung up' if stop.signum == signal.SIGHUP else 'terminated',
              file=sys.stderr)
        return 128 + stop.signum


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog='mrc-testbed', description='Emulation testbed for MRC over '
        'multi-plane SRv6 fabrics of Open vSwitch bridges.')
    parser.add_argument('--version', action='version',
                        version='%(prog)s ' + __version__)
    loudness = parser.add_mutually_exclusive_group()
    loudness.add_argument('-v', '--verbose', action='count', default=0,
                          help="Mininet's log level info (-vv: debug); "
                          'default: warning')
    loudness.add_argument('-q', '--quiet', action='count', default=0,
                          help="Mininet's log level error (-qq: critical), "
                          'and no progress lines')
    sub = parser.add_subparsers(required=True, metavar='COMMAND')
    doctor = sub.add_parser('doctor', help='what this machine can emulate')
    doctor.add_argument('--json', action='store_true')
    doctor.set_defaults(func=cmd_doctor)
    verify = sub.add_parser('verify', help='build a fabric and probe every '
                            'path and plane isolation')
    verify.add_argument('--topo', default=None, metavar='SPEC',
                        help='e.g. fattree,k=4,planes=2 or '
                        'leafspine,leaves=4,spines=4,hosts=2,planes=4')
    verify.add_argument('--down', action='append', default=[],
                        metavar='A-B', help='take this link down first '
                        '(repeatable), e.g. p1a0x0-p1c0')
    verify.add_argument('--fabric', choices=('srv6', 'routed'), default='srv6',
                        help="the fabric mode to probe: MRC's uSID paths, or "
                        'routed flows (one per ECMP choice)')
    verify.add_argument('--json', action='store_true')
    verify.set_defaults(func=cmd_verify)
    run = sub.add_parser('run', help='run a scenario file and write '
                         'results/<scenario>/<UTC time>/')
    run.add_argument('scenario', nargs='?', metavar='SCENARIO',
                     default=DEFAULT_SCENARIO,
                     help='scenario YAML (default: %(default)s)')
    run.add_argument('--transport', action='append', default=None,
                     choices=TRANSPORT_NAMES,
                     help='only these transports (repeatable)')
    run.add_argument('--out', default='results', metavar='DIR',
                     help='results root (default: %(default)s)')
    run.add_argument('--seed', type=int, default=None)
    run.add_argument('--quick', action='store_true',
                     help="the scenario's short form (its quick: section)")
    run.set_defaults(func=cmd_run)
    cross = sub.add_parser('crosscheck', help="run a scenario's one-plane form here "
                           'and in htsim, and print the figures side by side')
    cross.add_argument('scenario', metavar='SCENARIO', help='scenario YAML (no faults)')
    cross.add_argument('--htsim', required=True, metavar='PATH',
                       help="UEC's htsim_uec binary (built from github.com/"
                       'ultraethernet/uet-htsim)')
    cross.add_argument('--gbps', type=int, default=None,
                       help="htsim's link speed, whole Gbit/s (default: the speed that "
                       'gives its BDP as many packets as ours)')
    cross.add_argument('--last-hop-ecn', choices=('on', 'off'), default='on',
                       help="on: the last hop marks ECN on both sides (htsim's reference "
                       "NSCC); off: on neither, as MRC is deployed (htsim's receiver-"
                       'based CC on too; docs/crosscheck.md). Default: %(default)s')
    cross.add_argument('--out', default='results', metavar='DIR',
                       help='results root (default: %(default)s)')
    cross.add_argument('--quick', action='store_true',
                       help="the scenario's short form (its quick: section)")
    cross.add_argument('--seeds', type=int, default=1, metavar='N',
                       help="run N seeds from the scenario's (the same draws on both "
                       'sides) and give each figure as median (lowest-highest)')
    cross.set_defaults(func=cmd_crosscheck)
    check = sub.add_parser('check', help='validate a scenario file as run '
                           'does, and nothing else (no root, no fabric)')
    check.add_argument('scenario', metavar='SCENARIO')
    check.set_defaults(func=cmd_check)
    plan = sub.add_parser('plan', help="a topology's switches, ports, uSIDs "
                          "and every path's carrier (no root, no fabric)")
    plan.add_argument('--topo', default=None, metavar='SPEC',
                      help='e.g. fattree,k=4,planes=2 (the default)')
    plan.add_argument('--json', action='store_true',
                      help="for tools; also the controller's --plan file")
    plan.set_defaults(func=cmd_plan)
    cli = sub.add_parser('cli', help='build a fabric and open Mininet\'s '
                         'CLI on it, with MRC commands (paths, write, evs, '
                         'fail, ...)')
    cli.add_argument('--topo', default=None, metavar='SPEC',
                     help='e.g. fattree,k=4,planes=2 (the default)')
    cli.add_argument('--bw', type=float, default=None, metavar='MBIT',
                     help='shape every link to MBIT Mbit/s (default: the '
                     "SPEC's bw=, else %g, the default scenario's rate; 0: "
                     'unshaped, no congestion control or signals)'
                     % CLI_DEFAULT_BW)
    cli.set_defaults(func=cmd_cli)
    bench = sub.add_parser('bench', help='run the benchmarks (testbed/bench/) and '
                           'write BENCHMARKS.md with tables and plots')
    from testbed.bench.cli import add_arguments
    add_arguments(bench)
    bench.set_defaults(func=cmd_bench)
    clean = sub.add_parser('clean', help='remove everything of ours from '
                           'this machine (after a crash or kill)')
    clean.add_argument('--force', action='store_true',
                       help='also tear down a fabric that is running now')
    clean.set_defaults(func=cmd_clean)
    return parser


def _usage_error(message: str) -> int:
    print('mrc-testbed: error: %s' % message, file=sys.stderr)
    return EXIT_USAGE


def _need_root(what: str) -> int | None:
    if os.geteuid() != 0:
        return _usage_error('%s needs root: it creates network namespaces, '
                            'veth links, OVS bridges and routes' % what)
    return None


def cmd_doctor(args: argparse.Namespace) -> int:
    from testbed import native_core
    from testbed.fabric.features import Feature, all_features
    from testbed.workload import run_queue_waits
    core = native_core.status()
    watched, how = run_queue_waits.status()
    features = all_features() + [Feature(
        'compiled endpoint core', core == 'compiled', core,
        'the endpoints run as Python, about half as fast per packet: the health gate '
        'trips at lower link rates (bash scripts/setup.sh builds it)'), Feature(
        'run-queue wait program', watched, how,
        'the health gate limits the sum of all waits for a CPU, microsecond wake-ups '
        'included: beside other work a run may be NOT TRUSTED for waits that delayed '
        'no packet (docs/endpoint-core.md)')]
    if args.json:
        print(json.dumps([f.__dict__ for f in features], indent=2))
        return EXIT_OK
    for f in features:
        mark = 'yes' if f.present else 'NO '
        print('%-28s %s  %s' % (f.name, mark, f.detail))
        if not f.present:
            print('%-28s      without it: %s' % ('', f.without))
    return EXIT_OK


def cmd_verify(args: argparse.Namespace) -> int:
    from testbed.fabric.topo_spec import (DEFAULT_SPEC, TopoSpecError,
                                          parse_topo_spec)
    try:
        spec = parse_topo_spec(args.topo or DEFAULT_SPEC)
        down = [_link_arg(text) for text in args.down]
    except (TopoSpecError, ValueError) as err:
        return _usage_error(str(err))
    if (code := _need_root('verify')) is not None:
        return code
    from testbed.fabric.net import FabricError
    from testbed.fabric.verify import verify
    if not args.json:
        _progress('building %s ...' % spec)
    try:
        report = verify(spec, down, args.fabric)
    except FabricError as err:
        return _usage_error(str(err))
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        _print_verify(report)
    return EXIT_OK if report.ok else EXIT_FAILED


def _link_arg(text: str) -> tuple[str, str]:
    a, sep, b = text.partition('-')
    if not sep or not a or not b:
        raise ValueError('--down %r: expected NODE-NODE, e.g. p1a0x0-p1c0'
                         % text)
    return a, b


def _print_verify(report) -> None:
    t = report.timings
    print('topology       %s (%s datapath)' % (report.topo, report.datapath))
    print('fabric mode    %s' % report.fabric)
    print('host pairs     %d' % report.pairs)
    print('paths          %d ok of %d (%d probes sent)' % (
        report.paths_ok, report.paths_total, report.probes_sent))
    print('isolation      %s' % ('ok: no packet of one plane reached a '
                                 'switch of another' if report.isolation_ok
                                 else 'VIOLATED'))
    for leak in report.isolation_leaks:
        print('               %s' % leak)
    for path in report.failed_paths[:20]:
        print('failed         %s -> %s plane %d via %s' % (
            path['src'], path['dst'], path['plane'],
            ' '.join(path['switches'])))
    if len(report.failed_paths) > 20:
        print('               ... and %d more' % (len(report.failed_paths) - 20))
    print('times          build %.2f s, flows %.2f s, plumbing %.2f s, '
          'probes %.2f s, teardown %.2f s' % (
              t['build_s'], t['flows_s'], t['plumbing_s'], t['probe_s'],
              t['teardown_s']))
    print('result         %s' % ('PASS' if report.ok else 'FAIL'))


def _progress(line: str) -> None:
    """A progress line on stderr, unless -q."""
    if verbosity.shows('warning'):
        print(line, file=sys.stderr, flush=True)


def _load_scenario(path: str) -> 'Scenario':
    """The validated scenario; a refusal is a UsageError, the same for run
    and check."""
    from testbed.workload.scenario import ScenarioError, load_scenario
    if path == DEFAULT_SCENARIO and not Path(path).exists():
        raise UsageError('no SCENARIO given and the default, %s, is not under '
                         "%s: name a scenario file (the source's scenarios/ "
                         'holds the shipped ones)' % (path, Path.cwd()))
    try:
        return load_scenario(path)
    except ScenarioError as err:
        raise UsageError(str(err)) from None


def cmd_check(args: argparse.Namespace) -> int:
    scenario = _load_scenario(args.scenario)
    print('%s: ok: %s' % (args.scenario, _scenario_line(scenario)))
    return EXIT_OK


def _scenario_line(sc: 'Scenario') -> str:
    quick = ', quick form %g s' % sc.quick.duration_s if sc.quick else ''
    return '%s, %s at %g Mbit/s, %s workload, %d fault%s, %s, %g s%s' % (
        sc.name, sc.topology, sc.link_rate_mbit, sc.workload.type,
        len(sc.faults), '' if len(sc.faults) == 1 else 's',
        '/'.join(sc.transports), sc.duration_s, quick)


def cmd_plan(args: argparse.Namespace) -> int:
    from testbed.fabric.topo_spec import (DEFAULT_SPEC, TopoSpecError,
                                          parse_topo_spec)
    from testbed.fabric.usid_plan import FabricPlan
    from testbed.shell.plan_view import plan_document, plan_text
    try:
        spec = parse_topo_spec(args.topo or DEFAULT_SPEC)
        plan = FabricPlan.from_topo(spec.build())
    except (TopoSpecError, ValueError) as err:
        return _usage_error(str(err))
    if args.json:
        json.dump(plan_document(spec, plan), sys.stdout, indent=1)
        print()
    else:
        sys.stdout.writelines(plan_text(spec, plan))
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    scenario = _load_scenario(args.scenario)
    if (code := _need_root('run')) is not None:
        return code
    from testbed.fabric.link_options import (FeatureMissing, LinkOptionError,
                                             resolve)
    from testbed.fabric import signals
    from testbed.workload.runner import fabric_spec
    spec = fabric_spec(scenario.topology, scenario.link_rate_mbit)
    try:   # what this kernel cannot emulate is refused before anything runs
        resolve(spec.kwargs())
        signals.resolve(spec.kwargs(), scenario.plan().longest_path_links)
    except (FeatureMissing, LinkOptionError) as err:
        return _usage_error('%s: %s' % (args.scenario, err))
    from testbed.workload.report import table
    from testbed.workload.run_scenario import run_scenario
    transports = tuple(args.transport) if args.transport else None
    out, summary = run_scenario(
        scenario, Path(args.out), transports, args.quick, args.seed,
        progress=_progress)
    print(table(summary))
    print('\nresults: %s (report.md, summary.json, timeline.csv, '
          'events.jsonl, plots)' % out)
    trusted = all(m['trusted'] for m in summary.values())
    return EXIT_OK if trusted else EXIT_FAILED


def cmd_crosscheck(args: argparse.Namespace) -> int:
    from testbed.reference import crosscheck
    from testbed.reference.htsim import HELP, HtsimError, tiers_of
    scenario = _load_scenario(args.scenario)
    if args.quick:
        scenario = scenario.quick_version()
    binary = Path(args.htsim)
    if not binary.is_file():
        return _usage_error('%s: no such file. %s' % (binary, HELP))
    if args.seeds < 1:
        return _usage_error('--seeds must be 1 or more, got %d' % args.seeds)
    try:
        sc = crosscheck.one_plane(scenario, args.last_hop_ecn == 'on')
        tiers_of(sc.topo_spec)
    except (ValueError, HtsimError) as err:
        return _usage_error('%s: %s' % (args.scenario, err))
    if (code := _need_root('crosscheck')) is not None:
        return code
    from testbed.workload.results import new_results_dir
    root = new_results_dir(Path(args.out), sc.name + '-crosscheck')
    results = []
    try:
        for n, seed in enumerate(range(sc.seed, sc.seed + args.seeds), 1):
            _progress('crosscheck: seed %d (%d of %d)' % (seed, n, args.seeds))
            results.append(crosscheck.run_seed(binary, sc, seed, root, args.gbps, _progress))
            crosscheck.write_result(root / 'crosscheck.json', results)  # kept as it goes
    except HtsimError as err:
        print('htsim: %s (results so far: %s)' % (err, root), file=sys.stderr)
        return EXIT_FAILED
    print(crosscheck.report(sc, results))
    print('\nresults: %s (crosscheck.json; per seed the run\'s own files, with htsim\'s '
          'inputs and output beside them: htsim.topo, htsim.cm, htsim.out, its command '
          'run there)' % root)
    return EXIT_OK if all(r.trusted for r in results) else EXIT_FAILED


def cmd_cli(args: argparse.Namespace) -> int:
    from testbed.fabric.topo_spec import (DEFAULT_SPEC, TopoSpecError,
                                          parse_topo_spec)
    text = args.topo or DEFAULT_SPEC     # --bw wins over a bw= in SPEC
    try:
        spec = parse_topo_spec(text)
        # Shaped by default, as every scenario is: NSCC then has a rate to
        # size on and the switch ports signal congestion; unshaped, the one
        # datapath thread's drops stand in for congestion.
        bw = args.bw if args.bw is not None else spec.kwargs().get(
            'bw', CLI_DEFAULT_BW)
        params = {k: v for k, v in spec.kwargs().items() if k != 'bw'}
        if bw:
            params['bw'] = bw
        spec = parse_topo_spec(','.join([spec.name] + [
            '%s=%s' % kv for kv in sorted(params.items())]))
    except TopoSpecError as err:
        return _usage_error(str(err))
    if (code := _need_root('cli')) is not None:
        return code
    from testbed.shell.mrc_cli import run_cli
    from testbed.fabric.net import FabricError
    from testbed.fabric.run_lock import FabricBusy
    try:
        return run_cli(spec)
    except (FabricError, FabricBusy) as err:
        print('mrc-testbed: %s' % err, file=sys.stderr)
        return EXIT_FAILED


def cmd_bench(args: argparse.Namespace) -> int:
    refused = _need_root('bench')
    if refused is not None:
        return refused
    from testbed.bench.cli import run
    return run(args)


def cmd_clean(args: argparse.Namespace) -> int:
    if (code := _need_root('clean')) is not None:
        return code
    from testbed.fabric.clean import clean, leftovers
    from testbed.fabric.run_lock import FabricBusy, RunLock
    lock = RunLock()
    try:
        lock.acquire(wait_s=0)
    except FabricBusy as err:
        if not args.force:
            return _usage_error('%s; `clean --force` tears it down' % err)
    try:
        removed = clean()
    finally:
        lock.release()
    print('removed: ' + ', '.join('%d %s' % (n, kind)
                                  for kind, n in removed.items()))
    left = {k: v for k, v in leftovers().items() if v}
    if left:
        print('still present: %s' % left, file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK


if __name__ == '__main__':
    sys.exit(main())
