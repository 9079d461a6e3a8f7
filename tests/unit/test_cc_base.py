"""Tests of the congestion-control registry and CC profiles (testbed/nic/cc/base.py)."""

from __future__ import annotations

import pytest

from testbed.nic.cc import base
from testbed.nic.cc import (
    NSCC_ALGORITHM,
    NULL_ALGORITHM,
    CcConfigError,
    CcProfile,
    Nscc,
    NsccConfig,
    NullCc,
    make_cc,
    register_cc,
    registered_cc_algorithms,
)

MTU = 4096
DC = NsccConfig.defaults(100e9, 10e-6, MTU, trimming=True)


class FixedWindow:
    """A stand-in for a controller a later module registers."""

    limits_sending = True

    def __init__(self, window: int) -> None:
        self.window = window


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of the registry for the test to add to, so other tests never see its names."""
    monkeypatch.setattr(base, "_ALGORITHMS", dict(base._ALGORITHMS))


def test_built_in_algorithms_are_registered_under_their_control_api_names() -> None:
    assert registered_cc_algorithms() == ["dcqcn", "dcqcn-nic", "none", "uet-1.0-nscc"]
    assert NSCC_ALGORITHM == "uet-1.0-nscc" and NULL_ALGORITHM == "none"


def test_nscc_profile_gives_nscc() -> None:
    cc = make_cc(CcProfile(NSCC_ALGORITHM, DC), now=5.0)
    assert isinstance(cc, Nscc) and cc.limits_sending
    assert cc.cwnd == DC.max_cwnd                  # UEC: cwnd starts at MaxWnd
    assert cc.config is DC
    assert CcProfile(NSCC_ALGORITHM, DC).enabled and not CcProfile().enabled


@pytest.mark.parametrize("algorithm", [None, "none"])
def test_null_profile_gives_the_null_controller(algorithm: str | None) -> None:
    profile = CcProfile(algorithm)
    assert profile == CcProfile() and profile.algorithm == NULL_ALGORITHM
    cc = make_cc(profile)
    assert isinstance(cc, NullCc) and not cc.limits_sending


def test_unknown_algorithm_is_refused_with_the_known_ones() -> None:
    with pytest.raises(CcConfigError,
                       match=r"CcProfile.algorithm: unknown 'mrc-smtrk-1.00'; "
                             r"registered: dcqcn, dcqcn-nic, none, uet-1.0-nscc"):
        CcProfile("mrc-smtrk-1.00", DC)


def test_config_must_be_what_the_algorithm_takes() -> None:
    with pytest.raises(CcConfigError, match="CcProfile.config: .* needs a NsccConfig"):
        CcProfile(NSCC_ALGORITHM)
    with pytest.raises(CcConfigError, match="CcProfile.config: .* needs a NsccConfig"):
        CcProfile(NSCC_ALGORITHM, {"max_cwnd": 1})
    with pytest.raises(CcConfigError, match="CcProfile.config: algorithm 'none' takes no config"):
        CcProfile(NULL_ALGORITHM, DC)


def test_a_registered_algorithm_is_selected_by_its_profile(registry: None) -> None:
    register_cc("fixed-window",
                lambda config, *, now, initial_cwnd, base_rtt_floor_s: FixedWindow(config),
                config_type=int)
    assert "fixed-window" in registered_cc_algorithms()
    cc = make_cc(CcProfile("fixed-window", 3 * MTU))
    assert isinstance(cc, FixedWindow) and cc.window == 3 * MTU
    with pytest.raises(CcConfigError, match="needs a int"):
        CcProfile("fixed-window")


def test_a_name_registers_once(registry: None) -> None:
    with pytest.raises(CcConfigError, match="already registered"):
        register_cc(NSCC_ALGORITHM, lambda config, **_: NullCc())


def test_a_fabric_profile_is_the_algorithms_registered_defaults() -> None:
    profile = CcProfile.for_fabric(NSCC_ALGORITHM, 100e9, 10e-6, MTU, trimming=True)
    assert profile == CcProfile(NSCC_ALGORITHM, DC)
    assert CcProfile.for_fabric(NULL_ALGORITHM, 100e9, 10e-6, MTU, True) == CcProfile()
    assert profile.cnp_interval_s is None      # NSCC reads no CNPs: its peer sends none


def test_an_algorithm_without_fabric_defaults_says_so(registry: None) -> None:
    register_cc("fixed-window", lambda config, **_: FixedWindow(config), config_type=int)
    with pytest.raises(CcConfigError, match="no defaults for a fabric"):
        CcProfile.for_fabric("fixed-window", 100e9, 10e-6, MTU, True)


@pytest.mark.parametrize("algorithm", [NSCC_ALGORITHM, NULL_ALGORITHM])
def test_window_controllers_never_pace(algorithm: str) -> None:
    cc = make_cc(CcProfile.for_fabric(algorithm, 100e9, 10e-6, MTU, True))
    assert not cc.paces and cc.next_send_time() == float("-inf")
    cc.on_cnp(0.0)                              # read by nobody: changes nothing
    assert cc.stats() == make_cc(CcProfile.for_fabric(algorithm, 100e9, 10e-6, MTU,
                                                      True)).stats()
