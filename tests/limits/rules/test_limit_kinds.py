"""Limits of kind "concurrent" and hot-key options: saved, validated, published, diffed, rolled back."""

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
from limits.rules.compiling import policy_to_snapshot
from limits.versions.explain import explain
from limits.versions.selectors import snapshot_diff

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_notice_period")]


def concurrent_row(**fields) -> Limit:
    values = {
        "kind": LimitKind.CONCURRENT,
        "dimension": Dimension.TENANT,
        "rate": None,
        "period": None,
        "burst": None,
        "max_inflight": 3,
        "timeout": 60,
    }
    return Limit(**{**values, **fields})


def export_policy(rules) -> Policy:
    """An unsaved pro policy on orders.read (a route of cost 2)."""
    return Policy(scope=ScopeKind.TIER, tier=rules["pro"], route=rules["orders"])


def test_policy_save__concurrent_and_hot_key_limits__compiled_into_the_snapshot(
    rules, publisher
):
    # Given a policy with a leased rate limit and a concurrency cap
    policy = export_policy(rules)
    limits = [
        Limit(dimension=Dimension.TENANT, rate=600, period=60, burst=600, lease=20),
        concurrent_row(),
    ]
    # When product saves it and publishes
    services.policy_save(policy=policy, limits=limits, actor=publisher)
    version = snapshot_publish(actor=publisher, message="caps")
    # Then the snapshot carries both, in their own lists
    compiled = policy_to_snapshot(Policy.objects.get(pk=policy.pk))
    assert [lim.lease for lim in compiled.limits] == [20]
    assert [(c.max_inflight, c.timeout) for c in compiled.concurrency] == [(3, 60)]
    assert b'"concurrency":[{"dimension":"tenant","max_inflight":3' in bytes(
        version.content
    )
    assert sorted(str(limit) for limit in policy.limits.all()) == [
        "per tenant: 600 / min, burst 600, leases of 20 for 1,000 ms",
        "per tenant: at most 3 in flight (released after 60 s at most)",
    ]


@pytest.mark.parametrize(
    ("second", "message"),
    [
        (concurrent_row(max_inflight=None), "limit 2, max_inflight: A concurrent"),
        (
            Limit(dimension=Dimension.USER, rate=10, period=1, burst=3, shards=2),
            "limit 2, shards: each of 2 shards would hold 1 tokens, below the request cost 2",
        ),
        (
            Limit(
                dimension=Dimension.USER, rate=10, period=1, burst=10, shards=2, lease=2
            ),
            "limit 2, lease: A limit is either sharded or leased",
        ),
    ],
    ids=["concurrent without a cap", "shards too shallow", "shards and lease"],
)
def test_policy_validate__bad_second_row__message_names_the_row(
    rules, publisher, second, message
):
    # Given a concurrency cap in row 1 and a faulty row 2 (the route costs 2)
    limits = [concurrent_row(), second]
    # When the policy is validated
    with pytest.raises(ValidationError) as caught:
        services.policy_validate(
            policy=export_policy(rules), limits=limits, actor=publisher
        )
    # Then the message counts rows as people see them, whatever their kind
    assert any(text.startswith(message) for text in caught.value.message_dict["limits"])


def test_limit__concurrent_row_with_a_rate__refused_by_the_database(rules):
    policy = Policy.objects.create(
        scope=ScopeKind.TIER, tier=rules["free"], route=rules["orders"]
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        concurrent_row(policy=policy, rate=5).save()


def test_diff__cap_lowered_and_shards_changed__lowered_and_told(rules, publisher):
    # Given a published policy with a cap of 3 and a sharded bucket
    policy = export_policy(rules)
    bucket = Limit(dimension=Dimension.TENANT, rate=900, period=1, burst=900, shards=3)
    services.policy_save(
        policy=policy, limits=[bucket, concurrent_row()], actor=publisher
    )
    snapshot_publish(actor=publisher, message="v1")
    # When the cap goes down to 2 and the bucket is split in 6
    Limit.objects.filter(policy=policy, kind=LimitKind.CONCURRENT).update(
        max_inflight=2
    )
    Limit.objects.filter(policy=policy, kind=LimitKind.RATE).update(shards=6)
    diff = snapshot_diff()
    # Then the change lowers (notice needed) and says both in words
    (change,) = diff.changes
    assert change.lowers
    assert "at most 3 in flight" in change.text
    assert "at most 2 in flight" in change.text
    assert "6 shards" in change.text
    kinds = {(lim.period, lim.kind.value) for lim in change.limits}
    assert kinds == {(1, "changed"), (None, "lowered")}


def test_rollback__cap_and_lease_removed__restored_exactly(rules, publisher):
    # Given version 1 with a leased bucket and a cap, then a version without them
    policy = export_policy(rules)
    leased = Limit(dimension=Dimension.TENANT, rate=60, period=60, burst=60, lease=5)
    services.policy_save(
        policy=policy, limits=[leased, concurrent_row()], actor=publisher
    )
    v1 = snapshot_publish(actor=publisher, message="v1")
    Limit.objects.filter(policy=policy, kind=LimitKind.CONCURRENT).delete()
    Limit.objects.filter(policy=policy).update(lease=0)
    snapshot_publish(actor=publisher, message="v2")
    # When version 1 is rolled back to
    snapshot_rollback(actor=publisher, version=1, message="undo")
    # Then the rows compile to version 1's rules again
    latest = Snapshot.objects.order_by("-version").first()
    restored = json.loads(bytes(latest.content))["rules"]
    assert restored == json.loads(bytes(v1.content))["rules"]


def test_explain__sharded_bucket_and_cap__keys_shown(rules, publisher):
    # Given a published policy with a sharded bucket and a cap
    policy = export_policy(rules)
    bucket = Limit(dimension=Dimension.TENANT, rate=900, period=1, burst=900, shards=3)
    services.policy_save(
        policy=policy, limits=[bucket, concurrent_row()], actor=publisher
    )
    snapshot_publish(actor=publisher, message="v1")
    # When a pro tenant's request is explained
    result = explain(tenant="acme", route="orders.read")
    # Then the shards it picks from and the set it holds a slot in are named
    assert [key.key for key in result.keys] == [
        "rl:{tenant:acme}:route:orders.read:tenant:acme:1s:s0…s2",
        "rl:{tenant:acme}:route:orders.read:tenant:acme:inflight",
    ]
    assert (
        "per tenant: at most 3 in flight (released after 60 s at most)" in result.limits
    )
