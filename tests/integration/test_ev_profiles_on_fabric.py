"""The control model on the run path, on a real fabric: a QP's EVs are its
pair's explicit EV profile (from the EV planner), the profile and the EV
events reach the log, and a path the control plane denies carries nothing."""
import time
from collections import Counter

from testbed.workload.endpoint_flows import EndpointFlows

SRC, DST = 'h1', 'h16'
SIZE = 1 << 20
TIMEOUT_S = 60


def run_until_done(driver, flow_id):
    t0 = time.monotonic()
    while driver.status(flow_id) == 'running':
        assert time.monotonic() - t0 < TIMEOUT_S
        driver.poll()


def test_qp_evs_are_the_planners_profile_and_a_denied_path_carries_nothing(
        fabric_factory):
    fab = fabric_factory('fattree,k=4,planes=2,bw=20')
    driver = EndpointFlows(fab, 'mrc', seed=3)
    try:
        driver.prepare([(SRC, DST, SIZE)])
        conn = driver.connections[(SRC, DST)]
        pair = driver.planner.built(SRC, DST)
        table = conn.requester.ev_table
        # The QP's EV set is the profile's array, expanded, EV for EV.
        expanded = pair.ev_array_by_plane()
        assert Counter((e.plane, e.path) for e in table.evs()) == Counter(
            (plane, c) for plane, carriers in expanded.items() for c in carriers)
        assert len(table) == pair.ev_count
        assert table.config.ev_min_active == pair.min_active
        # ... and each entry expands to a real path of the pair on its plane.
        plan_paths = {p.carrier: p.plane for p in fab.plan.all_paths(SRC, DST)}
        assert all(plan_paths[c] == plane for plane, cs in expanded.items()
                   for c in cs)
        profiles = [e for e in driver.ev_events() if e['event'] == 'ev_profile']
        assert {(e['src'], e['dst']) for e in profiles} == {(SRC, DST),
                                                            (DST, SRC)}
        assert profiles[0]['ev_count'] == pair.ev_count

        # Deny one path: its EVs go DENIED and carry no data afterwards.
        denied = expanded[1][0]
        changed = driver.deny(SRC, DST, denied)
        assert changed == sum(1 for e in table.evs() if e.path == denied) > 0
        assert {str(e.state) for e in table.evs() if e.path == denied} == {
            'DENIED'}
        before = driver.path_bytes.get(denied, 0)
        driver.start(1, SRC, DST, SIZE)
        run_until_done(driver, 1)
        assert driver.status(1) == 'done' and driver.corrupt_bytes(1) == 0
        assert driver.path_bytes.get(denied, 0) == before
        assert sum(driver.path_bytes.values()) >= SIZE
        # The NIC's EV events come back through the planner, with the
        # profile's own compact EV for the path.
        events = [e for e in driver.ev_events() if e['event'] == 'ev_state']
        assert any(e['new'] == 'DENIED' for e in events)
        for e in events:
            assert e['profile_id'] == pair.ev_profile.profile_id
            assert int(e['ev'], 16) == pair.ev_for(e['path']).bits(
                pair.compact_width)
        assert {pair.nic_states[e['ev_id']] for e in events
                if e['path'] == denied} == {'DENIED'}
    finally:
        driver.close()
