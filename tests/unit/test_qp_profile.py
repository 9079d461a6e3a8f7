"""Tests of the QP profile (testbed/nic/qp_profile.py): one set of defaults, checked when
made, applied by bring_up, and the same profile after a trip through JSON."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from testbed.nic.cc import CcProfile
from testbed.nic.emulated_timescale import base_rtt_s, emulated_qp_profile
from testbed.nic.endpoint import Endpoint, bring_up, connect
from testbed.nic.ev_table import EvState, EvTableConfig
from testbed.nic.loopback import make_paths
from testbed.nic.qp_profile import QpProfile
from testbed.nic.qp_state import RetryConfig, timeout_seconds
from testbed.nic.transport_config import TransportConfig


def through_json(profile: QpProfile) -> QpProfile:
    return QpProfile.from_json(json.loads(json.dumps(profile.to_json())))


def test_the_defaults() -> None:
    profile = QpProfile()
    assert profile.transport_config == TransportConfig()
    assert profile.ev_table == EvTableConfig() and profile.cc_profile == CcProfile()
    limits = (profile.max_wimm_dest, profile.mpr_dest, profile.max_wimm, profile.mpr)
    assert limits == (64, 8, 64, 8)
    assert profile.retry == RetryConfig(linear_cnt=7, exp_cnt=7) and profile.timeout == 14
    assert profile.timeout_s is profile.pinned_path is profile.sq_psn is None
    assert not profile.dynamic_mpr and not profile.dynamic_mpr_dest


@pytest.mark.parametrize("profile", [
    QpProfile(),
    emulated_qp_profile(),
    emulated_qp_profile(20e6, base_rtt_s(10e6, 6)),                   # NSCC with its config
    QpProfile(pinned_path=(2, "carrier"), sq_psn=0xFFFFFF, dynamic_mpr=True,
              dynamic_mpr_dest=True, timeout_s=0.25,
              ev_table=EvTableConfig(event_mask=frozenset({EvState.GOOD}), ev_id_base=1 << 20,
                                       first_probe_delay_s=0.5, backup_promotion="random")),
], ids=["defaults", "emulated", "emulated-nscc", "everything-set"])
def test_json_round_trip(profile: QpProfile) -> None:
    assert through_json(profile) == profile


def test_from_json_fills_defaults_and_refuses_unknown_fields() -> None:
    assert QpProfile.from_json({"mpr": 2}) == QpProfile(mpr=2)
    with pytest.raises(ValueError, match="unknown field.*link_rate_bps"):
        QpProfile.from_json({"link_rate_bps": 1e6})


@pytest.mark.parametrize("fields, message", [
    ({"mpr": 0}, "mpr must be an integer in \\[1, 255\\]"),
    ({"max_wimm": 1 << 16}, "max_wimm must be"),
    ({"timeout": 25}, "timeout must be"),
    ({"timeout_s": 0}, "timeout_s must be > 0"),
    ({"sq_psn": 1 << 24}, "sq_psn must be"),
    ({"pinned_path": (1,)}, "pinned_path must be"),
    ({"retry": (7, 7)}, "retry must be a RetryConfig"),
    ({"cc_profile": "uet-1.0-nscc"}, "cc_profile must be a CcProfile"),
    ({"dynamic_mpr": 1}, "dynamic_mpr must be a bool"),
])
def test_a_bad_field_is_refused_where_it_is_written(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=f"QpProfile: {message}"):
        QpProfile(**fields)


def test_connect_brings_both_sides_up_with_the_profile() -> None:
    a, b = Endpoint("A"), Endpoint("B")
    profile = QpProfile(mpr=2, mpr_dest=3, max_wimm=5, timeout=10,
                        transport_config=TransportConfig(ack_every=4))
    qa, qb = connect(a, b, make_paths("A", "B", 2, 4), make_paths("B", "A", 2, 4), "mrc",
                     profile, psn_a=7)
    for qp in (qa, qb):
        assert (qp.rts.mpr, qp.rtr.mpr_dest, qp.rts.max_wimm) == (2, 3, 5)
        assert qp.rts.timeout_s == timeout_seconds(10) and qp.config.ack_every == 4
    assert qa.rts.sq_psn == 7 and qb.rtr.rq_psn == 7


def test_a_pinned_rc_qp_takes_its_path_from_the_profile() -> None:
    a, b = Endpoint("A"), Endpoint("B")
    paths_ab = make_paths("A", "B", 2, 4)
    qa = a.create_qp("rc")
    qb = b.create_qp("rc")
    bring_up(qa, qb.local_info(), paths_ab, replace(QpProfile(), pinned_path=(2, paths_ab[2][1])))
    assert (qa.pinned_route.plane, qa.pinned_route.path) == (2, paths_ab[2][1])
