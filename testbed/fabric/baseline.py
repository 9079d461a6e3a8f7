"""Whether a running fabric is as it was built: everything a run may leave on
a fabric that the next run would find lives here.

A fault leaves links down, tc filters (gray failures), nftables tables or
changed rates until it is undone (`FaultInjector.restore_all` undoes them);
the controller changes routed groups a convergence delay after each
port-status it hears, so a link brought back at the end of one run is
re-added to the groups during the next unless that run waits. `Baseline`
records what can be compared cheaply right after the build (every bridge's
flows and groups, every interface's admin and link state, the tc filters on
our links, our nftables tables); `settle` waits for the controller's last
repair and says what still differs.
"""
from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from pyroute2 import IPRoute
from pyroute2.netlink.exceptions import NetlinkError

from testbed.fabric.clean import our_nft_tables

# After its last group change OVS revalidates its datapath flows within its
# max-revalidator interval (500 ms by default).
REVALIDATE_S = 0.5
# A link brought up is reported by OVS within a poll of its link state (the
# netdev datapath reads netlink notifications; well under a second seen).
PORT_STATUS_S = 1.0
CLSACT_PARENTS = {'ingress': 0xFFFFFFF2, 'egress': 0xFFFFFFF3}
POLL_S = 0.5


@dataclass(frozen=True)
class FabricState:
    """What a fabric looks like at one moment, as far as a run can change it."""
    tables: dict[str, str]              # bridge -> its flows and groups, no counters
    interfaces: dict[str, str]          # OVS interface -> 'admin/link'
    filters: dict[str, int]             # 'device direction' -> tc filters there
    nft_tables: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, bridges: list[str], devices: list[str]) -> 'FabricState':
        return cls({br: _tables(br) for br in bridges}, _interfaces(),
                   _filters(devices), tuple(sorted(our_nft_tables())))

    def differences(self, now: 'FabricState') -> list[str]:
        """What differs in `now`, one line a kind of thing (empty: nothing)."""
        found = []
        for kind in ('tables', 'interfaces', 'filters'):
            before, after = getattr(self, kind), getattr(now, kind)
            changed = sorted(k for k in before.keys() | after.keys()
                             if before.get(k) != after.get(k))
            if changed:
                found.append('%s changed: %s' % (kind, ', '.join(changed[:8]) + (
                    ' and %d more' % (len(changed) - 8) if len(changed) > 8 else '')))
        if self.nft_tables != now.nft_tables:
            found.append('nftables tables: %s, were %s' % (now.nft_tables, self.nft_tables))
        return found


class Baseline:
    """A running fabric's state right after its build, and the wait for it."""

    def __init__(self, bridges: list[str], devices: list[str],
                 last_port_status: Callable[[], float | None],
                 convergence_delay_s: float) -> None:
        """`devices`: our links in the root namespace (switch ports, stages);
        `last_port_status`: when the controller last heard one (monotonic),
        None if never."""
        self.bridges, self.devices = bridges, devices
        self.last_port_status = last_port_status
        self.delay_s = convergence_delay_s
        self.state = self.now()

    def now(self) -> FabricState:
        return FabricState.of(self.bridges, self.devices)

    def settle(self, timeout_s: float | None = None) -> list[str]:
        """Wait until the controller has applied the last port-status it
        heard (its convergence delay after it, and OVS's revalidation) and
        the fabric is as built; at most `timeout_s` (default: a port-status
        to arrive, the delay and a revalidation, twice over). Returns what
        still differs then (empty: the fabric is as built)."""
        if timeout_s is None:
            timeout_s = 2 * (PORT_STATUS_S + self.delay_s + REVALIDATE_S)
        deadline = time.monotonic() + timeout_s
        time.sleep(PORT_STATUS_S)          # a restore's port-status, on its way
        while True:
            heard = self.last_port_status()
            quiet_at = -1.0 if heard is None else heard + self.delay_s + REVALIDATE_S
            now = time.monotonic()
            if now < quiet_at:
                if quiet_at >= deadline:
                    return self.state.differences(self.now()) + [
                        'the controller was still converging']
                time.sleep(quiet_at - now)
                continue
            found = self.state.differences(self.now())
            if not found or now >= deadline:
                return found
            time.sleep(POLL_S)


def _tables(bridge: str) -> str:
    """The bridge's flows and groups as ovs-ofctl prints them, counters off,
    in a stable order (OVS lists groups in its hash table's order, which a
    group's re-add changes), without the replies' headers."""
    lines = []
    for args in (['--no-stats', 'dump-flows'], ['dump-groups']):
        out = subprocess.run(['ovs-ofctl', '-O', 'OpenFlow15'] + args + [bridge],
                             capture_output=True, text=True, timeout=30).stdout
        lines += sorted(line.strip() for line in out.splitlines()
                        if line.startswith(' '))
    return '\n'.join(lines)


def _interfaces() -> dict[str, str]:
    out = subprocess.run(
        ['ovs-vsctl', '--timeout=30', '--format=csv', '--data=bare', '--no-headings',
         '--columns=name,admin_state,link_state', 'list', 'Interface'],
        capture_output=True, text=True, timeout=60).stdout
    rows = (line.split(',') for line in out.splitlines() if line)
    return {row[0]: '/'.join(row[1:]) for row in rows}


def _filters(devices: list[str]) -> dict[str, int]:
    """tc filters on each device's clsact hooks, counted (a gray failure's
    adds one; the switch-port program is one)."""
    counts = {}
    with IPRoute() as ipr:
        index = {link.get_attr('IFLA_IFNAME'): link['index'] for link in ipr.get_links()}
        for device in devices:
            if device not in index:
                continue
            for direction, parent in CLSACT_PARENTS.items():
                try:
                    found = ipr.get_filters(index=index[device], parent=parent)
                except NetlinkError:        # no clsact there: no filter
                    found = []
                counts['%s %s' % (device, direction)] = len(found)
    return counts
