"""Notifications: fan-out to affected tenants, signed webhooks, retries, idempotency, email."""

from __future__ import annotations

import base64
import hashlib
import hmac
import importlib.util
import json
import secrets
import threading
from datetime import timedelta
from pathlib import Path

import pytest
import standardwebhooks
from django.db import connection
from django.utils import timezone

from limits.announcements.deliveries import (
    delivery_resend,
    delivery_send,
    webhook_endpoint_test,
)
from limits.announcements.signing import secret_generate
from limits.announcements.tasks import announcement_notify_task, delivery_send_task
from limits.announcements.webhooks import (
    webhook_endpoint_create,
    webhook_endpoint_rotate_secret,
    webhook_endpoint_sends_legacy_signature,
)
from limits.choices import AuditAction, DeliveryChannel, DeliveryKind, DeliveryState
from limits.core.audit import Actor
from limits.core.secrets import secret_decrypt, secret_encrypt
from limits.models import AuditEntry, Delivery, WebhookEndpoint
from limits.publishing.services import snapshot_publish
from tests.limits.announce_fixtures import endpoint_for, lower_pro_search

SYSTEM = Actor.system("test")
_spec = importlib.util.spec_from_file_location(
    "webhook_receiver", Path(__file__).parents[3] / "docs" / "webhook_receiver.py"
)
docs_receiver = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(docs_receiver)


@pytest.fixture
def announced(rules, published, receiver):
    """acme (pro) with an endpoint at the receiver and a contact; globex (pro, own
    search policy) with an endpoint too; version 2 lowers pro search in 15 days."""
    rules["acme"].contact_emails = ["ops@acme.test"]
    rules["acme"].save()
    endpoint, secret = endpoint_for(rules["acme"], receiver.url)
    endpoint_for(rules["globex"], receiver.url + "/globex")
    lower_pro_search(rules)
    version = snapshot_publish(
        actor=SYSTEM,
        message="Lower pro search",
        note="Search gets stricter.",
        effective_at=timezone.now() + timedelta(days=15),
    )
    return {"version": version, "endpoint": endpoint, "secret": secret}


def _webhook(announced) -> Delivery:
    announcement_notify_task.apply(args=[announced["version"].announcement.pk])
    return Delivery.objects.get(channel=DeliveryChannel.WEBHOOK)


def test_announcement_notify__run_twice__one_delivery_per_affected_recipient(
    announced, rules
):
    # Given version 2, which reaches acme but not globex (its own policy shields it)
    announcement = announced["version"].announcement
    # When the notify task runs twice (a retried or duplicated task)
    first = announcement_notify_task.apply(args=[announcement.pk]).get()
    second = announcement_notify_task.apply(args=[announcement.pk]).get()
    # Then acme has one webhook and one email, globex nothing, and the rerun added none
    rows = Delivery.objects.order_by("channel")
    assert [(d.tenant.slug, d.channel) for d in rows] == [
        ("acme", DeliveryChannel.EMAIL),
        ("acme", DeliveryChannel.WEBHOOK),
    ]
    assert (first, second) == (2, 0)
    assert {d.state for d in rows} == {DeliveryState.PENDING}


