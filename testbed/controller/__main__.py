"""Run the fabric controller: ``python -m testbed.controller --plan F [--port N]
[--ready F] [--convergence-delay S] [--routing-log F]``.

Listens on 127.0.0.1 only: the switches are local and nothing else should
be able to program the fabric.
"""
from __future__ import annotations

import argparse
import os


def main() -> None:
    parser = argparse.ArgumentParser(prog='python -m testbed.controller')
    parser.add_argument('--plan', required=True, help='fabric plan JSON file')
    parser.add_argument('--port', type=int, default=6653)
    parser.add_argument('--ready', help='file listing the ready datapaths')
    parser.add_argument('--convergence-delay', type=float, default=0.0,
                        help='seconds from a port-status to the repaired routes')
    parser.add_argument('--routing-log', help='JSON lines: port-status and group changes')
    args = parser.parse_args()
    os.environ['MRC_PLAN'] = args.plan
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


if __name__ == '__main__':
    main()
