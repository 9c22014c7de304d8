"""Celery tasks of the domain app: thin wrappers that call a service."""

from __future__ import annotations

from celery import shared_task

from limits.announcements.deliveries import DeliveryFailed

__all__ = [
    "announcement_notify_task",
    "announcements_dispatch_due_task",
    "decision_stream_aggregate_task",
    "delivery_send_task",
    "snapshot_activate_due_task",
    "stats_prune_task",
]


@shared_task(name="limits.snapshot_activate_due")
def snapshot_activate_due_task() -> list[int]:
    """Activate the versions whose effective time has come, then make sure the gateway
    bundle in Redis matches Postgres (it heals a rewrite that failed). Run by beat."""
    from limits.core.audit import Actor
    from limits.gateways.bundle import snapshot_bundle_sync
    from limits.publishing import snapshot_activate_due

    activated = snapshot_activate_due(actor=Actor.system("celery beat"))
    snapshot_bundle_sync()
    return [row.version for row in activated]


@shared_task(name="limits.announcement_notify")
def announcement_notify_task(announcement_id: int) -> int:
    """Create and queue the notifications of one version (once, however often run)."""
    from limits.announcements.services import announcement_notify

    return announcement_notify(announcement_id=announcement_id)


#: 1 + 8 attempts, spaced by full-jitter exponential backoff (0-1 s, 0-2 s, ...,
#: capped at an hour): a receiver that is down for a few minutes still gets it.
@shared_task(
    name="limits.delivery_send",
    bind=True,
    autoretry_for=(DeliveryFailed,),
    retry_backoff=True,
    retry_backoff_max=3600,
    retry_jitter=True,
    max_retries=8,
)
def delivery_send_task(self, delivery_id: int) -> str | None:
    """One attempt at a webhook or email; Celery retries while attempts fail."""
    from limits.announcements.deliveries import delivery_send

    final = self.request.retries >= self.max_retries
    delivery = delivery_send(delivery_id=delivery_id, final=final)
    return delivery.state if delivery else None


@shared_task(name="limits.announcements_dispatch_due")
def announcements_dispatch_due_task() -> dict[str, int]:
    """Reminders before lowerings, and notifications whose task was lost. Run by beat."""
    from limits.announcements.services import announcements_dispatch_due

    return announcements_dispatch_due()


@shared_task(name="limits.decision_stream_aggregate")
def decision_stream_aggregate_task() -> dict[str, int]:
    """Roll the decision stream up into Postgres (safe to run twice). Run by beat."""
    from dataclasses import asdict

    from limits.traffic.stats import decision_stream_aggregate

    return asdict(decision_stream_aggregate())


@shared_task(name="limits.stats_prune")
def stats_prune_task() -> dict[str, int]:
    """Delete statistics older than their retention settings. Run by beat."""
    from limits.traffic.stats import stats_prune

    return stats_prune()
