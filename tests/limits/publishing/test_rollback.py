"""Rollback: an earlier version's content, published again as a new version."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from limits.choices import AuditAction, ScopeKind, SnapshotKind
from limits.core.audit import Actor
from limits.models import AuditEntry, Limit, Policy, Route, Snapshot, Tenant
from limits.publishing.rollback import snapshot_rollback
from limits.publishing.services import NothingToPublish, snapshot_publish
from limits.rules.compiling import rules_compile
from limits.versions.selectors import snapshot_get_active
from tests.factories import PolicyFactory, RouteFactory, TenantFactory

# These tests are about publishing mechanics, not the notice period.
pytestmark = pytest.mark.usefixtures("no_notice_period", "no_approval_rule")

SYSTEM = Actor.system("test")


@pytest.fixture
def two_versions(rules, publisher):
    """Version 1, then version 2 that lowers pro search, adds a route and moves initech."""
    v1 = snapshot_publish(actor=publisher, message="v1")
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=20, burst=40)
    export = RouteFactory(slug="export", path_pattern="/v1/export", cost=3)
    PolicyFactory(scope=ScopeKind.TIER, tier=rules["pro"], route=export)
    Tenant.objects.filter(slug="initech").update(tier=rules["pro"])
    TenantFactory(slug="newco", tier=rules["free"])
    Policy.objects.filter(tenant=rules["globex"]).delete()
    v2 = snapshot_publish(actor=publisher, message="v2")
    return v1, v2


def test_snapshot_rollback__earlier_version__published_again_as_next_version(
    two_versions, publisher
):
    # Given versions 1 and 2, 2 active
    v1, v2 = two_versions
    # When rolling back to 1
    v3 = snapshot_rollback(actor=publisher, version=1, message="v2 broke search")
    # Then version 3 is active with version 1's rules; 1 and 2 are untouched
    assert (v3.version, v3.parent_version, v3.kind, v3.restored_version) == (
        3,
        2,
        SnapshotKind.ROLLBACK,
        1,
    )
    assert v3.rules_digest == v1.rules_digest != v2.rules_digest
    assert snapshot_get_active() == v3
    assert Snapshot.objects.get(version=1).hash == v1.hash
    kinds = {change["key"]: change["kind"] for change in v3.diff["changes"]}
    assert kinds["tier:pro/search"] == "raised"
    assert kinds["export"] == "removed"
    entry = AuditEntry.objects.get(action=AuditAction.ROLLBACK)
    assert (entry.object_repr, entry.reason) == ("version 3", "v2 broke search")


def test_snapshot_rollback__working_copy__restored_and_audited(two_versions, publisher):
    # Given versions 1 and 2
    v1, _ = two_versions
    # When rolling back to 1
    snapshot_rollback(actor=publisher, version=1, message="undo")
    # Then the rule tables say what version 1 says, each change audited as such
    assert rules_compile().digest() == v1.rules_digest
    assert not Route.objects.filter(slug="export").exists()
    assert Tenant.objects.get(slug="initech").tier.slug == "free"
    assert Policy.objects.filter(tenant__slug="globex").exists()
    restored = AuditEntry.objects.filter(reason="rollback to version 1: undo")
    assert {(e.action, e.object_type) for e in restored} >= {
        (AuditAction.DELETE, "route"),
        (AuditAction.DELETE, "tenant"),
        (AuditAction.UPDATE, "tenant"),
        (AuditAction.CREATE, "policy"),
        (AuditAction.UPDATE, "policy"),
    }
    # And the next publish does not undo the rollback: there is nothing to publish
    with pytest.raises(NothingToPublish):
        snapshot_publish(actor=publisher, message="again")


def test_snapshot_rollback__costs_and_bursts_swapped__restored_despite_order(
    rules, publisher
):
    # Given version 1 with a cheap route and shallow buckets, then a version where
    # the route costs 8 and the buckets are deeper (no object-by-object order is valid)
    snapshot_publish(actor=publisher, message="v1")
    Limit.objects.update(burst=40)
    Route.objects.filter(slug="orders.read").update(cost=30)
    snapshot_publish(actor=publisher, message="v2")
    # When rolling back to 1 / Then it is restored exactly
    v3 = snapshot_rollback(actor=publisher, version=1, message="undo")
    assert v3.rules_digest == Snapshot.objects.get(version=1).rules_digest


def test_snapshot_rollback__active_content__refused_and_nothing_changed(
    two_versions, publisher
):
    # Given version 2 active, and an unpublished edit in the working copy
    Route.objects.filter(slug="export").update(cost=4)
    entries = AuditEntry.objects.count()
    # When rolling back to 2 / Then it is refused, and the edit is still there
    with pytest.raises(NothingToPublish, match="same as version 2"):
        snapshot_rollback(actor=publisher, version=2, message="noop")
    assert Route.objects.get(slug="export").cost == 4
    assert AuditEntry.objects.count() == entries


def test_snapshot_rollback__scheduled_version_pending__superseded(
    two_versions, publisher
):
    # Given version 3 scheduled for tomorrow
    Route.objects.filter(slug="export").update(cost=4)
    snapshot_publish(
        actor=publisher, message="v3", effective_at=timezone.now() + timedelta(days=1)
    )
    # When rolling back to 1, now / Then 3 will never take effect
    v4 = snapshot_rollback(actor=publisher, version=1, message="emergency")
    assert Snapshot.objects.get(version=3).superseded_by == v4.version == 4


def test_snapshot_rollback__to_active_version__cancels_scheduled_one(
    two_versions, publisher
):
    # Given version 2 active and version 3 scheduled for tomorrow
    Route.objects.filter(slug="export").update(cost=4)
    snapshot_publish(
        actor=publisher, message="v3", effective_at=timezone.now() + timedelta(days=1)
    )
    # When rolling back to 2, the active content
    v4 = snapshot_rollback(actor=publisher, version=2, message="cancel v3")
    # Then version 4 repeats 2 and version 3 never takes effect
    assert (v4.parent_version, v4.diff["changes"]) == (2, [])
    assert Snapshot.objects.get(version=3).superseded_by == 4
    assert Route.objects.get(slug="export").cost == 3


def test_snapshot_rollback__unknown_version__refused(rules, publisher):
    with pytest.raises(ValidationError, match="no version 9"):
        snapshot_rollback(actor=publisher, version=9, message="?")


def test_snapshot_rollback__support_role__permission_denied(two_versions, support):
    with pytest.raises(PermissionDenied):
        snapshot_rollback(actor=Actor(user=support), version=1, message="?")
