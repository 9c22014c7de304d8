"""Discussing a change request: comments, "request changes", reject, and who is told."""

from __future__ import annotations

import json

import pytest
from django.core import mail
from django.core.exceptions import PermissionDenied, ValidationError

from limits.announcements.signing import secret_generate
from limits.changes.notify import change_request_notify
from limits.changes.publishing import change_request_publish
from limits.changes.reviews import (
    change_request_comment,
    change_request_reject,
    change_request_request_changes,
)
from limits.changes.services import (
    change_request_approve,
    change_request_open,
    change_request_submit,
    change_request_update,
)
from limits.choices import AuditAction, Role
from limits.core.audit import Actor
from limits.models import AuditEntry, ChangeRequestState, Verdict
from limits.publishing.services import snapshot_publish
from tests.limits.changes.test_change_requests import _pro_search
from tests.limits.conftest import _user
from tests.receiver import receiver  # noqa: F401  (fixture)

SYSTEM = Actor.system("test")


def _actor(user) -> Actor:
    return Actor(user=user, request_id="test", ip="127.0.0.1")


@pytest.fixture
def lowering(rules, product, active):
    """An open request of product's lowering pro search (it needs an approval)."""
    return change_request_open(
        actor=_actor(product), proposals=[_pro_search(20, 40)], reason="Costs"
    )


@pytest.fixture
def active(rules):
    return snapshot_publish(actor=SYSTEM, message="v1")


@pytest.fixture
def reviewer(db):
    return _user("quinn", Role.PRODUCT)


def test_request_changes__author_edits_resubmits__reviewer_approves_and_it_publishes(
    lowering, product, reviewer, settings
):
    settings.SLUICE_NOTICE_PERIOD_DAYS = 0
    # Given an open request / When the reviewer requests changes, saying what
    change_request_request_changes(
        change_request=lowering, actor=_actor(reviewer), body="Say which ticket."
    )
    # Then it is a draft again, with the comment and its verdict, audited
    lowering.refresh_from_db()
    assert lowering.state == ChangeRequestState.DRAFT
    (comment,) = lowering.comments.all()
    assert (comment.verdict, comment.body, comment.author_name) == (
        Verdict.CHANGES,
        "Say which ticket.",
        "quinn",
    )
    assert AuditEntry.objects.filter(action=AuditAction.REVIEW).count() == 1
    # When the author edits the reason, saves and submits, and the reviewer approves
    change_request_update(
        change_request=lowering,
        actor=_actor(product),
        title=lowering.title,
        reason="Costs, ticket 4711",
    )
    change_request_submit(change_request=lowering, actor=_actor(product))
    change_request_approve(change_request=lowering, actor=_actor(reviewer))
    # Then it publishes, with the reason the author typed
    published = change_request_publish(change_request=lowering, actor=_actor(product))
    assert published.version is not None
    lowering.refresh_from_db()
    assert lowering.reason == "Costs, ticket 4711"


def test_reject__closes_the_request_with_the_reason(lowering, reviewer):
    change_request_reject(
        change_request=lowering, actor=_actor(reviewer), body="Not this quarter."
    )
    lowering.refresh_from_db()
    assert lowering.state == ChangeRequestState.REJECTED
    assert lowering.closed_at is not None
    assert not lowering.is_live
    with pytest.raises(ValidationError, match="only an open request"):
        change_request_reject(change_request=lowering, actor=_actor(reviewer), body="x")


def test_verdicts__author_or_support__refused_empty_body_named(
    lowering, product, support, reviewer
):
    with pytest.raises(PermissionDenied, match="own"):
        change_request_reject(change_request=lowering, actor=_actor(product), body="x")
    with pytest.raises(PermissionDenied, match="product role"):
        change_request_request_changes(
            change_request=lowering, actor=_actor(support), body="x"
        )
    with pytest.raises(ValidationError) as refused:
        change_request_request_changes(
            change_request=lowering, actor=_actor(reviewer), body="  "
        )
    assert "body" in refused.value.message_dict
    # And anyone with a role may comment, the author included
    change_request_comment(change_request=lowering, actor=_actor(support), body="+1")
    change_request_comment(change_request=lowering, actor=_actor(product), body="ok")
    assert lowering.comments.count() == 2


def test_notify__changes_requested__author_emailed_team_webhook_signed(
    lowering,
    product,
    reviewer,
    receiver,  # noqa: F811  (the fixture)
    settings,
):
    # Given a team webhook with a secret
    secret = secret_generate()
    settings.SLUICE_TEAM_WEBHOOK_URL = receiver.url
    settings.SLUICE_TEAM_WEBHOOK_SECRET = secret
    settings.SLUICE_WEBHOOK_ALLOW_PRIVATE = True
    # When the notification of a reviewer's "request changes" runs
    sent = change_request_notify(
        change_request_id=lowering.pk,
        event="change_request.changes_requested",
        actor="quinn",
        comment="Say which ticket.",
    )
    # Then the author got an email naming the request and the comment
    assert sent == {"emailed": ["product@x.test"], "webhook": 200}
    (email,) = mail.outbox
    assert email.to == ["product@x.test"]
    assert f"quinn requested changes to change request #{lowering.pk}" in email.subject
    assert "Say which ticket." in email.body
    # And the team's chat tool got a Standard Webhooks event with a text to show
    (got,) = receiver.requests
    body = json.loads(got.body)
    assert body["type"] == "change_request.changes_requested"
    assert body["change_request"]["id"] == lowering.pk
    assert "Say which ticket." in body["text"]
    assert got.headers["webhook-signature"].startswith("v1,")
    assert got.headers["webhook-id"] == body["id"]


def test_notify__submitted__reviewers_told_not_the_author(
    lowering, product, reviewer, settings
):
    settings.SLUICE_TEAM_WEBHOOK_URL = ""
    sent = change_request_notify(
        change_request_id=lowering.pk, event="change_request.submitted", actor="product"
    )
    assert sent == {"emailed": ["quinn@x.test"], "webhook": None}


def test_notify__team_webhook_down__raises_for_a_retry_which_emails_no_one_again(
    lowering,
    reviewer,
    receiver,  # noqa: F811  (the fixture)
    settings,
):
    settings.SLUICE_TEAM_WEBHOOK_URL = receiver.url
    settings.SLUICE_TEAM_WEBHOOK_SECRET = ""
    settings.SLUICE_WEBHOOK_ALLOW_PRIVATE = True
    receiver.statuses = [503]
    with pytest.raises(RuntimeError, match="503"):
        change_request_notify(
            change_request_id=lowering.pk,
            event="change_request.rejected",
            actor="quinn",
            comment="No.",
        )
    assert len(mail.outbox) == 1  # the first try emailed the author
    again = change_request_notify(
        change_request_id=lowering.pk,
        event="change_request.rejected",
        actor="quinn",
        comment="No.",
        email=False,
    )
    assert again == {"emailed": [], "webhook": 200}
    assert len(mail.outbox) == 1
    assert len(receiver.requests) == 2
