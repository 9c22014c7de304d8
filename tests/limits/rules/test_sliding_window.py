"""Limits of kind "sliding_window" in the control plane: saved, validated,
published as the snapshot's format, decided by the client, rolled back."""

from __future__ import annotations

import json

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from limits.choices import Dimension, LimitKind, ScopeKind
from limits.models import Limit, Policy, Snapshot
from limits.publishing.rollback import snapshot_rollback
from limits.publishing.services import snapshot_publish
from limits.rules import services
from sluice import Limiter
from sluice.snapshot import Snapshot as ClientSnapshot

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_notice_period")]


def window_row(**fields) -> Limit:
    """3 in any hour per tenant: nothing drains while a test runs."""
    values = {
        "kind": LimitKind.SLIDING_WINDOW,
        "dimension": Dimension.TENANT,
        "rate": 3,
        "period": 3600,
        "burst": None,
    }
    return Limit(**{**values, **fields})


def pro_policy(rules) -> Policy:
    """An unsaved pro policy on orders.read (a route of cost 2)."""
    return Policy(scope=ScopeKind.TIER, tier=rules["pro"], route=rules["orders"])


def test_publish__sliding_window__snapshot_format_and_the_client_decides_with_it(
    rules, publisher, redis_client
):
    # Given a pro policy on orders.read (cost 2) holding 6 in any hour per tenant
    policy = pro_policy(rules)
    services.policy_save(policy=policy, limits=[window_row(rate=6)], actor=publisher)
    # When it is published
    version = snapshot_publish(actor=publisher, message="windows")
    # Then the snapshot holds the window in the client's format
    document = json.loads(bytes(version.content))
    (published,) = [
        p
        for p in document["rules"]["policies"]
        if (p["scope"], p["route"]) == ("tier:pro", "orders.read")
    ]
    assert published["limits"] == [
        {
            "kind": "sliding_window",
            "dimension": "tenant",
            "limit": 6,
            "window": 3600,
            "cost": None,
            "shadow": False,
        }
    ]
    assert str(Limit.objects.get(policy=policy)) == (
        "per tenant: 6 requests per hour, sliding window"
    )
    # And a gateway with that snapshot admits three requests of cost 2, not a fourth
    limiter = Limiter(redis_client, ClientSnapshot.from_bytes(bytes(version.content)))
    decisions = [
        limiter.decide(route="orders.read", tenant="acme").allowed for _ in range(4)
    ]
    assert decisions == [True, True, True, False]


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"burst": 10}, "burst", "A sliding window has no burst"),
        ({"shards": 2}, "shards", "Shards are for rate limits"),
        ({"lease": 5}, "lease", "Leases are for rate limits"),
        ({"rate": None}, "rate", "A sliding window needs this"),
        ({"rate": 2, "cost": 3}, "rate", "limit 2 is below the request cost 3"),
    ],
    ids=["burst", "shards", "lease", "no limit", "below its cost"],
)
def test_limit_clean__sliding_window_with_a_bucket_setting__refused_by_field(
    fields, field, message
):
    with pytest.raises(ValidationError) as caught:
        window_row(**fields).clean()
    assert caught.value.message_dict[field][0].startswith(message)


def test_policy_validate__window_below_the_route_cost__row_named(rules, publisher):
    # Given a window of 1 on a route of cost 2, in the second row
    limits = [
        Limit(dimension=Dimension.USER, rate=10, period=1, burst=10),
        window_row(rate=1),
    ]
    # When the policy is validated, then the message names the row and its limit
    with pytest.raises(ValidationError) as caught:
        services.policy_validate(
            policy=pro_policy(rules), limits=limits, actor=publisher
        )
    assert any(
        text.startswith("limit 2, limit: limit 1 is below the request cost 2")
        for text in caught.value.message_dict["limits"]
    )


def test_limit__sliding_window_with_a_burst__refused_by_the_database(rules):
    policy = Policy.objects.create(
        scope=ScopeKind.TIER, tier=rules["free"], route=rules["orders"]
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        window_row(policy=policy, burst=5).save()


def test_rollback__window_removed__restored_exactly(rules, publisher):
    # Given version 1 with a bucket and a sliding window, then a version without it
    policy = pro_policy(rules)
    bucket = Limit(dimension=Dimension.TENANT, rate=60, period=60, burst=60)
    window = window_row(cost=2, public_name="Hourly window")
    services.policy_save(policy=policy, limits=[bucket, window], actor=publisher)
    v1 = snapshot_publish(actor=publisher, message="v1")
    Limit.objects.filter(policy=policy, kind=LimitKind.SLIDING_WINDOW).delete()
    snapshot_publish(actor=publisher, message="v2")
    # When version 1 is rolled back to
    snapshot_rollback(actor=publisher, version=1, message="undo")
    # Then the rows compile to version 1's rules again
    latest = Snapshot.objects.order_by("-version").first()
    restored = json.loads(bytes(latest.content))["rules"]
    assert restored == json.loads(bytes(v1.content))["rules"]
