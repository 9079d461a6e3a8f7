"""Where the PMD thread and the endpoint loop run (testbed.fabric.cpu_placement)."""
import os
import subprocess
import threading

import pytest

from testbed.fabric import cpu_placement
from testbed.fabric.cpu_placement import ENDPOINT_NICE, Placement, endpoint_loop, plan
from tests.unit.stand_in_threads import pmd_thread


def test_the_pmd_thread_takes_the_lowest_core_and_the_loop_the_rest():
    assert plan(frozenset({0, 1})) == Placement(frozenset({0}), frozenset({1}))
    placed = plan(frozenset({2, 5, 7}))
    assert placed.pmd_cores == {2} and placed.endpoint_cores == {5, 7}
    assert placed.pmd_cpu_mask == '0x4'


def test_one_core_is_left_to_the_scheduler():
    assert plan(frozenset({3})) is None


def _thread_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason='needs two cores')
def test_the_loop_runs_pinned_and_raised_and_both_come_back():
    cores, nice = os.sched_getaffinity(0), _thread_nice()
    placed = plan()
    with endpoint_loop(placed):
        assert os.sched_getaffinity(0) == placed.endpoint_cores
        if os.geteuid() == 0:
            assert _thread_nice() == ENDPOINT_NICE
    assert os.sched_getaffinity(0) == cores and _thread_nice() == nice


def test_no_placement_changes_nothing():
    cores, nice = os.sched_getaffinity(0), _thread_nice()
    with endpoint_loop(None):
        assert os.sched_getaffinity(0) == cores and _thread_nice() == nice


def test_the_placement_is_restored_when_the_loop_fails():
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip('needs two cores')
    cores = os.sched_getaffinity(0)
    with pytest.raises(RuntimeError):
        with endpoint_loop(cpu_placement.plan()):
            raise RuntimeError('trial failed')
    assert os.sched_getaffinity(0) == cores


@pytest.mark.skipif(os.geteuid() != 0, reason='needs root (raising a priority)')
def test_pmd_threads_are_raised_and_lowered_back_and_nothing_else_is():
    """This process stands in for ovs-vswitchd: a thread named as OVS names a PMD thread
    is raised to FORWARDING_NICE, the others are not; lowering puts it back at the
    process's own priority."""
    with pmd_thread() as pmd:
        own = _thread_nice()
        raised = cpu_placement.raise_pmd_threads(os.getpid())
        assert raised == [pmd]
        assert os.getpriority(os.PRIO_PROCESS, pmd) == cpu_placement.FORWARDING_NICE
        assert _thread_nice() == own                   # the main thread is not a PMD
        cpu_placement.lower_pmd_threads(os.getpid(), raised)
        assert os.getpriority(os.PRIO_PROCESS, pmd) == own
    cpu_placement.lower_pmd_threads(os.getpid(), raised)   # it has ended: nothing to do


needs_autogroups = pytest.mark.skipif(
    os.geteuid() != 0 or cpu_placement.autogroup_name(os.getpid()) is None,
    reason='a kernel with autogroups (CONFIG_SCHED_AUTOGROUP) that schedules this process '
           'by one (not in a cpu cgroup of its own), and root to raise one')


@pytest.fixture
def own_session():
    """A process in a session, so an autogroup, of its own: as ovs-vswitchd is."""
    child = subprocess.Popen(['sleep', '60'], start_new_session=True)
    try:
        yield child.pid
    finally:
        child.kill()
        child.wait()


@needs_autogroups
def test_an_autogroup_is_raised_and_restored_as_recorded(own_session, tmp_path):
    before = cpu_placement._autogroup_nice(own_session)
    assert cpu_placement.raise_autogroup(own_session, tmp_path)
    assert cpu_placement._autogroup_nice(own_session) == cpu_placement.FORWARDING_NICE
    assert cpu_placement.raise_autogroup(own_session, tmp_path)  # twice: first record holds
    cpu_placement.restore_autogroup(own_session, tmp_path)
    assert cpu_placement._autogroup_nice(own_session) == before
    assert list(tmp_path.iterdir()) == []                        # the record went too


@needs_autogroups
def test_clean_restores_what_a_killed_run_left_raised(own_session, tmp_path):
    before = cpu_placement._autogroup_nice(own_session)
    cpu_placement.raise_autogroup(own_session, tmp_path)       # then the run is killed
    assert cpu_placement.restore_recorded_autogroups([str(tmp_path)]) == 1
    assert cpu_placement._autogroup_nice(own_session) == before


def test_nothing_is_raised_where_a_process_is_gone(tmp_path):
    child = subprocess.Popen(['true'])
    child.wait()
    assert not cpu_placement.raise_autogroup(child.pid, tmp_path)
    assert list(tmp_path.iterdir()) == []


@needs_autogroups
def test_the_session_leader_shares_our_autogroup():
    # The leader itself where the kernel shows it in our autogroup, else this process
    # (CI once ran the suite in init's session, the default autogroup: the file was empty).
    leader = cpu_placement.session_leader()
    assert cpu_placement.autogroup_name(leader) == cpu_placement.autogroup_name(os.getpid())


@pytest.mark.skipif(os.geteuid() != 0 or cpu_placement.autogroup_name(1) is not None,
                    reason='needs root, and init in the kernel\'s default autogroup (a '
                           'process that never called setsid, as CI\'s harness runs)')
def test_a_process_in_the_default_autogroup_is_not_raised(tmp_path):
    """The kernel prints an empty autogroup file for tasks of the default autogroup (init
    and whatever it starts without setsid: CI ran the suite so): nothing is raised or
    recorded for them."""
    assert not cpu_placement.raise_autogroup(1, tmp_path)
    assert list(tmp_path.iterdir()) == []
