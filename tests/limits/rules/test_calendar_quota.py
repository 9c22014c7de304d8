"""Calendar quotas and tenants' calendars in the control plane: saved, validated,
published in the snapshot's format (a quota, ``calendars`` and ``zones``) that the
client parses, and rolled back."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from limits.choices import Dimension, LimitKind, ScopeKind
from limits.models import Limit, Policy, Snapshot, Tenant
from limits.publishing.rollback import snapshot_rollback
from limits.publishing.services import snapshot_publish
from limits.rules import services
from sluice.model import Calendar, CalendarQuota
from sluice.snapshot import Snapshot as ClientSnapshot

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("no_notice_period", "no_approval_rule"),
]

PARIS = "CET-1CEST,M3.5.0,M10.5.0/3"


def quota_row(**fields) -> Limit:
    """10,000 a month per tenant, on the billing cycle."""
    values = {
        "kind": LimitKind.CALENDAR_QUOTA,
        "dimension": Dimension.TENANT,
        "rate": 10000,
        "period": None,
        "burst": None,
        "quota_per": "month",
        "quota_cycle": "billing",
    }
    return Limit(**{**values, **fields})


def pro_policy(rules) -> Policy:
    """An unsaved pro policy on orders.read (a route of cost 2)."""
    return Policy(scope=ScopeKind.TIER, tier=rules["pro"], route=rules["orders"])


def test_publish__quota_and_calendars__snapshot_format_the_client_parses(
    rules, publisher
):
    # Given a pro policy on orders.read of 20/s burst 40 AND 10,000 a month on the
    # billing cycle, and acme in Paris billed on the 17th (globex, initech: defaults)
    bucket = Limit(dimension=Dimension.TENANT, rate=20, period=1, burst=40)
    services.policy_save(
        policy=pro_policy(rules), limits=[bucket, quota_row()], actor=publisher
    )
    Tenant.objects.filter(slug="acme").update(time_zone="Europe/Paris", billing_day=17)
    # When it is published
    version = snapshot_publish(actor=publisher, message="quotas")
    # Then the snapshot holds the quota in the client's words, and only acme's calendar
    document = json.loads(bytes(version.content))["rules"]
    (published,) = [
        p["limits"]
        for p in document["policies"]
        if (p["scope"], p["route"]) == ("tier:pro", "orders.read")
    ]
    assert {
        "kind": "calendar_quota",
        "dimension": "tenant",
        "limit": 10000,
        "per": "month",
        "cycle": "billing",
        "cost": None,
        "shadow": False,
    } in published
    assert document["calendars"] == {
        "acme": {"zone": "Europe/Paris", "billing_day": 17}
    }
    assert document["zones"] == {"Europe/Paris": PARIS}
    # And the client reads the same values back
    parsed = ClientSnapshot.from_bytes(bytes(version.content)).rules
    assert parsed.calendars == {"acme": Calendar(zone="Europe/Paris", billing_day=17)}
    assert parsed.zones == {"Europe/Paris": PARIS}
    (policy,) = [
        p for p in parsed.policies if p.key == ("tier:pro", "orders.read", False)
    ]
    assert CalendarQuota(Dimension.TENANT, 10000, "month", "billing") in policy.limits
    assert str(Limit.objects.get(kind=LimitKind.CALENDAR_QUOTA)).startswith(
        "per tenant: monthly quota (billing cycle) of 10,000 requests"
    )


def test_publish__every_tenant_on_utc_and_day_1__no_calendars_nor_zones_written(
    rules, publisher
):
    # Given tenants with the default calendar (most of 100,000)
    # When the rules are published
    version = snapshot_publish(actor=publisher, message="v1")
    # Then the snapshot has neither member: older snapshots keep their bytes
    document = json.loads(bytes(version.content))["rules"]
    assert "calendars" not in document
    assert "zones" not in document


def test_publish__billing_day_without_a_zone__calendar_without_a_zone_member(
    rules, publisher
):
    Tenant.objects.filter(slug="globex").update(billing_day=31)
    version = snapshot_publish(actor=publisher, message="v1")
    document = json.loads(bytes(version.content))["rules"]
    assert document["calendars"] == {"globex": {"billing_day": 31}}
    assert "zones" not in document


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"burst": 10}, "burst", "A calendar quota has no burst"),
        ({"period": 3600}, "period", "A calendar quota has no period"),
        ({"shards": 2}, "shards", "Shards are for rate limits"),
        ({"lease": 5}, "lease", "Leases are for rate limits"),
        ({"rate": None}, "rate", "A calendar quota needs this"),
        ({"quota_per": ""}, "quota_per", "A calendar quota needs this"),
        ({"quota_per": "day"}, "quota_cycle", "A billing cycle is a month"),
        ({"rate": 2, "cost": 3}, "rate", "limit 2 is below the request cost 3"),
    ],
    ids=[
        "burst",
        "period",
        "shards",
        "lease",
        "no limit",
        "no per",
        "daily billing",
        "below its cost",
    ],
)
def test_limit_clean__calendar_quota_with_a_bad_setting__refused_by_field(
    fields, field, message
):
    with pytest.raises(ValidationError) as caught:
        quota_row(**fields).clean()
    assert caught.value.message_dict[field][0].startswith(message)


def test_limit_clean__quota_with_the_untouched_period_default__period_dropped():
    # The column's default (one second, a bucket's) is what a body without a period leaves
    row = quota_row(period=1, quota_cycle="")
    row.clean()
    assert (row.period, row.quota_cycle) == (None, "calendar")


def test_policy_validate__quota_below_the_route_cost__row_named(rules, publisher):
    limits = [
        Limit(dimension=Dimension.USER, rate=10, period=1, burst=10),
        quota_row(rate=1),
    ]
    with pytest.raises(ValidationError) as caught:
        services.policy_validate(
            policy=pro_policy(rules), limits=limits, actor=publisher
        )
    assert any(
        text.startswith("limit 2, limit: limit 1 is below the request cost 2")
        for text in caught.value.message_dict["limits"]
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"burst": 5},
        {"period": 60},
        {"quota_per": "week"},
        {"quota_per": "day", "quota_cycle": "billing"},
        {"quota_cycle": ""},
    ],
    ids=["burst", "period", "a week", "daily billing", "no cycle"],
)
def test_limit__calendar_quota_the_kind_forbids__refused_by_the_database(rules, fields):
    policy = Policy.objects.create(
        scope=ScopeKind.TIER, tier=rules["free"], route=rules["orders"]
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        quota_row(policy=policy, **fields).save()


def test_limit__bucket_with_a_quota_per__refused_by_the_database(rules):
    policy = Policy.objects.create(
        scope=ScopeKind.TIER, tier=rules["free"], route=rules["orders"]
    )
    bucket = Limit(
        policy=policy,
        dimension=Dimension.TENANT,
        rate=1,
        period=1,
        burst=1,
        quota_per="day",
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        bucket.save()


def test_tenant__billing_day_beyond_31__refused_by_the_database(rules):
    with pytest.raises(IntegrityError), transaction.atomic():
        Tenant.objects.filter(slug="acme").update(billing_day=32)


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "Europe", "../etc/passwd", ""])
def test_tenant_clean__unknown_time_zone__refused_by_field(rules, zone):
    tenant = Tenant.objects.get(slug="acme")
    tenant.time_zone = zone
    with pytest.raises(ValidationError) as caught:
        tenant.full_clean()
    assert list(caught.value.message_dict) == ["time_zone"]


def test_rollback__quota_and_calendar_changed__restored_exactly(rules, publisher):
    # Given version 1 with a quota and acme in Paris, then a version without either
    policy = pro_policy(rules)
    services.policy_save(
        policy=policy, limits=[quota_row(public_name="Monthly calls")], actor=publisher
    )
    Tenant.objects.filter(slug="acme").update(time_zone="Europe/Paris", billing_day=17)
    v1 = snapshot_publish(actor=publisher, message="v1")
    bucket = Limit(dimension=Dimension.TENANT, rate=20, period=1, burst=40)
    services.policy_save(policy=policy, limits=[bucket], actor=publisher)
    Tenant.objects.filter(slug="acme").update(time_zone="UTC", billing_day=1)
    v2 = snapshot_publish(actor=publisher, message="v2")
    assert "calendars" not in json.loads(bytes(v2.content))["rules"]
    # When version 1 is rolled back to
    snapshot_rollback(actor=publisher, version=1, message="undo")
    # Then the rows compile to version 1's rules again, quota and calendar included
    latest = Snapshot.objects.order_by("-version").first()
    restored = json.loads(bytes(latest.content))["rules"]
    assert restored == json.loads(bytes(v1.content))["rules"]
    acme = Tenant.objects.get(slug="acme")
    assert (acme.time_zone, acme.billing_day) == ("Europe/Paris", 17)
    (row,) = Limit.objects.filter(
        policy__tier=rules["pro"], policy__route=rules["orders"]
    )
    assert (row.kind, row.rate, row.quota_per, row.quota_cycle) == (
        "calendar_quota",
        10000,
        "month",
        "billing",
    )


@pytest.fixture
def quota_live(rules, publisher, settings):
    """Version 1: pro on orders.read holds 10,000 a month per tenant; then the
    notice period is back (14 days)."""
    services.policy_save(
        policy=pro_policy(rules), limits=[quota_row()], actor=publisher
    )
    version = snapshot_publish(actor=publisher, message="v1")
    settings.SLUICE_NOTICE_PERIOD_DAYS = 14
    return version


def test_snapshot_publish__quota_lowered_now__refused_for_the_notice_period(
    quota_live, publisher
):
    from limits.publishing.notice import NoticePeriodTooShort

    # Given the quota lowered from 10,000 to 5,000 a month
    Limit.objects.filter(kind=LimitKind.CALENDAR_QUOTA).update(rate=5000)
    # When it is published to take effect now, then the notice period refuses it
    with pytest.raises(NoticePeriodTooShort) as caught:
        snapshot_publish(actor=publisher, message="lower")
    assert "monthly quota (billing cycle) lowered from 10,000 to 5,000 calls" in str(
        caught.value
    )


def test_snapshot_publish__tenant_calendar_moved_now__published_and_said(
    quota_live, publisher
):
    # Given acme moved to Tokyo: a change of its quotas' periods, not a lowering
    Tenant.objects.filter(slug="acme").update(time_zone="Asia/Tokyo")
    # When it is published now, then it is, and its diff says it in words
    version = snapshot_publish(actor=publisher, message="acme in Tokyo")
    (change,) = version.diff["changes"]
    assert change["text"].startswith("tenant acme calendar: time zone UTC → Asia/Tokyo")
    assert json.loads(bytes(version.content))["rules"]["zones"] == {
        "Asia/Tokyo": "JST-9"
    }
