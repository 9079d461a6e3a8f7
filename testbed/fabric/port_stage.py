"""Everything that gives an AF_XDP switch port a queue lives here.

An OVS `afxdp` port sends through the kernel's AF_XDP transmit, which hands
each frame straight to the veth's driver: the port's qdisc and its tc egress
hook never see it (BENCHMARKS.md §6 measures this). So on a fabric built with
``afxdp=1`` every link is two veth pairs joined in the root namespace by a
*stage*::

    end 1 ── stage 1  ==mirred==  stage 2 ── end 2

Each stage end redirects what it receives (tc ingress, `mirred egress
redirect`) to the other stage end's egress, where the link's HTB, the
switch-port program and any fault filter sit as they sit on a switch port of
a `system` fabric. What end 1 sends therefore queues at stage 2's egress: the
*queue device* of end 1 is the stage of end 2.

The switch ports take their frames in native XDP mode (`xdp-mode=native`).
Measured on this machine kind (kernel 6.18): with generic XDP a frame that
act_mirred, or a tc program's bpf_redirect, had redirected reached the
port's kernel stack instead of its AF_XDP socket (a ping across a staged
link failed); with native XDP it reached OVS. On
`leafspine,leaves=2,spines=2,hosts=1,planes=1,bw=10` a 4 MB MRC write moved
at 9.03 Mbit/s with afxdp=1 and 9.04 with `system` ports, the switch-port
program counting the same ~13,160 packets on both
(tests/integration/test_port_types.py checks the shaping and the counts).
"""
from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

from mininet.util import makeIntfPair, quietRun
from pyroute2 import IPRoute

from testbed.fabric import port_config
from testbed.topologies.link_params import SizedIntf, SizedLink

STAGE_SUFFIX = 's'
MAX_IFNAME = 15                 # IFNAMSIZ - 1


def stage_name(intf: str) -> str:
    """The root-namespace veth end paired with `intf`."""
    name = intf + STAGE_SUFFIX
    if len(name) > MAX_IFNAME:
        raise ValueError('interface %r: no room for its stage name' % intf)
    return name


def redirect_commands(stage: str, to: str) -> list[str]:
    """tc commands that send everything `stage` receives out of `to`."""
    return ['tc qdisc add dev %s clsact' % stage,
            'tc filter add dev %s ingress protocol all pref 1 u32 match u32 0 0 '
            'action mirred egress redirect dev %s' % (stage, to)]


# The tc commands of the links a build is making, run in one `tc -batch` once
# they all exist (batched_tc): one process per command cost ~10 s of an
# AF_XDP fat-tree's build (1,600 commands for fattree,k=4,planes=2,bw=10).
# None outside a build: a command then runs at once.
_pending: list[str] | None = None


@contextmanager
def batched_tc() -> Iterator[None]:
    """Queue the staged links' tc commands made inside, and run them in one
    tc -batch, in order, once it ends; a build that fails inside drops them."""
    global _pending
    _pending = []
    try:
        yield
        commands = _pending
    finally:
        _pending = None
    _run_batch(commands)


def _tc(command: str) -> str:
    """Run a tc command now, or queue it in a batched build (what only reads
    runs now either way)."""
    if _pending is None or ' show ' in command:
        return quietRun(command)
    _pending.append(command)
    return ''


