"""MPTCP's in-kernel path manager, set up per host: one `subflow`
endpoint per plane, limits raised, and both put back as they were."""
from __future__ import annotations

from testbed.fabric.netns import inside, write_sysctl
from testbed.fabric.usid_plan import HostPort
from testbed.kernel.routes import ip_in

MPTCP_MAX_SUBFLOWS = 8              # the kernel's cap on extra subflows
ENDPOINT_ID_BASE = 200              # our MPTCP endpoint ids: 200 + plane


def mptcp_limits(pid: int) -> dict[str, int]:
    """`ip mptcp limits` as {'subflows': n, 'add_addr_accepted': n}
    (iproute2 6.1 has no JSON output for it)."""
    words = ip_in(pid, 'mptcp', 'limits', 'show').split()
    return {k: int(v) for k, v in zip(words[::2], words[1::2])}


class _MptcpHost:
    """A host's in-kernel MPTCP path manager, set up for one subflow per
    plane: every plane's address is a `subflow` endpoint bound to its port
    (a sender opens a subflow from each, except the one its initial subflow
    already uses), nothing is announced or accepted from announcements.
    Undone by restore().

    Why not `signal` endpoints on the receiver: a host is often sender and
    receiver at once, so it would announce as a sender too, and a receiver
    accepting that announcement opens its own join towards the sender's
    ephemeral port; that join holds the receiver's subflow quota and the
    sender's real join is rejected (MPJoinRejected, seen here). A receiver's
    own `subflow` endpoints fail at once instead (each is bound to a port
    with no route to the sender's initial address: MPJoinSynTxCreatSkErr
    or ...ConnectErr), and the subflow limit is the kernel's maximum so
    such an attempt cannot crowd out a join: the endpoints alone bound a
    sender to one subflow per plane."""

    def __init__(self, pid: int, ports: list[HostPort]) -> None:
        self.pid = pid
        self.ports = ports
        self.saved_limits: dict[str, int] | None = None
        self.endpoint_ids: list[int] = []

    def enable(self) -> None:
        with inside(self.pid):
            write_sysctl('net.mptcp.enabled', 1)
        self.saved_limits = mptcp_limits(self.pid)
        ip_in(self.pid, 'mptcp', 'limits', 'set', 'subflow',
              str(MPTCP_MAX_SUBFLOWS), 'add_addr_accepted', '0')
        for port in self.ports:
            endpoint_id = ENDPOINT_ID_BASE + port.plane
            ip_in(self.pid, 'mptcp', 'endpoint', 'add', port.address, 'dev',
                  port.intf, 'id', str(endpoint_id), 'subflow')
            self.endpoint_ids.append(endpoint_id)

    def restore(self) -> None:
        for endpoint_id in self.endpoint_ids:
            ip_in(self.pid, 'mptcp', 'endpoint', 'delete', 'id',
                  str(endpoint_id))
        self.endpoint_ids.clear()
        if self.saved_limits is not None:
            ip_in(self.pid, 'mptcp', 'limits', 'set', 'subflow',
                  str(self.saved_limits['subflows']), 'add_addr_accepted',
                  str(self.saved_limits['add_addr_accepted']))
            self.saved_limits = None
