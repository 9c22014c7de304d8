"""Celery tasks of change requests: thin wrappers that call a service."""

from __future__ import annotations

from celery import shared_task

from limits.changes.overrides import overrides_maintain

__all__ = ["overrides_maintain_task"]


@shared_task(name="limits.overrides_maintain")
def overrides_maintain_task() -> dict[str, int]:
    """Remind of overrides about to expire and prune expired ones. Run by beat."""
    return overrides_maintain()
