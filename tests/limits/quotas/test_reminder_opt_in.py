"""A tenant's opt-in to quota reminders: set now by product or support (admin
actions, the service), audited; read-only on the tenant's form, which proposes
rule changes (the preference is not a rule)."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from limits.announcements.quota_reminders import tenant_quota_reminders_set
from limits.core.audit import Actor
from limits.models import AuditEntry, ChangeRequest

CHANGELIST = reverse("admin:limits_tenant_changelist")


@pytest.mark.parametrize("user", ["support_user", "product_user"])
def test_quota_reminders_action__on__set_now_and_audited(client, rules, request, user):
    # Given initech without reminders, and a person of support or product
    client.force_login(request.getfixturevalue(user))
    # When they turn reminders on from the tenants' list
    response = client.post(
        CHANGELIST,
        {"action": "quota_reminders_on", "_selected_action": [rules["initech"].pk]},
    )
    # Then initech has them now (no change request), and the change is audited
    assert response.status_code == 302
    rules["initech"].refresh_from_db()
    assert rules["initech"].quota_reminders is True
    assert not ChangeRequest.objects.exists()
    entry = AuditEntry.objects.filter(object_type="tenant").latest("id")
    assert (entry.before["quota_reminders"], entry.after["quota_reminders"]) == (
        False,
        True,
    )
    # And turning them off works the same way
    client.post(
        CHANGELIST,
        {"action": "quota_reminders_off", "_selected_action": [rules["initech"].pk]},
    )
    rules["initech"].refresh_from_db()
    assert rules["initech"].quota_reminders is False


def test_tenant_change_form__quota_reminders__shown_read_only(
    client, rules, product_user
):
    client.force_login(product_user)
    url = reverse("admin:limits_tenant_change", args=[rules["initech"].pk])
    html = client.get(url).content.decode()
    assert "field-quota_reminders" in html
    assert 'name="quota_reminders"' not in html


def test_tenant_quota_reminders_set__viewer__refused(rules, viewer_user):
    with pytest.raises(PermissionDenied):
        tenant_quota_reminders_set(
            tenant=rules["initech"], enabled=True, actor=Actor(user=viewer_user)
        )
    rules["initech"].refresh_from_db()
    assert rules["initech"].quota_reminders is False
