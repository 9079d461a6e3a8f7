"""`mrc-testbed plan`: a topology's uSID plan for people (text) and tools
(JSON), computed from the spec alone (no root, no fabric).

The JSON document is the controller's plan file (`FabricPlan.to_dict`:
switches, hosts, host ports, links), so `FabricPlan.from_json` and
`python -m testbed.controller --plan` read it, plus the topology spec, its
planes and every path between two hosts with its uSID carrier.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict

from testbed.fabric.topo_spec import TopoSpec
from testbed.fabric.usid_plan import FabricPlan, Path
from testbed.shell.text import table


def every_path(plan: FabricPlan) -> Iterator[Path]:
    """Every path of every ordered host pair, plane by plane."""
    for src in plan.hosts:
        for dst in plan.hosts:
            if src != dst:
                yield from plan.all_paths(src, dst)


def plan_document(spec: TopoSpec, plan: FabricPlan) -> dict:
    return {'topology': str(spec), 'planes': list(plan.planes),
            **plan.to_dict(),
            'paths': [asdict(p) for p in every_path(plan)]}


def plan_text(spec: TopoSpec, plan: FabricPlan) -> Iterator[str]:
    """The plan as text, a line or a table at a time."""
    paths = every_path(plan)
    yield '%s: planes %s, %d switches, %d hosts (%d ports), %d links\n' % (
        spec, ' '.join(map(str, plan.planes)), len(plan.switches),
        len(plan.hosts), len(plan.host_ports), len(plan.links))
    yield '\nswitches (uSID: tier nibble, index)\n'
    yield table(('switch', 'plane', 'tier', 'uSID', 'dpid', 'ports'), [
        (s.name, s.plane, s.tier, '%04x' % s.usid, '%016x' % s.dpid,
         ' '.join('%d:%s' % pn for pn in _ports(plan, s.name)))
        for s in plan.switches.values()])
    yield '\nhost ports (SID: where the host decapsulates)\n'
    yield table(('host', 'plane', 'intf', 'uSID', 'address', 'SID',
                 'switch:port'), [
        (p.host, p.plane, p.intf, '%04x' % p.usid, p.address, p.sid,
         '%s:%d' % (p.switch, p.switch_port))
        for p in sorted(plan.host_ports.values(),
                        key=lambda p: (int(p.host[1:]), p.plane))])
    yield '\npaths (carrier: block, the switches\' uSIDs, the host port\'s)\n'
    yield table(('src', 'dst', 'plane', 'carrier', 'switches'), [
        (p.src, p.dst, p.plane, p.carrier, ' '.join(p.switches))
        for p in paths])


def _ports(plan: FabricPlan, switch: str) -> list[tuple[int, str]]:
    """(port number, what is on it) of one switch, by port."""
    ports = [(n, peer) for peer, n in plan.neighbours(switch).items()]
    ports += [(p.switch_port, p.host) for p in plan.hosts_on(switch)]
    return sorted(ports)
