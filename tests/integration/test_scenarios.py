"""Every shipped scenario, in its quick form, on a real fabric: what each is
for is asserted, not just that it ran.

A result the project marks NOT TRUSTED (the emulator-health gate,
`summary[transport]['trusted']`) never counts: the transports that came out
untrusted are run again, and UNTRUSTED_TRIES untrusted results fail the test.

Every time bound is in base RTTs of the scenario's fabric (`base_rtt_s`) or
in the transport timers derived from it (`fabric_qp_profile`), as the
endpoints run them:

- T, the per-packet timeout, 11 base RTTs (the QP's ACK timer runs at T);
- RC's budget, NCCL's deployed one (testbed/nic/deployed_ack_timer.py): 8
  timeouts of 4.29 s in hardware, minutes on the timers' clock, which RC's
  timer, firing every T, spends before its QP errors; each stall stands for
  one deployed timeout. ECMP's budget is MRC's schedule, 22 T
  (`time_to_error`);
- C, the routed fabric's convergence delay (`convergence_delay_s`): the
  controller applies a switch's port-status report C after hearing it.

What MRC does on a fault that kills paths (docs/transport.md): a packet on
an entropy value (EV) through the dead element is lost; its own timer finds
it T after it was sent, marks that EV ASSUMED_BAD and resends it on the next
GOOD EV. Every active EV of a sending QP carries a packet in each rotation
of the EV table (32 active EVs: about one RTT of packets), so the first EV
through the element is found within T plus a rotation of the fault
taking effect (DETECT), or of the start of a later message of that QP, when
the one in flight at the fault had every loss repaired from SACKs (a hole
with later packets acknowledged is resent at once, no timer) and ended
before a timer could fire: a ring all-reduce's step of 54 ms on the default
fabric, where T is 304 ms. A fault takes effect at the latest when its
application ends: its event's time is read before the first change and its
`apply_s` after the last, tens of milliseconds apart in a run, where the
injector waits for a CPU beside the endpoints (a packet that left in
between crossed the element before it went down); the bounds below count
from then. A resend can be lost once more, on a dead EV not found yet (one
whose first packet since the fault left after the lost one), and once more
again on a backup EV: a plane keeps one backup EV per path, so once the
other paths' backups are spent a demoted EV is replaced by the backup on
the dead path itself, found T after its first packet. A packet lost to the
fault is so sent at most three times on dead EVs, and every byte is
delivered within 3 T plus an RTT for its first send to leave, one for its
last to arrive and one for the SACK that reopens the window behind it,
and the loop's slack on the way; the reported recovery
(`metrics.recovery_time`: goodput smoothed over SMOOTHING_S, back to 90 %
of what the fault left, per BIN_S bin) lags that by at most its smoothing
window and one bin (RECOVERY: 0.79 s, 44 RTTs, on the 10 Mbit/s fat-tree;
the bound was 2.0 s, raised after a measurement).
A loss the fault did not cause (congestion, or the emulator's own, which
the health gate does not count yet) costs a step one more timeout and
resend wherever it falls: each timeout on a path the fault did not touch
during the recovery adds T and an RTT to the bound, counted from the
run's own events.
"""
import csv
import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import pytest

from testbed.cli import DEFAULT_SCENARIO
from testbed.fabric.faults.catalogue import disruptive
from testbed.fabric.topo_spec import parse_topo_spec
from testbed.nic.emulated_timescale import MTU, base_rtt_s, fabric_qp_profile
from testbed.nic.retry_timer import retry_schedule, time_to_error
from testbed.workload.congestion_metrics import _faulty, _touches
from testbed.workload.metrics import SMOOTHING_S, jain_index
from testbed.workload.run_scenario import run_scenario
from testbed.workload.runner import BIN_S, fabric_spec
from testbed.workload.scenario import load_scenario
from testbed.workload.shared_fabric import SharedFabric

REPO = Path(__file__).resolve().parents[2]
# Each runs a shipped scenario over every transport: minutes each.
pytestmark = pytest.mark.slow
SCENARIOS = sorted((REPO / 'scenarios').glob('*.yaml'))
SUMMARY_SCHEMA = json.loads((REPO / 'docs/schemas/summary.schema.json').read_text())
OUTPUTS = {'scenario.yaml', 'summary.json', 'timeline.csv', 'events.jsonl',
           'report.md', 'goodput.png', 'planes.png', 'completion_cdf.png',
           'comparison.png', 'signals.png'}
