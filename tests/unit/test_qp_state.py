"""QP state machine, attributes per transition and accepted operations."""

from __future__ import annotations

import errno
import json

import pytest

from testbed.nic.cc import CcProfile
from testbed.nic.completion import WcStatus, WrOpcode
from testbed.nic.endpoint import Endpoint
from testbed.nic.ev_table import EvTableConfig
from testbed.nic.loopback import make_paths
from testbed.nic.qp_state import QpError, QpState, RetryConfig, timeout_seconds

from testbed.nic.qp_pair import RKEY, make_pair

PATHS = make_paths("A", "B", 2, 2)
INIT = {"ev_table": EvTableConfig(active_count=4, backup_per_plane=1), "cc_profile": CcProfile()}
RTR = {"max_wimm_dest": 4, "mpr_dest": 2, "dest_addr": "B", "dest_qp": 0x100, "rq_psn": 5,
       "paths_by_plane": PATHS}
RTS = {"max_wimm": 4, "mpr": 2, "retry": RetryConfig(3, 2), "timeout": 10}


def fresh_qp(transport: str = "mrc"):
    return Endpoint("A", seed=3).create_qp(transport)


def qp_in(state: QpState):
    qp = fresh_qp()
    for step, attrs in ((QpState.INIT, INIT), (QpState.RTR, RTR), (QpState.RTS, RTS)):
        if qp.state is state:
            break
        qp.modify(step, **attrs)
    return qp


def refused(excinfo: pytest.ExceptionInfo, field: str | None = None) -> None:
    assert excinfo.value.code == errno.EINVAL
    assert str(excinfo.value).startswith("EINVAL")
    if field is not None:
        assert excinfo.value.field == field


def test_reset_to_rts_with_required_attributes() -> None:
    qp = fresh_qp()
    assert qp.state is QpState.RESET
    qp.modify("INIT", **INIT)
    qp.modify("RTR", **RTR)
    qp.modify("RTS", **RTS)
    assert qp.state is QpState.RTS
    assert qp.rts.sq_psn == qp.initial_psn            # default: the PSN it advertised
    assert qp.rts.timeout_s == pytest.approx(timeout_seconds(10))


@pytest.mark.parametrize("state", [QpState.RESET, QpState.INIT, QpState.RTR])
def test_post_before_rts_is_refused(state: QpState) -> None:
    qp = qp_in(state)
    with pytest.raises(QpError) as excinfo:
        qp.post_write(b"x", 0, RKEY)
    refused(excinfo, "state")


@pytest.mark.parametrize("target, attrs, missing", [
    (QpState.INIT, INIT, "ev_table"),
    (QpState.INIT, INIT, "cc_profile"),
    (QpState.RTR, RTR, "max_wimm_dest"),
    (QpState.RTR, RTR, "mpr_dest"),
    (QpState.RTR, RTR, "paths_by_plane"),
    (QpState.RTR, RTR, "dest_qp"),
    (QpState.RTS, RTS, "max_wimm"),
    (QpState.RTS, RTS, "mpr"),
    (QpState.RTS, RTS, "retry"),
    (QpState.RTS, RTS, "timeout"),
])
def test_missing_attribute_is_einval(target: QpState, attrs: dict, missing: str) -> None:
    previous = {QpState.INIT: QpState.RESET, QpState.RTR: QpState.INIT,
                QpState.RTS: QpState.RTR}[target]
    qp = qp_in(previous)
    with pytest.raises(QpError) as excinfo:
        qp.modify(target, **{k: v for k, v in attrs.items() if k != missing})
    refused(excinfo, missing)
    assert qp.state is previous


@pytest.mark.parametrize("attrs", [
    {"retry": (8, 0)}, {"retry": (0, 26)}, {"retry": {"linear_cnt": -1, "exp_cnt": 0}},
    {"retry": "forever"}, {"timeout": 25}, {"mpr": 0}, {"mpr": 256}, {"max_wimm": 1 << 16},
    {"timeout_s": 0.0},
])
def test_out_of_range_rts_attributes(attrs: dict) -> None:
    qp = qp_in(QpState.RTR)
    with pytest.raises(QpError) as excinfo:
        qp.modify(QpState.RTS, **{**RTS, **attrs})
    refused(excinfo)


@pytest.mark.parametrize("attrs", [{"mpr_dest": 0}, {"dest_qp": 0x2}, {"rq_psn": 1 << 24},
                                   {"paths_by_plane": {}}, {"pinned_path": (1, "nowhere")}])
def test_out_of_range_rtr_attributes(attrs: dict) -> None:
    qp = qp_in(QpState.INIT)
    with pytest.raises(QpError):
        qp.modify(QpState.RTR, **{**RTR, **attrs})


def test_retry_limits_follow_mrc_h() -> None:
    assert RetryConfig(7, 25).infinite
    assert RetryConfig(7, 24).budget == 31
    with pytest.raises(QpError):
        RetryConfig(8, 0)
    with pytest.raises(QpError):
        RetryConfig(0, 26)


