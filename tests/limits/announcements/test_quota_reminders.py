"""Reminders at 80 % and 100 % of a calendar quota: opt-in per tenant, once per
(tenant, quota, period, threshold) however often beat's task runs, signed
webhooks and emails as every announcement's."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import pytest
import standardwebhooks
from django.core import mail
from django.db import connection, transaction

from limits.announcements.quota_reminders import quota_reminders_send
from limits.announcements.tasks import delivery_send_task, quota_reminders_send_task
from limits.choices import DeliveryChannel, DeliveryKind, DeliveryState
from limits.models import Delivery, QuotaNotice
from limits.quotas.usage import tenant_quotas
from limits.versions.explain import explain
from sluice.model import CalendarQuota, period_bounds
from tests.limits.announce_fixtures import endpoint_for
from tests.limits.quotas.quota_fixtures import (
    charge,
    publish_quota,
    redis_stopped,  # noqa: F401  (fixture)
)


@pytest.fixture
def opted_in(rules, receiver):
    """initech (free tier: 1,000 requests per month) asked for quota reminders; it has a
    webhook endpoint at the receiver and a contact."""
    initech = rules["initech"]
    initech.quota_reminders = True
    initech.contact_emails = ["ops@initech.test"]
    initech.save()
    _, secret = endpoint_for(initech, receiver.url)
    publish_quota(limit=1000, name="Monthly calls")
    (key,) = [
        k.key
        for k in explain(tenant="initech", route="search").keys
        if isinstance(k.limit, CalendarQuota)
    ]
    return {"tenant": initech, "secret": secret, "key": key}


def _sent() -> list[tuple[str, int]]:
    return sorted(
        (d.channel, d.payload["threshold"])
        for d in Delivery.objects.filter(kind=DeliveryKind.QUOTA)
    )


def test_quota_reminders__80_percent_and_run_twice__told_once_by_webhook_and_email(
    opted_in, redis_client
):
    # Given initech used 800 of its 1,000 this month
    charge(redis_client, opted_in["key"], 800)
    # When beat's task runs twice (a duplicated or retried run)
    first = quota_reminders_send_task.apply().get()
    second = quota_reminders_send_task.apply().get()
    # Then one webhook and one email tell of 80 %, and the second run sent nothing
    assert (first, second) == (2, 0)
    assert _sent() == [(DeliveryChannel.EMAIL, 80), (DeliveryChannel.WEBHOOK, 80)]
    assert QuotaNotice.objects.get().threshold == 80


def test_quota_reminders__webhook__signed_event_with_used_limit_and_period_end(
    opted_in, redis_client, receiver
):
    # Given initech's 80 % reminder queued
    charge(redis_client, opted_in["key"], 812)
    quota_reminders_send_task.apply()
    webhook = Delivery.objects.get(channel=DeliveryChannel.WEBHOOK)
    # When it is sent
    delivery_send_task.apply(args=[webhook.pk])
    # Then the receiver gets a Standard Webhooks event it can verify
    (request,) = receiver.requests
    event = standardwebhooks.Webhook(opted_in["secret"]).verify(
        request.body, dict(request.headers)
    )
    assert request.headers["Sluice-Event"] == event["type"] == "quota.threshold"
    assert event["id"] == request.headers["webhook-id"] == str(webhook.event_id)
    assert (event["tenant"], event["threshold"]) == ("initech", 80)
    quota = event["quota"]
    assert (quota["used"], quota["limit"], quota["remaining"]) == (812, 1000, 188)
    assert quota["name"] == "Monthly calls"
    now = datetime.now(UTC)
    end = datetime.fromisoformat(quota["period_end"])
    assert (end.day, end.hour) == (1, 0)
    assert end > now
    assert event["tenant_url"].startswith("http")
    webhook.refresh_from_db()
    assert webhook.state == DeliveryState.DELIVERED


def test_quota_reminders__email__says_usage_and_when_it_resets(opted_in, redis_client):
    charge(redis_client, opted_in["key"], 1000)
    quota_reminders_send_task.apply()
    email = Delivery.objects.get(channel=DeliveryChannel.EMAIL)
    delivery_send_task.apply(args=[email.pk])
    (message,) = mail.outbox
    assert message.to == ["ops@initech.test"]
    assert message.subject == (
        "[Sluice] initech has used all of a quota "
        "(1,000 requests per month per account)"
    )
    assert "has used 1000 of its 1000 requests this period (100.0 %)" in message.body
    (quota,) = tenant_quotas(tenant="initech").quotas
    assert quota.period_end.isoformat() in message.body


def test_quota_reminders__shadow_quota_at_100__says_it_is_not_enforced(
    opted_in, redis_client, receiver
):
    # Given initech's quota is a shadow one (reported, never enforced), used up
    publish_quota(limit=1000, name="Monthly calls", shadow=True)
    charge(redis_client, opted_in["key"], 1000)
    # When beat's task runs and both reminders are sent
    quota_reminders_send_task.apply()
    for delivery in Delivery.objects.filter(kind=DeliveryKind.QUOTA):
        delivery_send_task.apply(args=[delivery.pk])
    # Then the email says requests are still admitted, never that they are rejected
    (message,) = mail.outbox
    assert "This quota is reported, not enforced" in message.body
    assert "still admitted" in message.body
    assert "rejected" not in message.body
    # and the webhook's quota says it is a shadow one
    (request,) = receiver.requests
    event = standardwebhooks.Webhook(opted_in["secret"]).verify(
        request.body, dict(request.headers)
    )
    assert (event["threshold"], event["quota"]["shadow"]) == (100, True)


def test_quota_reminders__enforced_quota_at_100__says_requests_are_rejected(
    opted_in, redis_client
):
    charge(redis_client, opted_in["key"], 1000)
    quota_reminders_send_task.apply()
    email = Delivery.objects.get(channel=DeliveryChannel.EMAIL)
    delivery_send_task.apply(args=[email.pk])
    (message,) = mail.outbox
    assert "Requests beyond the quota are rejected (HTTP 429) until" in message.body
    assert (
        Delivery.objects.get(channel=DeliveryChannel.WEBHOOK).payload["quota"]["shadow"]
        is False
    )


def test_quota_reminders__80_then_100__each_told_once(opted_in, redis_client):
    # Given initech was told of 80 %
    charge(redis_client, opted_in["key"], 850)
    quota_reminders_send_task.apply()
    # When it reaches 100 % and beat runs twice more
    charge(redis_client, opted_in["key"], 1000)
    quota_reminders_send_task.apply()
    quota_reminders_send_task.apply()
    # Then it was told of 80 % once and of 100 % once, on each channel
    assert _sent() == [
        (DeliveryChannel.EMAIL, 80),
        (DeliveryChannel.EMAIL, 100),
        (DeliveryChannel.WEBHOOK, 80),
        (DeliveryChannel.WEBHOOK, 100),
    ]


def test_quota_reminders__70_to_100_between_runs__one_message_of_100(
    opted_in, redis_client
):
    # Given initech went from below 80 % to its whole quota between two runs
    charge(redis_client, opted_in["key"], 1000)
    # When beat runs (twice)
    quota_reminders_send_task.apply()
    quota_reminders_send_task.apply()
    # Then it hears of 100 % only, and 80 % is not sent later in this period
    assert _sent() == [(DeliveryChannel.EMAIL, 100), (DeliveryChannel.WEBHOOK, 100)]
    assert sorted(QuotaNotice.objects.values_list("threshold", flat=True)) == [80, 100]


def test_quota_reminders__new_period__thresholds_armed_again(opted_in, redis_client):
    # Given initech was told of 80 % last month (a scan then, with last month's hash)
    charge(redis_client, opted_in["key"], 900, periods_ago=1)
    now = int(datetime.now(UTC).timestamp())
    this_start = period_bounds(now, "month", "calendar", "UTC0")[0]
    assert quota_reminders_send(now=this_start - 3600) == 2
    # When it reaches 80 % again this month
    charge(redis_client, opted_in["key"], 800)
    quota_reminders_send_task.apply()
    # Then it is told again, for this period
    starts = sorted(QuotaNotice.objects.values_list("period_start", flat=True))
    assert [s.timestamp() for s in starts] == [
        period_bounds(this_start - 3600, "month", "calendar", "UTC0")[0],
        this_start,
    ]
    assert _sent() == [
        (DeliveryChannel.EMAIL, 80),
        (DeliveryChannel.EMAIL, 80),
        (DeliveryChannel.WEBHOOK, 80),
        (DeliveryChannel.WEBHOOK, 80),
    ]


def test_quota_reminders__not_opted_in__nothing_sent(opted_in, redis_client):
    # Given initech no longer wants reminders, at 100 % of its quota
    opted_in["tenant"].quota_reminders = False
    opted_in["tenant"].save()
    charge(redis_client, opted_in["key"], 1000)
    # When beat runs / Then nothing is sent or recorded
    assert quota_reminders_send_task.apply().get() == 0
    assert not QuotaNotice.objects.exists()


def test_quota_reminders__below_80_percent__nothing_sent(opted_in, redis_client):
    charge(redis_client, opted_in["key"], 799)
    assert quota_reminders_send_task.apply().get() == 0
    assert not QuotaNotice.objects.exists()


@pytest.mark.usefixtures("redis_stopped")
def test_quota_reminders__redis_stopped__skipped_nothing_recorded(opted_in):
    # Given the Redis gateways charge is down / When beat runs
    # Then nothing is sent or recorded: the next run tries again
    assert quota_reminders_send_task.apply().get() == 0
    assert not QuotaNotice.objects.exists()


def _lock_waiters() -> int:
    with connection.cursor() as cursor:
        # inside a transaction, activity is read once unless the snapshot is cleared
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE wait_event_type = 'Lock' AND datname = current_database()"
        )
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_quota_reminders__two_runs_at_once__told_once(rules, redis_client):
    # Given initech opted in at 90 % of its quota, with a contact
    initech = rules["initech"]
    initech.quota_reminders, initech.contact_emails = True, ["ops@initech.test"]
    initech.save()
    with transaction.atomic():
        publish_quota(limit=1000)
    (key,) = [
        k.key
        for k in explain(tenant="initech", route="search").keys
        if isinstance(k.limit, CalendarQuota)
    ]
    charge(redis_client, key, 900)
    # When a run has recorded its notice, uncommitted, and a second run starts then
    found: list[int] = []
    second = threading.Thread(
        target=lambda: (found.append(quota_reminders_send()), connection.close())
    )
    with transaction.atomic():
        first = quota_reminders_send()
        second.start()
        deadline = time.monotonic() + 120
        while _lock_waiters() == 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # the second run waits on the unique index
        assert _lock_waiters() == 1
    second.join(120)
    # Then the first told initech once, and the second found it told
    assert (first, found) == (1, [0])
    assert Delivery.objects.filter(kind=DeliveryKind.QUOTA).count() == 1
    assert QuotaNotice.objects.count() == 1
