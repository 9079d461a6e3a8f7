"""`mrc-testbed cli`: Mininet's CLI on a running fabric, with MRC commands.

Every stock command works as in `mn` (nodes, net, links, `h1 ping6 ..`,
`link a b down`, xterm, py, exit). Added: paths, write, evs, stats, fail,
restore, flap, loss, rate and scenario. Node names are checked against the
fabric's plan, nothing is ever run through a shell, and an error is one
line after which the prompt comes back. Leaving (exit, Ctrl-D, Ctrl-C
twice, SIGTERM, a closed terminal) tears the whole fabric down.
"""
from __future__ import annotations

import glob
import os
import signal
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import TextIO

from mininet.cli import CLI
from mininet.log import error, output, setLogLevel
from mininet.util import quietRun

from testbed.fabric.net import FabricError, FabricNet
from testbed.fabric.probe import PathProber
from testbed.fabric.run_lock import FabricBusy
from testbed.fabric import verbosity
from testbed.fabric.topo_spec import TopoSpec
from testbed.fabric.usid_plan import carrier_usids
from testbed.shell.text import (MIB, CliError, mib, ms, number, one_line,
                                parse_args, parse_size, short_detail,
                                split_words, state_counts, table, target_name,
                                write_summary)
from testbed.shell.transfers import Progress, Transfers, port_counters
from testbed.workload.transports import ENDPOINT_NAMES, NAMES
from testbed.fabric.faults.injector import FaultInjector
from testbed.fabric.faults.catalogue import down_kind, undo_kinds

TICK_S = 0.02               # how often queued flap steps are applied
TRANSPORTS = ENDPOINT_NAMES         # what an agent's QP can be
BAR = 24
# What each command completes besides node names (and files for scenario).
WORDS = {'paths': ('--plane',), 'write': ('--transport', '--imm') + TRANSPORTS,
         'evs': ('--paths',), 'fail': ('plane', 'nic'),
         'restore': ('plane', 'nic', 'all'),
         'scenario': ('--quick', '--transport', '--out') + NAMES}
HELP = (
    'MRC commands (help CMD for each):\n'
    '  paths H1 H2 [--plane P]          uSID paths and whether each works\n'
    '  write H1 H2 SIZE [--transport T] [--imm]   RDMA WRITE, e.g. 4M\n'
    '  evs H [QP] [--paths]             EV table of a host\'s QPs\n'
    '  stats [H]                        per-QP and per-plane counters\n'
    '  fail / restore LINK|SWITCH|plane P|nic H P, restore all\n'
    '  flap LINK PERIOD COUNT [DOWN_S], loss LINK PCT, rate LINK MBIT\n'
    '  scenario FILE [--quick]          run a scenario on this fabric\n'
    'LINK is a-b or a b, e.g. p1a0x0-p1c0. exit, Ctrl-D or Ctrl-C twice\n'
    'tears the fabric down.\n\n')


