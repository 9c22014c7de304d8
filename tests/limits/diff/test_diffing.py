"""The diff: classification, words, and the tiers and tenants a change reaches."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from limits.diff.diffing import RulesDiff, rules_diff
from limits.diff.impact import compare_limits
from limits.diff.kinds import ChangeKind
from limits.publishing.services import snapshot_publish
from limits.versions.selectors import ACTIVE, WORKING_COPY, snapshot_diff
from sluice import (
    Dimension,
    Limit,
    Policy,
    Resolver,
    Route,
    Rules,
    validate_rules,
)
from sluice.model import SlidingWindow
from tests.client.strategies import NOW, limits, rule_sets

# These tests are about publishing mechanics, not the notice period.
pytestmark = pytest.mark.usefixtures("no_notice_period", "no_approval_rule")
#: Hypothesis fails a test whose examples are slow to generate ("too_slow"): a loaded
#: machine makes them so, and what is judged is the diff, not the speed (nor is the
#: time per example: ``deadline=None``).
SLOW_OK = [HealthCheck.too_slow]

T, U, IP = Dimension.TENANT, Dimension.USER, Dimension.IP


def _rules(*policies, tenants=None, routes=("search",), route_cost=1) -> Rules:
    return Rules(
        tiers={"free": "Free", "pro": "Pro", "ent": "Enterprise"},
        tenants=tenants or {"acme": "pro", "globex": "pro", "initech": "free"},
        routes={r: Route(r, ("GET",), f"/v1/{r}", route_cost) for r in routes},
        policies=(Policy("default", "*", (Limit(IP, 10, 1, 20),)), *policies),
    )


def _pro_search(*limits_):
    return Policy("tier:pro", "search", tuple(limits_))


@pytest.mark.parametrize(
    ("before", "after", "kind"),
    [
        ([Limit(T, 50, 1, 100)], [Limit(T, 60, 1, 100)], ChangeKind.RAISED),
        ([Limit(T, 50, 1, 100)], [Limit(T, 50, 1, 200)], ChangeKind.RAISED),
        ([Limit(T, 50, 1, 100)], [Limit(T, 20, 1, 40)], ChangeKind.LOWERED),
        ([Limit(T, 50, 1, 100)], [Limit(T, 50, 1, 90)], ChangeKind.LOWERED),
        ([Limit(T, 50, 1, 100)], [Limit(T, 80, 1, 60)], ChangeKind.LOWERED),
        ([Limit(T, 50, 1, 100)], [Limit(T, 50, 1, 100, cost=3)], ChangeKind.LOWERED),
        ([Limit(T, 50, 1, 100, cost=3)], [Limit(T, 50, 1, 100)], ChangeKind.RAISED),
        (
            [Limit(T, 50, 1, 100)],
            [Limit(T, 50, 1, 100, shadow=True), Limit(U, 9, 1, 9)],
            ChangeKind.LOWERED,
        ),
        (
            [Limit(T, 50, 1, 100), Limit(U, 9, 1, 9)],
            [Limit(T, 50, 1, 100, shadow=True), Limit(U, 9, 1, 9)],
            ChangeKind.RAISED,
        ),
        (
            [Limit(T, 50, 1, 100), Limit(U, 9, 1, 9, shadow=True)],
            [Limit(T, 50, 1, 100), Limit(U, 9, 1, 9)],
            ChangeKind.LOWERED,
        ),
        (
            [Limit(T, 50, 1, 100), Limit(U, 9, 1, 9, shadow=True)],
            [Limit(T, 50, 1, 100), Limit(U, 1, 1, 1, shadow=True)],
            ChangeKind.CHANGED,
        ),
        (
            [Limit(T, 50, 1, 100)],
            [Limit(T, 50, 1, 100), Limit(U, 5, 1, 10)],
            ChangeKind.LOWERED,
        ),
        (
            [Limit(T, 50, 1, 100), Limit(U, 5, 1, 10)],
            [Limit(T, 50, 1, 100)],
            ChangeKind.RAISED,
        ),
        ([Limit(T, 100, 1, 100)], [Limit(T, 6000, 60, 6000)], ChangeKind.LOWERED),
    ],
    ids=[
        "rate up",
        "burst up",
        "both down",
        "burst down",
        "mixed: rate up, burst down",
        "cost override up",
        "cost override dropped",
        "limit turned shadow, another added",
        "limit turned shadow",
        "shadow limit enforced",
        "shadow limit edited",
        "limit added",
        "limit removed",
        "per second to per minute",
    ],
)
def test_rules_diff__limit_change__classified(before, after, kind):
    # Given pro search's limits changed / When diffed
    diff = rules_diff(_rules(_pro_search(*before)), _rules(_pro_search(*after)))
    # Then the one change is classified as expected
    (change,) = diff.changes
    assert (change.subject, change.key, change.kind) == (
        "policy",
        "tier:pro/search",
        kind,
    )
    assert change.lowers is (kind == ChangeKind.LOWERED)


def test_rules_diff__limit_lowered__said_in_words():
    diff = rules_diff(
        _rules(_pro_search(Limit(T, 50, 1, 100))),
        _rules(_pro_search(Limit(T, 20, 1, 40))),
    )
    assert diff.changes[0].text == (
        "tier pro · search: per tenant: 50 / s, burst 100 → 20 / s, burst 40"
    )
    assert [(f.field, f.before, f.after) for f in diff.changes[0].limits[0].fields] == [
        ("rate", 50, 20),
        ("burst", 100, 40),
    ]


@pytest.mark.parametrize(
    ("old", "new", "kind", "direction"),
    [
        pytest.param(
            _rules(),
            _rules(_pro_search(Limit(T, 5, 1, 10))),
            "new",
            "lowered",
            id="new stricter policy",
        ),
        pytest.param(
            _rules(),
            _rules(_pro_search(Limit(IP, 50, 1, 100))),
            "new",
            "raised",
            id="new looser policy",
        ),
        pytest.param(
            _rules(_pro_search(Limit(IP, 50, 1, 100))),
            _rules(),
            "removed",
            "lowered",
            id="looser policy removed",
        ),
        pytest.param(
            _rules(_pro_search(Limit(IP, 5, 1, 10))),
            _rules(),
            "removed",
            "raised",
            id="stricter policy removed",
        ),
        pytest.param(
            _rules(), _rules(route_cost=2), "lowered", None, id="route dearer"
        ),
        pytest.param(
            _rules(route_cost=2), _rules(), "raised", None, id="route cheaper"
        ),
        pytest.param(
            _rules(), _rules(routes=("search", "export")), "new", None, id="new route"
        ),
        pytest.param(
            _rules(routes=("search", "export")),
            _rules(),
            "removed",
            None,
            id="route removed",
        ),
    ],
)
def test_rules_diff__policy_or_route_change__kind_and_direction(
    old, new, kind, direction
):
    (change,) = rules_diff(old, new).changes
    assert (change.kind.value, change.direction and change.direction.value) == (
        kind,
        direction,
    )


def test_rules_diff__tenant_moved_to_stricter_tier__lowered_and_reaches_it():
    # Given free is stricter than pro, and initech moves from pro to free
    free = Policy("tier:free", "*", (Limit(T, 5, 1, 10),))
    pro = Policy("tier:pro", "*", (Limit(T, 50, 1, 100),))
    old = _rules(free, pro, tenants={"initech": "pro"})
    new = _rules(free, pro, tenants={"initech": "free"})
    # When diffed
    (change,) = rules_diff(old, new).changes
    # Then the move lowers, and reaches initech alone
    assert (change.subject, change.kind, change.text) == (
        "tenant",
        ChangeKind.LOWERED,
        "tenant initech moved: tier pro → tier free",
    )
    assert change.affected.tenants == ("initech",)


def test_rules_diff__tier_renamed__changed_reaching_no_one():
    old = _rules()
    new = dataclasses.replace(old, tiers={**old.tiers, "pro": "Professional"})
    diff = rules_diff(old, new)
    assert [c.text for c in diff.changes] == ["tier pro renamed: Pro → Professional"]
    assert (diff.affected_tiers, diff.affected_tenants, diff.anonymous) == (
        (),
        (),
        False,
    )


def test_rules_diff__tier_policy__reaches_its_tenants_except_shadowed_ones():
    # Given globex has its own search policy, acme a temporary override only
    own = Policy("tenant:globex", "search", (Limit(T, 900, 1, 900),))
    override = Policy(
        "tenant:acme", "search", (Limit(T, 900, 1, 900),), expires_at=NOW + timedelta(1)
    )
    old = _rules(_pro_search(Limit(T, 50, 1, 100)), own, override)
    new = _rules(_pro_search(Limit(T, 20, 1, 40)), own, override)
    # When pro search is lowered
    diff = rules_diff(old, new)
    # Then pro and acme are reached (its override expires), globex is not
    (change,) = diff.changes
    assert change.affected.tiers == ("pro",)
    assert change.affected.except_tenants == ("globex",)
    assert (diff.affected_tiers, diff.affected_tenants) == (("pro",), ("acme",))


@pytest.mark.parametrize(
    ("route", "tiers"),
    [("search", ("ent",)), ("*", ("ent", "pro"))],
)
def test_rules_diff__default_policy__reaches_tiers_that_fall_through(route, tiers):
    # Given free has a policy for all routes, pro for search only, ent none
    free = Policy("tier:free", "*", (Limit(T, 5, 1, 10),))
    pro = _pro_search(Limit(T, 50, 1, 100))
    tenants = {"acme": "pro", "initech": "free", "umbrella": "ent"}
    base = Policy("default", route, (Limit(IP, 10, 1, 20),))
    lower = Policy("default", route, (Limit(IP, 1, 1, 2),))
    old = _rules(free, pro, *([base] if route != "*" else []), tenants=tenants)
    new = _rules(free, pro, lower, tenants=tenants)
    if route == "*":
        new = dataclasses.replace(new, policies=(lower, free, pro))
    # When the default policy of ``route`` changes
    diff = rules_diff(old, new)
    # Then only the tiers that reach the default level are affected, and anonymous traffic
    assert diff.affected_tiers == tiers
    assert diff.anonymous is True
    assert "initech" not in diff.affected_tenants


def _mutated(draw, old: Rules) -> Rules:
    """``old`` with policies dropped, edited and added, and tenants moved."""
    kept = [
        p if p.key == ("default", "*", False) or draw(st.booleans()) else None
        for p in old.policies
    ]
    policies = [
        dataclasses.replace(p, limits=(draw(limits),)) if draw(st.booleans()) else p
        for p in kept
        if p is not None
    ]
    scopes = [
        "default",
        *(f"tier:{t}" for t in old.tiers),
        *(f"tenant:{t}" for t in old.tenants),
    ]
    for _ in range(draw(st.integers(0, 3))):
        key = (draw(st.sampled_from(scopes)), draw(st.sampled_from(["*", *old.routes])))
        override = key[0].startswith("tenant:") and draw(st.booleans())
        expires = (
            NOW + timedelta(hours=draw(st.integers(-48, 48))) if override else None
        )
        if (*key, override) not in {p.key for p in policies}:
            policies.append(Policy(*key, (draw(limits),), expires_at=expires))
    tenants = {
        slug: draw(st.sampled_from(sorted(old.tiers))) if draw(st.booleans()) else tier
        for slug, tier in old.tenants.items()
    }
    return dataclasses.replace(old, tenants=tenants, policies=tuple(policies))


@settings(max_examples=300, deadline=None, suppress_health_check=SLOW_OK)
@given(base=rule_sets(), data=st.data())
def test_rules_diff__any_change__reaches_every_tenant_whose_resolution_changes(
    base, data
):
    # Given a valid rule set (mutated once, for overrides without a permanent
    # policy) and a valid mutation of it
    old = _mutated(data.draw, base)
    new = _mutated(data.draw, old)
    assume(validate_rules(old) == validate_rules(new) == [])
    # When diffed, the new rules applying from NOW
    diff = rules_diff(old, new, at=NOW)
    # Then every tenant (and anonymous traffic) whose winning policy differs on some
    # route, at some moment from then on, is among those the diff says it reaches
    before, after = Resolver(old), Resolver(new)
    moments = [(NOW + timedelta(hours=h)).timestamp() for h in (0, 24, 72)]
    for tenant in [None, *old.tenants, *new.tenants]:
        for route in [None, *old.routes]:
            for now in moments:
                was = before.resolve(tenant=tenant, route=route, now=now).policy
                is_ = after.resolve(tenant=tenant, route=route, now=now).policy
                if was.to_json() != is_.to_json():
                    if tenant is None:
                        assert diff.anonymous, (route, now)
                    else:
                        assert tenant in diff.affected_tenants, (tenant, route, now)


@settings(max_examples=100, deadline=None, suppress_health_check=SLOW_OK)
@given(base=rule_sets(), data=st.data())
def test_rules_diff__stored_and_read_back__the_same_typed_diff(base, data):
    # Given any diff between two valid rule sets (new, removed and edited policies,
    # moved tenants, overrides)
    old = _mutated(data.draw, base)
    new = _mutated(data.draw, old)
    assume(validate_rules(old) == validate_rules(new) == [])
    diff = rules_diff(old, new, at=NOW)
    # When it is stored as JSON (Snapshot.diff) and read back
    stored = json.loads(json.dumps(diff.to_json()))
    again = RulesDiff.from_json(stored)
    # Then it is the diff that was built, field for field, and says the same words
    assert again == diff
    assert again.to_json() == diff.to_json()
    assert again.lowered() == [c.text for c in diff.changes if c.lowers]


def test_snapshot_diff__two_versions_and_working_copy__compared(rules, publisher):
    # Given version 1, version 2 lowering pro search, then an unpublished raise
    from limits.models import Limit as LimitRow

    snapshot_publish(actor=publisher, message="v1")
    LimitRow.objects.filter(policy=rules["pro_search"]).update(rate=20, burst=40)
    snapshot_publish(actor=publisher, message="v2")
    LimitRow.objects.filter(policy=rules["pro_search"]).update(rate=70, burst=140)
    # When diffing 1 → 2, and 2 (active) → the working copy
    versions = snapshot_diff(old=1, new=2)
    working = snapshot_diff(old=ACTIVE, new=WORKING_COPY)
    # Then each tells its own change
    assert [c.kind for c in versions.changes] == [ChangeKind.LOWERED]
    assert [c.text for c in working.changes] == [
        "tier pro · search: per tenant: 20 / s, burst 40 → 70 / s, burst 140"
    ]


@pytest.mark.parametrize(
    ("before", "after", "kind"),
    [
        (
            SlidingWindow(Dimension.USER, 100, 60),
            SlidingWindow(Dimension.USER, 50, 60),
            ChangeKind.LOWERED,
        ),
        (
            SlidingWindow(Dimension.USER, 100, 60),
            SlidingWindow(Dimension.USER, 200, 60, cost=1),
            ChangeKind.RAISED,
        ),
        (
            Limit(Dimension.USER, 100, 60, 100),
            SlidingWindow(Dimension.USER, 1000, 60),
            ChangeKind.LOWERED,
        ),
    ],
)
def test_compare_limits__sliding_windows__their_kind_decides_and_a_kind_change_lowers(
    before, after, kind
):
    # Given a limit per user replaced by another over the same period
    # Then the kind says the direction; a change of kind is a lowering
    assert compare_limits([before], [after]) is kind
