"""Flows over the kernel's own TCP and MPTCP: the same driver interface as
`endpoint_flows.EndpointFlows`, for the scenario runner."""
from __future__ import annotations

import time
from collections import Counter

from testbed.fabric.net import FabricNet
from testbed.kernel.congestion import DEFAULT_KERNEL_CC
from testbed.kernel.transports import FlowHandle, KernelTransports

POLL_WAIT_S = 0.001


class KernelFlows:
    def __init__(self, fab: FabricNet, transport: str, seed: int = 0,
                 fabric_mode: str = 'srv6', cc: str = DEFAULT_KERNEL_CC) -> None:
        # `seed` for the driver interface: the kernel picks its own ports.
        # `cc`: the kernel's TCP congestion control (testbed.kernel.congestion).
        self.transport = transport
        self.kernel = KernelTransports(fab, congestion=cc,
                                       routed=fabric_mode == 'routed')
        self.handles: dict[int, FlowHandle] = {}

    def prepare(self, flows: list[tuple[str, str, int]]) -> None:
        """Connections are opened per flow, as an application would; MPTCP
        path-manager endpoints are set up before the clock starts."""
        if self.transport == 'mptcp':
            self.kernel.prepare_mptcp({h for src, dst, _ in flows
                                       for h in (src, dst)})

    def start(self, flow_id: int, src: str, dst: str, size: int) -> dict:
        handle = self.kernel.start_flow(src, dst, size, self.transport)
        self.handles[flow_id] = handle
        paths = {p: x.carrier for p, x in handle.paths.items()}
        if self.transport == 'tcp' and paths:
            plane, carrier = next(iter(paths.items()))
            return {'pinned_path': {'plane': plane, 'path': carrier}}
        return {'pinned_path': None, 'paths': paths}

    def poll(self, until: float | None = None) -> None:
        """One round of the sockets, waiting at most POLL_WAIT_S and not
        past `until`: each round reads every socket's progress, so the
        caller's loop calls again."""
        wait = POLL_WAIT_S if until is None else min(POLL_WAIT_S, until - time.monotonic())
        self.kernel.poll(timeout_s=max(0.0, wait))

    def delivered(self, flow_id: int) -> int:
        return self.handles[flow_id].delivered_bytes

    def status(self, flow_id: int) -> str:
        return self.handles[flow_id].status

    def error(self, flow_id: int) -> str | None:
        return self.handles[flow_id].error

    def corrupt_bytes(self, flow_id: int) -> int:
        """Kernel streams are checked by hash: a mismatch is the whole flow."""
        h = self.handles[flow_id]
        if h.status != 'done' or h.sha256_sent == h.sha256_received:
            return 0
        return h.size_bytes

    @property
    def plane_bytes(self) -> Counter[int]:
        return Counter(self.kernel.plane_bytes())

    @property
    def path_bytes(self) -> dict[str, int]:
        return self.kernel.path_bytes()

    def retransmitted_bytes(self) -> int:
        return self.kernel.retransmitted_bytes()

    def ev_events(self) -> list[dict]:
        return []

    def send_losses(self) -> int:
        return 0           # the kernel's own stacks: nothing sent by us

    def queueing_delay(self) -> tuple[list[int], float | None]:
        return [], None            # the kernel's CC keeps its own counsel

    def transport_counters(self) -> dict[str, int]:
        return {}

    def deployed_ack_timer(self) -> dict | None:
        return None                # the kernel's retransmission timer is its own

    def close(self) -> None:
        self.kernel.close()
