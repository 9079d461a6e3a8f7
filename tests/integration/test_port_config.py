"""OpenFlow port config over the bridges' management sockets: what
port_config.set_forwarding sets is what OVS reports, and a bad port is a
clear error, not a silent no-op."""
from __future__ import annotations

import re
import subprocess

import pytest

from testbed.fabric.port_config import PortConfigError, set_forwarding

LEAF_SPINE = 'leafspine,leaves=2,spines=2,hosts=1,planes=1'


def no_fwd_ports(bridge: str) -> set[str]:
    """The ports `ovs-ofctl show` lists with NO_FWD in their config."""
    out = subprocess.run(['ovs-ofctl', '-O', 'OpenFlow13', 'show', bridge],
                         capture_output=True, text=True, check=True).stdout
    ports, current = set(), None
    for line in out.splitlines():
        if m := re.match(r'^\s*\d+\((\S+)\):', line):
            current = m.group(1)
        elif 'config:' in line and 'NO_FWD' in line and current:
            ports.add(current)
    return ports


def test_forwarding_turns_off_and_on_as_ovs_reports(fabric_factory):
    fabric_factory(LEAF_SPINE)
    ports = [('p1l0', 'p1l0-eth1'), ('p1l0', 'p1l0-eth2'), ('p1s0', 'p1s0-eth1')]
    assert no_fwd_ports('p1l0') == set() and no_fwd_ports('p1s0') == set()
    set_forwarding(ports, False)
    assert no_fwd_ports('p1l0') == {'p1l0-eth1', 'p1l0-eth2'}
    assert no_fwd_ports('p1s0') == {'p1s0-eth1'}
    set_forwarding(ports, True)
    assert no_fwd_ports('p1l0') == set() and no_fwd_ports('p1s0') == set()


def test_a_port_ovs_does_not_have_is_an_error(fabric_factory):
    fabric_factory(LEAF_SPINE)
    with pytest.raises(PortConfigError, match='p1l0-eth99'):
        set_forwarding([('p1l0', 'p1l0-eth99')], False)
