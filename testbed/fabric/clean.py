"""`mrc-testbed clean`: remove everything of ours, whatever state a crashed
or killed run left behind (like ``mn -c``, for the whole testbed)."""
from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import subprocess
import time

from testbed.fabric import cpu_placement, ovs, switch_port
from testbed.fabric.features import ovs_datapath
from testbed.fabric.packet_capture import TCPDUMP_MARK

# Command lines of processes that only the testbed starts.
OUR_PROCESSES = ('mininet:', '-m testbed.controller --', 'testbed.nic.agent',
                 '-m testbed.workload.unread_backlog', TCPDUMP_MARK)
OUR_NETNS_PREFIX = 'mrc'
OUR_NFT_PREFIX = 'mrc_'
WORKDIR_GLOB = '/tmp/mrc-fabric-*'
# Switch names of testbed/topologies/ and their ports: a run killed before it tagged
# its links leaves these untagged, and the stages of an afxdp=1 fabric's links
# (testbed.fabric.port_stage: a switch port's or a host port's name and 's').
OUR_LINK_NAME = re.compile(r'^(p\d+(c\d+|[ae]\d+x\d+|[ls]\d+)(-eth\d+s?)?|h\d+-p\d+s)$')


def our_processes() -> dict[int, str]:
    """pid -> command line of every process of ours."""
    found = {}
    for entry in os.listdir('/proc'):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open('/proc/%s/cmdline' % entry, 'rb') as f:
                cmdline = f.read().replace(b'\0', b' ').decode(errors='replace')
        except OSError:
            continue
        if any(mark in cmdline for mark in OUR_PROCESSES):
            found[int(entry)] = cmdline.strip()
    return found


def our_pids() -> list[int]:
    return list(our_processes())


def kill_processes() -> int:
    pids = our_pids()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and our_pids():
        time.sleep(0.05)
    return len(pids)


def our_netns() -> list[str]:
    out = subprocess.run(['ip', 'netns', 'list'], capture_output=True,
                         text=True).stdout
    return [line.split()[0] for line in out.splitlines()
            if line.startswith(OUR_NETNS_PREFIX)]


def our_nft_tables() -> list[tuple[str, str]]:
    if not shutil.which('nft'):
        return []
    out = subprocess.run(['nft', 'list', 'tables'], capture_output=True,
                         text=True).stdout
    tables = [tuple(line.split()[1:3]) for line in out.splitlines()
              if line.startswith('table ')]
    return [(fam, name) for fam, name in tables
            if name.startswith(OUR_NFT_PREFIX)]


def our_links() -> list[str]:
    """Links in our group, or named like our switches and their ports."""
    out = subprocess.run(['ip', '-o', 'link', 'show'], capture_output=True,
                         text=True).stdout
    names = []
    for line in out.splitlines():
        name = line.split(':')[1].strip().split('@')[0]
        if OUR_LINK_NAME.match(name) or ' group %d ' % ovs.LINK_GROUP in line:
            names.append(name)
    return names


def leftovers() -> dict[str, list]:
    """Everything of ours still on the machine (empty lists = spotless)."""
    return {'processes': ['%d %s' % kv for kv in our_processes().items()], 'bridges': ovs.list_bridges(ours_only=True),
            'links': our_links(), 'netns': our_netns(),
            'nft_tables': our_nft_tables(), 'workdirs': glob.glob(WORKDIR_GLOB),
            'bpf_pins': switch_port.leftover_pin_dirs(),
            'ovs_settings': sorted(ovs.saved_settings())}


def _ovs_up() -> bool:
    """Open vSwitch running, started if need be: a teardown cut short can
    leave ovsdb-server holding our bridges with ovs-vswitchd stopped, and
    then nothing deletes them (ovs-vsctl waits for ovs-vswitchd)."""
    try:
        ovs.ensure_running()
    except (RuntimeError, OSError):   # not installed, or will not start
        return False
    return True


def clean() -> dict[str, int]:
    """Remove all of it; returns how many of each kind were removed."""
    removed = {'processes': kill_processes()}
    bridges = ovs.list_bridges(ours_only=True) if _ovs_up() else []
    ovs.delete_bridges(bridges, ovs_datapath())
    removed['bridges'] = len(bridges)
    links = our_links()
    ovs.tag_links(links)
    ovs.delete_tagged_links()
    removed['links'] = len(links)
    namespaces = our_netns()
    for ns in namespaces:
        subprocess.run(['ip', 'netns', 'del', ns], capture_output=True)
    removed['netns'] = len(namespaces)
    tables = our_nft_tables()
    for family, name in tables:
        subprocess.run(['nft', 'delete', 'table', family, name],
                       capture_output=True)
    removed['nft_tables'] = len(tables)
    workdirs = glob.glob(WORKDIR_GLOB)
    # What a killed afxdp=1 fabric raised (testbed.fabric.cpu_placement), recorded there.
    removed['autogroups'] = cpu_placement.restore_recorded_autogroups(workdirs)
    for path in workdirs:
        shutil.rmtree(path, ignore_errors=True)
    removed['workdirs'] = len(workdirs)
    # After the links: the switch-port filters went with them, and the pins are all that
    # keeps the program alive (clean_pins also takes our filter off anything still here).
    removed['bpf_pins'] = switch_port.clean_pins()
    # What a fabric set in OVS (PMD settings, log levels of an afxdp=1 fabric).
    removed['ovs_settings'] = ovs.restore_settings() if _ovs_up() else 0
    return removed
