"""What every fault mechanism shares: the errors, a link's two ends as the
running fabric has them, how commands run in a namespace, and small helpers."""
from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

EventLog = Callable[[dict], None]
# Runs a command in a namespace (host pid, or None for root) -> stdout.
Runner = Callable[[int | None, list[str], str | None], str]
IFNAME = re.compile(r'^[A-Za-z0-9_.-]{1,15}$')
COMMAND_TIMEOUT_S = 10.0


class FaultError(ValueError):
    """A fault that names nothing in the fabric, has bad parameters, or
    could not be applied."""


class FaultUnavailable(FaultError):
    """The machine lacks what a fault needs (a tool or a kernel feature)."""

    def __init__(self, fault: str, missing: str, without: str) -> None:
        super().__init__('%s needs %s, which this machine does not have: %s'
                         % (fault, missing, without))
        self.fault = fault
        self.missing = missing


@dataclass(frozen=True)
class LinkEnd:
    node: str
    intf: str
    pid: int | None          # the host's namespace; None: the root namespace
    queue: str = ''          # where what it sends queues, when not on intf
                             # (an afxdp=1 fabric: testbed.fabric.port_stage)

    def where(self) -> str:
        return '%s (%s)' % (self.intf, 'root' if self.pid is None
                            else '%s netns' % self.node)

    def queue_end(self) -> LinkEnd:
        """The device whose egress (qdisc, tc hook) carries what this end
        sends: itself, or the stage in the root namespace."""
        return LinkEnd(self.node, self.queue, None) if self.queue else self


@dataclass(frozen=True)
class FabricLink:
    ends: tuple[LinkEnd, LinkEnd]

    @property
    def key(self) -> frozenset[str]:
        return frozenset(e.node for e in self.ends)

    @property
    def name(self) -> str:
        return '-'.join(sorted(self.key))

    def switch_ends(self) -> list[LinkEnd]:
        return [e for e in self.ends if e.pid is None]

    @property
    def staged(self) -> bool:
        """Built with a stage between its ends (afxdp=1: testbed.fabric.port_stage),
        which is where it is cut."""
        return all(e.queue for e in self.ends)


def _by_namespace(ends: Iterable[LinkEnd]) -> dict[int | None, list[LinkEnd]]:
    grouped: dict[int | None, list[LinkEnd]] = {}
    for end in ends:
        grouped.setdefault(end.pid, []).append(end)
    return grouped


def _clock() -> tuple[float, float]:
    return time.time(), time.monotonic()


def _alive(pid: int) -> bool:
    return os.path.exists('/proc/%d' % pid)


def _exists(end: LinkEnd) -> bool:
    """Whether the interface is still there (a stopped fabric took its
    links and namespaces with it)."""
    if end.pid is None:
        return os.path.exists('/sys/class/net/' + end.intf)
    return _alive(end.pid)


def _try(step: Callable[[], Any], what: str, errors: list[str]) -> None:
    """Run one undo step; a failure is noted and the next step still runs."""
    try:
        step()
    except Exception as err:  # noqa: BLE001 - restore_all must try everything
        errors.append('%s: %s' % (what, err))