class MrcCLI(CLI):
    """Mininet's CLI plus the MRC commands (do_*). Like Mininet's, the
    constructor runs the command loop and returns when the user leaves."""
    prompt = 'mrc> '
    helpStr = HELP + CLI.helpStr

    def __init__(self, fab: FabricNet, transfers: Transfers,
                 stdin: TextIO = sys.stdin) -> None:
        self.fab, self.plan, self.transfers = fab, fab.plan, transfers
        self.injector = FaultInjector(fab)
        # The injector is single-threaded: the ticker applying queued flap
        # steps and the commands take turns through this lock.
        self.fault_lock = threading.Lock()
        self.late_errors: list[str] = []
        self.interrupted = False
        self._stop = threading.Event()
        self._names = {(s.plane, s.usid): s.name
                       for s in self.plan.switches.values()}
        self._names.update({(p.plane, p.usid): p.host
                            for p in self.plan.host_ports.values()})
        ticker = threading.Thread(target=self._tick, name='fault-ticker',
                                  daemon=True)
        ticker.start()
        try:
            super().__init__(fab.net, stdin=stdin)   # returns on exit
        finally:
            self._stop.set()
            ticker.join()
            try:
                with self.fault_lock:
                    self.injector.restore_all()
            except Exception as err:  # noqa: BLE001 - the teardown follows
                error('*** restoring faults: %s\n' % one_line(err))

    # -- the loop: one-line errors, Ctrl-C twice to leave ---------------------

    def run(self) -> None:
        while True:
            try:
                for node in self.mn.values():   # as Mininet's run() does
                    while node.waiting:
                        node.sendInt()
                        node.waitOutput()
                if self.isatty():
                    quietRun(['stty', 'echo', 'sane', 'intr', '^C'])
                self.cmdloop()
                return
            except KeyboardInterrupt:
                if self.interrupted:
                    output('\n')
                    return
                self.interrupted = True
                output('\nInterrupt: Ctrl-C again, exit or Ctrl-D leaves '
                       'and tears the fabric down\n')

    def precmd(self, line: str) -> str:
        self.interrupted = False
        with self.fault_lock:
            late, self.late_errors = self.late_errors, []
        for message in late:
            error('*** %s\n' % message)
        return super().precmd(line)

    def onecmd(self, line: str) -> bool:
        name = (line.split() or [''])[0]
        try:
            return bool(super().onecmd(line))
        except KeyboardInterrupt:
            # Counts as the first of the two Ctrl-C that leave.
            self.interrupted = True
            error('*** %s: interrupted (Ctrl-C again leaves)\n' % name)
        except Exception as err:  # noqa: BLE001 - any failure is one line
            error('*** %s: %s\n' % (name, one_line(err)))
        return False

    def getLocals(self) -> dict:
        return dict(super().getLocals(), fab=self.fab, plan=self.plan,
                    faults=self.injector, transfers=self.transfers)

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            with self.fault_lock:
                try:
                    self.injector.due()
                except Exception as err:  # noqa: BLE001 - shown at the prompt
                    self.late_errors.append('queued fault: %s'
                                            % one_line(err))

    # -- paths ----------------------------------------------------------------

    def do_paths(self, line: str) -> None:
        """paths H1 H2 [--plane P]
        The uSID paths from H1 to H2, plane by plane: carrier, switches, and
        whether each works now (one probe per path, up to 3 tries)."""
        args = parse_args('paths', line, ('src', 'dst'), plane=int)
        src, dst = self._host(args.src), self._host(args.dst)
        if src == dst:
            raise CliError('H1 and H2 must be two different hosts')
        planes = self.plan.planes if args.plane is None \
            else (self._plane(args.plane),)
        paths = [p for pl in planes for p in self.plan.paths(src, dst, pl)]
        prober = PathProber(self.plan, {h: self.fab.host_pid(h)
                                        for h in (src, dst)})
        try:
            ok = prober.probe(paths).ok
        finally:
            prober.close()
        output('%s -> %s: %d paths, %d work\n' % (src, dst, len(paths),
                                                  len(ok)))
        output(table(('plane', 'path', 'works', 'switches', 'carrier'), [
            (p.plane, i + 1, 'yes' if i in ok else 'NO', ' '.join(p.switches),
             p.carrier) for i, p in enumerate(paths)]))

    # -- write ----------------------------------------------------------------

    def do_write(self, line: str) -> None:
        """write H1 H2 SIZE [--transport mrc|rc|ecmp] [--imm]
        RDMA WRITE of SIZE bytes (e.g. 512K, 4M) from H1 into a region of
        H2, over the pair's QP (made on first use, kept for later writes).
        Shows progress, then time, goodput and whether H2's copy hashes the
        same as what was sent. --imm: WRITE_WITH_IMM, H2 gets a completion."""
        args = parse_args('write', line, ('src', 'dst', 'size'),
                      transport=TRANSPORTS, imm=bool)
        src, dst = self._host(args.src), self._host(args.dst)
        if src == dst:
            raise CliError('H1 and H2 must be two different hosts')
        size = parse_size(args.size)
        transport = args.transport or 'mrc'
        output('%s -> %s: WRITE %s over %s\n' % (src, dst, mib(size),
                                                transport))
        try:
            result = self.transfers.write(src, dst, size, transport,
                                          args.imm, self._progress(size))
        except KeyboardInterrupt:
            output('\nthe write goes on in %s\'s agent; later writes from %s '
                   'to %s over %s queue behind it\n' % (src, src, dst,
                                                        transport))
            raise
        if self.isatty():
            output('\r' + ' ' * (BAR + 40) + '\r')     # wipe the bar
        output(write_summary(result, self._path_names))

    def _progress(self, size: int) -> Progress:
        """A progress bar redrawn in place (only on a terminal)."""
        if not self.isatty():
            return lambda delivered, elapsed: None

        def show(delivered: int, elapsed: float) -> None:
            filled = BAR * delivered // size
            output('\r  [%s%s] %s / %s  %.1f s ' % (
                '#' * filled, '.' * (BAR - filled), mib(delivered),
                mib(size), elapsed))
        return show

    # -- evs and stats --------------------------------------------------------

    def do_evs(self, line: str) -> None:
        """evs H [QP] [--paths]
        The EV table of each of H's QPs (or of QP, e.g. 0x100): ev id,
        state, role, plane, path (switches), packets sent, losses, smoothed
        RTT. RC and ECMP QPs show their one pinned path. --paths: one line
        per path instead, with how many of its EVs are in each state."""
        args = parse_args('evs', line, ('host', 'qp?'), paths=bool)
        host = self._host(args.host)
        qps = self.transfers.qps(host)
        if not qps:
            raise CliError('%s has no QPs yet: `write %s H SIZE` or `write H '
                           '%s SIZE` makes a pair' % (host, host, host))
        for qpn in [self._qpn(args.qp, qps)] if args.qp else sorted(qps):
            evs = self.transfers.evs(host, qpn)
            states = Counter(e.get('state', 'PINNED') for e in evs)
            output('%s qp %#x (%s): %d EVs: %s\n' % (
                host, qpn, self.transfers.label(host, qpn), len(evs),
                state_counts(states)))
            output(self._by_path(evs) if args.paths else self._ev_rows(evs))

    def _ev_rows(self, evs: list[dict]) -> str:
        return table(('ev', 'state', 'role', 'plane', 'path', 'pkts', 'lost',
                       'rtt ms'), [
            (e['ev_id'], e.get('state', 'PINNED'), e.get('role', '-'),
             e['plane'], self._path_names(e['path']), e['packets_sent'],
             e.get('losses', '-'), ms(e.get('rtt_ewma_s'))) for e in evs])

    def _by_path(self, evs: list[dict]) -> str:
        groups: dict[tuple[int, str], list[dict]] = {}
        for e in evs:
            groups.setdefault((e['plane'], e['path']), []).append(e)
        rows = []
        for (plane, path), group in sorted(groups.items()):
            states = Counter(e.get('state', 'PINNED') for e in group)
            rtts = [e['rtt_ewma_s'] for e in group if e.get('rtt_ewma_s')]
            rows.append((plane, self._path_names(path), state_counts(states),
                sum(e['packets_sent'] for e in group),
                sum(e.get('losses', 0) for e in group),
                ms(sum(rtts) / len(rtts) if rtts else None)))
        return table(('plane', 'path', 'EVs', 'pkts', 'lost', 'rtt ms'), rows)

    def do_stats(self, line: str) -> None:
        """stats [H]
        Per-QP counters (sent, retransmitted, timeouts, received, EV
        demotions, completions) and per-plane counters (NIC port packets
        and drops; packets and losses on the plane's EVs) of H, or of every
        host whose agent runs."""
        args = parse_args('stats', line, ('host?',))
        hosts = [self._host(args.host)] if args.host else [
            h for h in self.plan.hosts if self.transfers.running(h)]
        if not hosts:
            output('no agents run yet: `write H1 H2 SIZE` starts them\n')
        for host in hosts:
            qps = self.transfers.qps(host)
            output('%s: %s\n' % (host, '%d QPs' % len(qps) if qps
                                 else 'no QPs'))
            if qps:
                output(self._qptable(host, qps))
            output(self._planetable(host, qps))

    def _qptable(self, host: str, qps: dict[int, dict]) -> str:
        return table(('qp', 'what', 'state', 'MiB sent', 'pkts', 'rtx pkts',
                       'timeouts', 'MiB rcvd', 'demotions', 'done'), [
            ('%#x' % qpn, self.transfers.label(host, qpn), q['state'],
             '%.2f' % (q['bytes_sent'] / MIB), q['packets_sent'],
             q['retransmitted_packets'], q['packet_timeouts'],
             '%.2f' % (q['bytes_received'] / MIB), q['ev_demotions'],
             q['requester_completions'] + q['responder_completions'])
            for qpn, q in sorted(qps.items())])

    def _planetable(self, host: str, qps: dict[int, dict]) -> str:
        ports = port_counters(self.fab, host)
        evs = [e for qpn in qps for e in self.transfers.evs(host, qpn)]
        return table(('plane', 'port', 'tx pkts', 'rx pkts', 'drops', 'EVs',
                       'usable', 'EV pkts', 'EV losses'), [
            self._plane_row(host, plane, ports.get(plane, {}),
                            [e for e in evs if e['plane'] == plane])
            for plane in self.plan.planes])

    def _plane_row(self, host: str, plane: int, port: dict,
                   evs: list[dict]) -> tuple:
        """The NIC port's counters, then those of the plane's EVs (a pinned
        RC/ECMP route has no state: it counts as usable)."""
        return (plane, self.plan.host_ports[(host, plane)].intf,
                port.get('tx_packets', '-'), port.get('rx_packets', '-'),
                port.get('tx_dropped', 0) + port.get('rx_dropped', 0),
                len(evs),
                sum(e.get('state', 'GOOD') in ('GOOD', 'SKIP') for e in evs),
                sum(e['packets_sent'] for e in evs),
                sum(e.get('losses', 0) for e in evs))

    # -- faults ---------------------------------------------------------------

    def do_fail(self, line: str) -> None:
        """fail LINK | SWITCH | plane P | nic HOST P
        Take it down now, as a scenario's link_down, switch_down,
        plane_down or nic_port_down does (admin-down of switch-side ports, of
        a staged link's stages with afxdp=1; flow tables untouched). LINK is
        a-b or a b, e.g. p1a0x0-p1c0."""
        target, params = self._target(split_words(line))
        event = self._fault(down_kind(target), **params)
        output('%s down: %s\n' % (target_name(target, params),
                                   event['detail']))

    def do_link(self, line: str) -> None:
        """link NODE1 NODE2 up|down
        Mininet's command, through FabricNet.set_link: with afxdp=1 the
        link's stages go down, not its AF_XDP ports (those would keep what
        OVS sends them and send it all when back up)."""
        words = line.split()
        if len(words) != 3 or words[2] not in ('up', 'down'):
            error('usage: link NODE1 NODE2 up|down\n')
            return
        self.fab.set_link(words[0], words[1], words[2] == 'up')

    def do_restore(self, line: str) -> None:
        """restore LINK | SWITCH | plane P | nic HOST P | all
        Undo `fail` (for a LINK also `loss` and `rate`); `restore all` (or
        no argument) undoes every fault applied here and cancels flaps."""
        words = split_words(line)
        if words in ([], ['all']):
            output('restored: %s\n' % self._fault('restore_all')['detail'])
            return
        target, params = self._target(words)
        undo = undo_kinds(target)
        if len(undo) == 1:
            event = self._fault(undo[0], **params)
            output('%s up: %s\n' % (target_name(target, params),
                                     event['detail']))
            return
        output('%s: %s\n' % (target_name(target, params), '; '.join(
            self._fault(fault, **params)['detail'] for fault in undo)))

    def do_flap(self, line: str) -> None:
        """flap LINK PERIOD COUNT [DOWN_S]
        COUNT cycles of PERIOD seconds, each starting with LINK down for
        DOWN_S (default half the period), then up; runs in the background."""
        link, numbers = self._link_and_numbers(split_words(line), 2, 3)
        period = float(numbers[0])
        count = number(int, numbers[1], 'COUNT')
        down = float(numbers[2]) if len(numbers) > 2 else None
        steps = self._fault('link_flap', **link, period_s=period,
                            count=count, down_s=down)
        output('%s flapping: %d cycles of %g s, up for good at +%g s\n' % (
            target_name('link', link), count, period, steps[-1][0]))

    def do_loss(self, line: str) -> None:
        """loss LINK PCT
        Drop PCT % of the frames each way on LINK, at random (a gray
        failure); `loss LINK 0` or `restore LINK` clears it."""
        link, numbers = self._link_and_numbers(split_words(line), 1, 1)
        pct = float(numbers[0])
        event = self._fault('gray_clear', **link) if pct == 0 else \
            self._fault('gray_failure', **link, loss_pct=pct)
        output('%s: %s\n' % (target_name('link', link), event['detail']))

    def do_rate(self, line: str) -> None:
        """rate LINK MBIT
        Shape both ends of LINK to MBIT Mbit/s; `restore LINK` undoes it."""
        link, numbers = self._link_and_numbers(split_words(line), 1, 1)
        event = self._fault('link_rate', **link, mbit=float(numbers[0]))
        output('%s: %s\n' % (target_name('link', link), event['detail']))

    def _fault(self, fault: str, /, **params) -> dict | list:
        """Apply a fault now; its event's detail comes back shortened."""
        with self.fault_lock:
            event = self.injector.restore_all() if fault == 'restore_all' \
                else self.injector.apply(fault, **params)
        if isinstance(event, dict):
            event = dict(event, detail=short_detail(str(event['detail'])))
        return event

    def _target(self, words: list[str]) -> tuple[str, dict]:
        if len(words) == 2 and words[0] == 'plane':
            return 'plane', {'plane': number(int, words[1], 'plane')}
        if len(words) == 3 and words[0] == 'nic':
            return 'nic_port', {'host': self._host(words[1]),
                                'plane': number(int, words[2], 'plane')}
        if len(words) == 1 and words[0] in self.plan.switches:
            return 'switch', {'name': words[0]}
        if len(words) == 1 and '-' not in words[0]:
            self._node(words[0])
            raise CliError('%s is a host: give a link (%s-SWITCH) or nic %s '
                           'PLANE' % ((words[0],) * 3))
        return 'link', self._link(words)

    def _link(self, words: list[str]) -> dict:
        if len(words) == 1 and '-' in words[0]:
            words = words[0].split('-', 1)
        if len(words) != 2:
            raise CliError('expected LINK (a-b or a b, e.g. p1a0x0-p1c0), '
                           'SWITCH, plane P or nic HOST P')
        a, b = self._node(words[0]), self._node(words[1])
        return {'a': a, 'b': b}

    def _link_and_numbers(self, words: list[str], least: int,
                          most: int) -> tuple[dict, list[str]]:
        split = 1 if words and '-' in words[0] else 2
        link, numbers = self._link(words[:split]), words[split:]
        if not least <= len(numbers) <= most:
            raise CliError('expected %d to %d numbers after the link, got %d'
                           % (least, most, len(numbers)))
        for text in numbers:
            number(float, text, 'argument')
        return link, numbers

    # -- scenario -------------------------------------------------------------

    def do_scenario(self, line: str) -> None:
        """scenario FILE [--quick] [--transport T ...] [--out DIR]
        Run a scenario file on this fabric, transports one after another,
        and write results/<scenario>/<UTC time>/ as `mrc-testbed run` does.
        The file's topology and link rate must be this fabric's. The
        agents are stopped first (the scenario's endpoints need their
        port) and their QPs forgotten; faults set here stay applied."""
        from testbed.workload.report import table as summary_table
        from testbed.workload.run_scenario import run_scenario
        from testbed.workload.runner import fabric_spec
        from testbed.workload.scenario import load_scenario
        from testbed.workload.shared_fabric import SharedFabric
        args = parse_args('scenario', line, ('file',), quick=bool,
                      transport=list(NAMES), out=str)
        scenario = load_scenario(args.file)
        sc = scenario.quick_version() if args.quick else scenario
        wanted = fabric_spec(sc.topology, sc.link_rate_mbit)
        if wanted != self.fab.spec:
            raise CliError(
                '%s runs on %s, this fabric is %s: leave and `mrc-testbed run '
                '%s`, or start `mrc-testbed cli --topo %s --bw %g`' % (
                    args.file, wanted, self.fab.spec, args.file, sc.topology,
                    sc.link_rate_mbit))
        self.transfers.reset()

        def progress(text: str) -> None:
            output(text + '\n')
        with SharedFabric(self.fab.spec, progress, self.fab.convergence_delay_s,
                          given=self.fab) as shared:
            try:
                out, summary = run_scenario(
                    scenario, Path(args.out or 'results'),
                    tuple(args.transport) if args.transport else None, args.quick,
                    progress=progress, shared=shared)
            except ValueError as err:      # the scenario's convergence delay
                raise CliError(str(err)) from None
        output('%s\n\nresults: %s\n' % (summary_table(summary), out))

    # -- names ----------------------------------------------------------------

    def _host(self, name: str) -> str:
        if name not in self.plan.hosts:
            raise CliError('no host named %r (hosts: %s..%s)' % (
                name, self.plan.hosts[0], self.plan.hosts[-1]))
        return name

    def _node(self, name: str) -> str:
        if name not in self.plan.hosts and name not in self.plan.switches:
            raise CliError('no host or switch named %r' % name)
        return name

    def _plane(self, plane: int) -> int:
        if plane not in self.plan.planes:
            raise CliError('no plane %d (planes: %s)' % (
                plane, ', '.join(map(str, self.plan.planes))))
        return plane

    def _qpn(self, text: str, qps: dict[int, dict]) -> int:
        qpn = number(lambda t: int(t, 0), text, 'QP')
        if qpn not in qps:
            raise CliError('no QP %s here (QPs: %s)' % (
                text, ', '.join('%#x' % q for q in sorted(qps))))
        return qpn

    def _path_names(self, carrier: str) -> str:
        """The switches (and destination host) a uSID carrier goes through."""
        try:
            plane, usids = carrier_usids(carrier)
        except ValueError:
            return carrier
        return ' '.join(self._names.get((plane, u), '%#x' % u) for u in usids)

    def _peers(self, node: str) -> list[str]:
        if node in self.plan.switches:
            return list(self.plan.neighbours(node)) + [
                p.host for p in self.plan.hosts_on(node)]
        return [p.switch for (h, _), p in self.plan.host_ports.items()
                if h == node]

    # -- tab completion -------------------------------------------------------

    def completenames(self, text: str, *ignored) -> list[str]:
        """Commands, and node names (for `h1 ping6 ...`)."""
        return super().completenames(text, *ignored) + [
            n for n in sorted(self.mn) if n.startswith(text)]

    def completedefault(self, text: str, line: str, begidx: int,
                        endidx: int) -> list[str]:
        """Node names, the command's words and options, real links after
        `a-`, files for scenario. readline splits words at '-' and '/', so
        candidates are matched on the whole word and cut back to `text`."""
        command = (line.split() or [''])[0]
        word = line[:endidx].rsplit(' ', 1)[-1]
        if word.startswith('-'):
            candidates = [w for w in WORDS.get(command, ()) if w[0] == '-']
        elif command == 'scenario':
            candidates = [p + '/' if os.path.isdir(p) else p
                          for p in glob.glob(glob.escape(word) + '*')]
        elif '-' in word:
            node = word.split('-', 1)[0]
            known = node in self.plan.switches or node in self.plan.hosts
            candidates = ['%s-%s' % (node, peer)
                          for peer in (self._peers(node) if known else [])]
        else:
            candidates = sorted(self.mn) + [
                w for w in WORDS.get(command, ()) if w[0] != '-']
        cut = len(word) - len(text)
        return [c[cut:] for c in candidates if c.startswith(word)]


