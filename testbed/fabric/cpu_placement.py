"""Where the emulation runs on the machine's cores: everything that decides it lives here.

On an `afxdp=1` fabric (testbed.fabric.port_stage) two threads carry every packet: OVS's
PMD thread, which polls the switch ports, and the endpoint loop, which runs every NIC of
the trial. Left to the scheduler beside other work, each waits for a CPU often enough for
its packets' timing to be the scheduler's (the health gate's WAIT_LIMIT). So such a fabric
puts the PMD thread on one core (`other_config:pmd-cpu-mask`) and the endpoint loop on the
others, both at FORWARDING_NICE: a process of ordinary priority beside them then takes
what they leave.

Decided by measurement: the default scenario (MRC, `fattree,k=4,planes=2,mtu=3500,afxdp=1`,
10 Mbit/s) on this 2-core machine beside `python3 -c 'while True: pass'`, share of the run
each waited for a CPU (endpoint loop / ovs-vswitchd), with both at ovs-vswitchd's own
nice -10 (as Open vSwitch's ovs-ctl starts it):
  neither           34 % / 15 %   NOT TRUSTED
  nice -10 only     16 % / 27 %   NOT TRUSTED (the two then wait for each other)
  pinned only       15 % / 12 %   NOT TRUSTED
  pinned + nice     4.6 % / 6.8 % trusted here; on a CI machine the PMD thread waited 13 %
and pinned at nice -20 (three runs), in waits of 0.28 ms or more (what the gate limits):
  pinned + nice -20 1.3-2.3 % / 1.4-2.3 % trusted (at -10, five runs: 0.5-3.6 % / 1.3-7.4 %)
Why -10 was not enough: beside a busy process of nice 0, a thread of nice -10 is owed ~90 %
of its core (weights 9548 : 1024), so whenever it runs for longer than a scheduler slice
(the PMD thread forwards in bursts), the busy process gets its ~10 % as whole slices,
waits of milliseconds. Measured with the run-queue wait program
(testbed/workload/run_queue_waits.py), a thread running 1 ms then sleeping 50 us beside a
busy loop on its core waited 7.7 % of the time in waits of 0.28 ms or more at nice -10,
0.1 % at nice -20 (weights 88761 : 1024). At -20 the PMD thread also stays ahead of
ovs-vswitchd's own other threads (-10), which may run on its core.

Nice ranks threads within one autogroup only. Where the kernel groups tasks by session
(CONFIG_SCHED_AUTOGROUP, sched_autogroup_enabled=1, tasks outside any cpu cgroup: this
machine's kind), ovs-vswitchd is a daemon with a session, so an autogroup, of its own, and
a busy process of another session weighs as much as all of ovs-vswitchd whatever the PMD
thread's nice: the CI run that failed this way had the PMD thread wait 17 % of the run. So
the fabric also raises the autogroups of ovs-vswitchd's session and of its own (the
endpoint loop's) to FORWARDING_NICE, recorded in its workdir and put back at teardown
(`mrc-testbed clean` puts back what a killed run left). Measured (default scenario --quick,
MRC, share of the run in waits of 0.28 ms or more, endpoint loop / PMD thread), beside a
busy loop started with setsid and pinned to one core:
  on the PMD thread's core       before 2.8 % / 35 % NOT TRUSTED;   after 0.9 % / 0.7 %
  on the endpoint loop's core    before 26 % / 1.1 % NOT TRUSTED;   after 1.3 % / 1.1 %
and beside one in the run's own session, unpinned: before 1.0-1.9 % / 0.8-1.1 %, after
2.8-3.8 % / 3.1-5.0 % (five runs), all trusted. On machines whose sessions sit in cpu
cgroups (cgroup v2 with the cpu controller) autogroups do not apply; the cgroups' weights
decide, and the health gate reports what the threads waited. A run in init's session (no
setsid anywhere above it, as CI's harness) is in the kernel's default autogroup, the root
group itself: nothing to raise there, and its threads' nice counts directly.

The PMD thread is OVS's: raise_pmd_threads() raises it once the ports exist, and
lower_pmd_threads() puts it back at teardown; a killed run leaves nothing either, as OVS
ends its PMD threads when `clean` has removed the ports they poll.
The kernel datapath and `system` ports are left alone: their forwarding runs in the
kernel's softirq and ovs-vswitchd's main thread wherever the kernel puts them (with
`system` ports that thread alone took ~0.9 of a core at this load, and no placement
brought the run under the gate's limits beside a busy core).
"""
from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

FORWARDING_NICE = -20       # the highest priority of ordinary scheduling (module docstring)
ENDPOINT_NICE = FORWARDING_NICE
# OVS names the threads that poll AF_XDP switch ports `pmd-c<core>/id:<n>`.
PMD_THREADS = 'pmd'
# In a fabric's workdir, the nice an autogroup had before raise_autogroup(): pid in the name.
AUTOGROUP_RECORD = 'autogroup-nice-%d'


@dataclass(frozen=True)
class Placement:
    pmd_cores: frozenset[int]
    endpoint_cores: frozenset[int]

    @property
    def pmd_cpu_mask(self) -> str:
        """OVS's `pmd-cpu-mask`: a hexadecimal core mask."""
        return '0x%x' % sum(1 << core for core in self.pmd_cores)

    def describe(self) -> dict:
        return {'pmd_cores': sorted(self.pmd_cores),
                'endpoint_cores': sorted(self.endpoint_cores),
                'endpoint_nice': ENDPOINT_NICE}


