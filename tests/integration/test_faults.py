"""Fault injection on real fabrics: every fault fails exactly the paths it
should and its undo brings them all back; gray loss is the share asked for;
rates read back from tc; events are timestamped in order; restore_all
leaves nothing behind."""
from __future__ import annotations

import errno
import math
import shutil
import subprocess
import time
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from testbed.fabric import ovs
from testbed.fabric.clean import our_nft_tables
from testbed.fabric.probe import PathProber, all_pairs
from testbed.fabric.usid_plan import FabricPlan, Path
from testbed.fabric.faults import gray, injector
from testbed.fabric.faults.base import FaultError, FaultUnavailable
from testbed.fabric.faults.injector import FaultInjector
from testbed.workload.model import Fault
from testbed.workload.runner import apply_fault

LEAF_SPINE = 'leafspine,leaves=2,spines=2,hosts=1,planes=2'
FAT_TREE = 'fattree,k=4,planes=2'
GRAY_PROBES = 400            # per direction of a gray link
GRAY_TOLERANCE = 0.10
IFF_UP = 0x1


class LossyProber(PathProber):
    """A probe that nftables drops at its sender's own port comes back from
    sendto() as ENOBUFS: that is a lost probe, not a broken test."""

    def _send(self, index: int, path: Path) -> None:
        try:
            super()._send(index, path)
        except OSError as err:
            if err.errno != errno.ENOBUFS:
                raise

    def send(self, paths: list[Path], first: int) -> None:
        """One probe per path, numbered from `first`, none waited for."""
        for index, path in enumerate(paths, first):
            self._send(index, path)

    def arrivals(self, idle_s: float) -> set[int]:
        """The numbers of every probe that arrives until none did for `idle_s`."""
        return self._collect({-1}, idle_s)      # -1 is never sent: wait for quiet


class Rig:
    """A running fabric with its prober and fault injector."""

    def __init__(self, fab) -> None:
        self.fab = fab
        self.plan: FabricPlan = fab.plan
        self.paths = [p for a, b in all_pairs(self.plan.hosts)
                      for p in self.plan.all_paths(a, b)]
        self.prober = LossyProber(self.plan, {h: fab.host_pid(h)
                                              for h in self.plan.hosts})
        self.events: list[dict] = []
        self.inj = FaultInjector(fab, log=self.events.append)

    def failing(self) -> set[Path]:
        result = self.prober.probe(self.paths)
        return {p for i, p in enumerate(self.paths) if i not in result.ok}

    def loss(self, paths: list[Path], probes: int = GRAY_PROBES) -> float:
        """Share of `probes` probes lost, sent round-robin over `paths`."""
        batch = paths * math.ceil(probes / len(paths))
        result = self.prober.probe(batch, tries=1, timeout_s=0.3)
        return 1 - len(result.ok) / len(batch)

    def where(self, test: Callable[[Path], bool]) -> set[Path]:
        return {p for p in self.paths if test(p)}

    def close(self) -> None:
        try:
            self.inj.restore_all()
        finally:
            self.prober.close()


@pytest.fixture
def rig(fabric_factory):
    made: list[Rig] = []

    def build(spec: str) -> Rig:
        made.append(Rig(fabric_factory(spec)))
        return made[-1]
    yield build
    for r in made:      # before fabric_factory stops the fabric
        r.close()


def crosses(plan: FabricPlan, a: str, b: str) -> Callable[[Path], bool]:
    """Paths over the link a-b (either direction)."""
    if a in plan.switches and b in plan.switches:
        return lambda p: frozenset((a, b)) in p.hops()
    host, switch = (a, b) if a in plan.hosts else (b, a)
    plane = plan.switches[switch].plane
    return lambda p: p.plane == plane and host in (p.src, p.dst)


def run(argv: list[str], pid: int | None = None) -> str:
    if pid is not None:
        argv = ['mnexec', '-a', str(pid), *argv]
    return subprocess.run(argv, capture_output=True, text=True,
                          check=True).stdout


def no_fault_on_tc(intf: str, pid: int | None) -> bool:
    """No filter on the port's egress (where a gray loss's goes) and no clsact
    qdisc, but the one a host port's eBPF decapsulation sits on, on its
    ingress (docs/host-decap.md), which was there before any fault."""
    if run(['tc', 'filter', 'show', 'dev', intf, 'egress'], pid).strip():
        return False
    return 'clsact' not in run(['tc', 'qdisc', 'show', 'dev', intf], pid) or \
        'mrc_host_decap' in run(['tc', 'filter', 'show', 'dev', intf, 'ingress'], pid)


