"""Stock Mininet's `mn`, run as the README says, forwards: plumbed hosts,
uSID tables from `--controller mrc`, a carrier probe on every plane and, on
a kernel with seg6 routes, an SRv6 ping (docs/host-decap.md)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pexpect
import pytest

from testbed.fabric.clean import our_processes
from testbed.fabric.host_decap import kernel_seg6local
from testbed.fabric.probe import PathProber
from testbed.fabric.run_lock import RunLock
from testbed.fabric.topo_spec import parse_topo_spec
from testbed.fabric.usid_plan import FabricPlan
from tests.integration.leaks import leaked
from tests.integration.time_limits import BASE_S, build_allowance

REPO = Path(__file__).resolve().parents[2]
SPEC = 'fattree,k=4,planes=2'
MN = ['mn', '--custom', 'testbed/topologies/fattree.py', '--topo', SPEC,
      '--controller', 'mrc', '--host', 'mrc',
      '--switch', 'ovs,datapath=user,protocols=OpenFlow15']
PROMPT = 'mininet> '
# Building 40 userspace bridges and plumbing 16 hosts, on a shared machine.
START_TIMEOUT_S = 300
# One ping's wait for its reply. A reply takes one fabric RTT (well under a
# millisecond unshaped); the first packets of a fresh fabric also wait for
# the controller's tables, which it installs as each switch connects.
PING_WAIT_S = 1
PING_TRIES = 10


def bridges_named(names):
    out = subprocess.run(['ovs-vsctl', '--timeout=10', 'list-br'],
                         capture_output=True, text=True, check=True).stdout
    return [name for name in out.split() if name in names]


def mn_env():
    # mn's own sudo-like environment, plus the Python that has os-ken and
    # pyroute2 (this one: the tests run in the project's venv).
    return {'PATH': os.environ['PATH'], 'MRC_PYTHON': sys.executable}


def command(child, line):
    child.sendline(line)
    child.expect_exact(PROMPT)
    return child.before


def srv6_route(host, peer, path, plan):
    """An encap route on `host` to `peer`'s port on the path's plane."""
    dst = plan.host_ports[(peer, path.plane)]
    port = plan.host_ports[(host, path.plane)].intf
    return ('%s ip -6 route replace %s/128 encap seg6 mode encap segs %s dev %s'
            % (host, dst.address, path.carrier, port))


def host_pid(child, host):
    """A process in the host's namespace: its shell."""
    return int(re.search(r'^(\d+)\s*$', command(child, '%s echo $$' % host),
                         re.M).group(1))


def ping_until_answered(child, src, address):
    for _ in range(PING_TRIES):
        out = command(child, '%s ping6 -c 1 -W %d %s' % (src, PING_WAIT_S,
                                                         address))
        if re.search(r'\b1 received', out):
            return True
    return False


# Stock mn builds and tears down the 2-plane fat-tree (160 system ports) its
# own way, in a child, then pings every plane.
@pytest.mark.time_limit(BASE_S + build_allowance(160, afxdp=False),
                        why="stock mn's fat-tree in a child")
def test_stock_mn_forwards_srv6_on_every_plane():
    plan = FabricPlan.from_topo(parse_topo_spec(SPEC).build())
    switches = list(plan.switches)
    lock = RunLock()      # the same bridge names as any fabric of ours
    lock.acquire()
    child = None
    try:
        child = pexpect.spawn(MN[0], MN[1:], cwd=str(REPO), env=mn_env(),
                              encoding='utf-8', timeout=START_TIMEOUT_S)
        child.expect_exact(PROMPT)
        controllers = [cmd for cmd in our_processes().values()
                       if '-m testbed.controller --topo ' + SPEC in cmd]
        assert len(controllers) == 1, controllers
        pids = {h: host_pid(child, h) for h in ('h1', 'h16')}
        for plane in plan.planes:
            # h1 (pod 0) and h16 (pod 3): across a core switch of the plane
            there = plan.paths('h1', 'h16', plane)[0]
            back = plan.paths('h16', 'h1', plane)[-1]
            assert len(there.switches) == 5
            # Each way, the endpoints' own packets: a raw IPv6-in-IPv6
            # socket sends, the receiving host's decapsulation delivers.
            prober = PathProber(plan, pids)
            try:
                assert prober.probe([there, back]).ok == {0, 1}, plane
            finally:
                prober.close()
            if not kernel_seg6local():
                continue      # no seg6 routes by hand on this kernel
            command(child, srv6_route('h1', 'h16', there, plan))
            command(child, srv6_route('h16', 'h1', back, plan))
            address = plan.host_ports[('h16', plane)].address
            assert ping_until_answered(child, 'h1', address), (plane, address)
        child.sendline('exit')
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0
        # Mininet called the controller's stop(): the process is gone
        assert not [c for c in our_processes().values()
                    if 'testbed.controller' in c]
    finally:
        if child is not None and child.isalive():
            child.terminate(force=True)
        # Never `mn -c`: remove by name only what this topology built.
        for name in bridges_named(switches):
            subprocess.run(['ovs-vsctl', '--timeout=10', 'del-br', name],
                           capture_output=True)
        lock.release()
    assert leaked() == {}


def test_stock_mn_says_which_python_it_needs():
    # A Python without os-ken: refused before anything is built, exit 2,
    # and the message says how to fix it.
    env = dict(mn_env(), MRC_PYTHON='/usr/bin/python3')
    lock = RunLock()
    lock.acquire()
    try:
        result = subprocess.run(MN + ['--test', 'none'], cwd=REPO, env=env,
                                capture_output=True, text=True, timeout=120)
    finally:
        lock.release()
    assert result.returncode == 2, result.stderr[-2000:]
    assert 'need a Python with os_ken' in result.stderr
    assert 'MRC_PYTHON=' in result.stderr
    assert bridges_named(list(FabricPlan.from_topo(
        parse_topo_spec(SPEC).build()).switches)) == []
    assert leaked() == {}
