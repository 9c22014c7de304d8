"""Celery tasks of the traffic statistics: thin wrappers that call a service."""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task

from limits.traffic.stats import decision_stream_aggregate, stats_prune

__all__ = ["decision_stream_aggregate_task", "stats_prune_task"]


@shared_task(name="limits.decision_stream_aggregate")
def decision_stream_aggregate_task() -> dict[str, int]:
    """Roll the decision stream up into Postgres (safe to run twice). Run by beat."""
    return asdict(decision_stream_aggregate())


@shared_task(name="limits.stats_prune")
def stats_prune_task() -> dict[str, int]:
    """Delete statistics older than their retention settings. Run by beat."""
    return stats_prune()
