"""Which quota thresholds a tenant was told about, once per period."""

from django.db import models
from django.utils import timezone

from .rules import Tenant

__all__ = ["QuotaNotice"]


class QuotaNotice(models.Model):
    """A tenant reached ``threshold`` % of one calendar quota in the period starting
    at ``period_start``, and was notified (webhooks, email).

    At most one row exists per (tenant, quota, period, threshold), and it is written
    in the transaction that creates the notification's deliveries: a scan that runs
    twice, or twice at once, never notifies twice. A new period has a new start, so
    the thresholds are armed again.
    """

    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="quota_notices"
    )
    quota = models.CharField(
        max_length=500, help_text="The quota's Redis key: one per quota and tenant."
    )
    period_start = models.DateTimeField()
    period_end = models.DateTimeField()
    threshold = models.PositiveSmallIntegerField(help_text="Percent of the limit.")
    used = models.PositiveBigIntegerField(help_text="Requests' worth used when seen.")
    limit = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        default_permissions = ("view",)
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "quota", "period_start", "threshold"],
                name="%(app_label)s_%(class)s_unique_tenant_quota_period_threshold",
                violation_error_message="This tenant was already told of this threshold.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}: {self.threshold} % of {self.quota}"
