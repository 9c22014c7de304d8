"""A scheduled version's "Cancel or move…" page."""

from __future__ import annotations

from datetime import UTC, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from limits.core.audit import Actor
from limits.models import Limit, Snapshot
from limits.publishing.services import snapshot_publish
from limits.versions.selectors import snapshot_scheduled

pytestmark = pytest.mark.django_db


@pytest.fixture
def scheduled(rules):
    snapshot_publish(actor=Actor.system(), message="v1")
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=20, burst=40)
    return snapshot_publish(
        actor=Actor.system(),
        message="Lower pro search",
        effective_at=timezone.now() + timedelta(days=15),
    )


def _page(row: Snapshot) -> str:
    return reverse("admin:limits_snapshot_scheduled", args=[row.version])


def test_version_page__scheduled__links_to_cancel_or_move(
    client, scheduled, product_user
):
    client.force_login(product_user)
    html = client.get(reverse("admin:limits_snapshot_change", args=[scheduled.pk])).text
    assert _page(scheduled) in html
    active = Snapshot.objects.get(version=1)
    html = client.get(reverse("admin:limits_snapshot_change", args=[active.pk])).text
    assert _page(active) not in html


def test_move__later__new_version_at_the_new_time(client, scheduled, product_user):
    client.force_login(product_user)
    later = (scheduled.effective_at + timedelta(days=2)).astimezone(UTC)
    response = client.post(
        _page(scheduled),
        {
            "action": "move",
            "move-effective_at": later.strftime("%Y-%m-%dT%H:%MZ"),
            "move-reason": "Customers asked",
        },
    )
    assert response.status_code == 302
    (moved,) = snapshot_scheduled()
    assert moved.version == scheduled.version + 1
    assert moved.effective_at == later.replace(second=0)


def test_move__sooner_than_the_notice__error_on_the_time_nothing_written(
    client, scheduled, product_user
):
    client.force_login(product_user)
    soon = timezone.now() + timedelta(days=1)
    response = client.post(
        _page(scheduled),
        {
            "action": "move",
            "move-effective_at": soon.strftime("%Y-%m-%dT%H:%MZ"),
            "move-reason": "Hurry",
        },
    )
    assert response.status_code == 200
    assert (
        "cannot take effect before"
        in response.context["move"].errors["effective_at"][0]
    )
    assert list(snapshot_scheduled()) == [scheduled]


def test_cancel__support__refused(client, scheduled, support_user):
    client.force_login(support_user)
    response = client.post(_page(scheduled), {"action": "cancel", "cancel-reason": "x"})
    assert response.status_code == 403
    assert list(snapshot_scheduled()) == [scheduled]