def admin_up(intf: str) -> bool:
    with open('/sys/class/net/%s/flags' % intf) as f:
        return bool(int(f.read(), 16) & IFF_UP)


def flows(switch: str) -> list[str]:
    out = run(['ovs-ofctl', '-O', 'OpenFlow13', 'dump-flows', switch])
    return sorted(line.split(' actions=')[1] + line.split(',')[-1]
                  for line in out.splitlines() if 'actions=' in line)


def host_intf(plan: FabricPlan, host: str, plane: int) -> str:
    return plan.host_ports[(host, plane)].intf


# -- down and up: exactly the expected paths fail -------------------------

def test_each_down_fault_fails_exactly_its_paths_and_undo_restores(rig):
    r = rig(FAT_TREE)
    plan = r.plan
    cases = [
        ('link_down', ('p1a0x0', 'p1c0'), 'link_up',
         crosses(plan, 'p1a0x0', 'p1c0')),
        ('link_down', ('p2e1x1', 'p2a1x0'), 'link_up',
         crosses(plan, 'p2e1x1', 'p2a1x0')),
        ('link_down', ('h5', 'p1e1x0'), 'link_up',
         crosses(plan, 'h5', 'p1e1x0')),
        ('switch_down', ('p1c3',), 'switch_up',
         lambda p: 'p1c3' in p.switches),
        ('switch_down', ('p2e0x0',), 'switch_up',
         lambda p: 'p2e0x0' in p.switches),
        ('plane_down', (2,), 'plane_up', lambda p: p.plane == 2),
        ('nic_port_down', ('h16', 1), 'nic_port_up',
         lambda p: p.plane == 1 and 'h16' in (p.src, p.dst)),
    ]
    assert r.failing() == set()
    # The paths that cross the core link p1a0x0-p1c0, either way: 96 of 1,696.
    assert len(r.where(cases[0][3])) == 96
    tables = {s: flows(s) for s in ('p1a0x0', 'p1c0', 'p1c3', 'p2e0x0')}
    for down, args, up, hit in cases:
        expected = r.where(hit)
        assert expected, down
        getattr(r.inj, down)(*args)
        failed = r.failing()
        print('%s%r: %d of %d paths fail' % (down, args, len(failed),
                                             len(r.paths)))
        assert failed == expected, (down, args, len(failed), len(expected))
        getattr(r.inj, up)(*args)
        assert r.failing() == set(), (up, args)
    # Static fabric: nothing reacted to a failed link, and a switch losing
    # power keeps its tables: only its ports went down.
    assert {s: flows(s) for s in tables} == tables
    assert [e['fault'] for e in r.events] == [
        name for down, _, up, _ in cases for name in (down, up)]


def carrier(fab, intf: str, host: str) -> bool:
    """The host port's carrier, as its kernel sees it (the endpoint's port events)."""
    return run(['cat', '/sys/class/net/%s/carrier' % intf], fab.host_pid(host)).strip() == '1'


@pytest.mark.parametrize('ports', ['system', 'afxdp'])
def test_a_nic_port_fault_takes_the_hosts_carrier_and_gives_it_back(rig, ports):
    """The host sees its port's carrier go, as a real NIC whose peer went dark, on either
    kind of switch port: with afxdp=1 the host's port is paired with its stage, not
    with the switch port (testbed/fabric/port_stage.py), and a plane fault does the same."""
    if ports == 'afxdp' and 'afxdp' not in ovs.interface_types():
        pytest.skip('OVS without afxdp ports')
    r = rig('leafspine,leaves=2,spines=2,hosts=1,planes=2,afxdp=%d' % (ports == 'afxdp'))
    h1_1, h1_2 = host_intf(r.plan, 'h1', 1), host_intf(r.plan, 'h1', 2)
    assert carrier(r.fab, h1_1, 'h1') and carrier(r.fab, h1_2, 'h1')
    r.inj.nic_port_down('h1', 1)
    assert not carrier(r.fab, h1_1, 'h1') and carrier(r.fab, h1_2, 'h1')
    r.inj.plane_down(2)
    assert not carrier(r.fab, h1_2, 'h1')
    r.inj.nic_port_up('h1', 1)
    r.inj.plane_up(2)
    assert carrier(r.fab, h1_1, 'h1') and carrier(r.fab, h1_2, 'h1')
    assert r.failing() == set()