RETRY_EXCEEDED = 'retry counter exceeded'
# A timer's expiry is seen when the endpoint loop next turns; on the shared
# 2-core machine a turn can wait for a scheduler slice or two (the health
# gate passes at most 10 % of the run waiting), under an RTT each.
LOOP_SLACK_RTTS = 2
# The health gate's window ends with the workload's loop: the sample that
# closes it reads the datapath's counters (one ovs-appctl call, ~5 ms) and
# then its clocks. What must stay out of it, the bookkeeping after the loop,
# is far longer: the switch counters' netlink dumps alone took ~0.6 s of CPU
# on the k=4 fat-tree, which the gate used to charge to the endpoint loop.
GATE_WINDOW_LAG_S = 0.1
# A transport whose result the health gate did not trust is run again: the
# scenarios sit at 40-60 % of the gate's limits on a quiet machine of this
# kind, and a slower or busier one reads some runs past them (the endpoint
# loop's wait for a CPU, the datapath's unread backlog). An untrusted result
# never counts; this many untrusted in a row fail the test. Three were not
# enough on a fresh machine of this kind on Dec 7: MRC's runs of
# core_switch_failure came out untrusted three times in a row in two suites
# (endpoint loop's CPU waits 10-12 %, unread backlog 19-24 ms), and so did
# permutation_ecmp_vs_mrc's once (10-14 %), every other transport trusted;
# a retry costs one transport's run on the shared fabric, under a minute.
UNTRUSTED_TRIES = 5


@dataclass
class Run:
    """One transport's result: its summary row, events and timeline."""
    summary: dict
    events: list
    rows: list


@dataclass
class Fabric:
    """The scenario fabric's timers, as its endpoints run them."""
    rtt: float          # base RTT, s
    timeout: float      # T: per-packet timeout = the QP's ACK timer, s
    rc_budget: float    # last progress to RC's QP error, s
    ecmp_budget: float  # the same for ECMP (MRC's retry schedule), s
    rc_expiries: int    # retry-timer expiries in RC's budget
    ecmp_expiries: int  # ... and in ECMP's

    @classmethod
    def of(cls, scenario) -> 'Fabric':
        plan = scenario.plan()
        rate = scenario.link_rate_mbit * 1e6
        links, planes = plan.longest_path_links, len(plan.planes)
        mtu = int(parse_topo_spec(scenario.topology).kwargs().get('mtu', MTU))
        rc = fabric_qp_profile('rc', rate, planes, links, mtu=mtu)
        ecmp = fabric_qp_profile('ecmp', rate, planes, links, mtu=mtu)
        timeout = rc.transport_config.packet_timeout_s
        assert ecmp.transport_config.packet_timeout_s == timeout
        rc_budget = rc.transport_config.retry_give_up_s
        return cls(base_rtt_s(rate, links, mtu), timeout, rc_budget,
                   time_to_error(timeout, ecmp.retry),
                   math.ceil(rc_budget / timeout),
                   len(retry_schedule(timeout, ecmp.retry)))

    @property
    def detect(self) -> float:
        """Fault to the first EV through it found dead (see the module)."""
        return self.timeout + (1 + LOOP_SLACK_RTTS) * self.rtt

    @property
    def recovery(self) -> float:
        """Fault to goodput back (see the module)."""
        return (3 * self.timeout + (3 + LOOP_SLACK_RTTS) * self.rtt
                + SMOOTHING_S + BIN_S)


def load_runs(out, transports):
    """A results directory's outputs, checked, per transport."""
    assert OUTPUTS <= {p.name for p in out.iterdir()}
    document = json.loads((out / 'summary.json').read_text())
    # What a tool reading summary.json may rely on (docs/results.md).
    jsonschema.validate(document, SUMMARY_SCHEMA,
                        jsonschema.Draft202012Validator)
    for row in document['transports'].values():
        assert row['health']['window_s'] - row['elapsed_s'] < GATE_WINDOW_LAG_S, row
    events = [json.loads(line) for line in
              (out / 'events.jsonl').read_text().splitlines()]
    with (out / 'timeline.csv').open() as f:
        rows = list(csv.DictReader(f))
    return {t: Run(document['transports'][t],
                   [e for e in events if e['transport'] == t],
                   [r for r in rows if r['transport'] == t])
            for t in transports}


class ScenarioFabrics:
    """The shared fabric the scenario tests run on (testbed.workload.
    shared_fabric), one at a time: scenarios of one fabric run on it one after
    another, settled between them as their transports are; a scenario of
    another fabric, or one that wants fresh fabrics, closes it first (it
    holds the run lock)."""

    def __init__(self) -> None:
        self.held: SharedFabric | None = None
        self.key: tuple | None = None

    def for_scenario(self, sc) -> SharedFabric:
        key = (fabric_spec(sc.topology, sc.link_rate_mbit), sc.convergence_delay_s)
        if self.held is None or key != self.key:
            self.release()
            self.held, self.key = SharedFabric(key[0], lambda _line: None, key[1]), key
        return self.held

    def release(self) -> None:
        if self.held is not None:
            self.held.__exit__(None, None, None)
        self.held = self.key = None


