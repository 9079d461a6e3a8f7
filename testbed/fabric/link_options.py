"""Which link shaping a fabric gets, decided in one place from what the
kernel offers.

A topology spec may ask for more than HTB shaping (``bw=``): ``delay=<ms>``
(sch_netem) and ``ecn=1`` (sch_red marking ECN-capable packets at the shaped
rate). Mininet's TCLink applies whatever it is given and, when a qdisc is
missing, only logs a tc error per link: the fabric would come up without the
delay or the marking asked for, and every result would claim conditions that
never existed. So FabricNet resolves the options here first, from the same
feature detection `mrc-testbed doctor` prints, and an option this machine
cannot apply is refused before anything is built.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from testbed.fabric import features
from testbed.topologies.link_params import tc_link_params


@dataclass(frozen=True)
class LinkFeatures:
    """The kernel features link options depend on."""
    netem: bool
    red_ecn: bool

    @classmethod
    def detect(cls) -> LinkFeatures:
        return cls(netem=features.netem_available(),
                   red_ecn=features.red_ecn_available())


@dataclass(frozen=True)
class LinkRequest:
    """What a topology spec asks of every link."""
    bw_mbit: float | None = None
    delay_ms: float | None = None
    ecn: bool = False
    mtu: int | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, float | int]) -> LinkRequest:
        mtu = params.get('mtu')
        return cls(bw_mbit=params.get('bw') or None,
                   delay_ms=params.get('delay') or None,
                   ecn=bool(params.get('ecn')),
                   mtu=int(mtu) if mtu else None)

    def needs_qdiscs(self) -> bool:
        """Beyond HTB, which every kernel here has."""
        return self.delay_ms is not None or self.ecn


class LinkOptionError(ValueError):
    """Options that cannot work together, whatever the kernel."""


class FeatureMissing(RuntimeError):
    """A requested link option needs a feature this machine lacks."""

    def __init__(self, missing: list[tuple[str, str]]) -> None:
        self.missing = missing      # (spec option, doctor's feature name)
        super().__init__('; '.join(
            '%s needs %s, which this machine does not offer' % pair
            for pair in missing) + ' (see `mrc-testbed doctor`)')


# spec option, doctor's feature name, LinkFeatures field
_NEEDS = (('delay=', features.NETEM, 'netem'),
          ('ecn=1', features.RED_ECN, 'red_ecn'))


def missing_features(request: LinkRequest,
                     available: LinkFeatures) -> list[tuple[str, str]]:
    asked = {'delay=': request.delay_ms is not None, 'ecn=1': request.ecn}
    return [(option, name) for option, name, field in _NEEDS
            if asked[option] and not getattr(available, field)]


def tclink_kwargs(request: LinkRequest,
                  available: LinkFeatures) -> dict[str, Any]:
    """TCLink keyword arguments for every link ({} means plain veths), or
    LinkOptionError / FeatureMissing. Computed by the topologies' own
    tc_link_params, so these are exactly what the fabric's links get."""
    if request.ecn and request.bw_mbit is None:
        raise LinkOptionError('ecn=1 needs bw=: TCLink hangs RED under the '
                              'HTB class, so without a rate nothing marks')
    missing = missing_features(request, available)
    if missing:
        raise FeatureMissing(missing)
    return tc_link_params(request.bw_mbit, request.delay_ms, request.ecn,
                          request.mtu)


def resolve(params: Mapping[str, float | int],
            available: LinkFeatures | None = None) -> dict[str, Any]:
    """`tclink_kwargs` for a topology spec's parameters, judged against this
    machine unless `available` is given."""
    request = LinkRequest.from_params(params)
    if available is None:
        # Probing a qdisc makes a scratch namespace: only when one is asked
        # for. Without such options nothing below looks at the flags.
        available = (LinkFeatures.detect() if request.needs_qdiscs()
                     else LinkFeatures(netem=False, red_ecn=False))
    return tclink_kwargs(request, available)
