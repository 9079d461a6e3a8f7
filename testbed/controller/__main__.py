"""Run the fabric controller: ``python -m testbed.controller (--plan F | --topo
SPEC) [--port N] [--ready F] [--convergence-delay S] [--routing-log F]``.

Listens on 127.0.0.1 only: the switches are local and nothing else should
be able to program the fabric. `--topo` computes the plan from a topology
spec (``fattree,k=4,planes=2``), as stock `mn --controller mrc` runs it.
"""
from __future__ import annotations

import argparse
import os


def main() -> None:
    parser = argparse.ArgumentParser(prog='python -m testbed.controller')
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument('--plan', help='fabric plan JSON file')
    source.add_argument('--topo', help='topology spec to compute the plan of')
    parser.add_argument('--port', type=int, default=6653)
    parser.add_argument('--ready', help='file listing the ready datapaths')
    parser.add_argument('--convergence-delay', type=float, default=0.0,
                        help='seconds from a port-status to the repaired routes')
    parser.add_argument('--routing-log', help='JSON lines: port-status and group changes')
    args = parser.parse_args()
    os.environ['MRC_PLAN'] = args.plan or plan_of_topo(args.topo)
    if args.ready:
        os.environ['MRC_READY'] = args.ready
    if args.routing_log:
        os.environ['MRC_ROUTING_LOG'] = args.routing_log
    os.environ['MRC_CONVERGENCE_DELAY'] = repr(args.convergence_delay)
    from os_ken import cfg
    from os_ken.base.app_manager import AppManager
    cfg.CONF(args=['--ofp-listen-host', '127.0.0.1',
                   '--ofp-tcp-listen-port', str(args.port)], project='os_ken')
    AppManager.run_apps(['testbed.controller.usid_app'])


def plan_of_topo(spec: str) -> str:
    """The plan of a topology spec, in an unnamed in-memory file (a path
    under /proc/self/fd): nothing is left behind however the controller
    ends, SIGKILL included."""
    from testbed.fabric.topo_spec import parse_topo_spec
    from testbed.fabric.usid_plan import FabricPlan
    plan = FabricPlan.from_topo(parse_topo_spec(spec).build())
    fd = os.memfd_create('mrc-plan')
    os.write(fd, plan.to_json().encode())
    return '/proc/self/fd/%d' % fd


if __name__ == '__main__':
    main()
