"""What the routed fabric believes about its links, and the group changes a
port-status report leads to once the convergence delay has passed.

The controller learns of a failure only as a routing protocol does, from
the switches: an OpenFlow port-status on a switch-to-switch port. A link
is down in its view when either end was reported down; host ports are no
concern of routing (a NIC behind a dead port has no other route on its
plane). The view changes `delay_s` after the report, the time a BGP fabric
takes to withdraw and re-advertise (`testbed.fabric.convergence`), and
every switch's groups are then recomputed from the plan and the view, as
every router's FIB is once withdrawals have propagated. Nothing here
talks OpenFlow: the app sends what `apply` returns.
"""
from __future__ import annotations

from dataclasses import dataclass

from testbed.fabric.routed_tables import (LinkKey, SwitchRouting, link_key,
                                          routed_tables)
from testbed.fabric.usid_plan import FabricPlan

PortKey = tuple[int, int]       # (dpid, OpenFlow port number)


@dataclass(frozen=True)
class GroupChange:
    switch: str
    dpid: int
    group_id: int
    before: tuple[int, ...]
    after: tuple[int, ...]

    def describe(self) -> dict:
        return {'switch': self.switch, 'dpid': self.dpid,
                'group_id': self.group_id, 'before': list(self.before),
                'after': list(self.after)}


class RoutedView:
    def __init__(self, plan: FabricPlan) -> None:
        self.plan = plan
        self._links: dict[PortKey, LinkKey] = {
            (info.dpid, port): link_key(name, peer)
            for name, info in plan.switches.items()
            for peer, port in plan.neighbours(name).items()}
        self._names = {s.dpid: name for name, s in plan.switches.items()}
        self._down_ports: set[PortKey] = set()
        self.tables: dict[str, SwitchRouting] = routed_tables(plan)

    def switch_name(self, dpid: int) -> str | None:
        return self._names.get(dpid)

    def link_of(self, dpid: int, port: int) -> LinkKey | None:
        """The switch-to-switch link of a port; None for a host port."""
        return self._links.get((dpid, port))

    def down_links(self) -> frozenset[LinkKey]:
        return frozenset(self._links[p] for p in self._down_ports)

    def apply(self, dpid: int, port: int, up: bool) -> list[GroupChange]:
        """Take a port's reported state into the view; the groups that
        change on every switch (none if the link's state did not)."""
        if self.link_of(dpid, port) is None:
            return []
        (self._down_ports.discard if up else self._down_ports.add)((dpid, port))
        tables = routed_tables(self.plan, self.down_links())
        changes = [GroupChange(name, self.plan.switches[name].dpid, gid,
                               self.tables[name].groups.get(gid, ()), ports)
                   for name, table in sorted(tables.items())
                   for gid, ports in sorted(table.groups.items())
                   if self.tables[name].groups.get(gid) != ports]
        self.tables = tables
        return changes
