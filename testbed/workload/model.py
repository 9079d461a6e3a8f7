"""The data model of an experiment: what a scenario file says, and the
flows its workload becomes. Plain frozen dataclasses, nothing else: the
loader (`scenario`), the workload builders (`workloads`) and the htsim
format (`connection_matrix`) all import from here, never from each other's
data.

Sizes: ``size_mb`` is in MB of 10^6 bytes, as htsim's matrices count them.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from mininet.topo import Topo

from testbed.fabric.faults.catalogue import last_step_at
from testbed.fabric.topo_spec import TopoSpec, parse_topo_spec
from testbed.fabric.usid_plan import FabricPlan
from testbed.workload.transports import transport as transport_info

MB = 1_000_000


@dataclass(frozen=True)
class Flow:
    """One message from src to dst. `start_s` delays it after its phase
    begins (only connection matrices use it; phase 0 begins at t=0)."""
    id: int
    src: str
    dst: str
    size_bytes: int
    label: str = ''
    start_s: float = 0.0


@dataclass(frozen=True)
class Workload:
    kind: str
    phases: tuple[tuple[Flow, ...], ...]
    steps: tuple[range, ...]        # phase indexes of each measured step

    def __iter__(self) -> Iterator[tuple[Flow, ...]]:
        return iter(self.phases)

    def __len__(self) -> int:
        return len(self.phases)

    def __getitem__(self, index: int) -> tuple[Flow, ...]:
        return self.phases[index]

    @property
    def flows(self) -> tuple[Flow, ...]:
        return tuple(f for phase in self.phases for f in phase)

    @property
    def total_bytes(self) -> int:
        return sum(f.size_bytes for f in self.flows)



# -- htsim connection matrices (testbed.workload.connection_matrix) --------

@dataclass(frozen=True)
class CmConnection:
    """One ``src->dst`` line. `start_us` is None for a triggered flow."""
    src: int
    dst: int
    size: int
    id: int = 0
    start_us: float | None = None
    trigger: int = 0
    send_done_trigger: int = 0
    recv_done_trigger: int = 0
    prio: int | None = None
    msg: int | None = None          # uet-htsim: 'msg' alone reads as msg 0
    addon: bool = False


@dataclass(frozen=True)
class CmTrigger:
    id: int
    kind: str                       # oneshot | multishot | barrier
    count: int = 0                  # barrier: signals needed to fire


@dataclass(frozen=True)
class ConnectionMatrix:
    nodes: int
    connections: tuple[CmConnection, ...]
    triggers: tuple[CmTrigger, ...] = ()
    failures: tuple[str, ...] = field(default=())   # verbatim lines



# -- scenarios (testbed.workload.scenario loads them) ------------------------

@dataclass(frozen=True)
class Victim:
    """An innocent flow next to an incast: its dst shares the receiver's
    last-hop switch."""
    src: str
    dst: str
    size_mb: float

    @property
    def size_bytes(self) -> int:
        return round(self.size_mb * MB)


@dataclass(frozen=True)
class WorkloadSpec:
    """One dataclass for every workload type; parameters a type does not
    take keep their defaults. Lists as written: empty `hosts` means every
    host of the topology; `file` is resolved to an absolute path and
    `matrix` holds its parsed content."""
    type: str
    size_mb: float = 0.0
    src: str | None = None
    dst: str | None = None
    count: int = 1
    hosts: tuple[str, ...] = ()
    receiver: str | None = None
    senders: tuple[str, ...] = ()
    fan_in: int | None = None
    victim: Victim | None = None
    iterations: int = 1
    file: str | None = None
    matrix: ConnectionMatrix | None = field(default=None, repr=False)

    @property
    def size_bytes(self) -> int:
        return round(self.size_mb * MB)


class Fault:
    """One fault of a scenario: its kind (a `catalogue.FAULT_KINDS` name),
    when, and its parameters as the scenario names them (``link`` is a
    pair of node names, ``switch`` a name, ...). Immutable and hashable.
    A link_flap is one fault: the injector applies its steps."""
    __slots__ = ('kind', 'at', '_params')

    def __init__(self, kind: str, at: float, **params: Any) -> None:
        object.__setattr__(self, 'kind', kind)
        object.__setattr__(self, 'at', at)
        object.__setattr__(self, '_params', tuple(sorted(params.items())))

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError('Fault is immutable')

    @property
    def params(self) -> dict[str, Any]:
        return dict(self._params)

    def get(self, name: str) -> Any:
        return self.params.get(name)

    @property
    def end(self) -> float:
        """When the fault's last change happens (a flap's last up)."""
        return last_step_at(self.kind, self.at, self.params)

    def describe(self) -> str:
        params = self.params
        target = ' '.join(
            '-'.join(v) if k == 'link' else ('plane %s' % v if k == 'plane'
                                             else str(v))
            for k, v in params.items() if k in ('link', 'switch', 'host',
                                                'plane'))
        extra = ''.join(' %s=%g' % (k, v) for k, v in params.items()
                        if k not in ('link', 'switch', 'host', 'plane'))
        return '%s %s%s at %g s' % (self.kind, target, extra, self.at)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fault) and (
            self.kind, self.at, self._params) == (other.kind, other.at,
                                                  other._params)

    def __hash__(self) -> int:
        return hash((self.kind, self.at, self._params))

    def __repr__(self) -> str:
        return 'Fault(%r, %g%s)' % (self.kind, self.at, ''.join(
            ', %s=%r' % kv for kv in self._params))


@dataclass(frozen=True)
class CaptureSpec:
    """A scenario's `capture:`: pcaps of these links and host NIC ports (docs/scenarios.md)."""
    links: tuple[tuple[str, str], ...] = ()     # captured on the first node's interface
    hosts: tuple[str, ...] = ()                 # every NIC port of each host
    snaplen: int = 256                          # bytes kept of each frame


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    topology: str                       # canonical spec, without bw=
    link_rate_mbit: float
    transports: tuple[str, ...]
    workload: WorkloadSpec
    faults: tuple[Fault, ...]           # in file order
    duration_s: float
    fabric_modes: tuple[tuple[str, str], ...] = ()   # overrides, by transport
    convergence_delay_s: float | None = None          # None: the fabric's default
    seed: int = 1
    repetitions: int = 1
    source_path: str = ''
    source_text: str = field(default='', repr=False)
    is_quick: bool = False
    quick: 'Scenario | None' = field(default=None, repr=False, compare=False)
    capture: CaptureSpec | None = None
    hardware: str | None = None         # a hardware_profile name; None: none
    cc: tuple[tuple[str, str], ...] = ()  # (transport, algorithm) the file chose
    qps_per_connection: tuple[tuple[str, int], ...] = ()   # (transport, QPs) chosen

    def qps_of(self, transport: str) -> int:
        """QPs per connection of `transport`: the file's choice, else NCCL's
        default, 1 (NCCL_IB_QPS_PER_CONNECTION; testbed.workload.endpoint_flows)."""
        return dict(self.qps_per_connection).get(transport, 1)

    def cc_of(self, transport: str) -> str:
        """The congestion control `transport` runs: the file's choice, else
        the transport's default (testbed.workload.transports)."""
        return dict(self.cc).get(transport) or transport_info(transport).default_cc

    def fabric_mode(self, transport: str) -> str | None:
        """The scenario's fabric mode for a transport; None: its default."""
        return dict(self.fabric_modes).get(transport)

    def quick_version(self) -> 'Scenario':
        """The `quick` overrides applied (already validated at load); the
        scenario itself when it has no quick section."""
        return self.quick or self

    @property
    def topo_spec(self) -> TopoSpec:
        return parse_topo_spec(self.topology)

    @property
    def shaped_topology(self) -> str:
        """The spec with every link shaped: what the fabric is built from."""
        return '%s,bw=%g' % (self.topology, self.link_rate_mbit)

    def plan(self) -> FabricPlan:
        return fabric_of(self.topology).plan

    @property
    def hosts(self) -> tuple[str, ...]:
        return fabric_of(self.topology).plan.hosts

    def timeline(self) -> tuple[Fault, ...]:
        """The faults by time; faults at the same time keep file order."""
        return tuple(sorted(self.faults, key=lambda f: f.at))


@dataclass(frozen=True)
class FabricOf:
    topo: Topo
    plan: FabricPlan

    def nodes(self) -> set[str]:
        return set(self.topo.nodes())

    def neighbours(self, node: str) -> list[str]:
        return sorted({b if a == node else a for a, b in self.topo.links()
                       if node in (a, b)})


@lru_cache(maxsize=16)
def fabric_of(topology: str) -> FabricOf:
    """Topo and plan for a canonical spec; cached because every scenario
    (and its quick form) asks again, and both are immutable in use."""
    topo = parse_topo_spec(topology).build()
    return FabricOf(topo, FabricPlan.from_topo(topo))
