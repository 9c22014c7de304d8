"""Celery tasks of announcements: thin wrappers that call a service."""

from __future__ import annotations

from celery import shared_task

from limits.announcements.deliveries import SEND_TASK, DeliveryFailed, delivery_send
from limits.announcements.quota_reminders import quota_reminders_send
from limits.announcements.services import (
    NOTIFY_TASK,
    announcement_notify,
    announcements_dispatch_due,
)

__all__ = [
    "announcement_notify_task",
    "announcements_dispatch_due_task",
    "delivery_send_task",
    "quota_reminders_send_task",
]


@shared_task(name=NOTIFY_TASK)
def announcement_notify_task(announcement_id: int) -> int:
    """Create and queue the notifications of one version (once, however often run)."""
    return announcement_notify(announcement_id=announcement_id)


#: 1 + 8 attempts, spaced by full-jitter exponential backoff (0-1 s, 0-2 s, ...,
#: capped at an hour): a receiver that is down for a few minutes still gets it.
@shared_task(
    name=SEND_TASK,
    bind=True,
    autoretry_for=(DeliveryFailed,),
    retry_backoff=True,
    retry_backoff_max=3600,
    retry_jitter=True,
    max_retries=8,
)
def delivery_send_task(self, delivery_id: int) -> str | None:
    """One attempt at a webhook or email; Celery retries while attempts fail."""
    final = self.request.retries >= self.max_retries
    delivery = delivery_send(delivery_id=delivery_id, final=final)
    return delivery.state if delivery else None


@shared_task(name="limits.announcements_dispatch_due")
def announcements_dispatch_due_task() -> dict[str, int]:
    """Reminders before lowerings, and notifications whose task was lost. Run by beat."""
    return announcements_dispatch_due()


@shared_task(name="limits.quota_reminders_send")
def quota_reminders_send_task() -> int:
    """Tell opted-in tenants of the quota thresholds they reached. Run by beat."""
    return quota_reminders_send()
