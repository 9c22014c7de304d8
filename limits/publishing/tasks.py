"""Celery tasks of publishing: thin wrappers that call a service."""

from __future__ import annotations

from celery import shared_task

from limits.core.audit import Actor
from limits.gateways.bundle import snapshot_bundle_sync
from limits.publishing.services import snapshot_activate_due

__all__ = ["snapshot_activate_due_task"]


@shared_task(name="limits.snapshot_activate_due")
def snapshot_activate_due_task() -> list[int]:
    """Activate the versions whose effective time has come, then make sure the gateway
    bundle in Redis matches Postgres (it heals a rewrite that failed). Run by beat."""
    activated = snapshot_activate_due(actor=Actor.system("celery beat"))
    snapshot_bundle_sync()
    return [row.version for row in activated]
