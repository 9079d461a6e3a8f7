"""The hardware an emulated fabric stands for, and how emulated time maps to it.

Everything that relates the emulator's clock to the hardware's lives here.
A profile names a NIC port's line rate, its MTU and the fabric's base RTT.
The emulated fabric keeps the profile's dimensionless ratio, the
bandwidth-delay product *in packets*: its base RTT holds as many of its
own packet times as the hardware's holds of the hardware's. Its links are
a few Mbit/s and carry no propagation delay (no netem here), so the
difference is added in the endpoints: each endpoint holds every packet it
receives for a one-way delay before it sees it (`SocketRuntime`'s delay
stage). The **time dilation** (emulated RTT / hardware RTT) turns any
emulated duration into the hardware time it stands for.

The default profile is the paper's fabric: NICs broken out into 8 x 100G
ports, one per plane, 4 KB MTU, and a base RTT of 13 us from the
cross-T1 point-to-point latency (6.54 us one way for a 2-byte message, so
about twice that for the round trip; a 4 KB packet adds 0.33 us per hop).
Source: Araujo et al., "Resilient AI Supercomputer Networking using MRC
and SRv6", arXiv:2605.04333, sections 2 and 5.2.1.

The RoCE baseline has profiles of its own, the NICs RoCE is deployed on:
one port per GPU, not broken out into planes, at RoCE's largest MTU, 4 KB.
`roce-400g` is Meta's RoCE training cluster ("400 Gbps interconnects
between GPUs", Grattafiori et al., "The Llama 3 Herd of Models",
arXiv:2407.21783, section 3.3.1); `roce-800g` is the paper's own 800G NIC
left as one port, the design it sets the 8 x 100G planes against (section
2). An RC QP keeps 160 and 320 packets in flight there, 4 and 8 times what
one 100G port of the MRC NIC keeps. Their base RTT is the paper fabric's
13.1 us, a lower bound: a single-plane fabric of the same size has more
tiers, so RC's real window is, if anything, larger.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    port_rate_bps: float     # one NIC port, i.e. one plane
    mtu: int                 # bytes of a full packet on the wire
    base_rtt_s: float        # longest path, unloaded, one MTU packet
    source: str

    @property
    def packet_s(self) -> float:
        return self.mtu * 8 / self.port_rate_bps

    @property
    def bdp_packets(self) -> float:
        """Full packets one port keeps in flight over the base RTT."""
        return self.base_rtt_s / self.packet_s


PAPER_FABRIC = HardwareProfile(
    'mrc-8x100g', port_rate_bps=100e9, mtu=4096, base_rtt_s=13.1e-6,
    source='arXiv:2605.04333 §2 (8x100G planes), §5.2.1 (6.54 us one way)')
ROCE_400G = HardwareProfile(
    'roce-400g', port_rate_bps=400e9, mtu=4096, base_rtt_s=13.1e-6,
    source='arXiv:2407.21783 §3.3.1 (400G RoCE per GPU); RTT as mrc-8x100g')
ROCE_800G = HardwareProfile(
    'roce-800g', port_rate_bps=800e9, mtu=4096, base_rtt_s=13.1e-6,
    source='arXiv:2605.04333 §2 (the 800G NIC as one port); RTT as mrc-8x100g')
ROCE_FABRICS = (ROCE_400G, ROCE_800G)
HARDWARE_PROFILES: dict[str, HardwareProfile] = {
    p.name: p for p in (PAPER_FABRIC, *ROCE_FABRICS)}


@dataclass(frozen=True)
class EmulatedTime:
    """One emulated fabric standing for `profile`."""
    profile: HardwareProfile
    base_rtt_s: float        # emulated, with the delay stage
    structural_rtt_s: float  # what the shaped links and endpoints give alone
    link_mtu: int = 1500     # the emulated links' (the profile's, unless the
                             # topology named another)

    @property
    def rx_delay_s(self) -> float:
        """What each endpoint holds a received packet for: half the added
        RTT, since both directions of a round trip are received once."""
        return (self.base_rtt_s - self.structural_rtt_s) / 2

    @property
    def dilation(self) -> float:
        return self.base_rtt_s / self.profile.base_rtt_s

    def rtts(self, emulated_s: float) -> float:
        return emulated_s / self.base_rtt_s

    def hardware_us(self, emulated_s: float) -> float:
        return emulated_s / self.dilation * 1e6

    def describe(self) -> dict:
        """For results: the profile and the mapping."""
        return {'profile': self.profile.name, 'source': self.profile.source,
                'hardware_base_rtt_us': round(self.profile.base_rtt_s * 1e6, 2),
                'bdp_packets': round(self.profile.bdp_packets, 1),
                'base_rtt_ms': round(self.base_rtt_s * 1e3, 2),
                'structural_rtt_ms': round(self.structural_rtt_s * 1e3, 2),
                'rx_delay_ms': round(self.rx_delay_s * 1e3, 2),
                'dilation': round(self.dilation),
                'mtu': self.profile.mtu, 'link_mtu': self.link_mtu}


def emulate(profile: HardwareProfile, packet_s: float,
            structural_rtt_s: float, link_mtu: int = 1500) -> EmulatedTime:
    """The emulated base RTT that holds the profile's BDP in packets of
    `packet_s` (one full packet's time on an emulated link of `link_mtu`
    bytes). Where the structure alone is already slower, nothing is added:
    that fabric keeps more packets in flight than the profile, and says so
    in `describe()` (rx_delay_ms 0)."""
    wanted = profile.bdp_packets * packet_s
    return EmulatedTime(profile, max(wanted, structural_rtt_s),
                        structural_rtt_s, link_mtu)