@pytest.fixture(scope='module')
def fabrics():
    held = ScenarioFabrics()
    yield held
    held.release()


def run_quick(name, tmp_path, fabrics):
    """The scenario's quick form over every transport, each result trusted
    (an untrusted transport is run again, up to UNTRUSTED_TRIES in all).
    The transports run one after another on the module's shared fabric, as
    the interactive CLI's `scenario` command runs them (ScenarioFabrics); the
    default scenario gets a fresh fabric per transport, as `mrc-testbed run`
    gives it."""
    scenario = load_scenario(REPO / 'scenarios' / (name + '.yaml'))
    runs, todo = {}, scenario.quick_version().transports
    if REPO / DEFAULT_SCENARIO == REPO / 'scenarios' / (name + '.yaml'):
        fabrics.release()
        shared = None
    else:
        shared = fabrics.for_scenario(scenario.quick_version())
    for attempt in range(1, UNTRUSTED_TRIES + 1):
        out, _ = run_scenario(scenario, tmp_path / str(attempt),
                              transports=todo, quick=True,
                              progress=lambda line: None, shared=shared)
        fabrics_used = json.loads((out / 'summary.json').read_text())['fabrics']
        assert fabrics_used['per_transport'] == (shared is None), fabrics_used
        runs.update(load_runs(out, todo))
        todo = tuple(t for t in todo if not runs[t].summary['trusted'])
        if not todo:
            break
    assert not todo, 'NOT TRUSTED %d times: %s' % (UNTRUSTED_TRIES, {
        t: runs[t].summary['health']['reasons'] for t in todo})
    return checked(scenario, runs)


def checked(scenario, runs):
    sc = scenario.quick_version()
    fabric = Fabric.of(sc)
    for run in runs.values():
        if run.summary['base_rtt_ms'] is not None:   # kernel TCP has none
            assert run.summary['base_rtt_ms'] == round(fabric.rtt * 1e3, 2)
    return sc, fabric, runs


def faults_of(run):
    """The disruptive fault events the transport's run logged."""
    return [e for e in run.events if disruptive(e.get('fault', ''))]


def outage_s(sc, kind):
    """How long the quick scenario's fault of `kind` keeps its element
    down: until the fault that undoes it (a flap: each down half-period)."""
    timeline = sc.timeline()
    for i, fault in enumerate(timeline):
        if fault.kind == kind:
            if kind == 'link_flap':
                return fault.get('period_s') / 2
            return next(f.at for f in timeline[i + 1:]
                        if not disruptive(f.kind)) - fault.at
    raise AssertionError('no %s in %s' % (kind, sc.name))


def completes_intact(run):
    s = run.summary
    assert s['completed'], (s['flows_done'], s['flows'], s['qp_errors'],
                            s['aborted'])
    assert s['bytes_corrupted'] == 0
    assert s['qp_errors'] == []


# --- MRC --------------------------------------------------------------------

# Faults that take a host's NIC port down (its link's carrier): the
# endpoint is told at once by the kernel (a port event, docs/faults.md) and
# stops sending there, and tells its peers (a Port Status Update): no
# timer has to find the port's paths.
PORT_FAULTS = ('plane_down', 'nic_port_down')
# The port event reaches the endpoint loop at its next turn: within two
# base RTTs of the fault's application (as in test_nic_port_events.py).
PORT_EVENT_RTTS = 2


def ev_key(event: dict) -> tuple[str, str, int]:
    return event['src'], event['dst'], event['ev_id']


def bad_evs_at(run, t: float) -> set[tuple[str, str, int]]:
    """The EVs (src, dst, id) whose last state change before `t` left them
    ASSUMED_BAD (an EV starts GOOD)."""
    state = {}
    for e in run.events:
        if e.get('event') == 'ev_state' and e['t'] < t:
            state[ev_key(e)] = e['new']
    return {key for key, new in state.items() if new == 'ASSUMED_BAD'}


def message_start(run, found) -> float:
    """When the message (flow) that QP was sending when `found` came began."""
    return max(e['t'] for e in run.events if e.get('event') == 'flow_start'
               and (e['src'], e['dst']) == (found['src'], found['dst'])
               and e['t'] <= found['t'])


