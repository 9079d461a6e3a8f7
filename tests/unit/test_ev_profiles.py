"""EV format profiles, EV profiles, their lifecycle, EV operations, SRv6 carriers, GEN.

Rules follow mrc_ctl.h of github.com/opencomputeproject/OCP-Multipath-Reliable-Connection;
choices where it is silent are listed in the docstring of testbed/nic/ev_profiles.py.
"""

from __future__ import annotations

import errno
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from ipaddress import IPv6Address
from itertools import product

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testbed.mrc_ctl.ev_profiles import (
    EV_OP_F_ALL_COPIES,
    EV_STATE_BITS,
    EV_UNPOPULATED,
    PROFILE_TRANSITIONS,
    DeviceCaps,
    EvEntry,
    EvField,
    EvFormat,
    EvFormatProfile,
    EvMode,
    EvOp,
    EvOpEntry,
    EvProfile,
    EvState,
    FmtMode,
    ProfileError,
    ProfileState,
    Srv6Carrier,
    gen_bounds,
    generate_evs,
    mask_bits,
    mask_states,
    srv6_carrier,
    srv6_ev_from_carrier,
    srv6_ev_from_usids,
)

INIT, OFFLINE, ONLINE = ProfileState.INIT, ProfileState.OFFLINE, ProfileState.ONLINE
GOOD, BAD, DENIED = EvState.GOOD, EvState.ASSUMED_BAD, EvState.DENIED
WATCH = frozenset({EvState.GOOD, EvState.ASSUMED_BAD})

SRV6_WIDTHS = (32, 16, 16, 16, 16)
# Worked example B: fixed locator, four tier-tagged uSIDs with 4 EV bits each.
SRV6_FIELDS = (EvField.fixed(32, 0x13131313),) + tuple(
    EvField(16, k << 8, 1, 0xF, 0x000F) for k in range(1, 5)
)
# 32 + 6x16 DA, 32 + 2x16 SRH segment (the C sample's SRv6+SRH scenario).
SRH_WIDTHS = (32, 16, 16, 16, 16, 16, 16, 32, 16, 16)
SRH_FIELDS = (
    (EvField.fixed(32, 0xCAFECAFE),)
    + (EvField(16, mask=0xFFFF),) * 6
    + (EvField.fixed(32, 0xDECAFBAD),)
    + (EvField(16, mask=0xFFFF),) * 2
)


@contextmanager
def raises(code: int, match: str | None = None) -> Iterator[pytest.ExceptionInfo[ProfileError]]:
    """pytest.raises for ProfileError that also checks the errno code."""
    with pytest.raises(ProfileError, match=match) as caught:
        yield caught
    assert caught.value.code == code, caught.value


def fmt_profile(
    mode: FmtMode = FmtMode.SRV6,
    widths: tuple[int, ...] = SRV6_WIDTHS,
    caps: DeviceCaps | None = None,
    state: ProfileState = ONLINE,
) -> EvFormatProfile:
    profile = EvFormatProfile(100, caps)
    profile.modify(state=OFFLINE, mode=mode, fmt_fields=widths)
    if state is ONLINE:
        profile.modify(state=ONLINE)
    return profile


def offline_profile(
    mode: EvMode = EvMode.EXP,
    count: int = 8,
    caps: DeviceCaps | None = None,
    fields: tuple[EvField, ...] = SRV6_FIELDS,
    fmt: EvFormatProfile | None = None,
    profile_id: int = 7,
) -> EvProfile:
    profile = EvProfile(profile_id, caps)
    profile.modify(
        state=OFFLINE,
        mode=mode,
        fmt_profile=fmt or fmt_profile(caps=caps),
        ev_count=count,
        fields=fields,
    )
    return profile


def distinct_evs(count: int, ports: tuple[int, ...] = tuple(range(1, 9))) -> list[EvEntry]:
    """Distinct 16-bit compact EVs, ports round-robin."""
    return [EvEntry.from_bits(i + 1, 16, ports[i % len(ports)]) for i in range(count)]


def populate(profile: EvProfile) -> list[EvEntry]:
    evs = distinct_evs(profile.ev_count, profile.caps.ports)
    result = profile.ev_op(EvOp.REPLACE_EV, [EvOpEntry(EV_UNPOPULATED, ev) for ev in evs])
    result.raise_for_error()
    return evs


def online_profile(caps: DeviceCaps | None = None, mode: EvMode = EvMode.EXP) -> EvProfile:
    profile = offline_profile(mode=mode, caps=caps)
    if mode is EvMode.EXP:
        populate(profile)
    profile.modify(state=ONLINE, min_active=2, event_mask=WATCH)
    return profile


CAP_ONLINE = DeviceCaps(ev_profile_modify_online=True)


# ------------------------------------------------------------------ formats


