"""Reminders before a lowering takes effect, and what beat re-queues (clock injected)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from limits.announcements.services import announcements_dispatch_due, reminders_send_due
from limits.choices import DeliveryKind
from limits.core.audit import Actor
from limits.models import Announcement, Delivery
from limits.publishing.services import snapshot_publish
from tests.limits.announce_fixtures import endpoint_for, lower_pro_search

SYSTEM = Actor.system("test")
DAY = timedelta(days=1)


@pytest.fixture
def lowering(rules, published):
    """acme with an endpoint; a lowering published to take effect in 15 days, notified."""
    endpoint_for(rules["acme"], "https://hooks.acme.test/sluice")
    lower_pro_search(rules)
    version = snapshot_publish(
        actor=SYSTEM, message="m", effective_at=timezone.now() + 15 * DAY
    )
    announcements_dispatch_due()  # the fan-out whose on-commit task did not run here
    return version


def _reminders() -> list[int]:
    rows = Delivery.objects.filter(kind=DeliveryKind.REMINDER).order_by("id")
    return [row.lead // 86400 for row in rows]


@pytest.mark.parametrize(
    ("days_later", "expected"),
    [
        pytest.param(1, [], id="too-early"),
        pytest.param(8.5, [7], id="7-days-before"),
        pytest.param(14.5, [1], id="1-day-before-only-the-closest"),
        pytest.param(16, [], id="already-in-effect"),
    ],
)
def test_reminders_send_due__clock__closest_due_reminder_once(
    lowering, days_later, expected
):
    # Given a notified lowering due in 15 days / When beat runs `days_later` days on, twice
    now = lowering.published_at + days_later * DAY
    reminders_send_due(now=now)
    reminders_send_due(now=now)
    # Then at most one reminder went out, the one whose time has come
    assert _reminders() == expected


def test_reminders_send_due__week_then_day__two_reminders(lowering):
    # Given the 7-day reminder sent / When the 1-day one comes due / Then both exist, once
    reminders_send_due(now=lowering.published_at + 8.5 * DAY)
    reminders_send_due(now=lowering.published_at + 14.5 * DAY)
    reminders_send_due(now=lowering.published_at + 14.6 * DAY)
    assert _reminders() == [7, 1]
    assert Announcement.objects.get(snapshot=lowering).reminded == [7 * 86400, 86400]


def test_reminders_send_due__published_three_days_ahead__no_week_reminder(
    rules, published
):
    # Given an emergency lowering published three days ahead
    endpoint_for(rules["acme"], "https://hooks.acme.test/sluice")
    lower_pro_search(rules)
    version = snapshot_publish(
        actor=SYSTEM,
        message="m",
        emergency_reason="Abuse",
        effective_at=timezone.now() + 3 * DAY,
    )
    announcements_dispatch_due()
    # When beat runs right away and two and a half days later
    reminders_send_due(now=version.published_at + timedelta(hours=1))
    reminders_send_due(now=version.published_at + 2.5 * DAY)
    # Then only the 1-day reminder went out (the announcement itself was the week's notice)
    assert _reminders() == [1]


def test_reminders_send_due__cancelled_version__nothing(rules, lowering):
    # Given the lowering superseded by a publish of the active rules now
    from limits.models import Limit

    Limit.objects.filter(policy=rules["pro_search"]).update(rate=50, burst=100)
    snapshot_publish(actor=SYSTEM, message="Never mind")
    # When the reminder time comes / Then nobody is reminded
    reminders_send_due(now=lowering.published_at + 8.5 * DAY)
    assert _reminders() == []


def test_announcements_dispatch_due__lost_fan_out__notified_once(lowering):
    # Given a fan-out already done by the fixture / When beat runs again
    result = announcements_dispatch_due()
    # Then nothing is created twice
    assert result["notified"] == 0
    assert Delivery.objects.filter(kind=DeliveryKind.ANNOUNCEMENT).count() == 1
