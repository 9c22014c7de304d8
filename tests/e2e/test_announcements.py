"""Announcements end to end: a real Celery worker and beat notify, then remind, on time,
in webhooks a Standard Webhooks library verifies."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
import standardwebhooks
from django.utils import timezone

from limits.choices import DeliveryKind, DeliveryState
from limits.core.audit import Actor
from limits.models import Delivery
from limits.publishing.services import snapshot_publish
from tests.celery_fixtures import wait_until
from tests.factories import TenantFactory
from tests.limits.announce_fixtures import endpoint_for, lower_pro_search
from tests.receiver import receiver  # noqa: F401  (a customer's endpoint)
from tests.recorded import record

pytestmark = [
    pytest.mark.celery,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("no_notice_period"),  # a lowering due in seconds
]
LEAD_SECONDS = 6


@pytest.fixture
def celery_env(celery_env):
    """Beat's announcement task every second, and one reminder 6 s ahead."""
    return {
        **celery_env,
        "SLUICE_ANNOUNCE_INTERVAL": "1",
        "SLUICE_REMINDERS": f"{LEAD_SECONDS}s",
    }


def _events(receiver) -> list[dict]:  # noqa: F811
    return [json.loads(request.body) for request in receiver.requests]


def test_lowering__published_ahead__announced_then_reminded_by_worker_and_beat(
    rules,
    receiver,  # noqa: F811
    redis_client,
    celery_worker,
    celery_beat,
):
    # Given version 1, and acme with an endpoint at a local receiver
    actor = Actor.system("e2e")
    snapshot_publish(actor=actor, message="v1")
    _, secret = endpoint_for(rules["acme"], receiver.url)
    # When a lowering of pro search is published to take effect in 12 seconds
    lower_pro_search(rules)
    snapshot_publish(
        actor=actor, message="v2", effective_at=timezone.now() + timedelta(seconds=12)
    )
    # Then the worker delivers the announcement, and beat the reminder before it applies
    events = wait_until(
        lambda: (
            (found := _events(receiver))
            and any(e["type"] == "limits.reminder" for e in found)
            and found
        ),
        why=f"a reminder to arrive\n{celery_worker.output()[-3000:]}",
    )
    assert [(e["type"], e["version"]) for e in events] == [
        ("limits.changed", 2),
        ("limits.reminder", 2),
    ]
    assert events[1]["reminder"] == {"seconds_before": LEAD_SECONDS}
    # And the receiver verifies each one with the standardwebhooks package, as sent
    webhook = standardwebhooks.Webhook(secret)
    for request in receiver.requests:
        assert webhook.verify(request.body, request.headers)["version"] == 2
    # and both are recorded delivered (the worker writes that once the receiver's
    # answer is back: a moment after the receiver saw the request)
    delivered = [
        (DeliveryKind.ANNOUNCEMENT, DeliveryState.DELIVERED),
        (DeliveryKind.REMINDER, DeliveryState.DELIVERED),
    ]
    wait_until(
        lambda: (
            [(r.kind, r.state) for r in Delivery.objects.order_by("id")] == delivered
        ),
        timeout=60,
        why="both deliveries recorded delivered",
    )


def test_reminder__worker_and_beat__each_tenant_gets_its_own_figures(
    rules,
    receiver,  # noqa: F811
    redis_client,
    celery_worker,
    celery_beat,
):
    # Given version 1; acme and hooli (both pro) with endpoints; acme searched 30 a
    # second for 20 s an hour ago, hooli 4 a second
    actor = Actor.system("e2e")
    hooli = TenantFactory(slug="hooli", tier=rules["pro"])
    snapshot_publish(actor=actor, message="v1")
    for tenant in (rules["acme"], hooli):
        endpoint_for(tenant, f"{receiver.url}/{tenant.slug}")
    an_hour_ago = timezone.now() - timedelta(hours=1)
    record("acme", "search", an_hour_ago, [30] * 20)
    record("hooli", "search", an_hour_ago, [4] * 20)
    # When a lowering of pro search to 20/s is published to take effect in 12 seconds
    lower_pro_search(rules)
    snapshot_publish(
        actor=actor, message="v2", effective_at=timezone.now() + timedelta(seconds=12)
    )
    # Then beat's reminders reach both, each with its own figures only
    reminders = wait_until(
        lambda: (
            len(
                found := [
                    e for e in _events(receiver) if e["type"] == "limits.reminder"
                ]
            )
            == 2
            and {e["tenant"]: e for e in found}
        ),
        why=f"two reminders to arrive\n{celery_worker.output()[-3000:]}",
    )
    acme, unhurt = reminders["acme"]["impact"], reminders["hooli"]["impact"]
    assert [r["route"] for r in acme["routes"]] == ["search"]
    assert (acme["requests"], 150 <= acme["rejected"] <= 200) == (600, True)
    assert unhurt is None
    assert "hooli" not in json.dumps(reminders["acme"])
    assert "acme" not in json.dumps(reminders["hooli"])
