"""Notifications to tenants: one row per (notice, recipient), sent at most once.

State machine of a :class:`~limits.models.Delivery`::

    pending ──attempt ok──► delivered
       │                        ▲
       └─attempt failed─► retrying ─attempt ok─┘
                              │ (last attempt, or a permanent error)
                              ▼
                            failed        resend (audited): delivered|failed ─► pending

Idempotency: rows are unique per (announcement, endpoint or tenant, kind, lead)
and created with ``ON CONFLICT DO NOTHING``; sending locks the row
(``SELECT … FOR UPDATE SKIP LOCKED``) and only sends from pending or retrying,
so a task that is retried, re-queued or run twice at once never sends twice.
The lock is held while sending: a worker that dies mid-send rolls back, and the
next run sends again (at least once; receivers dedupe on the event id).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from django.core.exceptions import ValidationError
from django.core.mail import EmailMessage
from django.db import transaction
from django.template.loader import render_to_string
from django.utils import timezone

from limits.announcements.webhooks import (
    PostResult,
    endpoint_headers,
    require_manager,
    webhook_post,
    webhook_timeout,
)
from limits.choices import AuditAction, DeliveryChannel, DeliveryKind, DeliveryState
from limits.core.audit import Actor, audit_record
from limits.core.chain import chain_lock
from limits.core.jobs import enqueue_on_commit
from limits.models import Delivery, DeliveryAttempt, WebhookEndpoint

__all__ = [
    "DeliveryFailed",
    "deliveries_enqueue",
    "delivery_body",
    "delivery_resend",
    "delivery_send",
    "webhook_endpoint_test",
]

SENDABLE = (DeliveryState.PENDING, DeliveryState.RETRYING)
#: The ``type`` of each kind of event, in payloads and the ``Sluice-Event`` header.
EVENT_TYPES = {
    DeliveryKind.ANNOUNCEMENT: "limits.changed",
    DeliveryKind.REMINDER: "limits.reminder",
    DeliveryKind.CANCELLATION: "limits.cancelled",
    DeliveryKind.TEST: "ping",
    DeliveryKind.QUOTA: "quota.threshold",
}


#: The task that runs :func:`delivery_send`, retried (``limits.announcements.tasks``).
SEND_TASK = "limits.delivery_send"


class DeliveryFailed(Exception):
    """An attempt failed and another should follow (Celery retries on it)."""


def deliveries_enqueue(ids: list[int]) -> None:
    """Queue one send task per delivery once the current transaction commits."""
    for pk in ids:
        enqueue_on_commit(SEND_TASK, pk)


def delivery_body(delivery: Delivery) -> bytes:
    """The exact bytes sent: the stored payload with the event id, as compact JSON."""
    document = {"id": str(delivery.event_id), **delivery.payload}
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class _Outcome:
    result: PostResult
    permanent: bool = False  #: no point retrying (no endpoint, no contacts)


def _send_webhook(delivery: Delivery) -> _Outcome:
    endpoint = delivery.endpoint
    if endpoint is None or not endpoint.is_active:
        why = "the endpoint was deleted" if endpoint is None else "endpoint inactive"
        return _Outcome(PostResult(None, 0, why), permanent=True)
    body = delivery_body(delivery)
    headers = {
        **endpoint_headers(endpoint, body, message_id=str(delivery.event_id)),
        "Sluice-Event": delivery.payload["type"],
        "Sluice-Delivery": str(delivery.event_id),
    }
    delivery.target = endpoint.url
    return _Outcome(
        webhook_post(
            url=endpoint.url, body=body, headers=headers, timeout=webhook_timeout()
        )
    )


def _send_email(delivery: Delivery) -> _Outcome:
    recipients = list(delivery.tenant.contact_emails)
    if not recipients:
        return _Outcome(PostResult(None, 0, "the tenant has no contacts"), True)
    delivery.target = ", ".join(recipients)
    context = {"payload": delivery.payload, "event_id": delivery.event_id}
    subject = render_to_string("announcements/email_subject.txt", context)
    message = EmailMessage(
        subject=" ".join(subject.split()),
        body=render_to_string("announcements/email.txt", context),
        to=recipients,
    )
    started = timezone.now()
    try:
        message.send()
    except Exception as exc:  # SMTP and socket errors alike: log and retry
        return _Outcome(PostResult(None, _ms(started), f"{type(exc).__name__}: {exc}"))
    return _Outcome(PostResult(250, _ms(started)))


def _ms(started: datetime) -> int:
    return round((timezone.now() - started).total_seconds() * 1000)


def _record(delivery: Delivery, outcome: _Outcome, started: datetime, final: bool):
    result = outcome.result
    delivery.attempt_count += 1
    DeliveryAttempt.objects.create(
        delivery=delivery,
        number=delivery.attempt_count,
        started_at=started,
        duration_ms=result.duration_ms,
        status_code=result.status_code,
        error=result.error,
        response_excerpt=result.excerpt,
    )
    delivery.last_status_code, delivery.last_error = result.status_code, result.error
    if result.ok:
        delivery.state, delivery.delivered_at = DeliveryState.DELIVERED, timezone.now()
    elif final or outcome.permanent:
        delivery.state = DeliveryState.FAILED
    else:
        delivery.state = DeliveryState.RETRYING
    delivery.save()


def delivery_send(*, delivery_id: int, final: bool = False) -> Delivery | None:
    """Make one attempt at a pending or retrying delivery, logged; None if there is
    nothing to do (delivered, failed, or another worker is sending it right now).

    Raises DeliveryFailed after a failed attempt that is not ``final`` (the
    attempt is committed first), so that the caller can retry later.
    """
    with transaction.atomic():
        delivery = (
            Delivery.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("tenant", "endpoint")
            .filter(pk=delivery_id, state__in=SENDABLE)
            .first()
        )
        if delivery is None:
            return None
        started = timezone.now()
        send = (
            _send_webhook
            if delivery.channel == DeliveryChannel.WEBHOOK
            else _send_email
        )
        outcome = send(delivery)
        _record(delivery, outcome, started, final)
    if delivery.state == DeliveryState.RETRYING:
        raise DeliveryFailed(f"delivery {delivery.pk}: {delivery.last_error}")
    return delivery


@transaction.atomic
def delivery_resend(*, delivery: Delivery, actor: Actor) -> Delivery:
    """Send a delivered or failed notification again, as the same event; audited."""
    require_manager(actor)
    chain_lock()  # before the delivery's row lock (limits.core.chain: lock order)
    row = Delivery.objects.select_for_update().get(pk=delivery.pk)
    if row.state in SENDABLE:
        raise ValidationError("This notification is already queued.")
    before = {"state": row.state, "attempt_count": row.attempt_count}
    row.state = DeliveryState.PENDING
    row.save(update_fields=["state", "updated_at"])
    audit_record(
        actor=actor,
        action=AuditAction.RESEND,
        obj=row,
        before=before,
        after={"state": row.state, "event_id": str(row.event_id)},
    )
    deliveries_enqueue([row.pk])
    return row


@transaction.atomic
def webhook_endpoint_test(*, endpoint: WebhookEndpoint, actor: Actor) -> Delivery:
    """Queue a signed ``ping`` event to ``endpoint``; its attempts are logged like any."""
    require_manager(actor)
    if not endpoint.is_active:
        raise ValidationError("This endpoint is inactive: activate it first.")
    delivery = Delivery.objects.create(
        tenant=endpoint.tenant,
        endpoint=endpoint,
        channel=DeliveryChannel.WEBHOOK,
        kind=DeliveryKind.TEST,
        target=endpoint.url,
        payload={
            "type": EVENT_TYPES[DeliveryKind.TEST],
            "tenant": endpoint.tenant.slug,
            "created_at": timezone.now().isoformat(),
            "sent_by": actor.username,
        },
    )
    deliveries_enqueue([delivery.pk])
    return delivery