# -- running it ---------------------------------------------------------------

def run_cli(spec: TopoSpec) -> int:
    """Build the fabric, run the CLI until the user leaves, tear down."""
    fab = FabricNet(spec)
    for sig in (signal.SIGTERM, signal.SIGHUP):   # leave through `finally`
        signal.signal(sig, _leave)
    output('building %s ...\n' % spec)
    try:
        _start(fab)
        setLogLevel(verbosity.at_least('output'))   # the CLI talks
        transfers = Transfers(fab)
        output('%s: %d hosts, %d switches, %d planes, built in %.1f s; MRC '
               'agents start on first use.\n%s' % (
                   spec, len(fab.plan.hosts), len(fab.plan.switches),
                   len(fab.plan.planes), fab.ready_s, HELP))
        MrcCLI(fab, transfers)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)   # the teardown must finish
        output('tearing down ...\n')
        fab.stop()
        output('fabric torn down in %.1f s\n' % fab.timings['teardown_s'])
    return 0


def _start(fab: FabricNet) -> None:
    try:
        fab.start()
    except (FabricError, FabricBusy):
        raise
    except Exception as err:  # noqa: BLE001 - Mininet raises bare Exception
        raise FabricError('could not build %s: %s (debris of a crashed run? '
                          '`mrc-testbed clean` removes it)'
                          % (fab.spec, one_line(err))) from None


def _leave(signum: int, frame) -> None:
    raise SystemExit(128 + signum)
