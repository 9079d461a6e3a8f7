"""FabricNet: a multi-plane fabric of OVS bridges, its controller and
SRv6-plumbed hosts, built in one call and torn down fast.

Every bridge carries both fabric modes (`testbed.controller.usid_app`):
MRC's static uSID tables, and destination routes with ECMP groups that the
controller repairs after `convergence_delay_s` when a link goes down.

Mininet builds the nodes and links. Everything else is ours: the os-ken
controller runs as a child process on 127.0.0.1, host plumbing is done
in-process with pyroute2, and teardown deletes every bridge in one OVSDB
transaction and every namespace at once instead of link by link (Mininet's
own stop() takes 9 s for an 80-switch fabric).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path

from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import Host, RemoteController

from testbed.fabric import (build_log, convergence, cpu_placement, host_decap, ovs, port_stage,
                            signals, verbosity)
from testbed.fabric.baseline import Baseline
from testbed.fabric.features import afxdp_misfit, ovs_datapath
from testbed.fabric.host_plumbing import plumb_host, prepare_namespace
from testbed.fabric.probe import PathProber
from testbed.fabric.link_options import (FeatureMissing, LinkOptionError,
                                         resolve)
from testbed.fabric.netns import write_sysctl
from testbed.fabric.run_lock import RunLock
from testbed.fabric.topo_spec import AUTO, TopoSpec
from testbed.fabric.usid_plan import FabricPlan
from testbed.nic.emulated_timescale import (MTU, NO_SIGNALS, CongestionSignals,
                                            base_rtt_s)
from testbed.topologies.link_params import AFXDP_MAX_MTU

REPO_ROOT = Path(__file__).resolve().parents[2]
FLOW_INSTALL_TIMEOUT_S = 60.0
# A build's phases in order (FabricNet.timings, build_log), the run lock's wait aside;
# the first three bring up the switches with their ports.
BRIDGE_PHASES = ('controller_s', 'nodes_links_s', 'ports_open_s')
BUILD_PHASES = BRIDGE_PHASES + ('flows_s', 'plumbing_s', 'signals_s')


class FabricHost(Host):
    """A Mininet host whose namespace is made quiet before its ports exist."""

    def startShell(self, *args, **kwargs) -> None:
        super().startShell(*args, **kwargs)
        prepare_namespace(self.pid)


class UsidControllerNode(RemoteController):
    """Mininet's handle on our controller process. Mininet would check the
    port with telnet through a shell, whose output can catch the
    controller's binary OpenFlow hello and fail to decode; FabricNet has
    already waited for the port to listen."""

    def checkListening(self) -> None:
        return


class FabricError(RuntimeError):
    """The fabric could not be built as asked."""


class FabricNet:
    """Build with `start()` (or `with FabricNet(spec) as fab:`), then use
    `fab.net` (the Mininet object), `fab.plan` and `fab.timings`."""

    def __init__(self, spec: TopoSpec, datapath: str | None = None,
                 convergence_delay_s: float | None = None,
                 decap: str = host_decap.AUTO) -> None:
        self.spec = spec
        # Who decapsulates at the hosts: the kernel's End.DT6, or eBPF where
        # the kernel has no seg6local (host_decap).
        try:
            self.decap = host_decap.choose(decap)
        except host_decap.HostDecapError as err:
            raise FabricError(str(err)) from err
        if convergence_delay_s is not None and not convergence_delay_s >= 0:
            raise FabricError('convergence delay must be >= 0 s, got %r'
                              % (convergence_delay_s,))
        # Before the run lock, OVS or any namespace: a link option the
        # kernel cannot apply is refused, not left to TCLink's logged errors.
        self.topo = spec.build()
        self.plan = FabricPlan.from_topo(self.topo)
        # The links' MTU (the spec's mtu=, else the kernel's): its one road.
        self.mtu: int = int(spec.kwargs().get('mtu', MTU))
        # afxdp=1: AF_XDP switch ports, each link staged (port_stage); they
        # exist only in the userspace datapath. afxdp=auto: where they fit.
        self.afxdp, self.switch_port_choice = self._choose_ports(
            spec.kwargs().get('afxdp', 0))
        self.datapath = 'user' if self.afxdp else datapath or ovs_datapath()
        # Which cores its PMD thread and the endpoint loop run on (None: the
        # scheduler's choice; cpu_placement says why).
        self.placement = cpu_placement.plan() if self.afxdp else None
        try:
            self.link_options = resolve(spec.kwargs())
            self.signal_settings, self.missing_features = signals.resolve(
                spec.kwargs(), self.plan.longest_path_links)
        except (FeatureMissing, LinkOptionError) as err:
            raise FabricError('%s: %s' % (spec, err)) from err
        self.signals: signals.SignallingPorts | None = None
        # The one road of the link rate: what every link is shaped to (the
        # spec's bw=), None on unshaped links. Drivers size their QPs on it.
        bw = spec.kwargs().get('bw')
        self.link_rate_bps: float | None = float(bw) * 1e6 if bw else None
        # Unless given, on the timescale of this fabric's timers (convergence.py).
        self.convergence_delay_s = float(
            convergence.delay_for(self.base_rtt_s) if convergence_delay_s is None
            else convergence_delay_s)
        # The idle base RTT, once something measured it
        # (workload.base_rtt; a hardware profile's delay is made up from it).
        self.measured_base_rtt_s: float | None = None
        self.workdir: Path | None = None    # made once the run lock is ours
        self.net: Mininet | None = None
        self.controller: subprocess.Popen | None = None
        self.timings: dict[str, float] = {}
        self._phase_end = 0.0
        # Run first at teardown, newest first: what others started inside
        # the hosts (agents, runtimes) would keep a namespace alive.
        self._cleanups: list[Callable[[], None]] = []
        # Settings changed in Open vSwitch (ovs.set_for_fabric): put back last, once
        # the ports are gone (their removal logs at the fabric's log levels).
        self.ovs_settings_changed = False
        self.lock = RunLock()
        self.links_tagged = False

    def __enter__(self) -> 'FabricNet':
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        setLogLevel(verbosity.level())     # the command's -v / -q
        t0 = time.monotonic()
        self.lock.acquire()
        self.workdir = Path(tempfile.mkdtemp(prefix='mrc-fabric-'))
        ovs.ensure_running()
        self._phase('lock_wait_s', t0)
        port = self._start_controller()
        self._phase('controller_s')
        # OpenFlow 1.5 for the controller (its select groups need it:
        # testbed.controller.ofp_groups), 1.3 for ovs-ofctl readers.
        switch = partial(ovs.FabricSwitch, datapath=self.datapath, failMode='secure',
                         protocols='OpenFlow13,OpenFlow15', batch=True,
                         port_type='afxdp' if self.afxdp else 'system')
        # build=False: self.net exists before any node does, so stop() can
        # tear down a network whose build failed half way.
        if self.afxdp:
            port_stage.stage_links(self.topo)
            self._set_pmd()
        self.net = Mininet(topo=self.topo, switch=switch, host=FabricHost,
                           controller=partial(UsidControllerNode,
                                              ip='127.0.0.1', port=port),
                           autoSetMacs=False, build=False)
        with port_stage.batched_tc():    # the staged links' tc, in one batch
            self.net.build()
        self.net.start()
        root_links = self._root_links()
        ovs.tag_links(root_links)
        self.links_tagged = True
        quiet_root_links(root_links)
        self._phase('nodes_links_s')
        if self.afxdp:
            ovs.wait_ports_open(self.switch_ports, 'afxdp')
            self._raise_pmd()
            self._phase('ports_open_s')
        self._wait_flows()
        self._phase('flows_s')
        self._plumb_hosts()
        self._phase('plumbing_s')
        self._raise_tx_buffer()
        self._start_signals()
        self._phase('signals_s')
        # build_s: up to switches with ports (what bench and verify report as the build)
        self.timings['build_s'] = sum(self.timings.get(k, 0.0) for k in BRIDGE_PHASES)
        build_log.record('built', str(self.spec), self.afxdp, self.timings)

    @property
    def ready_s(self) -> float:
        """How long the fabric took to be ready to carry traffic, the wait
        for the run lock aside."""
        return sum(self.timings.get(k, 0.0) for k in BUILD_PHASES)

    def _phase(self, name: str, since: float | None = None) -> None:
        """The build phase that ends now (FabricNet.timings, build_log)."""
        now = time.monotonic()
        self.timings[name] = now - (self._phase_end if since is None else since)
        self._phase_end = now

    def set_link(self, a: str, b: str, up: bool) -> None:
        """Bring the link between two nodes down or up (both ends), as
        Mininet's `link a b down` does (on a staged fabric, both stages).
        Flow tables are not touched."""
        assert self.net is not None
        links = self.net.linksBetween(self.net[a], self.net[b])
        if not links:
            raise FabricError('no link between %s and %s' % (a, b))
        link = links[0]
        if isinstance(link, port_stage.StagedLink):
            port_stage.cut(link.stages(), [(i.node.name, i.name) for i in (link.intf1, link.intf2)
                                           if i.node.name not in self.plan.hosts], up)
        else:
            self.net.configLinkStatus(a, b, 'up' if up else 'down')

    def _root_links(self) -> list[str]:
        """Switch ports, link stages and bridge taps: our links in the root
        netns."""
        assert self.net is not None
        return [i.name for s in self.net.switches for i in s.intfList()
                if i.name != 'lo'] + [s.name for s in self.net.switches] + \
            port_stage.stages(self.net.links)

    @property
    def base_rtt_s(self) -> float | None:
        """The formula base RTT of the fabric's longest path
        (emulated_timescale.base_rtt_s); None on unshaped links."""
        if not self.link_rate_bps:
            return None
        return base_rtt_s(self.link_rate_bps, self.plan.longest_path_links, self.mtu)

    def _choose_ports(self, asked: int | str) -> tuple[bool, str]:
        """Whether the switch ports are AF_XDP ones, and why: as the spec
        asks (refused where they cannot be built), or with afxdp=auto the
        faster where they fit (BENCHMARKS.md §6), system ports elsewhere."""
        if asked != AUTO:
            if asked and os.geteuid() == 0 and (why := self._afxdp_misfit(False)):
                raise FabricError('%s: afxdp=1: %s (see `mrc-testbed doctor`)'
                                  % (self.spec, why))
            return bool(asked), 'afxdp=%d' % asked
        why_not = self._afxdp_misfit(True)
        if why_not is None:
            return True, 'afxdp=auto: AF_XDP ports fit here'
        return False, 'afxdp=auto: system ports, %s' % why_not

    def _afxdp_misfit(self, auto: bool) -> str | None:
        """Why AF_XDP ports cannot carry this fabric here; None if they can.
        Chosen by auto, they also want what made them worth choosing: the
        MTU a veth runs native XDP at, and a core of the PMD thread's own."""
        if auto and self.mtu > AFXDP_MAX_MTU:
            return 'mtu %d is above the %d an AF_XDP port on a veth takes' % (
                self.mtu, AFXDP_MAX_MTU)
        if auto and cpu_placement.plan() is None:
            return 'one core: none of its own for the PMD thread'
        return afxdp_misfit(self.switch_port_count)

    @property
    def switch_port_count(self) -> int:
        """How many switch ports the fabric has (an end of a link at a switch)."""
        topo = self.topo
        return sum(1 for link in topo.links() for node in link if topo.isSwitch(node))

    def _set_pmd(self) -> None:
        """The PMD thread that will poll the `afxdp` switch ports (native XDP
        mode: port_stage says why) allowed to sleep while its ports are idle
        and kept on its own core (cpu_placement), and ovs-vswitchd's log spared
        a line per port for each port added or deleted; set before any port
        exists, restored at teardown (after the ports are gone)."""
        self.ovs_settings_changed = True
        ovs.set_for_fabric('pmd-maxsleep', str(ovs.PMD_MAX_SLEEP_US))
        for module in ovs.CHATTY_AFXDP_MODULES:
            ovs.log_less_for_fabric(module)
        if self.placement is not None:
            ovs.set_for_fabric('pmd-cpu-mask', self.placement.pmd_cpu_mask)

    def _raise_pmd(self) -> None:
        """The PMD thread, now polling the ports, above ordinary work on its core,
        and the autogroups of ovs-vswitchd's session and of ours (the endpoint
        loop's) above other sessions' (cpu_placement says why); all back as they
        were at teardown."""
        vswitchd = ovs.vswitchd_pid()
        if self.placement is None or vswitchd is None:
            return
        assert self.workdir is not None
        raised = cpu_placement.raise_pmd_threads(vswitchd)
        self.add_cleanup(partial(cpu_placement.lower_pmd_threads, vswitchd, raised))
        for pid in (vswitchd, cpu_placement.session_leader()):
            if cpu_placement.raise_autogroup(pid, self.workdir):
                self.add_cleanup(partial(cpu_placement.restore_autogroup, pid, self.workdir))

    def _raise_tx_buffer(self) -> None:
        """The userspace datapath's one transmit socket must hold what every
        shaped queue of the fabric may hold (ovs.raise_tx_buffer says why).
        OVS makes it at its first transmit: one probe on one path does."""
        if self.datapath != 'user' or self.afxdp:
            return          # AF_XDP ports send through their own rings
        if ovs.raise_tx_buffer() is None:
            src, dst = self.plan.hosts[0], self.plan.hosts[-1]
            prober = PathProber(self.plan, {h: self.host_pid(h)
                                            for h in (src, dst)})
            try:
                prober.probe(self.plan.paths(src, dst, self.plan.planes[0])[:1])
            finally:
                prober.close()
            if ovs.raise_tx_buffer() is None:
                self.missing_features.append(
                    "a large transmit buffer for OVS's datapath (its socket "
                    'was not found: shaped queues may lose packets uncounted)')

    def _start_signals(self) -> None:
        settings = self.signal_settings
        if settings is None or not settings.on:
            return
        assert self.net is not None and self.workdir is not None
        self.signals = signals.SignallingPorts(
            self.workdir.name, settings, self.link_rate_bps or 0,
            self._switch_ports(), self.mtu)

    @property
    def congestion_signals(self) -> CongestionSignals:
        """What the running fabric signals, for the endpoints' profiles."""
        s = self.signal_settings if self.signals is not None else None
        return CongestionSignals(ecn=s.mark, trimming=s.trim) if s else \
            NO_SIGNALS

    @property
    def switch_ports(self) -> list[str]:
        """Every switch-side interface of the running fabric."""
        return list(self._switch_ports())

    @property
    def port_queues(self) -> dict[str, str]:
        """Switch port -> the device where what it sends queues (itself, or
        on an afxdp=1 fabric a link stage: testbed.fabric.port_stage)."""
        return {port: info.queue or port for port, info in self._switch_ports().items()}

    def _switch_ports(self) -> dict[str, signals.PortInfo]:
        """Every switch-side interface: its switch, its peer, and whether the
        peer is a host (the port is a last hop)."""
        assert self.net is not None
        ports = {}
        for switch in self.net.switches:
            for intf in switch.intfList():
                if intf.link is None:
                    continue
                peer = intf.link.intf2 if intf.link.intf1 is intf else \
                    intf.link.intf1
                ports[intf.name] = signals.PortInfo(
                    switch.name, peer.node.name, isinstance(peer.node, Host),
                    port_stage.queue_of(intf))
        return ports

    def add_cleanup(self, cleanup: Callable[[], None]) -> None:
        """Call `cleanup` when the fabric stops, before anything of the
        fabric goes (newest first; an exception is reported, the teardown
        goes on)."""
        self._cleanups.append(cleanup)

    def host_pid(self, host: str) -> int:
        assert self.net is not None
        return self.net[host].pid

    def _start_controller(self) -> int:
        plan_file = self.workdir / 'plan.json'
        plan_file.write_text(self.plan.to_json())
        port = _free_tcp_port()
        log = open(self.workdir / 'controller.log', 'w')
        self.controller = subprocess.Popen(
            [sys.executable, '-m', 'testbed.controller', '--plan', str(plan_file),
             '--port', str(port), '--ready', str(self.workdir / 'ready.json'),
             '--convergence-delay', repr(self.convergence_delay_s),
             '--routing-log', str(self.routing_log)],
            cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        _wait_listening(port, self.controller)
        return port

    def baseline(self) -> Baseline:
        """What the fabric looks like now, to tell later whether a run left
        anything on it (testbed.fabric.baseline)."""
        assert self.net is not None
        return Baseline([s.name for s in self.net.switches], self._root_links(),
                        self.last_port_status, self.convergence_delay_s)

    def last_port_status(self) -> float | None:
        """When the controller last heard a port-status (monotonic)."""
        heard = [e['monotonic'] for e in self.routing_events() if e['event'] == 'port_status']
        return max(heard, default=None)

    @property
    def routing_log(self) -> Path:
        """The controller's JSON lines: every port-status it heard and every
        routed group it changed (gone once the fabric stops)."""
        assert self.workdir is not None
        return self.workdir / 'routing.jsonl'

    def routing_events(self) -> list[dict]:
        """What the controller logged so far."""
        if self.workdir is None or not self.routing_log.exists():
            return []
        return [json.loads(line) for line in
                self.routing_log.read_text().splitlines() if line.strip()]

    def _wait_flows(self) -> None:
        want = {s.dpid for s in self.plan.switches.values()}
        ready_file = self.workdir / 'ready.json'
        deadline = time.monotonic() + FLOW_INSTALL_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.controller and self.controller.poll() is not None:
                raise FabricError('controller exited: see %s'
                                  % (self.workdir / 'controller.log'))
            if ready_file.exists() and want <= set(json.loads(
                    ready_file.read_text() or '[]')):
                return
            time.sleep(0.05)
        raise FabricError('switches did not all get their flows within %.0f s'
                          % FLOW_INSTALL_TIMEOUT_S)

    def _plumb_hosts(self) -> None:
        assert self.net is not None
        decap_obj = host_decap.build() if self.decap == host_decap.EBPF else None
        for host in self.plan.hosts:
            ports = [self.plan.host_ports[(host, p)] for p in self.plan.planes]
            plumb_host(self.net[host].pid, ports, decap_obj)

    def stop(self) -> None:
        """Fast, complete teardown; safe to call more than once."""
        with _signals_held():
            self._stop()

    def _stop(self) -> None:
        t0 = time.monotonic()
        built = self.net is not None     # (part way): a second stop() has nothing to log
        while self._cleanups:
            _run_cleanup(self._cleanups.pop())
        if self.signals is not None:
            self.signals.stop()
            self.signals = None
        if self.controller is not None:
            _kill_group(self.controller)
            self.controller = None
        if self.net is not None:
            _kill_nodes(self.net.hosts + self.net.switches +
                        self.net.controllers)
            if not self.links_tagged:    # interrupted while building
                ovs.tag_links(self._root_links())
            ovs.delete_bridges([s.name for s in self.net.switches],
                               self.datapath)
            self.net = None
        if self.ovs_settings_changed:
            _run_cleanup(ovs.restore_settings)
            self.ovs_settings_changed = False
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        self.lock.release()
        self.timings['teardown_s'] = time.monotonic() - t0
        if built:
            build_log.record('torn_down', str(self.spec), self.afxdp,
                             {'teardown_s': self.timings['teardown_s']})


def _run_cleanup(cleanup: Callable[[], None]) -> None:
    """An exception is reported; the teardown goes on."""
    try:
        cleanup()
    except Exception as err:  # noqa: BLE001 - the teardown goes on
        print('mrc-testbed: cleanup %r failed: %s' % (cleanup, err), file=sys.stderr)


TEARDOWN_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def _signals_held() -> Iterator[None]:
    """A signal during the teardown (the second Ctrl-C of an impatient
    user) would stop it half way and leave bridges and links behind: it
    takes effect once the teardown is done."""
    if threading.current_thread() is not threading.main_thread():
        yield                      # only the main thread gets signals
        return
    held: list[int] = []
    saved = {sig: signal.signal(sig, lambda signum, _: held.append(signum))
             for sig in TEARDOWN_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        if held:
            signal.raise_signal(held[0])


def _free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _wait_listening(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(('127.0.0.1', port)) == 0:
                return
        time.sleep(0.05)
    raise FabricError('controller did not listen on 127.0.0.1:%d' % port)


def quiet_root_links(names: list[str]) -> None:
    """Switch ports live in the root namespace, where the kernel would send
    IPv6 router solicitations and MLD reports from them into the fabric."""
    for name in names:
        try:
            write_sysctl('net.ipv6.conf.%s.disable_ipv6' % name, 1)
        except FileNotFoundError:
            pass


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _kill_nodes(nodes: list) -> None:
    """Kill every node's shell at once; a host's namespace and its veth ends
    go with its last process. Then Mininet's cleanup closes each node's
    pty (without it, every fabric would leak a few descriptors per node)."""
    for node in nodes:
        if getattr(node, 'shell', None) is not None:
            try:
                os.kill(node.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for node in nodes:
        if getattr(node, 'shell', None) is not None:
            node.cleanup()
