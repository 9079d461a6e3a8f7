"""os-ken application: installs each switch's static SRv6 uSID tables.

The tables come from `testbed.fabric.flow_tables`, computed once from the
fabric plan (a JSON file named by $MRC_PLAN). When a switch connects, its
tables are replaced wholesale and a barrier confirms them; the set of ready
datapaths is written to $MRC_READY so the fabric builder knows when the
fabric forwards. Nothing is ever changed afterwards: no packet-in handling,
no reaction to port status, as MRC's static fabric requires.
"""
from __future__ import annotations

import json
import os

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_3

from testbed.fabric.flow_tables import (NEXT_USID_TABLE, PRIORITY, SHIFT_TABLE,
                                        FlowRule, NextUsidOutput, ShiftAndForward,
                                        all_rules)
from testbed.fabric.usid_plan import FabricPlan

ETH_TYPE_IPV6 = 0x86DD


class UsidController(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        with open(os.environ['MRC_PLAN']) as f:
            self.rules = all_rules(FabricPlan.from_json(f.read()))
        self.ready_file = os.environ.get('MRC_READY')
        self.ready: set[int] = set()

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
        for rule in rules:
            dp.send_msg(flow_mod(dp, rule))
        dp.send_msg(parser.OFPBarrierRequest(dp))

    @set_ev_cls(ofp_event.EventOFPBarrierReply, MAIN_DISPATCHER)
    def on_barrier(self, ev) -> None:
        self.ready.add(ev.msg.datapath.id)
        if self.ready_file:
            tmp = self.ready_file + '.tmp'
            with open(tmp, 'w') as f:
                json.dump(sorted(self.ready), f)
            os.replace(tmp, self.ready_file)


def flow_mod(dp, rule: FlowRule):
    parser, ofp = dp.ofproto_parser, dp.ofproto
    match = parser.OFPMatch(eth_type=ETH_TYPE_IPV6,
                            ipv6_dst=rule.match.masked_dst())
    if isinstance(rule, ShiftAndForward):
        table = SHIFT_TABLE
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [
            # The uSID shift of RFC 9800: bits 16..95 move up by 16 and the
            # last 16 become zero (end of carrier).
            parser.NXActionRegMove(src_field='ipv6_dst', dst_field='ipv6_dst',
                                   n_bits=80, src_ofs=0, dst_ofs=16),
            parser.NXActionRegLoad(ofs_nbits=(0 << 6) | 15, dst='ipv6_dst',
                                   value=0),
            parser.OFPActionDecNwTtl()]),
            parser.OFPInstructionGotoTable(NEXT_USID_TABLE)]
    else:
        table = NEXT_USID_TABLE
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS,
                                             output_actions(parser, rule))]
    return parser.OFPFlowMod(dp, table_id=table, priority=PRIORITY,
                             match=match, instructions=inst)


def output_actions(parser, rule: NextUsidOutput) -> list:
    actions = []
    if rule.eth_src:
        actions.append(parser.OFPActionSetField(eth_src=rule.eth_src))
    if rule.eth_dst:
        actions.append(parser.OFPActionSetField(eth_dst=rule.eth_dst))
    return actions + [parser.OFPActionOutput(rule.port)]