def test_delivery_send__receiver__verifies_signature_with_the_documented_code(
    announced, receiver
):
    # Given acme's webhook delivery / When the send task runs
    delivery = _webhook(announced)
    delivery_send_task.apply(args=[delivery.pk])
    # Then the receiver got one POST that the documented receiver code accepts
    (request,) = receiver.requests
    event = docs_receiver.verify_webhook(
        secret=announced["secret"], headers=request.headers, body=request.body
    )
    assert request.headers["webhook-id"] == event["id"] == str(delivery.event_id)
    assert request.headers["Sluice-Event"] == "limits.changed"
    assert request.headers["Sluice-Delivery"] == event["id"]
    assert (event["tenant"], event["version"], event["emergency"]) == ("acme", 2, False)
    assert event["note"] == "Search gets stricter."
    assert [c["text"] for c in event["changes"]] == [
        "tier pro · search: per tenant: 50 / s, burst 100 → 20 / s, burst 40"
    ]
    assert "globex" not in request.body.decode()
    # And a new secret gets no former Sluice-Signature header
    assert "Sluice-Signature" not in request.headers
    # And a tampered body or id, another secret, or a replay 5 minutes later is rejected
    timestamp = int(request.headers["webhook-timestamp"])
    other_id = {
        **{k: v for k, v in request.headers.items() if k.lower() != "webhook-id"},
        "webhook-id": "another-event",
    }
    for headers, body, secret, now in [
        (request.headers, request.body.replace(b"20 / s", b"90 / s"), None, timestamp),
        (other_id, request.body, None, timestamp),
        (request.headers, request.body, secret_generate(), timestamp),
        (request.headers, request.body, None, timestamp + 301),
    ]:
        with pytest.raises(docs_receiver.InvalidSignature):
            docs_receiver.verify_webhook(
                secret=secret or announced["secret"],
                headers=headers,
                body=body,
                now=now,
            )


def test_delivery_send__standard_webhooks_library__verifies_it_as_sent(
    announced, receiver
):
    # Given acme's webhook delivery, sent
    delivery_send_task.apply(args=[_webhook(announced).pk])
    (request,) = receiver.requests
    # When the receiver verifies it with the standardwebhooks package and the secret as issued
    event = standardwebhooks.Webhook(announced["secret"]).verify(
        request.body, request.headers
    )
    # Then it is the event, and the secret is standard base64 of 32 bytes
    assert event["type"] == "limits.changed"
    assert len(base64.b64decode(announced["secret"].removeprefix("whsec_"))) == 32


def test_delivery_send__secret_from_before_standard_webhooks__both_schemes_verify(
    announced, receiver
):
    # Given an endpoint whose secret was issued before (URL-safe base64, unpadded)
    legacy = "whsec_" + secrets.token_urlsafe(32)
    endpoint = announced["endpoint"]
    endpoint.secret_encrypted = secret_encrypt(legacy)
    endpoint.save()
    # When a delivery is sent to it
    delivery_send_task.apply(args=[_webhook(announced).pk])
    (request,) = receiver.requests
    # Then its existing receiver verifies the former header, with the secret as it was
    header = request.headers["Sluice-Signature"]
    timestamp, digest = (part.split("=", 1)[1] for part in header.split(","))
    expected = hmac.new(
        legacy.encode(), timestamp.encode() + b"." + request.body, hashlib.sha256
    )
    assert hmac.compare_digest(expected.hexdigest(), digest)
    # And Standard Webhooks receivers verify it with the same bytes in standard base64
    key = base64.urlsafe_b64decode(legacy.removeprefix("whsec_") + "=")
    converted = "whsec_" + base64.b64encode(key).decode()
    standardwebhooks.Webhook(converted).verify(request.body, request.headers)
    docs_receiver.verify_webhook(
        secret=legacy, headers=request.headers, body=request.body
    )
    assert webhook_endpoint_sends_legacy_signature(endpoint) is True
    # And once the secret is rotated, the former header is gone
    rotated = webhook_endpoint_rotate_secret(endpoint=endpoint, actor=SYSTEM)
    assert webhook_endpoint_sends_legacy_signature(endpoint) is False
    delivery = webhook_endpoint_test(endpoint=endpoint, actor=SYSTEM)
    delivery_send_task.apply(args=[delivery.pk])
    latest = receiver.requests[-1]
    assert "Sluice-Signature" not in latest.headers
    standardwebhooks.Webhook(rotated).verify(latest.body, latest.headers)