@pytest.mark.parametrize('road', ['fault', 'set_link'])
@pytest.mark.parametrize('ports', ['system', 'afxdp'])
def test_what_is_sent_over_a_down_link_is_lost_not_delivered_late(rig, ports, road):
    """A failed link drops what the switch sends it. With afxdp=1 an AF_XDP port
    taken admin-down would keep it in its transmit ring and send it all once back
    up (port_stage.cut); there the link is cut at its stages, by a fault and by
    FabricNet.set_link (the CLI's `link` command) alike."""
    if ports == 'afxdp' and 'afxdp' not in ovs.interface_types():
        pytest.skip('OVS without afxdp ports')
    r = rig('%s,afxdp=%d' % (LEAF_SPINE, ports == 'afxdp'))
    over = r.where(crosses(r.plan, 'p1l0', 'p1s0'))
    assert over, 'no path crosses the link'
    outage = sorted(over, key=str) * 20          # 0 .. len - 1
    if road == 'fault':
        r.inj.link_down('p1l0', 'p1s0')
    else:
        r.fab.set_link('p1l0', 'p1s0', up=False)
    r.prober.send(outage, first=0)
    assert r.prober.arrivals(idle_s=0.3) == set()
    if road == 'fault':
        r.inj.link_up('p1l0', 'p1s0')
    else:
        r.fab.set_link('p1l0', 'p1s0', up=True)
    # Fresh probes, numbered apart, until the link carries them again: each one
    # the switch sends on the port is a transmit that would release a held ring.
    fresh, late = 1000, set()
    for _ in range(20):
        r.prober.send(sorted(over, key=str), first=fresh)
        late |= r.prober.arrivals(idle_s=0.3)
        if any(i >= fresh for i in late):
            break
    assert any(i >= fresh for i in late), 'the link did not come back'
    # Zero, from the mechanism: a down link delivers nothing sent over it, later or not.
    assert {i for i in late if i < fresh} == set(), len(late)


def test_overlapping_faults_undo_independently(rig):
    r = rig(FAT_TREE)
    plan = r.plan
    on_core = r.where(lambda p: 'p1c0' in p.switches)
    on_link = r.where(crosses(plan, 'p1a0x0', 'p1c0'))
    r.inj.switch_down('p1c0')
    r.inj.link_down('p1a0x0', 'p1c0')
    assert r.failing() == on_core
    r.inj.switch_up('p1c0')      # the link is still held down by link_down
    assert r.failing() == on_link
    r.inj.plane_down(1)
    r.inj.link_up('p1a0x0', 'p1c0')  # ... and now by the plane
    assert r.failing() == r.where(lambda p: p.plane == 1)
    r.inj.plane_up(1)
    assert r.failing() == set()


# -- gray failure -----------------------------------------------------------

def measure_gray(r: Rig, a: str, b: str) -> dict[str, float]:
    """Loss per direction on the paths that cross a-b, and on the rest."""
    hit = crosses(r.plan, a, b)
    crossing = [p for p in r.paths if hit(p)]
    other = [p for p in r.paths if not hit(p)]
    losses = {}
    for src, dst in {(p.src, p.dst) for p in crossing}:
        paths = [p for p in crossing if (p.src, p.dst) == (src, dst)]
        losses['%s->%s' % (src, dst)] = r.loss(paths)
    losses['elsewhere'] = r.loss(other)
    return losses


@pytest.mark.parametrize('a,b', [('p1l0', 'p1s0'), ('h1', 'p1l0')],
                         ids=['switch-link', 'host-link'])
def test_gray_failure_drops_the_share_asked_on_its_paths_only(rig, a, b):
    r = rig(LEAF_SPINE)
    event = r.inj.gray_failure(a, b, 50)
    assert event['method'] == 'tc'
    losses = measure_gray(r, a, b)
    print('gray 50%% (tc) on %s-%s, %d probes each: %s' % (
        a, b, GRAY_PROBES, {k: round(v, 3) for k, v in losses.items()}))
    elsewhere = losses.pop('elsewhere')
    assert len(losses) == 2      # both directions cross the link
    for direction, loss in losses.items():
        assert abs(loss - 0.5) <= GRAY_TOLERANCE, (direction, loss)
    # A path that does not cross the link never meets the filter, and the
    # fabric loses no probe by itself at this load (every path loses none
    # once the fault is cleared, below).
    assert elsewhere == 0
    r.inj.gray_clear(a, b)
    assert r.failing() == set()
    assert r.loss(r.paths) == 0
    for end in r.inj._link(a, b).ends:    # nothing of the fault's left on tc
        assert no_fault_on_tc(end.intf, end.pid)


