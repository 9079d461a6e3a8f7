"""Congestion signals on a running fabric: the switch-port program
(`switch_port`) on every shaped switch port, with the strict-priority HTB it
steers trimmed and control packets into.

Everything that decides whether and how the fabric signals congestion lives
here: the spec keys (``mark=0|1``, ``trim=0|1``, ``mark_kb=``, ``trim_kb=``),
the default thresholds, which port is a last hop, and the counters read
after a run. MRC's split (Sohan et al., arXiv:2606.18170 §II-C; Araujo et
al., arXiv:2605.04333 §2.1):
congestion is signalled (ECN marks, trimmed headers), silence means failure.

Defaults, on a fabric shaped to R bit/s whose NSCC target queueing delay is
T (UEC: 0.75 × the base RTT when the fabric trims; `emulated_timescale`):

- a port marks CE once its queue holds more than R × T: NSCC's whole-path
  target waiting at this one hop, so a marked packet has met as much
  queueing as NSCC tolerates. Not less: a port loaded to 90 % by sprayed
  packets holds about 4 packets of queue with no congestion at all (M/D/1:
  rho^2 / (2 (1 - rho))), a count that is the same on every timescale,
  while R × T in packets grows with the bandwidth-delay product. On
  hardware (100 Gbit/s, 13 us) half the target is ~40 frames of 1,500 B;
  at this fabric's 3 Mbit/s it is 3.4, and set there nearly every packet
  of an 8-host permutation was marked (1.7 marks per packet), NSCC held
  its windows (ECN with delay below target) and MRC reached 72-74 % of line
  rate against 81-82 % at R × T (the payload ceiling with SACKs is 86 %),
  with trims down from ~340 to ~50 per run (fat-tree k=4, 2 planes,
  bench load_balance, 2 repetitions each; the 7->1 incast on the
  leaf-spine kept its victim at 98 % either way);
- it trims data packets once its queue holds more than 2 × R × T: a packet
  would wait twice NSCC's target at this hop alone, which only an incast or
  a burst NSCC has not yet answered makes, and a header that comes back as
  a NACK within an RTT beats a drop found by a timeout;
- ECN is off on the last hop into a host, as in MRC deployments ("ECN ...
  enabled on all but the last hop", Araujo et al. §2.1): an incast at the
  receiver's port is not path congestion, so it must not steer EVs; trims
  there are TRIMMED_LASTHOP, which retransmit without touching the EV.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from pyroute2 import IPRoute

from testbed.fabric import features
from testbed.fabric.link_options import FeatureMissing, LinkOptionError
from testbed.fabric.switch_port import (PortConfig, SwitchPortError,
                                        SwitchPortProgram,
                                        set_priority_htb_rate,
                                        setup_priority_htb_many)
from testbed.nic.emulated_timescale import ETHERNET_HEADER_LEN, MTU, nscc_target_s

SPEC_FLAGS = ('mark', 'trim', 'mark_last')
SPEC_KB = ('mark_kb', 'trim_kb')
MARK_TARGET_FRACTION = 1.0
TRIM_TARGET_MULTIPLE = 2.0
ROOT_PARENT = 0xFFFFFFFF                 # TC_H_ROOT


@dataclass(frozen=True)
class PortInfo:
    """A switch port: its switch, the node at the other end of its link, and
    the device where what it sends queues (the port itself, or on an AF_XDP
    fabric the stage in front of the peer: testbed.fabric.port_stage)."""
    switch: str
    peer: str
    last_hop: bool               # the peer is a host
    queue: str = ''              # '' : the port itself


@dataclass(frozen=True)
class SignalSettings:
    """What the switch ports do; thresholds in bytes of queue."""
    mark: bool
    trim: bool
    mark_bytes: int
    trim_bytes: int
    # MRC's fabric leaves the last hop into a host unmarked, so a last-hop
    # incast does not read as path congestion (docs/switch-port.md); a RoCE
    # fabric marks there too, where DCQCN's incast bottleneck is.
    mark_last_hop: bool = False

    @property
    def on(self) -> bool:
        return self.mark or self.trim

    def describe(self) -> dict:
        return {'ecn_marking': self.mark, 'trimming': self.trim,
                'mark_threshold_bytes': self.mark_bytes if self.mark else None,
                'mark_last_hop': self.mark and self.mark_last_hop,
                'trim_threshold_bytes': self.trim_bytes if self.trim else None}


def default_thresholds(rate_bps: float, path_links: int,
                       mtu: int = MTU) -> tuple[int, int]:
    """(mark, trim) bytes for a port at `rate_bps` on links of `mtu`
    (module docstring)."""
    queue_at_target = rate_bps / 8 * nscc_target_s(rate_bps, path_links,
                                                   trimming=True, mtu=mtu)
    return (round(MARK_TARGET_FRACTION * queue_at_target),
            round(TRIM_TARGET_MULTIPLE * queue_at_target))


def settings_from_spec(params: Mapping[str, float | int],
                       path_links: int) -> SignalSettings | None:
    """The fabric's signalling from its spec, None on an unshaped fabric
    (a virtual queue needs the port's rate). Marking and trimming are on
    unless the spec turns them off."""
    rate_mbit = params.get('bw')
    if not rate_mbit:
        return None
    mark, trim = default_thresholds(float(rate_mbit) * 1e6, path_links,
                                    int(params.get('mtu', MTU)))
    return SignalSettings(
        mark=bool(params.get('mark', 1)), trim=bool(params.get('trim', 1)),
        mark_bytes=round(params['mark_kb'] * 1000) if 'mark_kb' in params
        else mark,
        trim_bytes=round(params['trim_kb'] * 1000) if 'trim_kb' in params
        else trim,
        mark_last_hop=bool(params.get('mark_last', 0)))


def asked_for(params: Mapping[str, float | int]) -> bool:
    """Whether the spec itself asks for a signal (then a machine that cannot
    run the program refuses the fabric instead of building it without)."""
    return any(params.get(k) for k in SPEC_FLAGS) or any(
        k in params for k in SPEC_KB)


def resolve(params: Mapping[str, float | int], path_links: int,
            missing: Callable[[], list[str]] = features.switch_port_missing
            ) -> tuple[SignalSettings | None, list[str]]:
    """(what the switch ports will do, None for nothing; what is missing for
    the signals this fabric would have had). A spec that asks for a signal
    this machine or fabric cannot give is refused."""
    if asked_for(params) and not params.get('bw'):
        raise LinkOptionError('mark=, trim=, mark_kb= and trim_kb= need bw=: '
                              "a switch port's virtual queue drains at its "
                              'rate')
    settings = settings_from_spec(params, path_links)
    if settings is None or not settings.on:
        return settings, []
    lacking = missing()
    if lacking and asked_for(params):
        raise FeatureMissing([('mark=/trim=', name) for name in lacking])
    return (None, lacking) if lacking else (settings, [])


def port_config(s: SignalSettings, rate_bps: int, last_hop: bool) -> PortConfig:
    """What one switch port's program does."""
    return PortConfig(
        rate_bps=rate_bps, last_hop=last_hop,
        mark_threshold=s.mark_bytes if s.mark and (
            s.mark_last_hop or not last_hop) else None,
        trim_threshold=s.trim_bytes if s.trim else None)


class SignallingPorts:
    """The program on every switch port of one running fabric."""

    def __init__(self, tag: str, settings: SignalSettings, rate_bps: float,
                 ports: Mapping[str, PortInfo], mtu: int = MTU) -> None:
        """`ports`: every switch-side interface (all in the root namespace),
        on links of `mtu` bytes."""
        self.settings = settings
        self.rate_bps = int(rate_bps)
        self.ports = dict(ports)
        # port -> the device its queue, HTB and program are on, and back
        self.queues = {port: info.queue or port for port, info in self.ports.items()}
        self._port_of = {queue: port for port, queue in self.queues.items()}
        self.quantum_bytes = mtu + ETHERNET_HEADER_LEN     # one full frame
        self.program: SwitchPortProgram | None = SwitchPortProgram(tag)
        try:
            setup_priority_htb_many(list(self.queues.values()), self.rate_bps,
                                    quantum_bytes=self.quantum_bytes)
            self.program.attach_many({self.queues[port]: self._config(port, self.rate_bps)
                                      for port in self.ports})
        except BaseException:
            self.stop()
            raise

    def _config(self, intf: str, rate_bps: int) -> PortConfig:
        return port_config(self.settings, rate_bps, self.ports[intf].last_hop)

    def mark_last_hop(self, on: bool) -> None:
        """Mark the last hop into a host too, or not (a RoCE fabric's marks
        against MRC's: SignalSettings.mark_last_hop), from now on; the ports'
        queues and counters carry on."""
        assert self.program is not None
        if on == self.settings.mark_last_hop:
            return
        self.settings = replace(self.settings, mark_last_hop=on)
        program = self.program
        program.configure_many({
            self.queues[port]: self._config(port, program.config(self.queues[port]).rate_bps)
            for port, info in self.ports.items() if info.last_hop})

    def handles(self, intf: str) -> bool:
        return intf in self.ports

    def set_rate(self, intf: str, rate_bps: float) -> None:
        """A rate change on a signalling port: the HTB classes and the
        virtual queue both drain at the new rate."""
        assert self.program is not None
        queue = self.queues[intf]
        set_priority_htb_rate(queue, int(rate_bps), quantum_bytes=self.quantum_bytes)
        self.program.set_rate(queue, int(rate_bps))

    def counters(self, queues: bool = True) -> dict[str, dict[str, int]]:
        """Per port: the program's counters and, with `queues`, what the real
        (HTB) queue behind it dropped: one netlink dump for every port, so
        that costs milliseconds, not a process per port."""
        assert self.program is not None
        found = self.program.all_counters()
        if queues:
            drops = _root_qdisc_drops()
            for device, row in found.items():
                row['queue_drops'] = drops.get(device, 0)
        return {self._port_of.get(device, device): row for device, row in found.items()}

    def stop(self) -> None:
        """Unload and unpin (the ports go with the fabric's links)."""
        if self.program is not None:
            try:
                self.program.unload()
            except SwitchPortError:
                pass            # the links are already gone with the fabric
            self.program = None


def _root_qdisc_drops() -> dict[str, int]:
    """Interface -> packets its root qdisc (the HTB and its leaves) dropped,
    for every interface of this namespace, from one dump of each kind."""
    with IPRoute() as ipr:
        names = {link['index']: link.get_attr('IFLA_IFNAME')
                 for link in ipr.get_links()}
        drops = {}
        for qdisc in ipr.get_qdiscs():
            if qdisc['parent'] == ROOT_PARENT and qdisc['index'] in names:
                stats = qdisc.get_attr('TCA_STATS2')
                queue = stats.get_attr('TCA_STATS_QUEUE') if stats else None
                drops[names[qdisc['index']]] = queue['drops'] if queue else 0
    return drops
