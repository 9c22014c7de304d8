"""The Celery app of the control plane; configuration comes from CELERY_* settings."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "controlplane.settings")

app = Celery("controlplane")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_configure.connect
def schedule_periodic_tasks(sender: Celery, **kwargs) -> None:
    """Beat's schedule; read from settings here, once Django is configured."""
    from django.conf import settings

    sender.add_periodic_task(
        float(settings.SLUICE_ACTIVATION_INTERVAL),
        sender.signature("limits.snapshot_activate_due"),
        name="activate scheduled snapshots",
        expires=float(settings.SLUICE_ACTIVATION_INTERVAL),
    )
    sender.add_periodic_task(
        float(settings.SLUICE_ANNOUNCE_INTERVAL),
        sender.signature("limits.announcements_dispatch_due"),
        name="send due reminders, re-queue lost notifications",
        expires=float(settings.SLUICE_ANNOUNCE_INTERVAL),
    )
    sender.add_periodic_task(
        float(settings.SLUICE_QUOTA_REMINDER_INTERVAL),
        sender.signature("limits.quota_reminders_send"),
        name="tell opted-in tenants of the quota thresholds they reached",
        expires=float(settings.SLUICE_QUOTA_REMINDER_INTERVAL),
    )
    sender.add_periodic_task(
        float(settings.SLUICE_STATS_INTERVAL),
        sender.signature("limits.decision_stream_aggregate"),
        name="roll the decision stream up",
        expires=float(settings.SLUICE_STATS_INTERVAL),
    )
    sender.add_periodic_task(
        float(settings.SLUICE_OVERRIDE_INTERVAL),
        sender.signature("limits.overrides_maintain"),
        name="remind of expiring overrides, prune expired ones",
        expires=float(settings.SLUICE_OVERRIDE_INTERVAL),
    )
    if settings.SLUICE_AUDIT_CHECKPOINT_INTERVAL > 0:
        sender.add_periodic_task(
            float(settings.SLUICE_AUDIT_CHECKPOINT_INTERVAL),
            sender.signature("limits.audit_checkpoint"),
            name="checkpoint the audit chain's head out of the database",
            expires=float(settings.SLUICE_AUDIT_CHECKPOINT_INTERVAL),
        )
    sender.add_periodic_task(
        float(settings.SLUICE_STATS_PRUNE_INTERVAL),
        sender.signature("limits.stats_prune"),
        name="prune old statistics",
        expires=float(settings.SLUICE_STATS_PRUNE_INTERVAL),
    )