def _run_batch(commands: list[str]) -> None:
    if not commands:
        return
    done = subprocess.run(['tc', '-force', '-batch', '-'],
                          input=''.join(cmd.split(None, 1)[1] + '\n' for cmd in commands),
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError('staged links: tc -batch: %s' % done.stderr.strip()[-2000:])


class StagedIntf(SizedIntf):
    """A link end whose egress queue is the other end's stage: the link's
    tc configuration (HTB, netem) goes there, in the root namespace (in a
    build, batched: batched_tc)."""

    def queue(self) -> str:
        return self.link.queue_of[self.name]

    def tc(self, cmd, tc='tc'):
        return _tc(cmd % (tc, self.queue()))

    def config(self, mtu=None, **params):
        result = super().config(mtu=mtu, **params)
        if mtu:
            quietRun('ip link set dev %s mtu %d' % (stage_name(self.name), int(mtu)))
        return result


class StagedLink(SizedLink):
    """Two veth pairs and a stage between them (the module's header)."""

    def __init__(self, *args, **kwargs):
        self.queue_of: dict[str, str] = {}
        kwargs.setdefault('cls1', StagedIntf)
        kwargs.setdefault('cls2', StagedIntf)
        super().__init__(*args, **kwargs)

    def makeIntfPair(self, intfname1, intfname2, addr1=None, addr2=None,
                     node1=None, node2=None, deleteIntfs=True):
        stage1, stage2 = stage_name(intfname1), stage_name(intfname2)
        self.queue_of = {intfname1: stage2, intfname2: stage1}
        # node None: the root namespace (netns 1 for the peer).
        makeIntfPair(intfname1, stage1, None, None, node1, None, deleteIntfs=False)
        makeIntfPair(stage2, intfname2, None, None, None, node2, deleteIntfs=False)
        for node, intf, addr in ((node1, intfname1, addr1), (node2, intfname2, addr2)):
            if addr is not None:
                (node.cmd if node else quietRun)('ip link set dev %s address %s' % (intf, addr))
        for command in ['ip link set dev %s up' % s for s in (stage1, stage2)]:
            out = quietRun(command)
            if out.strip():
                raise RuntimeError('stage of %s<->%s: %s: %s'
                                   % (intfname1, intfname2, command, out.strip()))
        for command in redirect_commands(stage1, stage2) + redirect_commands(stage2, stage1):
            out = _tc(command)
            if out.strip():
                raise RuntimeError('stage of %s<->%s: %s: %s'
                                   % (intfname1, intfname2, command, out.strip()))

    def stages(self) -> list[str]:
        return sorted(self.queue_of.values())


def stage_links(topo) -> None:
    """Make every link of `topo` (not built yet) a StagedLink."""
    for _, _, info in topo.links(withInfo=True):
        info['cls'] = StagedLink


def stages(links) -> list[str]:
    """The stage devices of a network's links."""
    return [s for link in links if isinstance(link, StagedLink) for s in link.stages()]


def cut(stages: list[str], switch_ports: list[tuple[str, str]], up: bool) -> None:
    """Take a staged link down, or bring it back: `stages`, its two stage
    devices, admin down or up, and `switch_ports`, its (bridge, port) ends on
    switches, kept admin up but made to drop inside OVS while it is down.

    Down cannot be the AF_XDP port's own admin state: a port taken admin-down
    keeps what OVS sends it in its transmit ring and sends it all once back up
    (on fattree,k=4,planes=2 at 5 Mbit/s, 200 pings sent into a switch down
    for 4 s arrived at its end, 1.8 s late), a burst no failed link sends. Nor
    only its carrier: the kernel then drops one frame per transmit call and
    leaves the rest of a burst in the ring (34 of 40 probes arrived after the
    link came back). So OVS stops sending first, then the stages go down and
    every port on the link loses carrier, as the controller and the hosts'
    port events expect; coming back, the reverse order."""
    if not up:
        port_config.set_forwarding(switch_ports, False)
    with IPRoute() as ipr:
        for stage in stages:
            index = ipr.link_lookup(ifname=stage)
            if not index:
                raise RuntimeError('%s: no such stage device' % stage)
            ipr.link('set', index=index[0], state='up' if up else 'down')
    if up:
        port_config.set_forwarding(switch_ports, True)


def queue_of(intf) -> str:
    """Where what the link end `intf` sends queues: '' for the end itself
    (an unstaged link)."""
    return intf.queue() if isinstance(intf, StagedIntf) else ''