@pytest.mark.parametrize(
    ("mode", "limit"), [(FmtMode.STEV, 32), (FmtMode.UDP, 16), (FmtMode.SRV6, 256)]
)
def test_format_total_width_limit_per_mode(mode: FmtMode, limit: int) -> None:
    assert EvFormat(mode, (8,) * (limit // 8)).total_width == limit
    with raises(errno.E2BIG, "fmt_fields"):
        EvFormat(mode, (8,) * (limit // 8) + (1,))


def test_srv6_without_srh_is_one_destination_address() -> None:
    caps = DeviceCaps(srv6_srh=False)
    fmt_profile(widths=(32,) + (16,) * 6, caps=caps)
    with raises(errno.E2BIG, "128 bits"):
        fmt_profile(widths=SRH_WIDTHS, caps=caps)


@pytest.mark.parametrize("widths", [(), (0,), (16, 256), (16, True)])
def test_format_field_widths_must_be_1_to_255(widths: tuple[int, ...]) -> None:
    with raises(errno.EINVAL, "fmt_fields"):
        EvFormat(FmtMode.SRV6, widths)


def test_format_profile_lifecycle() -> None:
    profile = EvFormatProfile(1)
    profile.modify(state=OFFLINE, mode=FmtMode.STEV)
    profile.modify(fmt_fields=(16, 16))
    profile.modify(state=ONLINE)
    assert profile.fmt == EvFormat(FmtMode.STEV, (16, 16))
    profile.modify(state=OFFLINE)
    profile.modify(state=INIT)
    assert (profile.state, profile.mode, profile.widths) == (INIT, None, None)


def test_format_profile_offline_needs_mode() -> None:
    with raises(errno.EINVAL, "needs mode"):
        EvFormatProfile(1).modify(state=OFFLINE, fmt_fields=(16, 16))


def test_format_profile_online_needs_fields() -> None:
    profile = EvFormatProfile(1)
    profile.modify(state=OFFLINE, mode=FmtMode.STEV)
    with raises(errno.EINVAL, "needs fmt_fields"):
        profile.modify(state=ONLINE)


def test_format_profile_refuses_changes_while_online() -> None:
    profile = fmt_profile()
    with raises(errno.EINVAL, "ONLINE"):
        profile.modify(fmt_fields=(32, 16))
    with raises(errno.EINVAL, "ONLINE -> INIT"):
        profile.modify(state=INIT)


def test_format_profile_refuses_unsupported_mode() -> None:
    profile = EvFormatProfile(1, DeviceCaps(ev_fmt_mode_mask=FmtMode.STEV))
    with raises(errno.EINVAL, "SRV6 is not supported"):
        profile.modify(state=OFFLINE, mode=FmtMode.SRV6)


def test_format_profile_is_busy_while_an_ev_profile_using_it_is_online() -> None:
    fmt = fmt_profile()
    ev_profile = offline_profile(fmt=fmt)
    populate(ev_profile)
    ev_profile.modify(state=ONLINE, min_active=1, event_mask=WATCH)
    with raises(errno.EBUSY, "ONLINE EV profile"):
        fmt.modify(state=OFFLINE)
    ev_profile.modify(state=OFFLINE)
    fmt.modify(state=OFFLINE)


def test_format_query_fields_e2big_reports_needed_size() -> None:
    profile = fmt_profile()
    with raises(errno.E2BIG) as caught:
        profile.query_fields(capacity=2)
    assert caught.value.needed == 5
    assert profile.query_fields(capacity=5) == SRV6_WIDTHS


# ------------------------------------------------------------------ lifecycle


def profile_in(state: ProfileState) -> EvProfile:
    if state is INIT:
        return EvProfile(7)
    return offline_profile() if state is OFFLINE else online_profile()


@pytest.mark.parametrize(
    ("start", "target"), [(a, b) for a, b in product(ProfileState, repeat=2) if a is not b]
)
def test_every_state_transition(start: ProfileState, target: ProfileState) -> None:
    profile = profile_in(start)
    if (start, target) in PROFILE_TRANSITIONS:
        if start is INIT:
            profile.modify(
                state=target, mode=EvMode.EXP, fmt_profile=fmt_profile(), ev_count=8,
                fields=SRV6_FIELDS,
            )
        elif target is ONLINE:
            populate(profile)
            profile.modify(state=target, min_active=1, event_mask=WATCH)
        else:
            profile.modify(state=target)
        assert profile.state is target
    else:
        with raises(errno.EINVAL, f"{start.name} -> {target.name} is not allowed"):
            profile.modify(state=target)
        assert profile.state is start


def test_full_cycle_and_back_to_init_clears_configuration() -> None:
    profile = online_profile()
    profile.modify(state=OFFLINE)
    profile.modify(state=INIT)
    assert profile.state is INIT
    assert profile.config.mode is None and profile.ev_array == () and profile.fields == ()


@pytest.mark.parametrize("missing", ["mode", "fmt_profile", "ev_count", "fields"])
def test_offline_needs_mode_fmt_count_and_fields(missing: str) -> None:
    attrs: dict[str, object] = dict(
        mode=EvMode.EXP, fmt_profile=fmt_profile(), ev_count=8, fields=SRV6_FIELDS
    )
    del attrs[missing]
    with raises(errno.EINVAL, f"needs .*{missing}") as caught:
        EvProfile(7).modify(state=OFFLINE, **attrs)  # type: ignore[arg-type]
    assert caught.value.field == missing


def test_event_mask_as_the_c_api_bitmask_or_as_states() -> None:
    # mrc.h: GOOD = 1 << 0, ASSUMED_BAD = 1 << 1, DENIED = 1 << 2, UNKNOWN = 1 << 31.
    assert [EV_STATE_BITS[s] for s in (GOOD, BAD, DENIED, EvState.UNKNOWN)] == [
        1, 2, 4, 1 << 31]
    assert mask_states(0b11) == WATCH and mask_bits(WATCH) == 0b11
    with raises(errno.EINVAL, "no EV state"):
        mask_states(1 << 5)
    for mask in (0b11, WATCH, [GOOD, BAD]):
        profile = EvProfile(7)
        profile.modify(state=OFFLINE, mode=EvMode.AUTO)
        profile.modify(state=ONLINE, min_active=0, event_mask=mask)
        assert profile.event_mask == WATCH


def test_auto_profile_needs_only_mode_and_has_no_array() -> None:
    profile = EvProfile(7)
    profile.modify(state=OFFLINE, mode=EvMode.AUTO)
    profile.modify(state=ONLINE, min_active=0, event_mask=0)
    assert profile.ev_array == ()
    with raises(errno.EINVAL, "AUTO"):
        profile.ev_op(EvOp.QUERY_EV_STATE, [EvOpEntry(EV_UNPOPULATED)])


@pytest.mark.parametrize("missing", ["min_active", "event_mask"])
def test_online_needs_min_active_and_event_mask(missing: str) -> None:
    profile = offline_profile()
    populate(profile)
    attrs: dict[str, object] = dict(min_active=1, event_mask=WATCH)
    del attrs[missing]
    with raises(errno.EINVAL, f"needs {missing}"):
        profile.modify(state=ONLINE, **attrs)  # type: ignore[arg-type]


def test_required_attributes_may_come_from_earlier_offline_calls() -> None:
    profile = offline_profile()
    populate(profile)
    profile.modify(min_active=1)
    profile.modify(event_mask=WATCH)
    profile.modify(state=ONLINE)
    assert profile.state is ONLINE


def test_init_profile_takes_attributes_only_with_state_offline() -> None:
    with raises(errno.EINVAL, "INIT"):
        EvProfile(7).modify(ev_count=8)


def test_online_needs_an_online_format_profile() -> None:
    profile = offline_profile(fmt=fmt_profile(state=OFFLINE))
    populate(profile)
    with raises(errno.EINVAL, "not ONLINE") as caught:
        profile.modify(state=ONLINE, min_active=1, event_mask=WATCH)
    assert caught.value.field == "fmt_profile"


def test_refused_modify_changes_nothing() -> None:
    profile = offline_profile()
    before = (profile.config, profile.ev_array, profile.state)
    with raises(errno.EINVAL):
        profile.modify(ev_count=16, min_active=99)
    assert (profile.config, profile.ev_array, profile.state) == before


def test_profile_id_is_a_uint64() -> None:
    with raises(errno.EINVAL, "uint64"):
        EvProfile(1 << 64)


# ------------------------------------------------------------------ QPs, EBUSY, MODIFY_ONLINE


def test_qp_attaches_only_to_online_profile() -> None:
    with raises(errno.EINVAL, "not ONLINE"):
        offline_profile().attach_qp()
    profile = online_profile()
    profile.attach_qp()
    assert profile.active_qps == 1
    profile.detach_qp()
    with raises(errno.EINVAL, "no active QP"):
        profile.detach_qp()


def test_going_offline_with_active_qps_is_ebusy() -> None:
    profile = online_profile()
    profile.attach_qp()
    with raises(errno.EBUSY, "1 active QP"):
        profile.modify(state=OFFLINE)
    profile.detach_qp()
    profile.modify(state=OFFLINE)


def test_online_attribute_change_without_cap_is_einval_or_ebusy() -> None:
    profile = online_profile()
    with raises(errno.EINVAL, "while EV profile 7 is ONLINE"):
        profile.modify(event_mask=GOOD)
    profile.attach_qp()
    with raises(errno.EBUSY):
        profile.modify(event_mask=GOOD)


def test_modify_online_cap_allows_event_mask_and_fields_with_active_qps() -> None:
    profile = online_profile(CAP_ONLINE)
    profile.attach_qp()
    profile.modify(event_mask=BAD)
    assert profile.event_mask == {BAD}
    new_fields = SRV6_FIELDS[:4] + (EvField(16, 0x0500, 1, 0xF, 0x000F),)
    profile.modify(fields=new_fields)
    assert profile.fields == new_fields


@pytest.mark.parametrize("attrs", [dict(ev_count=16), dict(min_active=3), dict(mode=EvMode.GEN)])
def test_modify_online_cap_does_not_open_other_attributes(attrs: dict[str, object]) -> None:
    profile = online_profile(CAP_ONLINE)
    with raises(errno.EINVAL, "ONLINE"):
        profile.modify(**attrs)  # type: ignore[arg-type]
    profile.attach_qp()
    with raises(errno.EBUSY):
        profile.modify(**attrs)  # type: ignore[arg-type]


# ------------------------------------------------------------------ constraint checks


def expect_invalid(code: int, field: str, **attrs: object) -> None:
    base: dict[str, object] = dict(
        mode=EvMode.EXP, fmt_profile=fmt_profile(), ev_count=8, fields=SRV6_FIELDS
    )
    caps = attrs.pop("caps", None)
    if caps is not None:
        base["fmt_profile"] = fmt_profile(caps=caps)  # type: ignore[arg-type]
    base.update(attrs)
    with raises(code) as caught:
        EvProfile(7, caps).modify(state=OFFLINE, **base)  # type: ignore[arg-type]
    assert caught.value.field == field, caught.value
    assert field in str(caught.value)


def test_rule_no_more_fields_than_format_fields() -> None:
    expect_invalid(errno.EINVAL, "fields", fields=SRV6_FIELDS + (EvField(0),))


def test_rule_total_field_width_within_format_width() -> None:
    expect_invalid(errno.EINVAL, "fields", fields=(EvField(32),) * 4)  # 128 > 96 bits


def test_rule_field_width_at_most_32() -> None:
    fmt = fmt_profile(widths=(64, 16))
    expect_invalid(errno.EINVAL, "fields[0].width", fmt_profile=fmt, fields=(EvField(33),))


def test_rule_init_val_fits_width() -> None:
    fields = (SRV6_FIELDS[0], EvField(4, init_val=0x10, mask=0xF))
    expect_invalid(errno.EINVAL, "fields[1].init_val", fields=fields)


def test_rule_mask_inside_width() -> None:
    fields = (SRV6_FIELDS[0], EvField(4, mask=0x1F))
    expect_invalid(errno.EINVAL, "fields[1].mask", fields=fields)


def test_rule_max_val_fits_mask_bits() -> None:
    fields = (SRV6_FIELDS[0], EvField(16, max_val=0x10, mask=0x0F00))
    expect_invalid(errno.EINVAL, "fields[1].max_val", fields=fields)


def test_rule_gen_min_val_not_above_max_val() -> None:
    fields = (SRV6_FIELDS[0], EvField(16, min_val=9, max_val=8, mask=0xF))
    expect_invalid(errno.EINVAL, "fields[1].min_val", mode=EvMode.GEN, fields=fields)


def test_rule_exp_count_aligned() -> None:
    expect_invalid(errno.EINVAL, "ev_count", caps=DeviceCaps(ev_count_align=8), ev_count=12)


def test_gen_count_is_rounded_up_to_alignment() -> None:
    profile = offline_profile(mode=EvMode.GEN, count=12, caps=DeviceCaps(ev_count_align=8))
    assert profile.ev_count == 16 and len(profile.ev_array) == 16


def test_rule_count_within_device_maximum() -> None:
    caps = DeviceCaps(ev_max_count_profile=64)
    expect_invalid(errno.E2BIG, "ev_count", caps=caps, ev_count=65)


def test_rule_count_positive_for_exp_and_gen() -> None:
    expect_invalid(errno.EINVAL, "ev_count", ev_count=0)


def test_rule_min_active_not_above_count() -> None:
    expect_invalid(errno.EINVAL, "min_active", min_active=9)


@pytest.mark.parametrize("mask", [DENIED, EvState.UNKNOWN, 1 << 5, -1])
def test_rule_event_mask_only_good_and_assumed_bad(mask: int) -> None:
    expect_invalid(errno.EINVAL, "event_mask", event_mask=mask)


def test_rule_field_width_within_device_ev_max_width() -> None:
    caps = DeviceCaps(ev_max_width=64)
    expect_invalid(errno.E2BIG, "fields", caps=caps)


def test_rule_mode_supported_by_device() -> None:
    caps = DeviceCaps(ev_mode_mask=EvMode.EXP)
    expect_invalid(errno.EINVAL, "mode", caps=caps, mode=EvMode.GEN)


def test_rule_format_profile_must_be_configured() -> None:
    expect_invalid(errno.EINVAL, "fmt_profile", fmt_profile=EvFormatProfile(5))


# ------------------------------------------------------------------ explicit arrays, EV ops


def test_explicit_array_starts_unpopulated_and_blocks_online() -> None:
    profile = offline_profile()
    assert profile.ev_array == (EV_UNPOPULATED,) * 8
    assert profile.ev_states == (EvState.UNKNOWN,) * 8
    evs = distinct_evs(5)
    profile.ev_op(EvOp.REPLACE_EV, [EvOpEntry(EV_UNPOPULATED, ev) for ev in evs])
    with raises(errno.EINVAL, "3 of 8 entries are UNPOPULATED") as caught:
        profile.modify(state=ONLINE, min_active=1, event_mask=WATCH)
    assert caught.value.field == "ev_array"


def test_replace_ev_replaces_the_lowest_copy_unless_all_copies() -> None:
    profile = offline_profile()
    one, two, three = distinct_evs(3)
    profile.ev_op(EvOp.REPLACE_EV, [EvOpEntry(EV_UNPOPULATED, one, flags=EV_OP_F_ALL_COPIES)])
    assert profile.ev_array == (one,) * 8
    result = profile.ev_op(EvOp.REPLACE_EV, [EvOpEntry(one, two)])
    assert result.ok and result.results[0].slots == (0,)
    assert profile.ev_array == (two,) + (one,) * 7
    result = profile.ev_op(EvOp.REPLACE_EV, [EvOpEntry(one, three, flags=EV_OP_F_ALL_COPIES)])
    assert result.results[0].slots == tuple(range(1, 8))
    assert profile.ev_array == (two,) + (three,) * 7


def test_replaced_ev_takes_the_entry_state_or_good() -> None:
    profile = offline_profile()
    one, two = distinct_evs(2)
    profile.ev_op(
        EvOp.REPLACE_EV, [EvOpEntry(EV_UNPOPULATED, one), EvOpEntry(EV_UNPOPULATED, two, DENIED)]
    )
    assert profile.ev_states[:2] == (GOOD, DENIED)


def test_ev_op_stops_at_first_failure_keeping_earlier_entries() -> None:
    profile = offline_profile()
    one, two, three = distinct_evs(3)
    stranger = EvEntry.from_bits(0xFFFF, 16, 1)
    result = profile.ev_op(
        EvOp.REPLACE_EV,
        [
            EvOpEntry(EV_UNPOPULATED, one),
            EvOpEntry(stranger, two),
            EvOpEntry(EV_UNPOPULATED, three),
        ],
    )
    assert (result.ok, result.completed, result.requested) == (False, 1, 3)
    assert [r.code for r in result.results] == [0, errno.ENOENT]
    assert result.error is not None and result.error.field == "entries[1].ev"
    assert profile.ev_array[:2] == (one, EV_UNPOPULATED)
    with raises(errno.ENOENT):
        result.raise_for_error()


@pytest.mark.parametrize(
    ("new_ev", "field"),
    [
        (EvEntry.from_bits(0x1FFFF, 17, 1), "entries[0].ev_new.val"),  # beyond 16 compact bits
        (EvEntry.from_bits(1, 16, 9), "entries[0].ev_new.port"),  # port 9 not in 1..8
        (EvEntry.from_bits(1, 16, 0), "entries[0].ev_new.port"),
        (EV_UNPOPULATED, "entries[0].ev_new"),
    ],
)
def test_replace_ev_validates_the_new_ev(new_ev: EvEntry, field: str) -> None:
    result = offline_profile().ev_op(EvOp.REPLACE_EV, [EvOpEntry(EV_UNPOPULATED, new_ev)])
    assert result.results[0].code == errno.EINVAL
    assert result.error is not None and result.error.field == field


def test_replace_ev_refuses_unknown_state_and_missing_new_ev() -> None:
    profile = offline_profile()
    (one,) = distinct_evs(1)
    bad = profile.ev_op(EvOp.REPLACE_EV, [EvOpEntry(EV_UNPOPULATED, one, EvState.UNKNOWN)])
    assert bad.error is not None and bad.error.field == "entries[0].state"
    missing = profile.ev_op(EvOp.REPLACE_EV, [EvOpEntry(EV_UNPOPULATED)])
    assert missing.error is not None and missing.error.field == "entries[0].ev_new"


def test_replace_ev_while_online_needs_modify_online() -> None:
    profile = online_profile()
    old, new = profile.ev_array[0], EvEntry.from_bits(0xABCD, 16, 1)
    with raises(errno.EINVAL, "MODIFY_ONLINE"):
        profile.ev_op(EvOp.REPLACE_EV, [EvOpEntry(old, new)])
    profile.attach_qp()
    with raises(errno.EBUSY):
        profile.ev_op(EvOp.REPLACE_EV, [EvOpEntry(old, new)])
    capable = online_profile(CAP_ONLINE)
    capable.attach_qp()
    assert capable.ev_op(EvOp.REPLACE_EV, [EvOpEntry(capable.ev_array[0], new)]).ok
    assert capable.ev_array[0] == new


def test_ev_op_batch_larger_than_device_cap_is_e2big() -> None:
    profile = offline_profile(caps=DeviceCaps(ev_op_max_entries=4))
    entries = [EvOpEntry(EV_UNPOPULATED, ev) for ev in distinct_evs(5)]
    with raises(errno.E2BIG, "ev_op_max_entries"):
        profile.ev_op(EvOp.REPLACE_EV, entries)
    assert profile.ev_op(EvOp.REPLACE_EV, entries[:4]).ok


def test_modify_ev_state_applies_to_every_copy_and_works_online_with_qps() -> None:
    profile = online_profile()
    profile.attach_qp()
    target = profile.ev_array[3]
    result = profile.ev_op(EvOp.MODIFY_EV_STATE, [EvOpEntry(target, state=DENIED)])
    assert result.ok and profile.ev_states[3] is DENIED
    profile.ev_op(EvOp.MODIFY_EV_STATE, [EvOpEntry(target, state=GOOD)]).raise_for_error()
    assert profile.ev_states[3] is GOOD

    duplicated = offline_profile()
    (one,) = distinct_evs(1)
    duplicated.ev_op(EvOp.REPLACE_EV, [EvOpEntry(EV_UNPOPULATED, one, flags=EV_OP_F_ALL_COPIES)])
    duplicated.ev_op(EvOp.MODIFY_EV_STATE, [EvOpEntry(one, state=BAD)]).raise_for_error()
    assert duplicated.ev_states == (BAD,) * 8


@pytest.mark.parametrize(
    ("entry", "code"),
    [
        (EvOpEntry(EvEntry.from_bits(1, 16, 1), state=None), errno.EINVAL),
        (EvOpEntry(EvEntry.from_bits(1, 16, 1), state=EvState.UNKNOWN), errno.EINVAL),
        (EvOpEntry(EV_UNPOPULATED, state=GOOD), errno.EINVAL),
        (EvOpEntry(EvEntry.from_bits(0xFFFF, 16, 1), state=GOOD), errno.ENOENT),
    ],
)
def test_modify_ev_state_refusals(entry: EvOpEntry, code: int) -> None:
    result = online_profile().ev_op(EvOp.MODIFY_EV_STATE, [entry])
    assert result.results[0].code == code


def test_query_ev_state() -> None:
    profile = offline_profile()
    (one,) = distinct_evs(1)
    profile.ev_op(EvOp.REPLACE_EV, [EvOpEntry(EV_UNPOPULATED, one, BAD)])
    result = profile.ev_op(
        EvOp.QUERY_EV_STATE,
        [EvOpEntry(one), EvOpEntry(EV_UNPOPULATED), EvOpEntry(EvEntry.from_bits(9, 16, 1))],
    )
    assert [r.state for r in result.results[:2]] == [BAD, EvState.UNKNOWN]
    assert result.results[2].code == errno.ENOENT


def test_query_ev_array_reports_needed_size() -> None:
    profile = online_profile()
    with raises(errno.E2BIG) as caught:
        profile.query_ev_array(capacity=4)
    assert caught.value.needed == 8
    assert profile.query_ev_array(capacity=8) == profile.ev_array
    result = profile.ev_op(EvOp.QUERY_EV_ARRAY, [EvOpEntry()] * 8)
    assert [r.ev for r in result.results] == list(profile.ev_array)
    assert [r.state for r in result.results] == [GOOD] * 8
    with raises(errno.E2BIG):
        profile.ev_op(EvOp.QUERY_EV_ARRAY, [EvOpEntry()] * 7)


def test_ev_ops_need_a_configured_profile() -> None:
    with raises(errno.EINVAL, "INIT"):
        EvProfile(7).ev_op(EvOp.QUERY_EV_ARRAY, [])


def test_explicit_range_cap_requires_contiguous_values() -> None:
    caps = DeviceCaps(ev_explicit_range=True)
    profile = offline_profile(caps=caps)
    populate(profile)  # values 1..8
    profile.modify(state=ONLINE, min_active=1, event_mask=WATCH)

    gapped = offline_profile(caps=caps)
    populate(gapped)
    gapped.ev_op(EvOp.REPLACE_EV, [EvOpEntry(gapped.ev_array[4], EvEntry.from_bits(99, 16, 5))])
    with raises(errno.EINVAL, "EXPLICIT_RANGE") as caught:
        gapped.modify(state=ONLINE, min_active=1, event_mask=WATCH)
    assert caught.value.field == "ev_array[4]"


def test_changing_count_offline_keeps_prefix_and_pads_unpopulated() -> None:
    profile = offline_profile()
    evs = populate(profile)
    profile.modify(ev_count=10)
    assert profile.ev_array == tuple(evs) + (EV_UNPOPULATED,) * 2
    profile.modify(ev_count=4)
    assert profile.ev_array == tuple(evs[:4])


def test_version_counts_array_changes() -> None:
    profile = offline_profile()
    before = profile.version
    populate(profile)
    assert profile.version > before


# ------------------------------------------------------------------ SRv6 carriers


SRV6_FORMAT = EvFormat(FmtMode.SRV6, SRV6_WIDTHS)
SRH_FORMAT = EvFormat(FmtMode.SRV6, SRH_WIDTHS)


def test_srv6_carrier_of_worked_example_b() -> None:
    ev = EvEntry(bytes.fromhex("9b79"), 3)
    carrier = srv6_carrier(ev, SRV6_FORMAT, SRV6_FIELDS)
    assert carrier == Srv6Carrier(IPv6Address("1313:1313:109:20b:307:409::"), None, 3)
    assert srv6_ev_from_carrier(carrier, SRV6_FORMAT, SRV6_FIELDS) == ev


def test_srv6_ev_from_usid_list() -> None:
    ev = srv6_ev_from_usids([0x109, 0x20B, 0x307, 0x409], 3, SRV6_FORMAT, SRV6_FIELDS)
    assert ev == EvEntry(bytes.fromhex("9b79"), 3)
    with raises(errno.EINVAL, r"values\[0\]"):
        srv6_ev_from_usids([0x209, 0x20B, 0x307, 0x409], 3, SRV6_FORMAT, SRV6_FIELDS)


def test_srv6_carrier_with_srh_segment() -> None:
    # First EV of the C sample's SRv6+SRH scenario.
    ev = EvEntry(bytes.fromhex("b8a7310e14c80962ae4b9dd6587a4c16"), 2)
    carrier = srv6_carrier(ev, SRH_FORMAT, SRH_FIELDS)
    assert carrier.da == IPv6Address("cafe:cafe:b8a7:310e:14c8:962:ae4b:9dd6")
    assert carrier.srh_segment == IPv6Address("deca:fbad:587a:4c16::")
    assert srv6_ev_from_carrier(carrier, SRH_FORMAT, SRH_FIELDS) == ev


def test_srv6_carrier_refusals() -> None:
    wrong_locator = Srv6Carrier(IPv6Address("1313:1314:109:20b:307:409::"), None, 1)
    with raises(errno.EINVAL, "not an expansion"):
        srv6_ev_from_carrier(wrong_locator, SRV6_FORMAT, SRV6_FIELDS)
    with_srh = Srv6Carrier(IPv6Address("1313:1313::"), IPv6Address("::1"), 1)
    with raises(errno.EINVAL, "no SRH"):
        srv6_ev_from_carrier(with_srh, SRV6_FORMAT, SRV6_FIELDS)
    with raises(errno.EINVAL, "not SRV6"):
        srv6_carrier(EvEntry(b"", 1), EvFormat(FmtMode.STEV, (16, 16)), ())


def test_profile_wire_ev_is_the_srv6_carrier() -> None:
    profile = online_profile()
    for entry in profile.ev_array:
        carrier = srv6_carrier(entry, SRV6_FORMAT, SRV6_FIELDS)
        assert profile.wire_ev(entry)[:16] == carrier.da.packed


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 0xF), min_size=4, max_size=4), st.integers(1, 8))
def test_srv6_usids_carrier_round_trip(nibbles: list[int], port: int) -> None:
    usids = [(k << 8) | nibble for k, nibble in enumerate(nibbles, start=1)]
    ev = srv6_ev_from_usids(usids, port, SRV6_FORMAT, SRV6_FIELDS)
    carrier = srv6_carrier(ev, SRV6_FORMAT, SRV6_FIELDS)
    words = carrier.da.exploded.split(":")
    assert [int(word, 16) for word in words[2:6]] == usids
    assert srv6_ev_from_carrier(carrier, SRV6_FORMAT, SRV6_FIELDS) == ev


# ------------------------------------------------------------------ GEN


TIER_FIELDS = (
    EvField.fixed(32, 0x13131313),
    EvField(16, 0x0100, 1, 0xF, 0x000F),  # 15 values
    EvField(16, 0x0200, 0, 3, 0x0003),  # 4 values
)


def field_chunks(entry: EvEntry, fields: tuple[EvField, ...]) -> list[int]:
    masked = [f for f in fields if f.mask]
    value, width = entry.bits(sum(f.ev_bits for f in masked)), sum(f.ev_bits for f in masked)
    chunks = []
    for ev_field in masked:
        width -= ev_field.ev_bits
        chunks.append((value >> width) & ((1 << ev_field.ev_bits) - 1))
    return chunks


def test_gen_is_deterministic_per_seed() -> None:
    ports = (1, 2, 3, 4)
    first = generate_evs(TIER_FIELDS, 32, ports, seed=5)
    assert first == generate_evs(TIER_FIELDS, 32, ports, seed=5)
    assert first != generate_evs(TIER_FIELDS, 32, ports, seed=6)


def test_gen_profile_seed_defaults_to_profile_id() -> None:
    a = offline_profile(mode=EvMode.GEN, fields=TIER_FIELDS, profile_id=42)
    b = offline_profile(mode=EvMode.GEN, fields=TIER_FIELDS, profile_id=42)
    c = offline_profile(mode=EvMode.GEN, fields=TIER_FIELDS, profile_id=43)
    assert a.ev_array == b.ev_array != c.ev_array
    assert all(state is GOOD for state in a.ev_states)


def test_gen_assigns_ports_round_robin_so_planes_are_equal() -> None:
    ports = (1, 2, 3, 4, 5, 6, 7, 8)
    entries = generate_evs(TIER_FIELDS, 64, ports, seed=1)
    assert [e.port for e in entries[:16]] == list(ports) * 2
    assert Counter(e.port for e in entries) == {port: 8 for port in ports}
    uneven = Counter(e.port for e in generate_evs(TIER_FIELDS, 10, (1, 2, 3, 4), seed=1))
    assert max(uneven.values()) - min(uneven.values()) <= 1


def test_gen_paths_are_distinct_within_a_plane_and_respect_bounds() -> None:
    entries = generate_evs(TIER_FIELDS, 64, (1, 2, 3, 4), seed=3)  # 16 per plane, 60 combos
    for port in (1, 2, 3, 4):
        plane = [e.val for e in entries if e.port == port]
        assert len(set(plane)) == len(plane) == 16
    for entry in entries:
        tier1, tier2 = field_chunks(entry, TIER_FIELDS)
        assert 1 <= tier1 <= 0xF and 0 <= tier2 <= 3


def test_gen_cycles_through_the_whole_space_when_count_exceeds_it() -> None:
    fields = (EvField(16, 0, 0, 3, 0x3),)  # 4 combinations
    entries = generate_evs(fields, 16, (1, 2), seed=0)  # 8 per plane
    for port in (1, 2):
        plane = Counter(e.val for e in entries if e.port == port)
        assert sorted(plane.values()) == [2, 2, 2, 2]


def test_gen_max_val_zero_means_unbounded() -> None:
    assert gen_bounds(0, EvField(16, mask=0x00FF)) == (0, 0xFF)
    assert gen_bounds(0, EvField(16, min_val=1, max_val=7, mask=0x00FF)) == (1, 7)


def test_gen_needs_a_port() -> None:
    with raises(errno.EINVAL, "no port"):
        generate_evs(TIER_FIELDS, 8, (), seed=0)


def test_gen_array_is_regenerated_only_when_its_inputs_change() -> None:
    profile = offline_profile(mode=EvMode.GEN, fields=TIER_FIELDS)
    before = profile.ev_array
    profile.modify(min_active=1)
    assert profile.ev_array == before
    profile.modify(fields=TIER_FIELDS[:2])
    assert profile.ev_array != before
    assert all(0 < field_chunks(e, TIER_FIELDS[:2])[0] <= 0xF for e in profile.ev_array)


def test_gen_profile_goes_online_without_replace() -> None:
    profile = online_profile(mode=EvMode.GEN)
    assert profile.state is ONLINE and len(profile.ev_array) == 8


@st.composite
def gen_fields(draw: st.DrawFn) -> tuple[EvField, ...]:
    fields = []
    for _ in range(draw(st.integers(1, 4))):
        width = draw(st.integers(1, 16))
        mask = draw(st.integers(1, (1 << width) - 1))
        top = (1 << bin(mask).count("1")) - 1
        low = draw(st.integers(0, top))
        high = draw(st.integers(low, top))
        fields.append(EvField(width, min_val=low, max_val=high, mask=mask))
    return tuple(fields)


@settings(max_examples=150, deadline=None)
@given(gen_fields(), st.integers(1, 64), st.integers(1, 8), st.integers(0, 2**32))
def test_gen_property_bounds_balance_determinism(
    fields: tuple[EvField, ...], count: int, plane_count: int, seed: int
) -> None:
    ports = tuple(range(1, plane_count + 1))
    entries = generate_evs(fields, count, ports, seed)
    assert entries == generate_evs(fields, count, ports, seed)
    per_plane = Counter(e.port for e in entries)
    assert sum(per_plane.values()) == count
    assert max(per_plane.values()) - min(per_plane.get(p, 0) for p in ports) <= 1
    for entry in entries:
        for ev_field, chunk in zip(fields, field_chunks(entry, fields)):
            low, high = gen_bounds(0, ev_field)
            assert low <= chunk <= high


def test_entry_repr_and_validation() -> None:
    assert repr(EvEntry(bytes.fromhex("9b79"), 3)) == "EvEntry(val=0x9b79, port=3)"
    with raises(errno.EINVAL, "uint8"):
        EvEntry(b"", 256)
    with raises(errno.EINVAL, "33 bytes"):
        EvEntry(bytes(33), 1)


def test_entry_value_is_padded_to_32_bytes() -> None:
    entry = replace(EvEntry(b"\x01", 1), port=2)
    assert entry.val == b"\x01" + bytes(31)
    assert EV_UNPOPULATED.is_unpopulated and not entry.is_unpopulated
