"""Webhook endpoints of tenants, and every notification sent to them, attempt by attempt."""

import uuid

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q
from django.utils import timezone

from limits.choices import DeliveryChannel, DeliveryKind, DeliveryState
from limits.core.egress import url_problem

from .announcements import Announcement
from .rules import Tenant

__all__ = ["Delivery", "DeliveryAttempt", "WebhookEndpoint"]


class WebhookEndpoint(models.Model):
    """A URL of a tenant that receives signed announcements.

    The signing secret is kept encrypted (``limits.core.secrets``): signing needs the
    secret itself, so it cannot be hashed like an API token. It is shown once,
    when created or rotated; ``secret_prefix`` identifies it afterwards.
    """

    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="webhook_endpoints"
    )
    url = models.URLField(max_length=500, help_text="Receives POST requests.")
    description = models.CharField(max_length=200, blank=True)
    is_active = models.BooleanField(
        default=True, help_text="Inactive endpoints receive nothing."
    )
    secret_prefix = models.CharField(max_length=16, editable=False)
    secret_encrypted = models.TextField(editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    revision = models.PositiveIntegerField(default=1, editable=False)

    class Meta:
        ordering = ["tenant__slug", "id"]
        verbose_name = "webhook endpoint"

    def __str__(self) -> str:
        return f"{self.tenant.slug}: {self.url}"

    def clean(self) -> None:
        problem = url_problem(self.url)
        if problem:
            raise ValidationError({"url": problem})


class Delivery(models.Model):
    """One notification to one tenant through one channel: its state and last outcome.

    At most one row exists per (announcement, endpoint, kind, lead) for webhooks
    and per (announcement, tenant, kind, lead) for emails, so a task that runs
    twice finds the row it made and never notifies twice.
    """

    announcement = models.ForeignKey(
        Announcement,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="deliveries",
    )
    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="deliveries"
    )
    endpoint = models.ForeignKey(
        WebhookEndpoint,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="deliveries",
    )
    channel = models.CharField(max_length=7, choices=DeliveryChannel.choices)
    kind = models.CharField(max_length=12, choices=DeliveryKind.choices)
    lead = models.PositiveIntegerField(
        default=0, help_text="Reminders: seconds before the effective time."
    )
    event_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    target = models.CharField(
        max_length=1000, help_text="The URL or the addresses last sent to."
    )
    payload = models.JSONField()
    state = models.CharField(
        max_length=9, choices=DeliveryState.choices, default=DeliveryState.PENDING
    )
    attempt_count = models.PositiveIntegerField(default=0)
    last_status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "deliveries"
        default_permissions = ("view", "change")
        constraints = [
            models.UniqueConstraint(
                fields=["announcement", "endpoint", "kind", "lead"],
                condition=Q(
                    channel=DeliveryChannel.WEBHOOK,
                    announcement__isnull=False,
                    endpoint__isnull=False,
                ),
                name="%(app_label)s_%(class)s_unique_webhook_notification",
                violation_error_message="This endpoint already has this notification.",
            ),
            models.UniqueConstraint(
                fields=["announcement", "tenant", "kind", "lead"],
                condition=Q(channel=DeliveryChannel.EMAIL, announcement__isnull=False),
                name="%(app_label)s_%(class)s_unique_email_notification",
                violation_error_message="This tenant already has this email.",
            ),
        ]
        indexes = [
            models.Index(
                fields=["state", "updated_at"], name="limits_delivery_state_idx"
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.channel} to {self.tenant.slug} ({self.state})"


class DeliveryAttempt(models.Model):
    """One try at delivering: when, how long, the HTTP status or the error."""

    delivery = models.ForeignKey(
        Delivery, on_delete=models.CASCADE, related_name="attempts"
    )
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    duration_ms = models.PositiveIntegerField()
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    response_excerpt = models.TextField(blank=True)

    class Meta:
        ordering = ["delivery_id", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["delivery", "number"],
                name="%(app_label)s_%(class)s_unique_delivery_number",
                violation_error_message="This attempt is already logged.",
            )
        ]

    def __str__(self) -> str:
        outcome = self.status_code or self.error[:40] or "?"
        return f"attempt {self.number}: {outcome}"
