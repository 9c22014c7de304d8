"""The admin, used as people would: notice preview, emergency publish, endpoints, deliveries."""

from __future__ import annotations

import re

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from limits.announcements.tasks import delivery_send_task
from limits.choices import DeliveryState
from limits.core.secrets import secret_decrypt
from limits.models import Delivery, Snapshot, TenantLink, WebhookEndpoint
from tests.limits.announce_fixtures import lower_pro_search

PUBLISH = reverse("admin:limits_snapshot_publish")


def _messages(response) -> str:
    return " ".join(str(m) for m in get_messages(response.wsgi_request))


@pytest.mark.usefixtures("no_approval_rule")
def test_publish_page__lowering__notice_shown_then_emergency_publish_marked(
    client, product, rules, published
):
    # Given a lowering in the working copy
    lower_pro_search(rules)
    client.force_login(product)
    # When product opens the Publish page
    html = client.get(PUBLISH).content.decode()
    # Then the notice consequence is shown before submitting
    assert "Notice period: this lowers limits." in html
    assert "It cannot take effect before" in html
    assert "emergency_reason" in html
    # When publishing now without a reason / Then refused with the earliest time
    refused = client.post(PUBLISH, {"message": "Lower", "effective_at": ""})
    assert "cannot take effect before" in refused.content.decode()
    assert Snapshot.objects.count() == 1
    # When publishing now as an emergency / Then version 2 is marked as such
    client.post(
        PUBLISH,
        {"message": "Lower", "effective_at": "", "emergency_reason": "Overload"},
    )
    row = Snapshot.objects.get(version=2)
    page = client.get(reverse("admin:limits_snapshot_change", args=[row.pk]))
    assert "EMERGENCY" in page.content.decode()
    assert "Overload" in page.content.decode()


def test_publish_page__raise__no_notice_needed(client, product, rules, published):
    from limits.models import Limit

    Limit.objects.filter(policy=rules["pro_search"]).update(rate=90, burst=180)
    client.force_login(product)
    html = client.get(PUBLISH).content.decode()
    assert "No change lowers anyone's limits: this may take effect at once." in html


def test_publish_page__lowering_without_notice_period__says_it_lowers(
    client, product, rules, published, settings
):
    # Given no notice period, and a lowering in the working copy
    settings.SLUICE_NOTICE_PERIOD_DAYS = 0
    lower_pro_search(rules)
    client.force_login(product)
    # When product opens the Publish page
    html = client.get(PUBLISH).content.decode()
    # Then it says the change lowers limits and why it may still take effect at once
    assert "This lowers limits, and no notice period is set" in html
    assert "No change lowers anyone's limits" not in html


def test_webhook_admin__add_test_resend__secret_once_attempts_visible(
    client, support, rules, receiver
):
    # Given support in the admin
    client.force_login(support)
    # When they add an endpoint for acme
    response = client.post(
        reverse("admin:limits_webhookendpoint_add"),
        {"tenant": rules["acme"].pk, "url": receiver.url, "is_active": "on"},
        follow=True,
    )
    # Then the secret is shown once, in a message
    endpoint = WebhookEndpoint.objects.get()
    secret = re.search(r"whsec_[A-Za-z0-9+/=]+", response.content.decode()).group()
    assert secret_decrypt(endpoint.secret_encrypted) == secret
    change = client.get(
        reverse("admin:limits_webhookendpoint_change", args=[endpoint.pk])
    )
    assert "Send a test event" in change.content.decode()
    assert secret not in change.content.decode()
    # When they press "Send a test event" and the task runs
    client.post(reverse("admin:limits_webhookendpoint_test", args=[endpoint.pk]))
    delivery = Delivery.objects.get()
    delivery_send_task.apply(args=[delivery.pk])
    # Then the delivery page shows the attempt with its status code
    page = client.get(reverse("admin:limits_delivery_change", args=[delivery.pk]))
    assert page.status_code == 200
    assert "200" in page.content.decode()
    # When they resend it with the list action / Then it is pending again
    client.post(
        reverse("admin:limits_delivery_changelist"),
        {"action": "resend", "_selected_action": [delivery.pk]},
    )
    assert Delivery.objects.get().state == DeliveryState.PENDING


@pytest.mark.parametrize("role", ["product", "support"])
def test_tenant_admin__issue_link_action__link_shown(client, rules, request, role):
    # Given product or support on the tenant list
    client.force_login(request.getfixturevalue(role))
    # When they issue acme's private link
    response = client.post(
        reverse("admin:limits_tenant_changelist"),
        {"action": "issue_changelog_link", "_selected_action": [rules["acme"].pk]},
        follow=True,
    )
    # Then the link is shown and opens acme's page
    assert "/changelog/tenant/" in _messages(response)
    assert TenantLink.objects.get().tenant == rules["acme"]


def test_announcement_note__names_a_tenant__stopped_once_then_saved(
    client, product, viewer, rules, published
):
    from datetime import timedelta

    from django.utils import timezone

    from limits.core.audit import Actor
    from limits.publishing.services import snapshot_publish

    lower_pro_search(rules)
    row = snapshot_publish(
        actor=Actor.system(),
        message="Lower",
        effective_at=timezone.now() + timedelta(days=15),
    )
    url = reverse("admin:limits_announcement_change", args=[row.announcement.pk])
    client.force_login(product)
    said = {"note": "Initech asked for this."}
    refused = client.post(url, said)
    assert refused.status_code == 200
    assert "names initech (" in refused.content.decode()
    row.announcement.refresh_from_db()
    assert row.announcement.note == ""
    assert client.post(url, {**said, "note_names_ok": "on"}).status_code == 302
    row.announcement.refresh_from_db()
    assert row.announcement.note == "Initech asked for this."
    # And a reader who may not edit sees the page, without the box
    client.force_login(viewer)
    page = client.get(url)
    assert page.status_code == 200
    assert "note_names_ok" not in page.content.decode()
