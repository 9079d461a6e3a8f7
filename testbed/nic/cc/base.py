"""What a congestion controller is, and how a CC profile picks one by name.

Everything that affects which controller a QPCC runs lives here: the interface a QP
needs from a controller (``CongestionControl``), the registry of algorithms by the
algorithm string of the OCP control API (``register_cc``), and the one configuration
object that selects one (``CcProfile``), validated against the registry when it is made.

A config type is a dataclass of plain values, so that a profile travels as JSON
(``CcProfile.to_json`` / ``from_json``) to an agent in another process.

A controller module registers itself at its foot, as aioquic's congestion controllers
do: ``register_cc(NAME, factory, config_type=ConfigClass)``. The package's __init__
imports every built-in controller module, which is what registers it; adding an
algorithm (DCQCN, say) touches its own module and that one import line, nothing else.
The registry is a module global rather than something an Endpoint holds because an
algorithm string means the same controller everywhere in the process, as on a NIC.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

NULL_ALGORITHM = "none"
"""mrc_ctl.h: a NULL algorithm disables CC; "none" is its name here (None is accepted)."""

RCV_CWND_PEN_MAX = 127   # rcv_cwnd_pen is a 7-bit field of the SACK's CC_STATE


class CcConfigError(ValueError):
    """A CC profile names an unknown algorithm, or gives it the wrong configuration."""


class CongestionControl(Protocol):
    """What an MRC QP needs from its QPCC's congestion controller.

    ``limits_sending`` is the controller's declaration of whether can_send() may ever
    say no or ack_request() ever say yes: when it is false, the QP's send path skips
    both calls (and on_send's window bookkeeping is all that is left of the controller
    per packet), which is what keeps an unlimited controller free.

    ``paces`` declares a rate-based controller (DCQCN): the QP sends a data packet only
    once ``now >= next_send_time()``, tells it of every transmission (``on_transmit``,
    new or retransmitted, as a NIC's rate limiter sees them) and wakes at that time.
    ``on_cnp`` is a congestion notification packet from the peer's notification point;
    a controller that does not read CNPs ignores it.
    """

    limits_sending: bool
    paces: bool

    @property
    def cwnd(self) -> float: ...

    @property
    def inflight(self) -> int: ...

    def can_send(self, nbytes: int) -> bool: ...

    def on_send(self, nbytes: int, now: float) -> None: ...

    def on_ack(self, acked_bytes: int, rtt_s: float | None, ecn: bool, now: float,
               service_time_s: float = 0.0, retransmitted: bool = False,
               rcv_cwnd_pen: int = 0, restore_cwnd: bool = False) -> None: ...

    def on_trim(self, nbytes: int, now: float, last_hop: bool,
                rtt_s: float | None = None, retransmitted: bool = False) -> None: ...

    def on_loss(self, nbytes: int, now: float) -> None: ...

    def on_receiver_penalty(self, pen: int, now: float, acked_bytes: int = 0,
                            restore: bool = False) -> bool: ...

    def ack_request(self, ack_gen_trigger: int = 0) -> bool: ...

    def next_send_time(self) -> float: ...

    def on_transmit(self, nbytes: int, now: float) -> None: ...

    def on_cnp(self, now: float) -> None: ...

    def stats(self) -> dict[str, float | int | bool | None]: ...


class Unpaced:
    """The rate-based part of CongestionControl for a controller without it: it never
    paces and does not read CNPs (NSCC reads ECN from SACKs; NULL reads nothing)."""

    paces = False

    def next_send_time(self) -> float:
        return -math.inf

    def on_transmit(self, nbytes: int, now: float) -> None:
        """Never called: the QP asks only a controller that paces."""

    def on_cnp(self, now: float) -> None:
        """A CNP carries nothing this controller reads."""


class Unlimited:
    """The window part of CongestionControl for a controller without a window (NULL,
    and the rate-based DCQCN): it tracks what is in flight and counts events for stats,
    never limits, and reads no receiver penalty. A subclass sets ``counters`` (with sent_bytes, acks, acked_bytes,
    trim_count, last_hop_trim_count, loss_count) and ``_inflight``."""

    limits_sending = False
    counters: Any
    _inflight: int

    @property
    def cwnd(self) -> float:
        return math.inf

    @property
    def inflight(self) -> int:
        return self._inflight

    def stats(self) -> dict[str, float | int | bool | None]:
        state: dict[str, float | int | bool | None] = {
            "cwnd": math.inf, "inflight": self._inflight}
        state.update(asdict(self.counters))
        return state

    def can_send(self, nbytes: int) -> bool:
        return True

    def on_send(self, nbytes: int, now: float) -> None:
        if type(nbytes) is not int or nbytes < 0:     # per packet: test inline, raise there
            check_bytes("nbytes", nbytes)
        self._inflight += nbytes
        self.counters.sent_bytes += nbytes

    def ack_request(self, ack_gen_trigger: int = 0) -> bool:
        return False

    def on_ack(self, acked_bytes: int, rtt_s: float | None, ecn: bool, now: float,
               service_time_s: float = 0.0, retransmitted: bool = False,
               rcv_cwnd_pen: int = 0, restore_cwnd: bool = False) -> None:
        if type(acked_bytes) is not int or acked_bytes < 0:   # per SACK: test inline
            check_bytes("acked_bytes", acked_bytes)
        self._inflight -= acked_bytes
        self.counters.acks += 1
        self.counters.acked_bytes += acked_bytes

    def on_trim(self, nbytes: int, now: float, last_hop: bool,
                rtt_s: float | None = None, retransmitted: bool = False) -> None:
        check_bytes("nbytes", nbytes)
        self._inflight -= nbytes
        self.counters.trim_count += 1
        self.counters.last_hop_trim_count += int(last_hop)

    def on_loss(self, nbytes: int, now: float) -> None:
        check_bytes("nbytes", nbytes)
        self._inflight -= nbytes
        self.counters.loss_count += 1

    def on_receiver_penalty(self, pen: int, now: float, acked_bytes: int = 0,
                            restore: bool = False) -> bool:
        check_penalty(pen)
        return False


class CcFactory(Protocol):
    """Makes a controller from its profile's config (None for an algorithm that takes none)."""

    def __call__(self, config: Any, *, now: float, initial_cwnd: int | None,
                 base_rtt_floor_s: float | None) -> CongestionControl: ...


FabricDefaults = Callable[..., Any]
"""(line rate bit/s, base RTT s, MTU, trimming, *, ack_timeout_s) -> the algorithm's config
for that fabric; ack_timeout_s (the QP's local ACK timeout, or None) is for a controller
whose slowest rate must stay within it."""


@dataclass(frozen=True)
class CcAlgorithm:
    """One registered algorithm: its name, how to make it, the config it takes, how
    its defaults follow from a fabric (None: it takes no config), and whether the
    switches mark its packets on the last hop too (RoCE's ECN marking does, at every
    egress queue; NSCC's fabric leaves the last hop to trimming: docs/switch-port.md)."""

    name: str
    factory: CcFactory
    config_type: type | None      # None: the algorithm takes no config
    defaults: FabricDefaults | None = None
    marks_last_hop: bool = False


_ALGORITHMS: dict[str, CcAlgorithm] = {}


def register_cc(name: str, factory: CcFactory, *, config_type: type | None = None,
                defaults: FabricDefaults | None = None, marks_last_hop: bool = False) -> None:
    """Make ``name`` selectable by a CcProfile; a name registers once. ``defaults`` makes
    the config it runs with on a given fabric (CcProfile.for_fabric)."""
    if name in _ALGORITHMS:
        raise CcConfigError(f"CC algorithm {name!r} is already registered")
    _ALGORITHMS[name] = CcAlgorithm(name, factory, config_type, defaults, marks_last_hop)


def cc_algorithm(name: str) -> CcAlgorithm:
    """The registered algorithm called ``name``; an unknown name names the known ones."""
    algorithm = _ALGORITHMS.get(name)
    if algorithm is None:
        raise CcConfigError(f"CcProfile.algorithm: unknown {name!r}; "
                            f"registered: {', '.join(registered_cc_algorithms())}")
    return algorithm


def registered_cc_algorithms() -> list[str]:
    return sorted(_ALGORITHMS)


@dataclass(frozen=True)
class CcProfile:
    """An MRC CC profile: algorithm string plus its algorithm-specific config.

    ``algorithm`` None is the NULL algorithm of mrc_ctl.h and is stored as "none".
    """

    algorithm: str | None = NULL_ALGORITHM
    config: Any = None

    def __post_init__(self) -> None:
        if self.algorithm is None:
            object.__setattr__(self, "algorithm", NULL_ALGORITHM)
        wanted = cc_algorithm(self.algorithm or NULL_ALGORITHM).config_type
        if wanted is None and self.config is not None:
            raise CcConfigError(f"CcProfile.config: algorithm {self.algorithm!r} takes no "
                                f"config, got {self.config!r}")
        if wanted is not None and not isinstance(self.config, wanted):
            raise CcConfigError(f"CcProfile.config: algorithm {self.algorithm!r} needs a "
                                f"{wanted.__name__}, got {self.config!r}")

    @property
    def enabled(self) -> bool:
        return self.algorithm != NULL_ALGORITHM

    @property
    def cnp_interval_s(self) -> float | None:
        """The notification point's CNP pacing when the algorithm's reaction point reads
        CNPs (its config has a ``cnp_interval_s``), else None: the peer sends no CNPs."""
        return getattr(self.config, "cnp_interval_s", None)

    @classmethod
    def for_fabric(cls, algorithm: str, link_rate_bps: float, base_rtt_s: float, mtu: int,
                   trimming: bool, ack_timeout_s: float | None = None) -> CcProfile:
        """`algorithm` with its defaults for a fabric of this line rate and base RTT, for
        a QP with this local ACK timeout."""
        chosen = cc_algorithm(algorithm)
        if chosen.config_type is None:
            return cls(algorithm)
        if chosen.defaults is None:
            raise CcConfigError(f"CC algorithm {algorithm!r} has no defaults for a fabric")
        return cls(algorithm, chosen.defaults(link_rate_bps, base_rtt_s, mtu, trimming,
                                              ack_timeout_s=ack_timeout_s))

    def to_json(self) -> dict[str, Any]:
        return {"algorithm": self.algorithm,
                "config": None if self.config is None else asdict(self.config)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CcProfile:
        algorithm = data.get("algorithm", NULL_ALGORITHM)
        config = data.get("config")
        if config is not None:
            config_type = cc_algorithm(algorithm or NULL_ALGORITHM).config_type
            if config_type is not None:
                config = config_type(**config)
        return cls(algorithm, config)


def make_cc(profile: CcProfile, now: float = 0.0, initial_cwnd: int | None = None,
            base_rtt_floor_s: float | None = None) -> CongestionControl:
    """The controller a QPCC bound to ``profile`` runs."""
    assert profile.algorithm is not None  # CcProfile stores None as NULL_ALGORITHM
    return cc_algorithm(profile.algorithm).factory(
        profile.config, now=now, initial_cwnd=initial_cwnd, base_rtt_floor_s=base_rtt_floor_s)


def check_bytes(name: str, nbytes: int) -> None:
    """The byte-count argument check every controller's hooks make."""
    if type(nbytes) is int and nbytes >= 0:
        return                        # the per-packet case, settled by one test
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError(f"{name}: must be a non-negative int, got {nbytes!r}")


def check_penalty(pen: int) -> None:
    """The rcv_cwnd_pen argument check every controller's on_receiver_penalty makes."""
    if type(pen) is int and 0 <= pen <= RCV_CWND_PEN_MAX:
        return                        # the per-SACK case, settled by one test
    if isinstance(pen, bool) or not isinstance(pen, int) or not 0 <= pen <= RCV_CWND_PEN_MAX:
        raise ValueError(f"rcv_cwnd_pen: must be an int in [0, {RCV_CWND_PEN_MAX}], got {pen!r}")
