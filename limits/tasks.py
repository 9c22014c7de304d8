"""Every Celery task of the domain app: Celery's autodiscovery imports this module.

Each package keeps its own tasks (``publishing``, ``announcements``, ``traffic``,
``changes``, ``core``); this module only makes sure they are all registered.
"""

from limits.announcements.tasks import (
    announcement_notify_task,
    announcements_dispatch_due_task,
    delivery_send_task,
    quota_reminders_send_task,
)
from limits.changes.tasks import overrides_maintain_task
from limits.core.tasks import audit_checkpoint_task
from limits.publishing.tasks import snapshot_activate_due_task
from limits.traffic.tasks import decision_stream_aggregate_task, stats_prune_task

__all__ = [
    "announcement_notify_task",
    "announcements_dispatch_due_task",
    "audit_checkpoint_task",
    "decision_stream_aggregate_task",
    "delivery_send_task",
    "overrides_maintain_task",
    "quota_reminders_send_task",
    "snapshot_activate_due_task",
    "stats_prune_task",
]