def test_delivery_send__fails_then_succeeds__retried_with_every_attempt_logged(
    announced, receiver
):
    # Given a receiver that answers 500, then 503, then 200
    receiver.statuses = [500, 503]
    delivery = _webhook(announced)
    # When the send task runs (Celery retries it, eagerly here)
    delivery_send_task.apply(args=[delivery.pk])
    # Then three attempts were logged, the last one delivered, all the same event
    delivery.refresh_from_db()
    attempts = list(delivery.attempts.order_by("number"))
    assert [(a.number, a.status_code) for a in attempts] == [
        (1, 500),
        (2, 503),
        (3, 200),
    ]
    assert [a.error for a in attempts] == ["HTTP 500", "HTTP 503", ""]
    assert all(a.duration_ms >= 0 for a in attempts)
    assert (delivery.state, delivery.attempt_count) == (DeliveryState.DELIVERED, 3)
    assert len({json.loads(r.body)["id"] for r in receiver.requests}) == 1


def test_delivery_send__keeps_failing__gives_up_after_the_last_retry(
    announced, receiver
):
    # Given a receiver that always answers 500
    receiver.statuses = [500] * 50
    delivery = _webhook(announced)
    # When the send task runs through all its retries
    delivery_send_task.apply(args=[delivery.pk])
    # Then 1 + max_retries attempts are logged and the delivery failed
    delivery.refresh_from_db()
    assert delivery.state == DeliveryState.FAILED
    assert delivery.attempt_count == 1 + delivery_send_task.max_retries
    assert len(receiver.requests) == delivery.attempt_count


def test_delivery_send__connection_refused__logged_as_error(announced, receiver):
    # Given an endpoint nobody listens on / When one attempt is made
    delivery = _webhook(announced)
    WebhookEndpoint.objects.filter(pk=announced["endpoint"].pk).update(
        url="http://127.0.0.1:9/nothing"
    )
    delivery_send(delivery_id=delivery.pk, final=True)
    # Then the attempt carries the error and no status code
    attempt = delivery.attempts.get()
    assert attempt.status_code is None
    assert "ConnectionRefusedError" in attempt.error or "URLError" in attempt.error


def test_delivery_send__task_run_twice__one_notification(announced, receiver):
    # Given a delivered notification / When its task runs again
    delivery = _webhook(announced)
    delivery_send_task.apply(args=[delivery.pk])
    delivery_send_task.apply(args=[delivery.pk])
    # Then the receiver got it once
    assert len(receiver.requests) == 1
    assert Delivery.objects.get(pk=delivery.pk).attempt_count == 1


def test_delivery_resend__delivered__same_event_again_and_audited(
    announced, receiver, product
):
    # Given a delivered notification
    delivery = _webhook(announced)
    delivery_send_task.apply(args=[delivery.pk])
    # When product resends it, and the queued task runs
    delivery_resend(delivery=delivery, actor=Actor(user=product))
    delivery_send_task.apply(args=[delivery.pk])
    # Then the receiver got the same event twice, and the resend is audited
    ids = [json.loads(r.body)["id"] for r in receiver.requests]
    assert ids == [str(delivery.event_id)] * 2
    entry = AuditEntry.objects.get(action=AuditAction.RESEND)
    assert (entry.actor, entry.before["state"]) == ("product", "delivered")


def test_email__affected_tenant__one_email_to_its_contacts(announced, mailoutbox):
    # Given acme's email delivery / When it is sent
    announcement_notify_task.apply(args=[announced["version"].announcement.pk])
    email = Delivery.objects.get(channel=DeliveryChannel.EMAIL)
    delivery_send_task.apply(args=[email.pk])
    delivery_send_task.apply(args=[email.pk])
    # Then one email went to acme's contacts, with the change in words
    (message,) = mailoutbox
    assert message.to == ["ops@acme.test"]
    assert "rate limits of acme change on" in message.subject
    assert "50 / s, burst 100 → 20 / s, burst 40" in message.body
    assert "Search gets stricter." in message.body
    assert Delivery.objects.get(pk=email.pk).state == DeliveryState.DELIVERED