def assert_mrc_rides_through(sc, fabric, run, recovery=True):
    """Completes intact; every fault that killed paths is found within
    DETECT by the packet timers (a NIC port or a plane: told by the port
    event and the peer's update within PORT_EVENT_RTTS) and recovered from
    within RECOVERY."""
    completes_intact(run)
    plan = sc.plan()
    paths = {}
    hosts = {h for e in run.events if e.get('event') == 'flow_start'
             for h in (e['src'], e['dst'])}
    for fault in faults_of(run):
        if fault['fault'] in PORT_FAULTS:
            told = {(e['host'], e['plane']): e['t'] for e in run.events
                    if e.get('event') == 'nic_port' and e['state'] == 'down'
                    and e['t'] >= fault['t']}
            ports = ({(fault['host'], fault['plane'])}
                     if fault['fault'] == 'nic_port_down'
                     else {(h, fault['plane']) for h in hosts})
            assert ports <= set(told), (ports, told)
            for port in ports:
                assert told[port] - fault['t'] <= fault['apply_s'] + \
                    PORT_EVENT_RTTS * fabric.rtt, (port, told[port], fault)
            if fault['fault'] == 'nic_port_down':
                # Its peers hear it from the host's Port Status Update (two
                # copies per live plane, at once, docs/faults.md), not from
                # their timers: none of those could have found the port
                # before a packet timeout after the fault, and the update
                # comes well within half of one (one way across a plane that
                # just took the other's traffic, read at the peer loop's
                # next turn).
                heard = [e for e in run.events
                         if e.get('event') == 'nic_port_peer'
                         and e['peer'] == fault['host']   # heard by e['host']
                         and e['plane'] == fault['plane']
                         and e['state'] == 'down' and e['t'] >= fault['t']]
                assert heard, 'no peer of %s heard its port' % fault['host']
                for e in heard:
                    assert e['t'] - fault['t'] - fault['apply_s'] < \
                        fabric.timeout / 2, (e, fault)
            continue     # every end is told: no timer has to find the port
        dead = _faulty([fault])
        # An EV still ASSUMED_BAD from an earlier fault carries nothing, so
        # there is nothing for its timer to find: a flap's EVs, demoted in
        # the first flap, failed their probes through the second and came
        # back only after it (a CI run), and the third flap's detection was
        # then read as the second's.
        bad = bad_evs_at(run, fault['t'])
        through, found = set(), []
        for e in run.events:
            if e.get('event') != 'ev_state':
                continue
            pair = (e['src'], e['dst'])
            if pair not in paths:
                paths[pair] = {p.carrier: p for p in plan.all_paths(*pair)}
            path = paths[pair].get(e['path'])
            if path is None or not _touches(path, dead):
                continue
            key = ev_key(e)
            through.add(key)
            if e['new'] == 'ASSUMED_BAD' and e['reason'] == 'timeout' and \
                    e['t'] >= fault['t'] and key not in bad:
                found.append(e)
        if through and through <= bad:
            continue
        assert found, ('no EV through %s found dead' % fault['fault'])
        first = found[0]
        took = first['t'] - max(fault['t'], message_start(run, first))
        bound = fabric.detect + fault['apply_s']
        assert took <= bound, (
            '%s: first dead EV found %.3f s (%.1f RTTs) after it, bound %.3f s'
            ' (applied in %.3f s)' % (fault['fault'], took, took / fabric.rtt,
                                      bound, fault['apply_s']))
    if not recovery:
        return
    assert run.summary['recovery'], 'a recovery per fault that killed paths'
    faults = faults_of(run)
    touched = _faulty(faults)
    for r, fault in zip(run.summary['recovery'], faults):
        seen = r['recovery_s'] if r['recovery_s'] is not None else r['observed_s']
        end = fault['t'] + seen
        other = []
        for e in run.events:
            if e.get('event') == 'ev_state' and e['reason'] == 'timeout' \
                    and fault['t'] <= e['t'] <= end:
                pair = (e['src'], e['dst'])
                if pair not in paths:
                    paths[pair] = {p.carrier: p
                                   for p in plan.all_paths(*pair)}
                path = paths[pair].get(e['path'])
                if path is not None and not _touches(path, touched):
                    other.append(e)
        bound = (fabric.recovery + fault['apply_s']
                 + len(other) * (fabric.timeout + fabric.rtt))
        # Not back yet when the load ended (the next fault, or the last phase's
        # flows finishing): a failure only if the load lasted past the bound.
        assert r['recovery_s'] is not None or r['observed_s'] < bound, (
            run.summary['recovery'], bound)
        if r['recovery_s'] is None:
            continue
        assert r['recovery_s'] <= bound, (
            '%s: recovery %.3f s (%.1f RTTs), bound %.3f s (%.1f RTTs, %d '
            'losses elsewhere)' % (
                r['fault'], r['recovery_s'], r['recovery_s'] / fabric.rtt,
                bound, bound / fabric.rtt, len(other)))


# --- the routed baselines (docs/routed-fabric.md) ---------------------------

# The controller's timer fires within its slack of the delay, and the group
# changes it then sends are logged within milliseconds: 0.1 s for both.
TIMER_SLACK_S = 0.1


