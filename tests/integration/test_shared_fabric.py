"""testbed.workload.shared_fabric on a real fabric: one fabric carries run
after run as fresh ones would. A run whose faults were undone leaves it as
built once the controller's repair lands (the same fabric goes on); one that
left a link down does not (a fresh fabric replaces it); each run's CC gets
the last-hop marking its own fabric would have had."""
from testbed.fabric.faults.injector import FaultInjector
from testbed.fabric.topo_spec import parse_topo_spec
from testbed.nic.transport_config import DEFAULT_CC
from testbed.workload.shared_fabric import SharedFabric
from tests.integration.leaks import leaked

# Shaped, so its switch ports signal; a short convergence delay keeps the
# controller's repair within a second.
SPEC = 'leafspine,leaves=2,spines=2,hosts=1,planes=1,bw=10'
DELAY_S = 0.2
NSCC, DCQCN = DEFAULT_CC['mrc'], DEFAULT_CC['rc']


def last_hop_marks(fab) -> set:
    """The mark thresholds of the ports into hosts (None: no marks)."""
    ports = fab.signals
    return {ports.program.config(ports.queues[port]).mark_threshold
            for port, info in ports.ports.items() if info.last_hop}


def test_a_fabric_is_shared_while_runs_leave_it_as_built():
    said: list[str] = []
    with SharedFabric(parse_topo_spec(SPEC), said.append, DELAY_S) as shared:
        fab = shared.for_run(NSCC)
        assert last_hop_marks(fab) == {None}        # MRC's fabric: no last-hop marks
        # A run that undid its fault: the controller re-adds the link to its
        # groups DELAY_S after the port-status, and the settle waits for it.
        injector = FaultInjector(fab)
        injector.apply('link_down', a='p1l0', b='p1s0')
        injector.restore_all()
        assert shared.for_run(DCQCN) is fab and shared.rebuilt == 0, said
        assert last_hop_marks(fab) == {fab.signals.settings.mark_bytes}   # RoCE's
        # A run that left a link down: replaced.
        FaultInjector(fab).apply('link_down', a='p1l0', b='p1s0')
        fresh = shared.for_run(NSCC)
        assert fresh is not fab and shared.rebuilt == 1
        assert fab.net is None                      # the old one is gone
        assert 'interfaces changed' in said[-1] and 'building a fresh one' in said[-1]
        assert last_hop_marks(fresh) == {None}
    assert leaked() == {}
