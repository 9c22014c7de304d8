"""Reminders before a lowering carry the tenant's own figures from its recorded traffic."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.conf import settings
from django.core import mail
from django.utils import timezone

from limits.announcements.deliveries import delivery_send
from limits.announcements.services import announcements_dispatch_due, reminders_send_due
from limits.choices import DeliveryKind
from limits.core.audit import Actor
from limits.models import Delivery
from limits.publishing.services import snapshot_publish
from tests.factories import TenantFactory
from tests.limits.announce_fixtures import endpoint_for, lower_pro_search
from tests.receiver import receiver  # noqa: F401  (a customer's endpoint)
from tests.recorded import record

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system("test")
DAY = timedelta(days=1)


@pytest.fixture
def reminded(rules, receiver):  # noqa: F811
    """acme and hooli (both pro) with an endpoint and a contact each; acme searched 30
    a second for 20 s yesterday, hooli 4 a second; pro search lowered to 20/s in 15
    days; the 7-day reminder sent, by webhook and email."""
    hooli = TenantFactory(slug="hooli", tier=rules["pro"])
    snapshot_publish(actor=SYSTEM, message="v1")
    for tenant in (rules["acme"], hooli):
        tenant.contact_emails = [f"ops@{tenant.slug}.test"]
        tenant.save()
        endpoint_for(tenant, f"{receiver.url}/{tenant.slug}")
    yesterday = timezone.now() - DAY
    record("acme", "search", yesterday, [30] * 20)
    record("hooli", "search", yesterday, [4] * 20)
    lower_pro_search(rules)
    version = snapshot_publish(
        actor=SYSTEM, message="m", effective_at=timezone.now() + 15 * DAY
    )
    announcements_dispatch_due()  # the announcement, whose on-commit task did not run
    reminders_send_due(now=version.published_at + 8.5 * DAY)
    for delivery in Delivery.objects.filter(kind=DeliveryKind.REMINDER):
        delivery_send(delivery_id=delivery.pk)
    events = [json.loads(request.body) for request in receiver.requests]
    webhooks = {e["tenant"]: e for e in events if e["type"] == "limits.reminder"}
    emails = {
        message.to[0].split("@")[1].split(".")[0]: message for message in mail.outbox
    }
    return webhooks, emails


def test_reminder__hit_tenant__its_own_figures_by_route_with_its_link(reminded, client):
    webhooks, emails = reminded
    # Then acme's reminder says how many of its 600 searches the new limit would reject
    impact = webhooks["acme"]["impact"]
    assert (impact["requests"], impact["days"]) == (600, settings.SLUICE_IMPACT_DAYS)
    (route,) = impact["routes"]
    assert route["route"] == "search"
    assert 150 <= route["rejected_new"] <= 200
    assert impact["rejected"] == route["rejected_new"]
    # and its email the same, with a link to its private page, which shows them too
    body = emails["acme"].body
    assert (
        f"of your 600 requests of the last 7 days, {impact['rejected']} would" in body
    )
    url = webhooks["acme"]["tenant_url"]
    assert url in body
    page = client.get(url.removeprefix(settings.SLUICE_PUBLIC_URL.rstrip("/")))
    assert page.status_code == 200
    assert f"{impact['rejected']} would have been rejected" in page.content.decode()
    path = url.removeprefix(settings.SLUICE_PUBLIC_URL.rstrip("/"))
    (upcoming,) = client.get(path + "limits.json").json()["upcoming"]
    assert upcoming["impact"] == impact
    # and nothing of another tenant
    assert "hooli" not in json.dumps(webhooks["acme"]) + body


def test_reminder__unhurt_tenant__the_usual_notice_without_alarm(reminded):
    webhooks, emails = reminded
    # Then hooli's reminder has no figures: 4 a second stays under 20
    assert webhooks["hooli"]["impact"] is None
    body = emails["hooli"].body
    assert "would have been rejected" not in body
    assert "acme" not in json.dumps(webhooks["hooli"]) + body
    # and still the link to its limits
    assert webhooks["hooli"]["tenant_url"] in body