def assert_routes_move_after_convergence(run):
    """The controller rewrites the ECMP groups one convergence delay after
    a switch reports the first fault down (its port-status), never sooner;
    or the run ended first. The report comes once OVS sees the link down:
    on a staged AF_XDP link ~0.1 s after the fault began (the cut stops OVS
    forwarding to the port and purges the datapath's cached flows first,
    testbed.fabric.port_stage.cut; then OVS reads the port's carrier)."""
    s = run.summary
    assert s['fabric'] == 'routed'
    delay = s['convergence_delay_s']
    first = s['routes_moved'][0] if s['routes_moved'] else None
    if first is None or first['after_s'] is None:
        return
    heard = min(e['t'] for e in run.events if e.get('source') == 'controller'
                and e.get('event') == 'port_status' and not e['up']
                and e['t'] >= first['at_s'])
    moved = first['groups_changed_at_s'] - heard
    assert delay <= moved <= delay + TIMER_SLACK_S, (s['routes_moved'], heard)


def survives(repair_s, fabric, budget_s):
    """A routed QP stalled by an element that is repaired `repair_s` after
    the fault (it comes back, or routes move) resends within one timeout T
    of the repair and so survives if that resend is acknowledged (an RTT)
    before its budget from its last progress (at the fault) runs out, with
    the loop's slack. True / False where the race is decided by the timers
    alone, None where it is too close to call."""
    margin = (1 + LOOP_SLACK_RTTS) * fabric.rtt
    if repair_s + fabric.timeout + margin <= budget_s:
        return True
    if repair_s >= budget_s + margin:
        return False
    return None


def assert_rc_stalls_as_deployed(run, outage_s, hit=None):
    """RC's compressed deployed ACK timer (testbed/nic/deployed_ack_timer.py):
    a stall wherever its timer fired (`hit`: a QP surely crossed the fault),
    none where it did not; the whole quick run lasts less than one deployed
    timeout on the timers' clock (51 s or more), so each QP that stalled
    stands for exactly one, however often its compressed retries met the
    fabric mid-repair; none left at the end; the result says so."""
    s = run.summary
    timer, counters = s['deployed_ack_timer'], s['transport_counters']
    assert timer['nccl_ib_timeout'] == 20 and timer['retry_cnt'] == 7
    assert timer['emulated_timeout_s'] > s['elapsed_s']
    stalls = counters['ack_timer_stalls']
    assert (stalls > 0) == (counters['retry_timeouts'] > 0), counters
    if hit:
        assert stalls > 0, counters
    if stalls:
        # A stalled QP resumes only once the fault is repaired. With none
        # stalled (no QP hashed across it), RC may be done before that: a
        # CI run finished at 3.9 s of a 4 s outage.
        assert s['elapsed_s'] > outage_s, s['elapsed_s']
    assert counters['ack_timer_hardware_timeouts'] == counters['ack_timer_stalled_qps']
    assert counters['ack_timer_stalled_at_end'] == 0


def assert_routed_outcome(run, fabric, budget_s, expiries, outage):
    """What a single-path QP on the routed fabric does across an outage
    (docs/routed-fabric.md): the element is repaired after
    min(outage, convergence delay); a QP that was stalled by it survives
    when its retry budget outlasts that (`survives`), and otherwise errors
    with 'retry counter exceeded' its budget after its last progress (the
    fault, or its start when it started later). Every flow that failed did
    so that way."""
    s = run.summary
    assert s['bytes_corrupted'] == 0
    assert_routes_move_after_convergence(run)
    repair = min(outage, s['convergence_delay_s'])
    verdict = survives(repair, fabric, budget_s)
    fault = faults_of(run)[0]['t']
    starts = {e['flow']: e['t'] for e in run.events
              if e.get('event') == 'flow_start'}
    for e in run.events:
        if e.get('event') != 'flow_failed':
            continue
        assert e['error'] == RETRY_EXCEEDED, e
        stalled = max(fault, starts[e['flow']])
        # The last acknowledgement can come up to an RTT after the fault
        # (the SACK of a packet that had already crossed the element), and
        # each of the budget's timer expiries is seen at the loop's next
        # turn, the next one counting from there (retry_timer.expire).
        assert budget_s - fabric.rtt <= e['t'] - stalled <= budget_s + (
            1 + LOOP_SLACK_RTTS * expiries) * fabric.rtt, (e, stalled, budget_s)
    if verdict is True:
        completes_intact(run)
    return verdict


# --- the scenarios ------------------------------------------------------------

def test_every_scenario_file_is_covered():
    tested = {name[len('test_'):] for name in globals()
              if name.startswith('test_')}
    assert {p.stem for p in SCENARIOS} <= tested


