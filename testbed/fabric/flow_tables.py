"""Each switch's static OpenFlow tables, computed once from the uSID plan.

Table 0, uN shift-and-forward: a packet whose carrier's first uSID is this
switch has its uSIDs shifted left by 16 bits (zero filled) and its hop limit
decremented, then goes to table 1. Table 1: the next uSID names a neighbour
switch or an attached host port; forward there. Nothing else is installed:
no ECMP, no MAC learning, no table-miss to the controller. Link failures
never change these tables: endpoints steer around failures, as in MRC.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from testbed.fabric.usid_plan import GATEWAY_MAC, FabricPlan, SwitchInfo, block

SHIFT_TABLE, NEXT_USID_TABLE = 0, 1
PRIORITY = 100


@dataclass(frozen=True)
class UsidMatch:
    """ipv6_dst matches <block>:<usid>::/48."""
    plane: int
    usid: int

    def masked_dst(self) -> tuple[str, str]:
        hi = block(self.plane) << 16 | self.usid
        return _v6(hi << 80), _v6(((1 << 48) - 1) << 80)


@dataclass(frozen=True)
class ShiftAndForward:
    """Table 0 rule: consume this switch's uSID."""
    match: UsidMatch


@dataclass(frozen=True)
class NextUsidOutput:
    """Table 1 rule: send to the port where the next uSID lives; a host
    port also needs its MAC as destination or the host kernel drops it."""
    match: UsidMatch
    port: int
    eth_dst: str | None = None
    eth_src: str | None = None


FlowRule = ShiftAndForward | NextUsidOutput


def switch_rules(plan: FabricPlan, name: str) -> list[FlowRule]:
    me: SwitchInfo = plan.switches[name]
    rules: list[FlowRule] = [ShiftAndForward(UsidMatch(me.plane, me.usid))]
    for neighbour, port in sorted(plan.neighbours(name).items()):
        usid = plan.switches[neighbour].usid
        rules.append(NextUsidOutput(UsidMatch(me.plane, usid), port))
    for hp in plan.hosts_on(name):
        rules.append(NextUsidOutput(UsidMatch(me.plane, hp.usid),
                                    hp.switch_port, hp.mac, GATEWAY_MAC))
    return rules


def all_rules(plan: FabricPlan) -> dict[int, list[FlowRule]]:
    """dpid -> rules, what the controller installs when a switch connects."""
    return {info.dpid: switch_rules(plan, name)
            for name, info in plan.switches.items()}


def _v6(value: int) -> str:
    return str(ipaddress.IPv6Address(value))