@pytest.mark.parametrize("current, target", [
    (QpState.RESET, QpState.RTR), (QpState.RESET, QpState.RTS), (QpState.INIT, QpState.RTS),
    (QpState.RTS, QpState.INIT), (QpState.RTR, QpState.INIT),
])
def test_invalid_transitions(current: QpState, target: QpState) -> None:
    qp = qp_in(current)
    attrs = {QpState.INIT: INIT, QpState.RTR: RTR, QpState.RTS: RTS}[target]
    with pytest.raises(QpError) as excinfo:
        qp.modify(target, **attrs)
    refused(excinfo, "state")


@pytest.mark.parametrize("name", ["rnr_retry", "min_rnr_timer", "port", "alt_path", "retry_cnt"])
def test_verbs_attributes_mrc_does_not_support(name: str) -> None:
    qp = qp_in(QpState.RTR)
    with pytest.raises(QpError) as excinfo:
        qp.modify(QpState.RTS, **RTS, **{name: 1})
    refused(excinfo, name)


def test_unknown_attribute_refused() -> None:
    with pytest.raises(QpError):
        fresh_qp().modify(QpState.INIT, **INIT, colour="blue")


@pytest.mark.parametrize("state", list(QpState))
def test_error_and_reset_from_any_state(state: QpState) -> None:
    qp = qp_in(state) if state is not QpState.ERROR else qp_in(QpState.RTS)
    qp.modify(QpState.ERROR)
    assert qp.state is QpState.ERROR
    with pytest.raises(QpError):
        qp.post_write(b"x", 0, RKEY)
    qp.modify(QpState.RESET)
    assert qp.state is QpState.RESET and qp.requester is None
    qp.modify(QpState.INIT, **INIT)                   # usable again


def test_profiles_by_registered_id() -> None:
    ep = Endpoint("A")
    ep.register_ev_profile(0x1234, INIT["ev_table"])
    ep.register_cc_profile(0x99, CcProfile("none"))
    qp = ep.create_qp()
    qp.modify(QpState.INIT, ev_table=0x1234, cc_profile=0x99)
    assert qp.init.ev_table is INIT["ev_table"]
    other = ep.create_qp()
    with pytest.raises(QpError) as excinfo:
        other.modify(QpState.INIT, ev_table=0x4321, cc_profile=0x99)
    refused(excinfo, "ev_table")


@pytest.mark.parametrize("opcode", [WrOpcode.SEND, WrOpcode.SEND_WITH_IMM, WrOpcode.RDMA_READ,
                                    WrOpcode.ATOMIC_CMP_AND_SWP, WrOpcode.ATOMIC_FETCH_AND_ADD])
def test_only_write_opcodes_accepted(opcode: WrOpcode) -> None:
    qp = qp_in(QpState.RTS)
    with pytest.raises(QpError) as excinfo:
        qp.post_send(opcode, b"abc", 0, RKEY)
    refused(excinfo, "opcode")
    assert qp.requester.idle


def test_write_and_write_with_imm_accepted_and_checked() -> None:
    qp = qp_in(QpState.RTS)
    qp.post_send(WrOpcode.RDMA_WRITE, b"abc", 0, RKEY)
    qp.post_send(WrOpcode.RDMA_WRITE_WITH_IMM, b"abc", 0, RKEY, imm=5)
    with pytest.raises(QpError):
        qp.post_send(WrOpcode.RDMA_WRITE_WITH_IMM, b"abc", 0, RKEY)          # imm missing
    with pytest.raises(QpError):
        qp.post_send(WrOpcode.RDMA_WRITE, b"abc", 0, RKEY, imm=5)            # imm on WRITE
    with pytest.raises(ValueError):
        qp.post_send("SEND_FAST", b"abc", 0, RKEY)


def test_timeout_exponent_and_override() -> None:
    assert timeout_seconds(7) == pytest.approx(131.072e-6)
    assert timeout_seconds(24) == pytest.approx(17.18, rel=1e-3)
    qp = qp_in(QpState.RTR)
    qp.modify(QpState.RTS, **RTS, timeout_s=0.02)
    assert qp.requester.retry.base_s == 0.02


def test_local_info_exchange_and_stats_are_plain_json() -> None:
    pair = make_pair()
    info = pair.qa.local_info()
    assert json.loads(json.dumps(info)) == info
    assert info["qpn"] == pair.qa.qpn and pair.qb.rtr.dest_qp == info["qpn"]
    assert pair.qb.rtr.rq_psn == info["psn"]
    json.dumps(pair.a.stats())
    json.dumps(pair.qa.ev_snapshot())


def test_error_flushes_outstanding_work() -> None:
    pair = make_pair()
    pair.qb.post_recv(11)
    pair.qa.post_write(b"abc", 0, RKEY, wr_id=1)
    pair.qa.post_write(b"def", 0, RKEY, wr_id=2)
    pair.qa.modify(QpState.ERROR)
    pair.qb.modify(QpState.ERROR)
    wcs = pair.a.poll_cq() + pair.b.poll_cq()
    assert sorted(wc.wr_id for wc in wcs) == [1, 2, 11]
    assert all(wc.status is WcStatus.WR_FLUSH_ERR for wc in wcs)
