"""The lifecycle of temporary overrides: reminders, one-click renewal, pruning."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from limits.changes.overrides import (
    override_reminders_send_due,
    override_renew,
    overrides_prune,
)
from limits.changes.publishing import change_request_publish
from limits.changes.services import Proposal, change_request_open
from limits.core.audit import Actor
from limits.models import AuditEntry, ChangeRequest, Delivery, Policy, Snapshot
from limits.publishing.services import snapshot_publish
from limits.versions.selectors import snapshot_get_active, snapshot_rules
from sluice.rules import format_time
from tests.celery_fixtures import wait_until
from tests.factories import PolicyFactory, UserFactory

SYSTEM = Actor.system("test")


def _actor(user):
    return Actor(user=user, request_id="test")


def _support_override(support, tenant="initech", days=2):
    expires = timezone.now() + timedelta(days=days)
    doc = {
        "scope": f"tenant:{tenant}",
        "route": "search",
        "expires_at": format_time(expires),
        "reason": "Launch week",
        "limits": [
            {"dimension": "tenant", "rate": 50, "period": "second", "burst": 100}
        ],
    }
    request = change_request_open(
        actor=_actor(support), proposals=[Proposal("policy", "", doc)]
    )
    change_request_publish(change_request=request, actor=_actor(support))
    return Policy.objects.get(tenant__slug=tenant, expires_at__isnull=False)


@pytest.fixture
def active(rules):
    return snapshot_publish(actor=SYSTEM, message="v1")


def test_reminder__expiring_within_the_lead__mailed_once_to_author_and_support(
    active, mailoutbox, settings
):
    settings.SLUICE_OVERRIDE_REMINDER = [3 * 86400]
    author = UserFactory(username="sam", role="support", email="sam@sluice.test")
    UserFactory(username="kim", role="support", email="kim@sluice.test")
    _support_override(author, days=2)
    # When beat's reminder runs twice
    assert override_reminders_send_due() == 1
    assert override_reminders_send_due() == 0
    # Then one e-mail went to the author and the support group, saying how to renew
    (mail,) = mailoutbox
    assert sorted(mail.to) == ["kim@sluice.test", "sam@sluice.test"]
    assert "tenant initech · search (override)" in mail.subject
    assert "renew it from the admin's home page" in mail.body


def test_reminder__not_within_the_lead__none(active, mailoutbox, settings):
    settings.SLUICE_OVERRIDE_REMINDER = [86400]
    _support_override(UserFactory(username="sam", role="support"), days=2)
    assert override_reminders_send_due() == 0
    assert mailoutbox == []


def test_renew__one_click__a_request_extending_it_capped_at_the_maximum(
    active, settings
):
    settings.SLUICE_OVERRIDE_RENEW_DAYS = 30
    settings.SLUICE_OVERRIDE_MAX_DAYS = 20
    support = UserFactory(username="sam", role="support")
    override = _support_override(support, days=2)
    request = override_renew(policy=override, actor=_actor(support))
    (edit,) = request.edits.all()
    limit = format_time(timezone.now() + timedelta(days=20))
    assert edit.after["expires_at"] <= limit
    assert edit.after["expires_at"] > edit.before["expires_at"]
    assert (request.origin, request.lowers) == ("renewal", False)
    # Support publishes it: approval-free, its own override
    done = change_request_publish(change_request=request, actor=_actor(support))
    assert done.version is not None


def test_prune__expired_past_the_grace__removed_by_a_published_request_no_notice(
    rules, settings, django_capture_on_commit_callbacks
):
    settings.SLUICE_OVERRIDE_GRACE_DAYS = 7
    long_ago = timezone.now() - timedelta(days=8)
    recent = timezone.now() - timedelta(days=1)
    PolicyFactory(
        override=True,
        tenant=rules["initech"],
        route=rules["search"],
        expires_at=long_ago,
    )
    PolicyFactory(
        override=True, tenant=rules["acme"], route=rules["search"], expires_at=recent
    )
    snapshot_publish(actor=SYSTEM, message="v1")
    with django_capture_on_commit_callbacks(execute=True):
        done = overrides_prune()
    # Then the long-expired override is gone from the rules and the tables, the recent one kept
    keys = {p.key for p in snapshot_rules(done.version).policies}
    assert ("tenant:initech", "search", True) not in keys
    assert ("tenant:acme", "search", True) in keys
    assert not Policy.objects.filter(expires_at=long_ago).exists()
    # Taking effect at once, lowering nothing, reaching no one, audited
    assert done.version.activated_at is not None
    assert done.version.diff["lowers"] is False
    assert done.version.diff["affected"]["tenants"] == []
    assert done.change_request.origin == "prune"
    assert AuditEntry.objects.filter(
        object_type="policy", action="delete", actor="celery beat"
    ).exists()
    assert not Delivery.objects.exists()
    assert overrides_prune() is None  # nothing left to prune


@pytest.fixture
def prune_every_second(celery_env):
    celery_env.update(
        {"SLUICE_OVERRIDE_INTERVAL": "1", "SLUICE_OVERRIDE_GRACE_DAYS": "7"}
    )
    return celery_env


@pytest.mark.celery
@pytest.mark.django_db(transaction=True)
def test_prune__beat_and_a_real_worker__expired_override_leaves_the_rules(
    rules, redis_client, prune_every_second, celery_worker, celery_beat
):
    # Given an override that expired 8 days ago, still in the active version
    PolicyFactory(
        override=True,
        tenant=rules["initech"],
        route=rules["search"],
        expires_at=timezone.now() - timedelta(days=8),
    )
    first = snapshot_publish(actor=SYSTEM, message="v1")
    # When beat runs limits.overrides_maintain on the worker (every second; the wait is
    # wait_until's generous default, as a loaded machine may be slow to run it)
    pruned = wait_until(
        lambda: ChangeRequest.objects.filter(origin="prune", state="published").first(),
        why="beat to prune the expired override",
    )
    # Then a new version without it is active, published by celery beat
    active = snapshot_get_active()
    assert active.version == pruned.published_version == first.version + 1
    assert active.author == "celery beat"
    assert all(not p.is_override for p in snapshot_rules(active).policies)
    assert Snapshot.objects.count() == 2