def test_link_failure_allreduce(tmp_path, fabrics):
    sc, fabric, runs = run_quick('link_failure_allreduce', tmp_path, fabrics)
    assert_mrc_rides_through(sc, fabric, runs['mrc'])
    assert_healthy_plane_never_stalls(runs['mrc'], fabric, ('p1a0x0', 'p1c0'))
    outage = outage_s(sc, 'link_down')          # 4 s
    # RC: its deployed budget (minutes here) outlasts the link's return (4 s)
    # and the routes' move (9.05 s): a QP hashed across the link stalls and
    # resumes, one that is not never stalls. Which QPs the switches hash
    # across the link is their draw (a basis per switch,
    # testbed.controller.ofp_groups), so the stalls are checked against the
    # run's own timers, not foretold.
    assert assert_routed_outcome(runs['rc'], fabric, fabric.rc_budget,
                                 fabric.rc_expiries, outage) is True
    assert_rc_stalls_as_deployed(runs['rc'], outage)
    # ECMP: its budget (22 T, 6.7 s) outlasts the outage (4 s) by more than
    # a timeout: every stalled QP resends after the link is back, and the
    # job completes.
    assert assert_routed_outcome(runs['ecmp'], fabric, fabric.ecmp_budget,
                                 fabric.ecmp_expiries,
                                 outage) is True


def zero_stretches(rows, column):
    """(start s, length s) of every stretch of 10 ms bins with nothing on
    `column`, while the job was still moving data."""
    busy = [i for i, r in enumerate(rows) if float(r['goodput_mbps']) > 0]
    out, start = [], None
    for i, r in enumerate(rows[:busy[-1] + 1] if busy else []):
        if float(r[column]) == 0 and start is None:
            start = i
        elif float(r[column]) > 0 and start is not None:
            out.append((float(rows[start]['t_s']), (i - start) * BIN_S))
            start = None
    return out


def assert_healthy_plane_never_stalls(run, fabric, link):
    """Congestion is signalled, so it never stalls the healthy plane 2 for
    a packet timeout. Only finding the dead link does: each QP whose paths
    cross it times out once on its first packets there (the all-reduce
    then waits at its barrier), which the EV events show as a timeout on
    a path through that link during the stall."""
    found_dead = [e['t'] for e in run.events if e.get('event') == 'ev_state'
                  and e['new'] == 'ASSUMED_BAD' and e['reason'] == 'timeout'
                  and crosses(e['path'], link)]
    stalls = [(t, length) for t, length in zero_stretches(run.rows,
                                                         'plane2_mbps')
              if length >= fabric.timeout and not any(
                  t - fabric.rtt <= d <= t + length + 2 * fabric.rtt
                  for d in found_dead)]
    # Nothing else stalls plane 2: congestion is signalled (a trimmed packet
    # comes back as a NACK within an RTT), and a SACK lost on a reverse path
    # through the dead link costs an ACK refresh (3 base RTTs, well under a
    # packet timeout), not a timeout: the requester's probe brings the
    # responder's ACK state back on another reverse path
    # (TransportConfig.ack_refresh_s). Before the refresh, such a SACK, the
    # last of a step, stalled plane 2 for a packet timeout in fresh-clone CI
    # 1.3 s after the fault, with 3 marks and no trim or drop on the plane.
    plane2 = run.summary['signals']['per_plane']['2']
    assert stalls == [], (stalls, found_dead, plane2)


def crosses(carrier, link):
    """Does a carrier's path use this switch link? (uSIDs of both ends
    adjacent in the carrier.)"""
    from testbed.fabric.topo_spec import parse_topo_spec
    from testbed.fabric.usid_plan import FabricPlan, carrier_usids
    plan = FabricPlan.from_topo(parse_topo_spec('fattree,k=4,planes=2').build())
    plane, usids = carrier_usids(carrier)
    a, b = (plan.switches[n].usid for n in link)
    return any({x, y} == {a, b} for x, y in zip(usids, usids[1:]))


def test_core_switch_failure(tmp_path, fabrics):
    sc, fabric, runs = run_quick('core_switch_failure', tmp_path, fabrics)
    assert_mrc_rides_through(sc, fabric, runs['mrc'])
    outage = outage_s(sc, 'switch_down')        # 4.2 s
    # RC's QPs through p1c0 stall until it returns or the routes move, and
    # resume: each stall one deployed timeout.
    assert assert_routed_outcome(runs['rc'], fabric, fabric.rc_budget,
                                 fabric.rc_expiries, outage) is True
    assert_rc_stalls_as_deployed(runs['rc'], outage, hit=True)
    # ECMP's 22 T, 6.3 s, outlasts 4.2 s plus a resend: its QPs survive.
    assert assert_routed_outcome(runs['ecmp'], fabric, fabric.ecmp_budget,
                                 fabric.ecmp_expiries, outage) is True


