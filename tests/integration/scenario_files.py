"""Scenario files the integration tests write: the default scenario's
mechanisms on a fabric that builds in seconds."""
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / 'scenarios/link_failure_allreduce.yaml'
# Two hosts on two leaves of one plane, two spines: 10 switch ports, AF_XDP
# ones where the default scenario's would be (afxdp=auto), the same MTU.
TINY_TOPOLOGY = 'leafspine,leaves=2,spines=2,hosts=1,planes=1,mtu=3500,afxdp=auto'


def tiny_default(tmp_path: Path, iterations_times: int = 1) -> Path:
    """The default scenario (a ring all-reduce, a link down and up again, its
    transports, its quick form) on TINY_TOPOLOGY: what a command does with a
    run (signals, exit codes, the run lock) is the same, its fabric builds
    in a few seconds instead of 30-110. `iterations_times` lengthens the
    quick form's workload."""
    scenario = yaml.safe_load(DEFAULT.read_text())
    scenario['name'] = 'tiny_' + scenario['name']
    scenario['description'] = ('The default scenario on two hosts of a small '
                               'leaf-spine (a test\'s)')
    scenario['topology'] = TINY_TOPOLOGY
    scenario['workload']['hosts'] = ['h1', 'h2']
    scenario['quick']['workload']['iterations'] *= iterations_times
    for faults in (scenario['faults'], scenario['quick']['faults']):
        for fault in faults:
            fault['link'] = ['p1l0', 'p1s0']
    path = tmp_path / 'tiny_default.yaml'
    path.write_text(yaml.safe_dump(scenario))
    return path
