"""os-ken application: the fabric's tables, static uSID and routed IPv6.

Every switch carries both fabric modes at once. Its static SRv6 uSID tables
(`testbed.fabric.flow_tables`), computed once from the fabric plan (a JSON
file named by $MRC_PLAN), forward MRC's carriers and never change. Below
them in table 0, destination routes to every host port with ECMP select
groups (`testbed.fabric.routed_tables`) forward plain IPv6, the routed mode
of the RoCE, TCP and MPTCP baselines.

When a switch connects, its tables and groups are replaced wholesale and a
barrier confirms them; the set of ready datapaths is written to $MRC_READY
so the fabric builder knows when the fabric forwards. Afterwards only the
routed mode changes: a port-status on a switch-to-switch port is taken into
the routed view $MRC_CONVERGENCE_DELAY seconds later, and every group whose
next hops changed is rewritten, as routers do once a withdrawal (or a
re-advertisement) has propagated. Every port-status heard and every group
change is one JSON line in $MRC_ROUTING_LOG.
"""
from __future__ import annotations

import heapq
import json
import os
import threading
import time

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib import hub
from os_ken.ofproto import ofproto_v1_5

from testbed.controller.ofp_groups import hash_basis, select_group_mod
from testbed.controller.reconvergence import RoutedView
from testbed.fabric.flow_tables import (NEXT_USID_TABLE, PRIORITY, SHIFT_TABLE,
                                        FlowRule, NextUsidOutput, ShiftAndForward,
                                        all_rules)
from testbed.fabric.routed_tables import (ROUTED_PRIORITY, GroupRoute, HostRoute,
                                          RoutedRule, host_prefix)
from testbed.fabric.usid_plan import FabricPlan

ETH_TYPE_IPV6 = 0x86DD
LAST_USID_MASK = '::ffff'
TIMER_SLACK_S = 0.005    # a timer that fires a hair early still finds its report


class UsidController(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_5.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        with open(os.environ['MRC_PLAN']) as f:
            plan = FabricPlan.from_json(f.read())
        self.rules = all_rules(plan)
        self.view = RoutedView(plan)
        self.delay_s = float(os.environ.get('MRC_CONVERGENCE_DELAY', '0'))
        self.ready_file = os.environ.get('MRC_READY')
        self.log_file = os.environ.get('MRC_ROUTING_LOG')
        self.ready: set[int] = set()
        self.datapaths: dict[int, object] = {}
        self.lock = threading.Lock()
        # (due, order heard, dpid, port, up): reports waiting out the delay
        self.pending: list[tuple[float, int, int, int, bool]] = []
        self.heard = 0

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev) -> None:
        dp = ev.msg.datapath
        rules = self.rules.get(dp.id)
        if rules is None:
            self.logger.warning('datapath %016x is not in the plan', dp.id)
            return
        self.ready.discard(dp.id)
        parser, ofp = dp.ofproto_parser, dp.ofproto
        dp.send_msg(parser.OFPFlowMod(dp, command=ofp.OFPFC_DELETE,
                                      table_id=ofp.OFPTT_ALL,
                                      out_port=ofp.OFPP_ANY,
                                      out_group=ofp.OFPG_ANY))
        dp.send_msg(parser.OFPGroupMod(dp, command=ofp.OFPGC_DELETE,
                                       group_id=ofp.OFPG_ALL))
        with self.lock:
            self.datapaths[dp.id] = dp
            name = self.view.switch_name(dp.id)
            routing = self.view.tables[name]
            for gid, ports in sorted(routing.groups.items()):
                dp.send_msg(select_group_mod(dp, gid, ports, ofp.OFPGC_ADD,
                                             hash_basis(name)))
        for rule in rules:
            dp.send_msg(flow_mod(dp, rule))
        for route in routing.routes:
            dp.send_msg(routed_flow_mod(dp, route))
        dp.send_msg(parser.OFPBarrierRequest(dp))

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def on_error(self, ev) -> None:
        """A refused message is a fabric that does not forward as planned."""
        msg = ev.msg
        self.logger.error('datapath %016x refused a message: type %d code %d: %s',
                          msg.datapath.id, msg.type, msg.code, bytes(msg.data)[:64].hex())

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def on_barrier(self, ev) -> None:
        self.ready.add(ev.msg.datapath.id)
        if self.ready_file:
            tmp = self.ready_file + '.tmp'
            with open(tmp, 'w') as f:
                json.dump(sorted(self.ready), f)
            os.replace(tmp, self.ready_file)

    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def on_port_status(self, ev) -> None:
        dp, desc = ev.msg.datapath, ev.msg.desc
        ofp = dp.ofproto
        # OVS reports an admin-down veth twice: first no longer LIVE, then
        # LINK_DOWN and PORT_DOWN; back up, LIVE again.
        up = bool(desc.state & ofp.OFPPS_LIVE) and not (
            desc.state & ofp.OFPPS_LINK_DOWN or desc.config & ofp.OFPPC_PORT_DOWN)
        link = self.view.link_of(dp.id, desc.port_no)
        self._log('port_status', switch=self.view.switch_name(dp.id),
                  port=desc.port_no, up=up, state=desc.state,
                  config=desc.config, link=sorted(link) if link else None)
        if link is None:
            return
        with self.lock:
            self.heard += 1
            heapq.heappush(self.pending, (time.monotonic() + self.delay_s,
                                          self.heard, dp.id, desc.port_no, up))
        hub.spawn_after(self.delay_s, self._converge_due)

    def _converge_due(self) -> None:
        """Apply every report whose delay has passed, in the order heard
        (timers of equal delay may fire out of order)."""
        with self.lock:
            now = time.monotonic() + TIMER_SLACK_S
            while self.pending and self.pending[0][0] <= now:
                _, _, dpid, port, up = heapq.heappop(self.pending)
                self._converge(dpid, port, up)

    def _converge(self, dpid: int, port: int, up: bool) -> None:
        changes = self.view.apply(dpid, port, up)
        for change in changes:
            dp = self.datapaths.get(change.dpid)
            if dp is not None:
                dp.send_msg(select_group_mod(
                    dp, change.group_id, change.after, dp.ofproto.OFPGC_MODIFY,
                    hash_basis(self.view.switch_name(change.dpid))))
        for change in changes:
            self._log('group_change', cause={'switch': self.view.switch_name(dpid),
                                             'port': port, 'up': up},
                      **change.describe())

    def _log(self, event: str, **fields) -> None:
        if not self.log_file:
            return
        line = json.dumps({'time': time.time(), 'monotonic': time.monotonic(),
                           'event': event, **fields})
        with open(self.log_file, 'a') as f:
            f.write(line + '\n')


