"""docs/snapshot.schema.json describes the snapshots that are really published."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from jsonschema import Draft202012Validator

import sluice.model as sluice_model
from limits.choices import Dimension, FailureMode, LimitKind, ScopeKind
from limits.models import Limit, Snapshot
from limits.publishing.rollback import snapshot_rollback
from limits.publishing.services import snapshot_publish
from tests.factories import PolicyFactory, RouteFactory

SCHEMA = json.loads(
    (Path(__file__).parents[2] / "docs" / "snapshot.schema.json").read_text()
)


@pytest.fixture
def validator():
    Draft202012Validator.check_schema(SCHEMA)
    return Draft202012Validator(SCHEMA)


def test_snapshot_schema__published_versions__all_valid(rules, publisher, validator):
    # Given every feature of the format in the working copy: an override with an
    # expiry, a cost override, a shadow limit, several methods, each failure mode,
    # a sharded limit, a leased one and a concurrency cap
    PolicyFactory(
        scope=ScopeKind.TENANT,
        tenant=rules["acme"],
        route=rules["search"],
        expires_at=timezone.now() + timedelta(days=3),
        reason="Launch",
    )
    export = RouteFactory(
        slug="export",
        methods=["GET", "POST"],
        path_pattern="/v1/reports/{id}/export",
        cost=5,
        failure_mode=FailureMode.LOCAL,
    )
    policy = PolicyFactory(
        scope=ScopeKind.TIER, tier=rules["pro"], route=export, limit=None
    )
    Limit.objects.create(
        policy=policy, dimension=Dimension.API_KEY, rate=1, period=60, burst=5
    )
    Limit.objects.create(
        policy=policy,
        dimension=Dimension.IP,
        rate=9,
        period=3600,
        burst=9,
        cost=9,
        shadow=True,
    )
    Limit.objects.create(
        policy=policy,
        dimension=Dimension.TENANT,
        rate=900,
        period=1,
        burst=900,
        shards=3,
    )
    Limit.objects.create(
        policy=policy,
        dimension=Dimension.USER,
        rate=60,
        period=60,
        burst=60,
        lease=10,
        lease_ms=500,
    )
    Limit.objects.create(
        policy=policy,
        kind=LimitKind.CONCURRENT,
        dimension=Dimension.TENANT,
        rate=None,
        period=None,
        burst=None,
        max_inflight=4,
        timeout=120,
    )
    # When published, changed and published for later, then rolled back
    snapshot_publish(actor=publisher, message="v1")
    Limit.objects.filter(policy=policy, dimension=Dimension.API_KEY).update(rate=2)
    snapshot_publish(
        actor=publisher, message="v2", effective_at=timezone.now() + timedelta(days=1)
    )
    snapshot_rollback(actor=publisher, version=1, message="undo")
    # Then every stored document validates against the schema, and uses them
    documents = [bytes(row.content) for row in Snapshot.objects.all()]
    assert all(b'"shards":3' in d and b'"max_inflight":4' in d for d in documents)
    for row in Snapshot.objects.all():
        document = json.loads(bytes(row.content))
        assert list(validator.iter_errors(document)) == [], row


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("rules", "policies", 0, "limits", 0, "rate"), 1.5),
        (("rules", "routes", "search", "failure_mode"), "sometimes"),
        (("published_at",), "2026-12-01T00:00:00+01:00"),
        (("rules", "extra"), {}),
    ],
    ids=["float", "unknown failure mode", "not UTC", "unknown member"],
)
def test_snapshot_schema__malformed_document__rejected(
    rules, publisher, validator, path, value
):
    document = json.loads(
        bytes(snapshot_publish(actor=publisher, message="v1").content)
    )
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert list(validator.iter_errors(document))


@pytest.mark.parametrize(
    ("limit", "valid"),
    [
        (sluice_model.SlidingWindow(sluice_model.Dimension.USER, 100, 60), True),
        (sluice_model.Limit(sluice_model.Dimension.USER, 10, 1, 20), True),
        (
            {
                "kind": "gcra",
                "dimension": "ip",
                "rate": 1,
                "period": 1,
                "burst": 1,
                "cost": None,
                "shadow": False,
            },
            True,
        ),
        (
            {
                "kind": "sliding_window",
                "dimension": "ip",
                "limit": 5,
                "window": 60,
                "cost": None,
                "shadow": False,
                "shards": 2,
            },
            False,
        ),
        (
            {
                "kind": "leaky",
                "dimension": "ip",
                "rate": 1,
                "period": 1,
                "burst": 1,
                "cost": None,
                "shadow": False,
            },
            False,
        ),
    ],
)
def test_snapshot_schema__limit_kinds__kind_absent_is_gcra(limit, valid):
    # Given the schema of one limit, and a limit of each kind (the client's own
    # documents, or written by hand)
    validator = Draft202012Validator(
        {"$defs": SCHEMA["$defs"], "$ref": "#/$defs/limit"}
    )
    document = limit if isinstance(limit, dict) else limit.to_json()
    # Then the schema takes a kind it knows, gcra when the member is absent
    assert validator.is_valid(document) is valid
