"""NIC port events on a real fabric: the sender's own port on plane 1 loses
its link mid-transfer (`nic_port_down`: the switch end goes admin-down, the
host's veth loses carrier); the endpoint runtime hears it over netlink and
the sender's QP takes plane 1 out at once, instead of finding the dead port
EV by EV through packet timeouts. When the port returns, so does plane 1.

How the figures are read:
- the fault's time is the injector's clock at the start of nic_port_down
  (its event's 'monotonic'), taken before it touches the switch port;
- the sender's data packets are seen by the runtime's tap, with the loop
  turn's time, as they go to the socket;
- a packet timeout is a packet a timer declared lost; the QP counts them by
  the plane the packet went on (QpCounters.timeout_losses_by_plane), and the
  count is read before each loop turn, so the value before the turn that
  heard the port event is what happened before the event.
"""
from __future__ import annotations

from testbed.fabric.faults.injector import FaultInjector
from testbed.nic.emulated_timescale import base_rtt_s
from testbed.workload.endpoint_flows import EndpointFlows
from tests.integration.port_faults import (PLANE, SPEC, SRC, DST, Watch,
                                           nic_of, tap_sender,
                                           transfer_across_a_port_fault)

# The bound, from the mechanism: the veth drops carrier as the switch end
# goes down and the kernel sends RTM_NEWLINK at once (a veth's carrier change
# is an urgent link-watch event: its iflink is its peer); the loop looks at
# its netlink sockets at the start of every turn (one poll() with the receive
# sockets), and the QP uses no plane-1 EV from that turn's packets on. So the
# sender's traffic is off the port the injector's apply time (netlink in the
# root namespace: 1-3 ms alone, docs/faults.md, up to 8 ms measured here
# beside the busy loop, which holds the GIL; the switch port goes down somewhere
# inside it), one kernel notification and one loop turn after the fault's
# clock, well inside a base RTT; two leave room for a turn stretched by a
# scheduler slice on this 2-core machine (the emulation health gate's wait).
BOUND_RTTS = 2.0


def test_sender_port_down_takes_its_plane_out_at_once(fabric_factory):
    fab = fabric_factory(SPEC)
    rtt = base_rtt_s(fab.link_rate_bps, fab.plan.longest_path_links)
    watch = Watch()
    with transfer_across_a_port_fault(
            fab, SRC, lambda driver: tap_sender(driver, watch),
            lambda driver: bool(nic_of(driver, SRC).port_events)) as (
                driver, inj, before):
        watch.timeouts_before_heard = before
        check(driver, inj, watch, rtt)


def check(driver: EndpointFlows, inj: FaultInjector, watch: Watch,
          rtt: float) -> None:
    assert driver.status(1) == 'done' and driver.corrupt_bytes(1) == 0
    fault = {e['fault']: e['monotonic'] for e in inj.events}
    applied = {e['fault']: e['apply_s'] for e in inj.events}
    events = nic_of(driver, SRC).port_events
    assert [(plane, up) for _t, plane, up in events] == [(PLANE, False),
                                                         (PLANE, True)]
    (heard_down, _, _), (heard_up, _, _) = events
    on_plane = [t for t, plane in watch.data_sent if plane == PLANE]
    assert any(t < fault['nic_port_down'] for t in on_plane)   # it was in use
    last = max(t for t in on_plane if t < heard_up)
    qp = driver.connections[(SRC, DST)].requester
    print('fault applied in %.2f ms; fault -> heard %.2f ms, -> last plane-%d data packet %.2f ms '
          '(%.3f base RTTs of %.1f ms); resent at the event: %d; timeouts on '
          'plane %d before/after: %s/%s; back %.2f ms after the fault undone'
          % (applied['nic_port_down'] * 1e3,
             (heard_down - fault['nic_port_down']) * 1e3, PLANE,
             (last - fault['nic_port_down']) * 1e3,
             (last - fault['nic_port_down']) / rtt, rtt * 1e3,
             qp.counters.port_down_resends, PLANE, watch.timeouts_before_heard,
             qp.counters.timeout_losses_by_plane.get(PLANE, 0),
             (heard_up - fault['nic_port_up']) * 1e3))
    assert heard_down - fault['nic_port_down'] <= BOUND_RTTS * rtt
    assert last - fault['nic_port_down'] <= BOUND_RTTS * rtt
    assert not [t for t in on_plane if heard_down <= t < heard_up]
    # What the port swallowed was resent at the event; no timer found it.
    assert qp.counters.port_down_resends > 0
    assert qp.counters.timeout_losses_by_plane.get(PLANE, 0) == \
        watch.timeouts_before_heard
    # The port is back: plane 1 carries the transfer's data again.
    assert any(t >= heard_up for t in on_plane)
    logged = [(e['host'], e['plane'], e['state']) for e in driver.ev_events()
              if e['event'] == 'nic_port']
    assert logged == [(SRC, PLANE, 'down'), (SRC, PLANE, 'up')]