def plan(cores: frozenset[int] | None = None) -> Placement | None:
    """The PMD thread on the lowest of the cores this process may use, the endpoint loop on
    the rest; None (nothing pinned) with fewer than two."""
    usable = sorted(cores if cores is not None else os.sched_getaffinity(0))
    if len(usable) < 2:
        return None
    return Placement(frozenset(usable[:1]), frozenset(usable[1:]))


@contextmanager
def endpoint_loop(placement: Placement | None) -> Iterator[None]:
    """Run the calling thread (the endpoint loop, and what it starts) on the placement's
    endpoint cores at ENDPOINT_NICE; both restored on leaving. Without the privilege to
    raise its priority the thread is only pinned: the health gate reports what it waited."""
    if placement is None:
        yield
        return
    thread = threading.get_native_id()
    cores, nice = os.sched_getaffinity(0), os.getpriority(os.PRIO_PROCESS, thread)
    os.sched_setaffinity(0, placement.endpoint_cores)      # 0: the calling thread
    try:
        os.setpriority(os.PRIO_PROCESS, thread, ENDPOINT_NICE)
    except PermissionError:
        pass
    try:
        yield
    finally:
        os.sched_setaffinity(0, cores)
        try:
            os.setpriority(os.PRIO_PROCESS, thread, nice)
        except PermissionError:
            pass


def threads(pid: int | str, named: str = '') -> list[str]:
    """The thread ids of process `pid` ('self' for this one) whose name starts with
    `named` (all by default); none for a process that is gone."""
    try:
        tasks = os.listdir('/proc/%s/task' % pid)
    except OSError:
        return []
    found = []
    for task in tasks:
        try:
            with open('/proc/%s/task/%s/comm' % (pid, task)) as f:
                if f.read().startswith(named):
                    found.append(task)
        except OSError:
            continue                  # a thread that ended meanwhile
    return found


def raise_pmd_threads(vswitchd_pid: int) -> list[int]:
    """ovs-vswitchd's PMD threads at FORWARDING_NICE; the threads raised."""
    raised = []
    for task in threads(vswitchd_pid, PMD_THREADS):
        try:
            os.setpriority(os.PRIO_PROCESS, int(task), FORWARDING_NICE)
        except (ProcessLookupError, PermissionError):
            continue                  # ended meanwhile, or not ours to raise
        raised.append(int(task))
    return raised


def raise_autogroup(pid: int, record_dir: Path) -> bool:
    """The autogroup of process `pid` (its session's: module docstring) at
    FORWARDING_NICE, the nice it had recorded in `record_dir` (a fabric's workdir, which
    `mrc-testbed clean` reads before removing it); False where the kernel has no
    autogroups or refused."""
    record = record_dir / (AUTOGROUP_RECORD % pid)
    try:
        before = _autogroup_nice(pid)
        if not record.exists():     # raised twice: the first record holds the original
            record.write_text(str(before))
        _set_autogroup_nice(pid, FORWARDING_NICE)
    except (OSError, ValueError, IndexError):
        return False
    return True


def session_leader() -> int:
    """A live process in this process's autogroup that outlives it: its session's leader
    (a shell, mostly), so that a record naming it can still be put back after this
    process was killed; this process where the leader is gone or not in our autogroup
    (no leader at all in init's session: CI once ran the suite so)."""
    leader = os.getsid(0)
    ours = autogroup_name(os.getpid())
    return leader if ours and autogroup_name(leader) == ours else os.getpid()


def restore_autogroup(pid: int, record_dir: Path) -> None:
    """Undo raise_autogroup() as recorded; nothing if it raised nothing or `pid` is gone."""
    record = record_dir / (AUTOGROUP_RECORD % pid)
    try:
        nice = int(record.read_text())
    except (OSError, ValueError):
        return
    try:
        _set_autogroup_nice(pid, nice)
    except OSError:
        pass                          # gone, and its session's autogroup with it
    record.unlink(missing_ok=True)


def restore_recorded_autogroups(record_dirs: list[str]) -> int:
    """For `clean`: every autogroup a killed run left raised, back as recorded."""
    restored = 0
    for record_dir in record_dirs:
        for record in Path(record_dir).glob(AUTOGROUP_RECORD.replace('%d', '*')):
            pid = int(record.name.rsplit('-', 1)[1])
            restore_autogroup(pid, Path(record_dir))
            restored += 1
    return restored


def autogroup_name(pid: int) -> str | None:
    """The name of process `pid`'s autogroup ("/autogroup-N"); None where the process is
    gone, the kernel has no autogroups, or the process is in the kernel's default one
    (init's, and that of whatever init starts without setsid: the file reads empty)."""
    try:
        with open('/proc/%d/autogroup' % pid) as f:
            fields = f.read().split()
    except OSError:
        return None
    return fields[0] if fields else None


def _autogroup_nice(pid: int) -> int:
    with open('/proc/%d/autogroup' % pid) as f:
        return int(f.read().split()[-1])      # "/autogroup-5 nice 0"


def _set_autogroup_nice(pid: int, nice: int) -> None:
    with open('/proc/%d/autogroup' % pid, 'w') as f:
        f.write(str(nice))


def lower_pmd_threads(vswitchd_pid: int, raised: list[int]) -> None:
    """The threads raise_pmd_threads() raised back at ovs-vswitchd's own priority."""
    try:
        nice = os.getpriority(os.PRIO_PROCESS, vswitchd_pid)
    except ProcessLookupError:
        return                        # ovs-vswitchd has gone, and its threads with it
    still_pmd = {int(task) for task in threads(vswitchd_pid, PMD_THREADS)}
    for task in raised:
        if task not in still_pmd:
            continue                  # ended (a thread id may be reused: only PMD ones)
        try:
            os.setpriority(os.PRIO_PROCESS, task, nice)
        except ProcessLookupError:
            continue
