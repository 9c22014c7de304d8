"""Tokens in the admin: the secret is shown once, stored hashed, and revocation is audited."""

import pytest
from django.urls import reverse

from limits.choices import AuditAction
from limits.models import AuditEntry, GatewayToken, hash_secret

pytestmark = pytest.mark.django_db


def test_gateway_token__created_in_admin__secret_shown_once_and_stored_hashed(
    client, product_user
):
    # Given a product person / When they add a gateway token
    client.force_login(product_user)
    response = client.post(
        reverse("admin:limits_gatewaytoken_add"), {"name": "gw-eu-1"}, follow=True
    )
    # Then the page shows the secret once, and only its hash is stored
    shown = [str(m) for m in response.context["messages"]]
    secret = shown[0].split(" is ")[1].split(" ")[0]
    token = GatewayToken.objects.get(name="gw-eu-1")
    assert secret.startswith("slg_")
    assert token.key_hash == hash_secret(secret)
    assert (
        secret
        not in client.get(
            reverse("admin:limits_gatewaytoken_change", args=[token.pk])
        ).content.decode()
    )
    assert AuditEntry.objects.get(action=AuditAction.TOKEN_CREATE).object_id == str(
        token.pk
    )


def test_gateway_token__revoke_action__revoked_and_audited(client, product_user):
    client.force_login(product_user)
    client.post(reverse("admin:limits_gatewaytoken_add"), {"name": "gw-1"})
    token = GatewayToken.objects.get()
    client.post(
        reverse("admin:limits_gatewaytoken_changelist"),
        {"action": "revoke_selected", "_selected_action": [token.pk]},
    )
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert AuditEntry.objects.filter(action=AuditAction.TOKEN_REVOKE).count() == 1


@pytest.mark.parametrize("role", ["support", "viewer"])
def test_gateway_token__other_roles__cannot_create(client, request, role):
    client.force_login(request.getfixturevalue(f"{role}_user"))
    assert client.get(reverse("admin:limits_gatewaytoken_add")).status_code == 403