def test_plane_failure(tmp_path, fabrics):
    sc, fabric, runs = run_quick('plane_failure', tmp_path, fabrics)
    # Every host's plane-1 port loses its carrier: each endpoint is told
    # and MRC carries on over planes 2-4, 3 of 4 of the capacity.
    assert_mrc_rides_through(sc, fabric, runs['mrc'])
    assert runs['mrc'].summary['recovery'][0]['capacity_left'] == 0.75
    outage = outage_s(sc, 'plane_down')         # 3.2 s
    # RC is bound to the plane its hash picked; one of its four QPs is on
    # plane 1 (deterministic hash) and stalls until the plane returns, one
    # deployed timeout; ECMP's 22 T outlasts the outage plus a resend.
    assert assert_routed_outcome(runs['rc'], fabric, fabric.rc_budget,
                                 fabric.rc_expiries, outage) is True
    assert_rc_stalls_as_deployed(runs['rc'], outage, hit=True)
    assert assert_routed_outcome(runs['ecmp'], fabric, fabric.ecmp_budget,
                                 fabric.ecmp_expiries,
                                 outage) is True


def test_flapping_link(tmp_path, fabrics):
    sc, fabric, runs = run_quick('flapping_link', tmp_path, fabrics)
    # Each of the four down periods is a fault of its own: found and
    # recovered from within the bounds each time.
    assert len(faults_of(runs['mrc'])) >= 3
    assert_mrc_rides_through(sc, fabric, runs['mrc'])
    outage = outage_s(sc, 'link_flap')          # 0.5 s down each time
    # Down 0.5 s at a time, less than either budget less a timeout: RC and
    # ECMP stall and resume each time, and complete.
    for name, budget, expiries in (
            ('rc', fabric.rc_budget, fabric.rc_expiries),
            ('ecmp', fabric.ecmp_budget, fabric.ecmp_expiries)):
        assert assert_routed_outcome(runs[name], fabric, budget, expiries,
                                     outage) is True
    assert_rc_stalls_as_deployed(runs['rc'], outage)


def test_gray_failure_1pct(tmp_path, fabrics):
    sc, fabric, runs = run_quick('gray_failure_1pct', tmp_path, fabrics)
    mrc = runs['mrc'].summary
    completes_intact(runs['mrc'])
    # MRC resends only what was lost (selective acknowledgements), each
    # lost packet once (its resend is lost again with 1 % probability): at
    # most the loss rate of what it sent, counted as if every packet had
    # crossed the lossy link (a quarter of h1's do), with three binomial
    # standard deviations, and one per packet the switches trimmed or
    # dropped for congestion. Go-back-N would resend the window behind
    # every loss, tens of packets.
    loss = 0.01
    sent = mrc['transport_counters']['packets_sent']
    resent = mrc['transport_counters']['retransmitted_packets']
    congestion = mrc['signals']['trimmed'] + mrc['signals']['queue_drops']
    assert resent <= loss * sent + 3 * (loss * sent) ** 0.5 + congestion, (
        resent, sent, congestion)
    # A gray failure reports nothing and changes no route.
    for name in ('rc', 'ecmp', 'tcp'):
        run = runs[name]
        # 1 % loss never costs a QP 8 timeouts in a row without progress
        # (0.01 ** 8), nor stalls TCP for good: all complete intact.
        completes_intact(run)
        assert all(m['groups_changed_at_s'] is None
                   for m in run.summary['routes_moved'])


def test_incast_7to1_victim(tmp_path, fabrics):
    sc, fabric, runs = run_quick('incast_7to1_victim', tmp_path, fabrics)
    rate = sc.link_rate_mbit
    planes = len(sc.plan().planes)
    incast_bytes = 7 * sc.workload.size_mb * 1e6
    for name, run in runs.items():
        s = run.summary
        completes_intact(run)
        # h1's ports are the incast's bottleneck whatever the transport:
        # 7 x size over its planes x rate (2.24 s quick) is the least it can
        # take; a shaper that let more through would finish sooner.
        assert s['elapsed_s'] >= incast_bytes * 8 / (planes * rate * 1e6), s
        assert s['victim']['completed'], (name, s['victim'])
    # The victim h3 -> h2 crosses the aggregation-to-edge links into h1's
    # edge switch with all seven senders (each is off that edge switch).
    # Without congestion control those FIFO queues would share out by what
    # arrives: each sender at its line rate, the victim's share 1/8 of
    # them, a quarter of its reach (2 planes x 2 links x rate / 8 = 2.5 of
    # its 10 Mbit/s). NSCC holds the incast to what h1's ports take, which
    # leaves the victim more: MRC keeps it above the FIFO share.
    victim = runs['mrc'].summary['victim']
    fifo_share = planes * 2 * rate / 8 / (planes * rate)
    assert victim['of_reach'] > fifo_share, victim


