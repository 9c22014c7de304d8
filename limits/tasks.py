"""Celery tasks of the domain app: thin wrappers that call a service."""

from __future__ import annotations

from celery import shared_task

__all__ = [
    "decision_stream_aggregate_task",
    "snapshot_activate_due_task",
    "stats_prune_task",
]


@shared_task(name="limits.snapshot_activate_due")
def snapshot_activate_due_task() -> list[int]:
    """Activate the versions whose effective time has come, then make sure the gateway
    bundle in Redis matches Postgres (it heals a rewrite that failed). Run by beat."""
    from limits.audit import Actor
    from limits.bundle import snapshot_bundle_sync
    from limits.publishing import snapshot_activate_due

    activated = snapshot_activate_due(actor=Actor.system("celery beat"))
    snapshot_bundle_sync()
    return [row.version for row in activated]


@shared_task(name="limits.decision_stream_aggregate")
def decision_stream_aggregate_task() -> dict[str, int]:
    """Roll the decision stream up into Postgres (safe to run twice). Run by beat."""
    from dataclasses import asdict

    from limits.stats import decision_stream_aggregate

    return asdict(decision_stream_aggregate())


@shared_task(name="limits.stats_prune")
def stats_prune_task() -> dict[str, int]:
    """Delete statistics older than their retention settings. Run by beat."""
    from limits.stats import stats_prune

    return stats_prune()