def test_gray_failure_nft_recipe_makes_tables_and_removes_them(rig):
    """The nftables method (method='nft'): a mrc_gray_* table per namespace.
    Under bursts OVS loses more than the rule drops (docs/faults.md)."""
    r = rig(LEAF_SPINE)
    h1 = r.fab.host_pid('h1')
    r.inj.gray_failure('h1', 'p1l0', 50, method='nft')
    assert our_nft_tables() == [('netdev', 'mrc_gray_h1_p1l0')]
    assert 'mrc_gray_h1_p1l0' in run(['nft', 'list', 'tables'], h1)
    losses = measure_gray(r, 'h1', 'p1l0')
    print('gray 50%% (nft) on h1-p1l0, %d probes each: %s' % (
        GRAY_PROBES, {k: round(v, 3) for k, v in losses.items()}))
    # The table sits in h1's namespace, on its port: no other path meets it
    # (what the rule's aborted batches cost falls on h1's own paths).
    assert losses.pop('elsewhere') == 0
    assert all(loss >= 0.5 - GRAY_TOLERANCE for loss in losses.values())
    event = r.inj.gray_clear('h1', 'p1l0')
    assert set(event['dropped']) == {'h1-p1', 'p1l0-eth3'}
    assert all(n > 0 for n in event['dropped'].values())
    assert our_nft_tables() == []
    assert run(['nft', 'list', 'tables'], h1) == ''
    assert r.failing() == set()


# -- link rate ------------------------------------------------------------------

def htb_class(intf: str, pid: int | None = None) -> str:
    return run(['tc', 'class', 'show', 'dev', intf], pid).strip()


def test_link_rate_changes_and_restores_the_htb_class(rig):
    r = rig('leafspine,leaves=2,spines=2,hosts=1,planes=1,bw=20')
    h1 = r.fab.host_pid('h1')
    ends = [('p1l0-eth1', None), ('p1s0-eth1', None), ('p1l0-eth3', None),
            ('h1-p1', h1)]
    before = {intf: htb_class(intf, pid) for intf, pid in ends}
    assert all('rate 20Mbit' in c for c in before.values()), before
    r.inj.link_rate('p1l0', 'p1s0', 5)
    r.inj.link_rate('h1', 'p1l0', 2.5)
    after = {intf: htb_class(intf, pid) for intf, pid in ends}
    print('tc class show after link_rate:', after)
    assert 'rate 5Mbit ceil 5Mbit' in after['p1l0-eth1']
    assert 'rate 5Mbit ceil 5Mbit' in after['p1s0-eth1']
    assert 'rate 2500Kbit ceil 2500Kbit' in after['p1l0-eth3']
    assert 'rate 2500Kbit ceil 2500Kbit' in after['h1-p1']
    r.inj.link_rate_restore('p1l0', 'p1s0')
    r.inj.link_rate_restore('h1', 'p1l0')
    assert {intf: htb_class(intf, pid) for intf, pid in ends} == before
    assert r.failing() == set()


def test_link_rate_on_an_unshaped_fabric_adds_and_removes_htb(rig):
    r = rig(LEAF_SPINE)
    qdisc = {i: run(['tc', 'qdisc', 'show', 'dev', i])
             for i in ('p1l0-eth1', 'p1s0-eth1')}
    r.inj.link_rate('p1l0', 'p1s0', 3)
    for intf in qdisc:
        assert 'rate 3Mbit' in htb_class(intf)
    r.inj.link_rate_restore('p1l0', 'p1s0')
    assert {i: run(['tc', 'qdisc', 'show', 'dev', i]) for i in qdisc} == qdisc


# -- timing: flaps, schedules, events ---------------------------------------

