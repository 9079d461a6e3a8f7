"""A scenario's `capture:` key on a real fabric: pcaps in the results
directory that tshark reads with the MRC dissector, cut at the snap length,
and no tcpdump left running, whether the run ends well or not."""

import pytest

from testbed.fabric.clean import our_processes
from testbed.fabric.packet_capture import TCPDUMP_MARK
from testbed.workload.run_scenario import run_scenario
from testbed.workload.scenario import parse_scenario
from tests.unit import tshark_mrc

SNAPLEN = 200


def scenario(size_mb=1):
    return parse_scenario({
        'name': 'capture', 'topology': 'fattree,k=4,planes=2',
        'link_rate_mbit': 10, 'transports': ['mrc'],
        'workload': {'type': 'point_to_point', 'src': 'h1', 'dst': 'h16',
                     'size_mb': size_mb},
        'duration_s': 30,
        'capture': {'links': [['p1e0x0', 'h1']], 'hosts': ['h16'],
                    'snaplen': SNAPLEN},
    }, '.', source='capture.yaml')


def tcpdumps():
    return [cmd for cmd in our_processes().values() if TCPDUMP_MARK in cmd]


def test_capture_writes_pcaps_the_dissector_reads(tmp_path):
    out, summary = run_scenario(scenario(), tmp_path, progress=lambda _: None)
    assert summary['mrc']['completed']
    pcaps = sorted(p.name for p in (out / 'pcap' / 'mrc-1').iterdir())
    assert pcaps == ['h16-p1.pcap', 'h16-p2.pcap', 'p1e0x0-h1.pcap']
    for name in pcaps:
        rows = tshark_mrc.tshark_fields(out / 'pcap' / 'mrc-1' / name,
                                        ('mrc.opcode', 'frame.cap_len',
                                         'mrc.dest_qp'))
        mrc = [r for r in rows if r['mrc.opcode']]
        assert mrc, name                 # both planes carry the transfer
        assert all(int(r['frame.cap_len']) <= SNAPLEN for r in rows)
        assert all(r['mrc.dest_qp'] for r in mrc)   # the BTH fits the snap
    assert tcpdumps() == []


def test_capture_stops_when_the_run_fails(tmp_path):
    running = []

    def fail(line):     # the runner's first progress report, 1 s into the run
        if 'flows done' in line:
            running.extend(tcpdumps())
            raise RuntimeError('stop the run')
    # 10 MB over two 10 Mbit/s planes take ~4 s: the report comes first.
    with pytest.raises(RuntimeError, match='stop the run'):
        run_scenario(scenario(size_mb=10), tmp_path, progress=fail)
    assert len(running) == 3             # the capture was on when it failed
    assert tcpdumps() == []
