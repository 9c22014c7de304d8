"""Rules as code with calendar quotas and tenants' calendars: exported in the
snapshot's words, read back unchanged by the control plane and the client, applied
and published, bad members named at their line."""

from __future__ import annotations

import json

import pytest

from limits.ascode.services import (
    RulesFileInvalid,
    rules_export,
    rules_file_apply,
    rules_file_diff,
    rules_file_read,
)
from limits.choices import Dimension, LimitKind, ScopeKind
from limits.core.audit import Actor
from limits.models import Limit, Policy, Tenant
from limits.publishing.services import snapshot_publish
from limits.rules import services
from limits.versions.selectors import snapshot_rules
from sluice.model import Calendar
from sluice.rulesfile import rules_from_yaml

SYSTEM = Actor.system("test")
QUOTA = "{kind: calendar_quota, dimension: tenant, limit: 10000, per: month, cycle: billing}"
ACME = "acme:\n    name: Acme\n    tier: pro\n    time_zone: Europe/Paris\n    billing_day: 17\n"

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("no_notice_period", "no_approval_rule"),
]


@pytest.fixture
def quota_published(rules):
    """The active version: pro on orders.read holds 10,000 a month per tenant on the
    billing cycle, and acme is in Paris, billed on the 17th."""
    policy = Policy(scope=ScopeKind.TIER, tier=rules["pro"], route=rules["orders"])
    quota = Limit(
        kind=LimitKind.CALENDAR_QUOTA,
        dimension=Dimension.TENANT,
        rate=10000,
        period=None,
        burst=None,
        quota_per="month",
        quota_cycle="billing",
    )
    services.policy_save(policy=policy, limits=[quota], actor=SYSTEM)
    Tenant.objects.filter(slug="acme").update(
        name="Acme", time_zone="Europe/Paris", billing_day=17
    )
    return snapshot_publish(actor=SYSTEM, message="quotas")


def test_round_trip__quota_and_calendar__exported_read_by_both_sides_unchanged(
    quota_published,
):
    # Given the export of a version with a quota and a tenant's calendar
    text = rules_export()
    # Then both are written in the snapshot's words, other tenants without a calendar
    assert QUOTA in text
    assert ACME in text
    assert text.count("time_zone") == 1
    # And the file reads back as the same rules, by the control plane and the client
    assert rules_file_diff(rules_file_read(text)).equal
    client = rules_from_yaml(text)
    published = snapshot_rules(quota_published)
    assert sorted(map(repr, client.policies)) == sorted(map(repr, published.policies))
    assert client.calendars == published.calendars
    assert client.zones == published.zones
    assert client.calendars["acme"] == Calendar("Europe/Paris", 17)


def test_apply_publish__quota_lowered_and_billing_day_moved__stored_published_said(
    quota_published,
):
    # Given a file that lowers the quota and moves acme's billing day
    text = (
        rules_export()
        .replace(QUOTA, QUOTA.replace("10000", "5000"))
        .replace("billing_day: 17", "billing_day: 3")
    )
    diff = rules_file_diff(rules_file_read(text))
    # Then its diff says both in words, the quota's a lowering
    said = [change.text for change in diff.diff.changes]
    assert (
        "tier pro · orders.read: per tenant: monthly quota (billing cycle) lowered "
        "from 10,000 to 5,000 calls"
    ) in said
    assert any(
        line.startswith("tenant acme calendar: billing day 17 → 3") for line in said
    )
    assert diff.diff.lowers
    # When it is applied and published
    done = rules_file_apply(rules_file_read(text), actor=SYSTEM, publish=True)
    # Then the rows hold it, and the version's snapshot too
    assert done.not_published == ""
    (row,) = Limit.objects.filter(kind="calendar_quota")
    assert (row.rate, row.quota_per, row.quota_cycle) == (5000, "month", "billing")
    assert Tenant.objects.get(slug="acme").billing_day == 3
    rules = json.loads(bytes(done.published.version.content))["rules"]
    assert rules["calendars"] == {"acme": {"zone": "Europe/Paris", "billing_day": 3}}
    assert done.published.version.diff["counts"]["lowered"] == 1
    assert rules_file_diff(rules_file_read(text)).equal


def test_apply_publish__new_tenant_with_a_calendar__created_with_it(quota_published):
    text = rules_export().replace(
        ACME,
        ACME + "  hooli:\n    name: Hooli\n    tier: pro\n    time_zone: Asia/Tokyo\n",
    )
    done = rules_file_apply(rules_file_read(text), actor=SYSTEM, publish=True)
    assert done.not_published == ""
    hooli = Tenant.objects.get(slug="hooli")
    assert (hooli.time_zone, hooli.billing_day) == ("Asia/Tokyo", 1)
    rules = json.loads(bytes(done.published.version.content))["rules"]
    assert rules["zones"]["Asia/Tokyo"] == "JST-9"


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        (
            QUOTA,
            QUOTA.replace(", cycle: billing", ", burst: 10"),
            "unknown member(s): burst",
        ),
        (QUOTA, QUOTA.replace("per: month", "per: week"), "'week' is not one of"),
        (QUOTA, QUOTA.replace("per: month", "per: day"), "'month' was expected"),
        ("time_zone: Europe/Paris", "time_zone: Mars/Olympus", "not a known time zone"),
        ("billing_day: 17", "billing_day: 32", "32 is greater than the maximum of 31"),
    ],
    ids=["burst", "a week", "daily billing", "unknown zone", "day 32"],
)
def test_read__bad_quota_or_calendar__named_at_its_line(
    quota_published, old, new, said
):
    text = rules_export().replace(old, new)
    with pytest.raises(RulesFileInvalid) as caught:
        rules_file_read(text, name="rules.yaml")
    assert any(said in problem.message for problem in caught.value.problems), [
        p.message for p in caught.value.problems
    ]
    (problem,) = [p for p in caught.value.problems if said in p.message]
    line = text.splitlines()[problem.line - 1]
    assert ("kind: calendar_quota" in line) if old == QUOTA else (new in line)
