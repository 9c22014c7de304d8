"""What gateways' rehearsals of scheduled versions said, rolled up per minute.

Written by ``limits.traffic.rehearsal`` (from the decision stream, in the same
transaction as the other decision counts), read by the version page and the API.
"""

from django.db import models

__all__ = ["RehearsalMinute"]


class RehearsalMinute(models.Model):
    """Requests of one minute, tenant and route that rehearsed a scheduled version,
    and how many of them that version would have rejected (``docs/rehearsal.md``)."""

    version = models.PositiveIntegerField(
        help_text="The rehearsed (scheduled) version."
    )
    minute = models.DateTimeField(help_text="Start of the minute, UTC.")
    tenant = models.CharField(max_length=100, blank=True, help_text="Empty: anonymous.")
    route = models.CharField(max_length=100, blank=True, help_text="Empty: no route.")
    requests = models.PositiveBigIntegerField(
        default=0, help_text="Decisions that rehearsed the version."
    )
    would_reject = models.PositiveBigIntegerField(
        default=0, help_text="Of those, how many the version would have rejected."
    )

    class Meta:
        verbose_name = "rehearsal minute"
        constraints = [
            models.UniqueConstraint(
                fields=["version", "minute", "tenant", "route"],
                name="%(app_label)s_%(class)s_unique_version_minute_tenant_route",
                violation_error_message="One count per version, minute, tenant and route.",
            ),
            models.CheckConstraint(
                condition=models.Q(would_reject__lte=models.F("requests")),
                name="%(app_label)s_%(class)s_rejects_within_requests",
                violation_error_message="A version cannot reject more requests than it saw.",
            ),
        ]
        indexes = [
            models.Index(fields=["minute"], name="limits_rehearsal_minute"),
        ]

    def __str__(self) -> str:
        return (
            f"v{self.version} {self.minute:%Y-%m-%d %H:%M} {self.tenant or '-'} "
            f"{self.route or '-'}: {self.would_reject}/{self.requests}"
        )