def test_notifications__emergency__marked_in_webhook_and_email(
    rules, published, receiver, mailoutbox
):
    # Given acme with an endpoint and a contact, and an emergency lowering
    rules["acme"].contact_emails = ["ops@acme.test"]
    rules["acme"].save()
    endpoint_for(rules["acme"], receiver.url)
    lower_pro_search(rules)
    version = snapshot_publish(actor=SYSTEM, message="m", emergency_reason="Abuse")
    # When its notifications are sent
    announcement_notify_task.apply(args=[version.announcement.pk])
    for delivery in Delivery.objects.all():
        delivery_send_task.apply(args=[delivery.pk])
    # Then both say emergency
    assert json.loads(receiver.requests[0].body)["emergency"] is True
    assert "EMERGENCY" in mailoutbox[0].subject


def test_webhook_endpoint_test__ping__signed_delivered_and_logged(
    rules, receiver, support
):
    # Given an endpoint of acme, created by support
    endpoint = WebhookEndpoint(tenant=rules["acme"], url=receiver.url)
    secret = webhook_endpoint_create(endpoint=endpoint, actor=Actor(user=support))
    # When support sends a test event, and its task runs
    delivery = webhook_endpoint_test(endpoint=endpoint, actor=Actor(user=support))
    delivery_send_task.apply(args=[delivery.pk])
    # Then a signed ping arrived and the attempt is logged
    (request,) = receiver.requests
    event = docs_receiver.verify_webhook(
        secret=secret, headers=request.headers, body=request.body
    )
    assert (event["type"], event["sent_by"]) == ("ping", "support")
    delivery.refresh_from_db()
    assert (delivery.kind, delivery.state) == (DeliveryKind.TEST, "delivered")


def test_webhook_endpoint__secret__encrypted_at_rest_never_audited(rules):
    # Given an endpoint created with a secret
    endpoint, secret = endpoint_for(rules["acme"], "https://hooks.acme.test/sluice")
    # Then the database holds neither the secret nor a hash of it, but can decrypt it
    stored = WebhookEndpoint.objects.get(pk=endpoint.pk).secret_encrypted
    assert secret not in stored
    assert secret_decrypt(stored) == secret
    assert secret.startswith(endpoint.secret_prefix)
    entry = AuditEntry.objects.get(object_type="webhookendpoint")
    assert secret not in json.dumps(entry.after)


@pytest.mark.django_db(transaction=True)
def test_delivery_send__two_workers_at_once__one_request(rules, receiver, settings):
    # Given a delivery whose receiver holds the first request until released (the
    # sender waits for its answer as long as that takes: the 10 s it is given in
    # production would time out on a machine slow to run the second worker)
    settings.SLUICE_WEBHOOK_TIMEOUT = 240
    endpoint, _ = endpoint_for(rules["acme"], receiver.url)
    delivery = webhook_endpoint_test(endpoint=endpoint, actor=SYSTEM)
    receiver.hold = threading.Event()
    first = threading.Thread(
        target=lambda: (delivery_send(delivery_id=delivery.pk), connection.close())
    )
    first.start()
    receiver.wait_for_request()
    # When a second worker tries the same delivery meanwhile
    second = delivery_send(delivery_id=delivery.pk)
    receiver.hold.set()
    first.join()
    # Then it skipped the locked row: one request, one attempt, delivered
    assert second is None
    assert len(receiver.requests) == 1
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempt_count) == ("delivered", 1)


@pytest.mark.django_db
def test_announcement_notify__announcement_gone__nothing_sent_one_log_line(caplog):
    # Given a notify task for an announcement this database does not hold (queued
    # against another database, or before a restore)
    missing = 987_654
    # When a worker runs it
    result = announcement_notify_task.apply(args=[missing])
    # Then it ends quietly, sends nothing and says which one it skipped
    assert (result.successful(), result.result) == (True, 0)
    assert Delivery.objects.count() == 0
    assert f"announcement_notify.gone: no announcement {missing}" in caplog.text
