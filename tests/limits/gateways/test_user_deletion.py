"""Deleting a user is audited, from the admin or the ORM, and their API tokens stay,
revoked and without an owner."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from limits.choices import AuditAction
from limits.core.audit import Actor
from limits.core.chain import chain_verify
from limits.gateways.tokens import token_create
from limits.gateways.users import ORM_ACTOR
from limits.models import ApiToken, AuditEntry
from tests.api.conftest import ApiClient
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def leaver():
    """A product person with an API token, and the token's secret."""
    user = UserFactory(username="lee-leaver", role="product", email="lee@example.com")
    token = ApiToken(name="ci", user=user)
    secret = token_create(token=token, actor=Actor.system("test"))
    return user, token, secret


def _deletion() -> AuditEntry:
    return AuditEntry.objects.get(object_type="user", action=AuditAction.DELETE)


def test_user_delete__through_the_orm__audited_and_token_kept_revoked(leaver):
    # Given a user with an active API token
    user, token, secret = leaver
    # When the user is deleted through the ORM (a shell, a script)
    get_user_model().objects.filter(pk=user.pk).delete()
    # Then the deletion is recorded with what the user was, as the system
    entry = _deletion()
    assert (entry.object_repr, entry.actor) == ("lee-leaver", ORM_ACTOR)
    assert entry.before["groups"] == ["product"]
    assert entry.before["api_tokens"] == [token.prefix]
    # And the token is still there, revoked, without an owner, its revocation audited
    token.refresh_from_db()
    assert (token.user, token.revoked_at is not None) == (None, True)
    revoked = AuditEntry.objects.get(action=AuditAction.TOKEN_REVOKE)
    assert revoked.reason == "user lee-leaver deleted"
    assert chain_verify().intact
    # And the secret opens nothing any more
    response = ApiClient().bearer(secret).get("/api/v1/tiers")
    assert response.status_code == 401


def test_user_delete__from_the_admin__audited_as_the_person_who_deleted(client, leaver):
    # Given a superuser on the user's delete page
    user, token, _ = leaver
    admin = UserFactory(username="ada-admin", is_superuser=True)
    client.force_login(admin)
    # When they confirm the deletion
    response = client.post(
        reverse("admin:auth_user_delete", args=[user.pk]),
        {"post": "yes"},
        HTTP_X_REQUEST_ID="req-del-1",
    )
    # Then it is recorded once, as them, with the request id; the token stays revoked
    assert response.status_code == 302
    entry = _deletion()
    assert (entry.actor, entry.request_id) == ("ada-admin", "req-del-1")
    assert AuditEntry.objects.filter(object_type="user").count() == 1
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert token.user is None


def test_user_delete__bulk_admin_action__each_user_audited(client):
    users = [UserFactory(username=f"temp-{n}") for n in (1, 2)]
    client.force_login(UserFactory(username="ada-admin", is_superuser=True))
    client.post(
        reverse("admin:auth_user_changelist"),
        {
            "action": "delete_selected",
            "_selected_action": [u.pk for u in users],
            "post": "yes",
        },
    )
    entries = AuditEntry.objects.filter(object_type="user", action=AuditAction.DELETE)
    assert sorted((e.object_repr, e.actor) for e in entries) == [
        ("temp-1", "ada-admin"),
        ("temp-2", "ada-admin"),
    ]
