"""The diff and calendar quotas: words, directions (notice and approval follow them),
and tenants' calendars, whose change moves their quotas' periods."""

from __future__ import annotations

import dataclasses

import pytest

from limits.diff.diffing import RulesDiff, rules_diff
from limits.diff.impact import compare_limits
from limits.diff.kinds import ChangeKind
from sluice.model import (
    Calendar,
    CalendarQuota,
    Dimension,
    Limit,
    Policy,
    Route,
    Rules,
)

T = Dimension.TENANT
PARIS = "CET-1CEST,M3.5.0,M10.5.0/3"


def _rules(*limits, calendars=None) -> Rules:
    calendars = calendars or {}
    zones = {c.zone: PARIS for c in calendars.values() if c.zone != "UTC"}
    return Rules(
        tiers={"free": "Free", "pro": "Pro"},
        tenants={"acme": "pro", "initech": "free"},
        routes={"search": Route("search", ("GET",), "/v1/search", 1)},
        policies=(
            Policy("default", "*", (Limit(Dimension.IP, 10, 1, 20),)),
            Policy("tier:pro", "search", tuple(limits)),
        ),
        calendars=calendars,
        zones=zones,
    )


def _monthly(limit: int, **fields) -> CalendarQuota:
    return CalendarQuota(T, limit, "month", **fields)


@pytest.mark.parametrize(
    ("before", "after", "words"),
    [
        (
            _monthly(10000),
            _monthly(5000),
            "per tenant: monthly quota lowered from 10,000 to 5,000 calls",
        ),
        (
            CalendarQuota(T, 500, "day"),
            CalendarQuota(T, 800, "day"),
            "per tenant: daily quota raised from 500 to 800 calls",
        ),
        (
            _monthly(10000, cycle="billing"),
            _monthly(5000, cycle="billing"),
            "per tenant: monthly quota (billing cycle) lowered from 10,000 to 5,000 calls",
        ),
        (
            _monthly(10000),
            _monthly(10000, cost=5),
            "per tenant: cost the route's → 5",
        ),
    ],
    ids=["monthly lowered", "daily raised", "billing lowered", "cost"],
)
def test_rules_diff__quota_changed__said_in_words(before, after, words):
    # Given a pro policy holding a quota, then the same quota changed
    diff = rules_diff(_rules(before), _rules(after))
    # Then the policy's change says it in the quota's words
    (change,) = diff.changes
    assert change.text == f"tier pro · search: {words}"
    # And the words survive the diff's stored form
    assert RulesDiff.from_json(diff.to_json()).changes[0].text == change.text


@pytest.mark.parametrize(
    ("before", "after", "kind"),
    [
        (_monthly(10000), _monthly(5000), ChangeKind.LOWERED),
        (_monthly(10000), _monthly(20000), ChangeKind.RAISED),
        (_monthly(10000), _monthly(10000, cost=2), ChangeKind.LOWERED),
        (
            CalendarQuota(T, 300, "day"),
            CalendarQuota(T, 300, "day", cost=1),
            ChangeKind.CHANGED,
        ),
    ],
    ids=["fewer per month", "more per month", "dearer", "same cost said"],
)
def test_compare_limits__quotas__their_kind_decides(before, after, kind):
    assert compare_limits([before], [after]) is kind


def test_rules_diff__quota_lowered__lowers_so_notice_and_approval_apply():
    diff = rules_diff(_rules(_monthly(10000)), _rules(_monthly(5000)))
    assert diff.lowers
    assert diff.lowered() == [
        "tier pro · search: per tenant: monthly quota lowered from 10,000 to 5,000 calls"
    ]
    assert "acme" in diff.affected_tenants


def test_rules_diff__quota_added_beside_a_bucket__a_lowering_said_in_words():
    bucket = Limit(T, 20, 1, 40)
    diff = rules_diff(_rules(bucket), _rules(bucket, _monthly(10000)))
    (change,) = diff.changes
    assert change.lowers
    assert "new limit per tenant: monthly quota of 10,000 requests" in change.text


def test_rules_diff__tenant_time_zone_and_billing_day__its_quotas_periods_said():
    # Given acme on UTC and day 1, then in Paris billed on the 17th
    quota = _monthly(10000, cycle="billing")
    calendars = {"acme": Calendar(zone="Europe/Paris", billing_day=17)}
    diff = rules_diff(_rules(quota), _rules(quota, calendars=calendars))
    # Then acme's change says what moved and what it means for its quotas
    (change,) = diff.changes
    assert (change.subject, change.key) == ("tenant", "acme")
    assert change.text.startswith(
        "tenant acme calendar: time zone UTC → Europe/Paris, billing day 1 → 17"
    )
    assert "calendar quotas" in change.text
    assert [(f.field, f.before, f.after) for f in change.fields] == [
        ("time_zone", "UTC", "Europe/Paris"),
        ("billing_day", 1, 17),
    ]
    # A new period starts from a zero count: a calendar's move lowers no one
    assert change.kind is ChangeKind.CHANGED
    assert not diff.lowers
    assert diff.affected_tenants == ("acme",)
    assert RulesDiff.from_json(diff.to_json()).changes[0].text == change.text


def test_rules_diff__tenant_moved_and_recalendared__one_change_saying_both():
    calendars = {"acme": Calendar(billing_day=5)}
    old = _rules(_monthly(10000))
    new = dataclasses.replace(
        _rules(_monthly(10000), calendars=calendars),
        tenants={"acme": "free", "initech": "free"},
    )
    (change,) = [c for c in rules_diff(old, new).changes if c.subject == "tenant"]
    assert change.text.startswith("tenant acme moved: tier pro → tier free; calendar:")
    assert "billing day 1 → 5" in change.text
