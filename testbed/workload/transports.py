"""Every transport a scenario can run, in one table, and the interface
their drivers share.

The scenario schema (which names a file may list), the runner (which
driver to start), the command line and the interactive CLI (their
choices), the plots (one colour per transport) and the bench read the
transports from here. A driver is imported only when its transport runs,
so reading the table loads neither the endpoints nor the kernel flows.
"""
from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from testbed.kernel.congestion import DEFAULT_KERNEL_CC, KERNEL_CC
from testbed.nic.cc import registered_cc_algorithms
from testbed.nic.transport_config import DEFAULT_CC
from testbed.nic.transport_config import TRANSPORTS as NIC_TRANSPORTS

# Every fabric carries both modes (testbed.controller.usid_app): MRC's static
# SRv6 uSID source routes, and destination routing with ECMP groups that the
# controller repairs after a convergence delay, as RoCE is deployed. MRC
# needs source routes (its EVs name paths). MPTCP's subflows each take
# their own plane on either: every plane routes every address of a host
# (testbed.fabric.routed_tables.addresses_via).
FabricMode = Literal['srv6', 'routed']
FABRIC_MODES: tuple[FabricMode, ...] = ('srv6', 'routed')


class Driver(Protocol):
    """Flows of one transport on a running fabric, advanced by `poll()`
    from the runner's single thread."""
    plane_bytes: Mapping[int, int]          # data bytes sent per plane
    path_bytes: Mapping[str, int]           # ... per uSID carrier

    def prepare(self, flows: list[tuple[str, str, int]]) -> None:
        """Before the clock starts: (src, dst, size) of every flow."""

    def start(self, flow_id: int, src: str, dst: str, size: int) -> dict:
        """Start a flow; returns what it runs on, for the event log."""

    def poll(self, until: float | None = None) -> None:
        """Advance the flows until time.monotonic() reaches `until`, or
        sooner (a flow may have finished; the caller looks and calls
        again); one step of the driver's loop without `until`."""
    def delivered(self, flow_id: int) -> int: ...
    def status(self, flow_id: int) -> str: ...          # running|done|failed
    def error(self, flow_id: int) -> str | None: ...
    def corrupt_bytes(self, flow_id: int) -> int: ...
    def retransmitted_bytes(self) -> int: ...
    def ev_events(self) -> list[dict]: ...

    def send_losses(self) -> int:
        """Packets the driver's own sockets could not send for a reason
        outside the fabric's model (loss the health gate counts)."""

    def queueing_delay(self) -> tuple[list[int], float | None]:
        """The congestion controller's delay samples (a histogram in
        quarters of its target) and that target; ([], None) without."""

    def transport_counters(self) -> dict[str, int]:
        """The transport's own counters over the run, summed over its
        connections (packet timeouts, NACKs, ...); {} where it has none."""

    def deployed_ack_timer(self) -> dict | None:
        """The deployed ACK timer its QPs' timer stands for, compressed
        (testbed.nic.deployed_ack_timer); None where they run their own."""
    def close(self) -> None: ...


@dataclass(frozen=True)
class TransportInfo:
    name: str
    family: Literal['endpoint', 'kernel']   # ours (testbed.nic), or the kernel's
    pinned: bool            # one path per flow (what ECMP hashing gives it)
    colour: str             # in every plot
    doc: str
    driver_class: str       # module:class, imported when the transport runs
    fabrics: tuple[FabricMode, ...]   # the modes it can run on; the first
                                      # is its default unless a scenario says

    @property
    def fabric(self) -> FabricMode:
        return self.fabrics[0]

    @property
    def congestion_controls(self) -> tuple[str, ...]:
        """What a scenario may choose for it: our registered algorithms
        (testbed.nic.cc) for our endpoints, the kernel's for its own."""
        if self.family == 'endpoint':
            return tuple(registered_cc_algorithms())
        return tuple(sorted(KERNEL_CC))

    @property
    def default_cc(self) -> str:
        """Its congestion control unless a scenario chooses: as deployed
        (DEFAULT_CC), and CUBIC, as Linux ships, for the kernel's."""
        return DEFAULT_CC[self.name] if self.family == 'endpoint' else DEFAULT_KERNEL_CC

    @property
    def splits_over_qps(self) -> bool:
        """Whether a connection may keep several QPs, each flow split over
        them (NCCL_IB_QPS_PER_CONNECTION): our pinned QPs, RC and ECMP; an
        MRC QP spreads itself, and the kernel's connections are its own."""
        return self.family == 'endpoint' and self.pinned

    def driver(self, fab: Any, seed: int, fabric_mode: FabricMode | None = None,
               cc: str | None = None, timescale: Any = None,
               qps_per_connection: int = 1) -> Driver:
        """`fabric_mode`: None for the transport's default. `cc`: the
        congestion control it runs (None: its default). `timescale`:
        the hardware profile's EmulatedTime, which only our endpoints can
        apply (their delay stage; the kernel's would need netem on the
        links). `qps_per_connection`: more than 1 only where
        `splits_over_qps`."""
        if qps_per_connection != 1 and not self.splits_over_qps:
            raise ValueError('%s keeps one QP per connection' % self.name)
        module, name = self.driver_class.split(':')
        make = getattr(importlib.import_module(module), name)
        mode = fabric_mode or self.fabric
        cc = cc or self.default_cc
        if self.family == 'endpoint':
            return make(fab, self.name, seed, mode, cc=cc, timescale=timescale,
                        qps_per_connection=qps_per_connection)
        return make(fab, self.name, seed, mode, cc=cc)


_ENDPOINT = 'testbed.workload.endpoint_flows:EndpointFlows'
_KERNEL = 'testbed.kernel.flows:KernelFlows'
_ALL = (
    TransportInfo('mrc', 'endpoint', False, '#1b7837', 'MRC: every QP sprayed '
                  'over all paths of all planes, EVs steered by feedback',
                  _ENDPOINT, ('srv6',)),
    TransportInfo('rc', 'endpoint', True, '#b2182b', 'RoCE RC: one path per '
                  'QP, go-back-N, DCQCN, QP error when the retry budget runs '
                  'out', _ENDPOINT, ('routed', 'srv6')),
    TransportInfo('ecmp', 'endpoint', True, '#2166ac', "one hashed path per "
                  "QP, MRC's selective recovery, DCQCN", _ENDPOINT,
                  ('routed', 'srv6')),
    TransportInfo('tcp', 'kernel', True, '#762a83', "the kernel's TCP on one "
                  'hashed path', _KERNEL, ('routed', 'srv6')),
    TransportInfo('mptcp', 'kernel', False, '#e08214', "the kernel's MPTCP, "
                  'one subflow per plane', _KERNEL, ('routed', 'srv6')),
)
TRANSPORTS: Mapping[str, TransportInfo] = {t.name: t for t in _ALL}
NAMES: tuple[str, ...] = tuple(TRANSPORTS)
ENDPOINT_NAMES: tuple[str, ...] = tuple(
    t.name for t in _ALL if t.family == 'endpoint')
assert set(ENDPOINT_NAMES) == set(NIC_TRANSPORTS), 'the NIC runs these'


def transport(name: str) -> TransportInfo:
    if name not in TRANSPORTS:
        raise KeyError('unknown transport %r (known: %s)'
                       % (name, ', '.join(NAMES)))
    return TRANSPORTS[name]


def colour(name: str) -> str | None:
    info = TRANSPORTS.get(name)
    return info.colour if info else None