def test_flap_and_scheduled_faults_run_from_a_single_loop(rig):
    r = rig(LEAF_SPINE)
    flap_port, plane_port = 'p1l0-eth1', 'p2l0-eth1'
    t0 = time.monotonic()
    steps = r.inj.link_flap('p1l0', 'p1s0', period_s=0.4, count=3)
    assert steps == [(0.0, 'down'), (0.2, 'up'), (0.4, 'down'), (0.6, 'up'),
                     (0.8, 'down'), (1.0, 'up')]
    assert not admin_up(flap_port)
    r.inj.schedule(t0 + 0.5, 'plane_down', plane=2)
    r.inj.schedule(t0 + 0.7, 'plane_up', plane=2)
    assert len(r.inj.pending()) == 7
    due_at = sorted(a.at for a in r.inj.pending())
    polls: list[tuple[float, list[dict]]] = []   # (now, events it applied)
    while r.inj.next_due() is not None:
        now = time.monotonic()
        applied = r.inj.due(now)
        polls.append((now, applied))
        # The state right after a poll is the one its last event on each port announced
        # (a poll late by a flap's half-period applies that port's down and up at once:
        # CI saw a link_flap_down read as up, the up of the same poll already applied).
        last = {flap_port if e['fault'].startswith('link_flap') else plane_port: e
                for e in applied}
        for port, event in last.items():
            assert admin_up(port) == event['fault'].endswith('up'), (event, applied)
        time.sleep(0.002)
    flap = [e for e in r.events if e['fault'].startswith('link_flap_')]
    print('flap steps late by at most %.1f ms; apply_s %s' % (
        1e3 * max(e['late_s'] for e in flap),
        {e['fault']: round(e['apply_s'], 4) for e in r.events}))
    assert [e['offset_s'] for e in flap] == [s for s, _ in steps[1:]]
    for event in flap:       # each step due at its offset from the first down
        assert event['late_s'] == pytest.approx(
            event['monotonic'] - r.events[0]['monotonic']
            - event['offset_s'], abs=1e-6)
    # On time, judged against the loop rather than the wall clock (a shared
    # 2-core machine can stall any process for tens of ms): every action is
    # applied by the first poll at or after its due time, never earlier, and
    # no poll that came before it was due skipped it.
    applied_at = [(now, event) for now, events in polls for event in events]
    assert len(applied_at) == len(due_at) == 7
    for at, (now, event) in zip(due_at, applied_at):
        earlier = [t for t, _ in polls if t < now]
        assert at <= now <= event['monotonic'], event['fault']
        assert not earlier or earlier[-1] < at, event['fault']
    assert [e['fault'] for e in r.events] == [
        'link_flap', 'link_flap_up', 'link_flap_down', 'plane_down',
        'link_flap_up', 'plane_up', 'link_flap_down', 'link_flap_up']
    for before, after in zip(r.events, r.events[1:]):
        assert before['monotonic'] <= after['monotonic']
        assert before['time'] <= after['time']
    for event in r.events:     # both clocks read at the same moment
        assert abs((event['time'] - event['monotonic']) -
                   (r.events[0]['time'] - r.events[0]['monotonic'])) < 0.01
        assert event['apply_s'] >= 0 and event['detail']
    assert admin_up(flap_port) and admin_up(plane_port)
    assert r.failing() == set()


# -- restore_all ------------------------------------------------------------------

def test_restore_all_undoes_everything_still_applied(rig):
    r = rig(LEAF_SPINE)
    h1 = r.fab.host_pid('h1')
    qdisc_before = run(['tc', 'qdisc', 'show'])
    r.inj.link_down('p1l1', 'p1s1')
    r.inj.switch_down('p2s1')
    r.inj.nic_port_down('h2', 1)
    r.inj.gray_failure('h1', 'p1l0', 30)
    r.inj.gray_failure('p2l0', 'p2s0', 30, method='nft')
    r.inj.link_rate('p1l0', 'p1s1', 4)
    r.inj.link_flap('p2l1', 'p2s0', period_s=10, count=2)
    r.inj.schedule(time.monotonic() + 60, 'plane_down', plane=1)
    assert len(r.failing()) > 0
    assert our_nft_tables()
    event = r.inj.restore_all()
    print('apply_s: %s' % [(e['fault'], round(e['apply_s'], 4))
                           for e in r.events])
    assert event['fault'] == 'restore_all' and event['errors'] == []
    assert r.inj.next_due() is None
    assert r.failing() == set()
    assert r.loss(r.paths) == 0          # no gray loss left
    assert our_nft_tables() == []
    assert run(['tc', 'qdisc', 'show']) == qdisc_before
    for plane in (1, 2):
        assert no_fault_on_tc('h1-p%d' % plane, h1)
    assert r.inj.restore_all()['detail'] == 'nothing to restore'


def test_restore_all_runs_when_the_experiment_fails(rig):
    r = rig(LEAF_SPINE)
    with pytest.raises(RuntimeError, match='experiment broke'):
        with FaultInjector(r.fab) as inj:
            inj.plane_down(1)
            inj.gray_failure('p2l0', 'p2s1', 100)
            raise RuntimeError('experiment broke')
    assert r.failing() == set()


