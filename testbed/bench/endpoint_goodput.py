"""One MRC QP between two hosts over P planes whose links are shaped to
R Mbit/s: achieved goodput as a fraction of P x R.

    .venv/bin/python testbed/bench/endpoint_goodput.py                 # P = 1, 2, 4; R = 20
    .venv/bin/python testbed/bench/endpoint_goodput.py --planes 2 --rate 50 --seconds 8
    .venv/bin/python testbed/bench/endpoint_goodput.py --cc none      # MPR window only

Fabric: leafspine,leaves=2,spines=2,hosts=1,planes=P,bw=R; h1 -> h2 cross
the spines, so each host port (R Mbit/s) is the bottleneck of its plane.
Goodput counts payload bytes only: a full MRC packet is 1,368 payload bytes
in a 1,510-byte frame (Ethernet, outer and inner IPv6, UDP, MRC headers), so
90.6% of P x R is line rate.
Each row also says whether the emulator kept up: the endpoint process's CPU
use (one core is one Python thread's ceiling) and the datapath's lost
upcalls. A row measured on a saturated emulator is marked, not trusted.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from testbed.fabric.clean import leftovers  # noqa: E402
from testbed.fabric.net import FabricNet  # noqa: E402
from testbed.fabric.netns import inside  # noqa: E402
from testbed.fabric.topo_spec import parse_topo_spec  # noqa: E402
from testbed.nic.emulated_timescale import (base_rtt_s,  # noqa: E402
                                             emulated_qp_profile)
from testbed.nic.endpoint import Endpoint, connect  # noqa: E402
from testbed.nic.socket_runtime import AddressBook, SocketRuntime  # noqa: E402

SATURATED_CPU = 0.9     # of one core


def datapath_lost() -> int:
    out = subprocess.run(['ovs-appctl', 'dpctl/show'], capture_output=True,
                         text=True).stdout
    m = re.search(r'lost:(\d+)', out)
    return int(m.group(1)) if m else 0


def measure(planes: int, rate: float, seconds: float, cc: str) -> dict:
    spec = parse_topo_spec('leafspine,leaves=2,spines=2,hosts=1,planes=%d,'
                           'bw=%g' % (planes, rate))
    with FabricNet(spec) as fab:
        plan = fab.plan
        book = AddressBook({k: p.address for k, p in plan.host_ports.items()})
        rt = SocketRuntime(book)
        a, b = Endpoint('h1', seed=1), Endpoint('h2', seed=2)
        with inside(fab.host_pid('h1')):
            rt.add(a)
        with inside(fab.host_pid('h2')):
            rt.add(b)
        size = int(planes * rate * 1e6 / 8 * seconds)
        region = b.register_mr(bytearray(size))
        qa, _qb = connect(
            a, b, {p: [x.carrier for x in plan.paths('h1', 'h2', p)]
                   for p in plan.planes},
            {p: [x.carrier for x in plan.paths('h2', 'h1', p)]
             for p in plan.planes}, 'mrc',
            emulated_qp_profile(planes * rate * 1e6 if cc == 'nscc' else None,
                                base_rtt_s(rate * 1e6, plan.longest_path_links)))
        data = os.urandom(size)
        done: list = []
        lost0, cpu0, t0 = datapath_lost(), time.process_time(), time.monotonic()
        qa.post_write(data, 0, region.rkey, wr_id=1)
        finished = rt.run(lambda: done.extend(a.poll_cq()) or bool(done),
                          timeout_s=seconds * 10)
        wall = time.monotonic() - t0
        cpu = (time.process_time() - cpu0) / wall
        lost = datapath_lost() - lost0
        stats = qa.stats()
        rt.close()
        ok = finished and done[0].ok and bytes(region.buf) == data
    goodput = size * 8 / wall / 1e6
    return {'planes': planes, 'rate': rate, 'bytes': size, 'ok': ok,
            'goodput_mbps': goodput, 'ratio': goodput / (planes * rate),
            'cpu': cpu, 'lost_upcalls': lost,
            'retransmitted': stats['retransmitted_packets'],
            'packets': stats['packets_sent'],
            'saturated': cpu > SATURATED_CPU or lost > 0,
            'leftovers': {k: v for k, v in leftovers().items() if v}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument('--planes', type=int, nargs='*', default=[1, 2, 4])
    parser.add_argument('--rate', type=float, default=20.0, help='Mbit/s')
    parser.add_argument('--seconds', type=float, default=5.0,
                        help='transfer length at line rate')
    parser.add_argument('--cc', choices=['none', 'nscc'], default='nscc')
    args = parser.parse_args()
    print('%6s %8s %9s %10s %7s %6s %8s %6s  %s' % (
        'planes', 'R Mbit/s', 'P x R', 'goodput', 'ratio', 'cpu', 'rtx/pkts',
        'lost', 'verdict'))
    for planes in args.planes:
        row = measure(planes, args.rate, args.seconds, args.cc)
        verdict = ('SATURATED: not a result' if row['saturated'] else
                   'ok' if row['ok'] else 'TRANSFER FAILED')
        print('%6d %8g %9g %9.1fM %6.1f%% %5.0f%% %4d/%-5d %5d  %s' % (
            planes, args.rate, planes * args.rate, row['goodput_mbps'],
            100 * row['ratio'], 100 * row['cpu'], row['retransmitted'],
            row['packets'], row['lost_upcalls'], verdict), flush=True)
        if row['leftovers']:
            raise SystemExit('leaked: %s' % row['leftovers'])


if __name__ == '__main__':
    main()