def flow_mod(dp, rule: FlowRule):
    parser, ofp = dp.ofproto_parser, dp.ofproto
    match = parser.OFPMatch(eth_type=ETH_TYPE_IPV6,
                            ipv6_dst=rule.match.masked_dst())
    if isinstance(rule, ShiftAndForward):
        table = SHIFT_TABLE
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [
            # The uSID shift of RFC 9800: bits 0..79 move up by 16 and the
            # last 16 become zero (end of carrier). OpenFlow 1.5's own
            # copy-field and masked set-field: OVS refuses the Nicira
            # reg_move/reg_load it takes over OF1.3 in an OF1.5 flow mod.
            parser.OFPActionCopyField(n_bits=80, src_offset=0, dst_offset=16,
                                      oxm_ids=['ipv6_dst', 'ipv6_dst']),
            parser.OFPActionSetField(ipv6_dst=('::', LAST_USID_MASK)),
            parser.OFPActionDecNwTtl()]),
            parser.OFPInstructionGotoTable(NEXT_USID_TABLE)]
    else:
        table = NEXT_USID_TABLE
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS,
                                             output_actions(parser, rule))]
    return parser.OFPFlowMod(dp, table_id=table, priority=PRIORITY,
                             match=match, instructions=inst)


def routed_flow_mod(dp, route: RoutedRule):
    """A /128 route in table 0, below the uSID rules: a router's hop (hop
    limit decremented), to the host port or the destination's group."""
    parser, ofp = dp.ofproto_parser, dp.ofproto
    match = parser.OFPMatch(eth_type=ETH_TYPE_IPV6,
                            ipv6_dst=host_prefix(route.address))
    actions = [parser.OFPActionDecNwTtl()]
    if isinstance(route, HostRoute):
        actions += [parser.OFPActionSetField(eth_src=route.eth_src),
                    parser.OFPActionSetField(eth_dst=route.eth_dst),
                    parser.OFPActionOutput(route.port)]
    else:
        assert isinstance(route, GroupRoute)
        actions.append(parser.OFPActionGroup(route.group_id))
    return parser.OFPFlowMod(dp, table_id=SHIFT_TABLE, priority=ROUTED_PRIORITY,
                             match=match, instructions=[parser.OFPInstructionActions(
                                 ofp.OFPIT_APPLY_ACTIONS, actions)])


def output_actions(parser, rule: NextUsidOutput) -> list:
    actions = []
    if rule.eth_src:
        actions.append(parser.OFPActionSetField(eth_src=rule.eth_src))
    if rule.eth_dst:
        actions.append(parser.OFPActionSetField(eth_dst=rule.eth_dst))
    return actions + [parser.OFPActionOutput(rule.port)]