# -- refusals ------------------------------------------------------------------

def test_bad_arguments_are_refused_before_anything_changes(rig, monkeypatch):
    r = rig(LEAF_SPINE)
    inj, now = r.inj, time.monotonic()
    refused = [
        lambda: inj.link_down('p1l0', 'p1l1'),          # leaves: no link
        lambda: inj.link_down('p1l0', 'p2s0'),          # across planes
        lambda: inj.link_down('h1', 'p2l1'),            # h1 is on p2l0
        lambda: inj.link_down('h1', 'h2'),
        lambda: inj.link_down('p1l0', 'p1l0'),
        lambda: inj.link_up('nosuch', 'p1s0'),
        lambda: inj.link_down('p1l0; reboot', 'p1s0'),
        lambda: inj.switch_down('h1'),
        lambda: inj.switch_up('p9s9'),
        lambda: inj.plane_down(3),
        lambda: inj.plane_down(True),
        lambda: inj.plane_up('1'),
        lambda: inj.nic_port_down('h9', 1),
        lambda: inj.nic_port_down('h1', 5),
        lambda: inj.gray_failure('p1l0', 'p1s0', 0),
        lambda: inj.gray_failure('p1l0', 'p1s0', 101),
        lambda: inj.gray_failure('p1l0', 'p1s0', '50'),
        lambda: inj.gray_failure('p1l0', 'p1s0', 50, method='netem'),
        lambda: inj.link_rate('p1l0', 'p1s0', 0),
        lambda: inj.link_rate('p1l0', 'p1s0', float('nan')),
        lambda: inj.link_flap('p1l0', 'p1s0', period_s=1, count=0),
        lambda: inj.link_flap('p1l0', 'p1s0', period_s=-1, count=2),
        lambda: inj.link_flap('p1l0', 'p1s0', 1, 2, down_s=1),
        lambda: inj.schedule(now, 'reboot'),
        lambda: inj.schedule(now, 'link_down', a='p1l0'),
        lambda: inj.schedule(now, 'link_down', a='p1l0', b='p1l1'),
        lambda: inj.schedule(now, 'gray_failure', a='p1l0', b='p1s0',
                             loss_pct=200),
        lambda: inj.schedule(float('inf'), 'plane_down', plane=1),
        lambda: inj.apply('plane_down', plane=7),
        lambda: inj.apply('switch_down', name='p1x0'),
        lambda: inj.apply({'kind': 'switch_down', 'name': 'p1s0'}),
        lambda: inj.apply('link_down', a='p1l0', b='p1s0', plane=1),
        lambda: apply_fault(inj, Fault('link_down', 1.0,
                                       link=('p1l0', 'p1l1'))),
    ]
    for i, call in enumerate(refused):
        with pytest.raises(FaultError):
            call()
            pytest.fail('call %d was accepted' % i)
    assert issubclass(FaultError, ValueError)
    assert r.events == [] and inj.pending() == []
    # Well formed: by name, and as the scenario's own Fault records through
    # the catalogue's translation (what the scenario runner does).
    inj.apply('link_down', a='p1l0', b='p1s0')
    apply_fault(inj, Fault('link_up', 1.0, link=('p1l0', 'p1s0')))
    apply_fault(inj, Fault('switch_down', 2.0, switch='p1s1'))
    apply_fault(inj, Fault('switch_up', 3.0, switch='p1s1'))
    apply_fault(inj, Fault('nic_port_down', 4.0, host='h2', plane=2))
    apply_fault(inj, Fault('nic_port_up', 5.0, host='h2', plane=2))
    assert [e['fault'] for e in r.events] == [
        'link_down', 'link_up', 'switch_down', 'switch_up', 'nic_port_down',
        'nic_port_up']

    # What a machine without the tools gets: a clear refusal, no number.
    monkeypatch.setattr(gray, 'tc_random_drop_available', lambda: False)
    with pytest.raises(FaultUnavailable, match='BPF'):
        inj.gray_failure('p1l0', 'p1s0', 10)
    assert any('gray_failure' in m for m in inj.missing_features)
    no_nft = SimpleNamespace(which=lambda tool: None if tool == 'nft'
                             else shutil.which(tool))
    monkeypatch.setattr(injector, 'shutil', no_nft)
    with pytest.raises(FaultUnavailable, match='nft'):
        inj.gray_failure('p1l0', 'p1s0', 10, method='nft')
    assert our_nft_tables() == []
    assert r.failing() == set()