def test_nic_port_failure(tmp_path, fabrics):
    sc, fabric, runs = run_quick('nic_port_failure', tmp_path, fabrics)
    # h1 learns of its own port at once (a port event), its peers from its
    # Port Status Update. The recovery
    # figure is not a measure here: the quick form's bystander flow (h6 ->
    # h11, 0.2 s on) ends at about 0.65 s, just after the fault, so the
    # second before the fault carried load the workload no longer offers
    # after it, a drop no transport could recover from. What the fault
    # costs is bounded instead by the flows across h1: each completes.
    assert_mrc_rides_through(sc, fabric, runs['mrc'], recovery=False)
    outage = outage_s(sc, 'nic_port_down')      # 3.5 s
    # A NIC port fault changes no route (it is a host's): the repair is the
    # port's return. ECMP's 22 T outlasts it plus a resend, and so does
    # RC's deployed budget: an RC QP on h1's plane 1, if its hash put one
    # there, stalls until the port is back.
    assert all(m['groups_changed_at_s'] is None
               for r in (runs['rc'], runs['ecmp'])
               for m in r.summary['routes_moved'])
    assert assert_routed_outcome(runs['rc'], fabric, fabric.rc_budget,
                                 fabric.rc_expiries, outage) is True
    assert_rc_stalls_as_deployed(runs['rc'], outage)
    assert assert_routed_outcome(runs['ecmp'], fabric, fabric.ecmp_budget,
                                 fabric.ecmp_expiries,
                                 outage) is True


def test_permutation_ecmp_vs_mrc(tmp_path, fabrics):
    sc, fabric, runs = run_quick('permutation_ecmp_vs_mrc', tmp_path, fabrics)
    for name in ('mrc', 'ecmp', 'tcp', 'mptcp'):
        completes_intact(runs[name])
    # RC on the routed fabric: flows hashed onto one link share it, under
    # DCQCN and go-back-N; with no fault nothing exhausts its retry budget,
    # but the slowest flow may still be running at the scenario's end
    # (measured: 7 of 8 done at 12 s once, all by 10.8 s another time). No
    # completion time can be derived for it yet: two colliding QPs under
    # DCQCN as configured fall to its rate floor within a few RTTs and take
    # ~270 RTTs to climb back (issue 36, DCQCN's collapse), longer than the
    # flow; once that is fixed, the ECMP bound below applies to RC too.
    rc = runs['rc'].summary
    assert rc['qp_errors'] == [] and rc['bytes_corrupted'] == 0, rc
    assert rc['completed'] or rc['elapsed_s'] >= sc.duration_s, rc
    mrc, ecmp = runs['mrc'].summary, runs['ecmp'].summary
    # MRC sprays every flow over every path of both planes, one packet per
    # active EV and rotation, its EVs spread evenly over the paths: each
    # path carries about the same share.
    assert mrc['jain_paths'] >= 0.9, mrc['jain_paths']
    # ECMP (here on the SRv6 fabric, its paths named) pins each flow to the
    # one path its hash gives: flows whose paths share a link (in the same
    # direction) share its rate, so the last of n of them cannot be done
    # before n x size at the link rate.
    plan = sc.plan()
    size = sc.workload.size_mb * 1e6
    load = {}
    for e in runs['ecmp'].events:
        if e.get('event') != 'flow_start':
            continue
        carrier = e['pinned_path']['path']
        path = {q.carrier: q for q in plan.all_paths(e['src'], e['dst'])}[carrier]
        for hop in zip(path.switches, path.switches[1:]):
            load[hop] = load.get(hop, 0) + 1
    shared = max(load.values())
    assert ecmp['fct_p99_s'] >= shared * size * 8 / (sc.link_rate_mbit * 1e6), (
        shared, ecmp['fct_p99_s'])
    if shared > 1:
        assert ecmp['fct_p99_s'] > ecmp['fct_p50_s'], ecmp
    # MPTCP opens a subflow per plane, each hashed onto one path of its plane.
    # The 4 hosts of a pod leave it over 4 uplinks per plane, so a subflow
    # shares its busiest link with at most 3 others: it runs at 1/4 to all of
    # the link rate, and each plane carries at least (1/4) / (1/4 + 1) = 1/5
    # of a flow's bytes. Both planes carry bytes: the Jain index over the two
    # is at least its value at a 1/5 : 4/5 split, 0.74 (a CI run measured
    # 0.8985, a 1/3 : 2/3 split).
    least = jain_index([1, 4])
    assert runs['mptcp'].summary['jain_planes'] >= least, (
        least, runs['mptcp'].summary)


def test_run_command_refuses_a_bad_scenario_before_building(tmp_path):
    bad = tmp_path / 'bad.yaml'
    bad.write_text((REPO / 'scenarios/link_failure_allreduce.yaml').read_text()
                   .replace('p1c0]', 'p1c9]', 1))
    result = subprocess.run([sys.executable, '-m', 'testbed.cli', 'run',
                             str(bad), '--out', str(tmp_path / 'results')],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 2
    assert 'faults[0].link' in result.stderr and 'p1c9' in result.stderr
    assert not (tmp_path / 'results').exists()
