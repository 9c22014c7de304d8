"""What the decision stream is rolled up into: counts per minute, totals, recent rejections.

Written by ``limits.traffic.stats`` only (the Celery aggregation task), read by the
dashboards and the Prometheus endpoint. ``StreamEntry`` is the bookkeeping that
makes the aggregation idempotent: a stream entry is counted in the same
transaction that records its id, and an id already recorded is never counted
again (``docs/stats.md``). ``DecisionPeak`` keeps, beside the per-minute counts, how
the minute's decisions fell into its seconds: what the impact estimate
(``limits.traffic.estimate``) replays, since per-minute counts hide bursts.
"""

from django.contrib.postgres.fields import ArrayField
from django.db import models

from limits.choices import Outcome

__all__ = [
    "SECONDS",
    "DecisionHour",
    "DecisionMinute",
    "DecisionPeak",
    "Rejection",
    "StatCounter",
    "StreamEntry",
]

SECONDS = 60  #: entries of ``DecisionPeak.seconds``: one per second of the minute


class DecisionMinute(models.Model):
    """Decisions of one minute, for one tenant, route and outcome."""

    minute = models.DateTimeField(help_text="Start of the minute, UTC.")
    tenant = models.CharField(max_length=100, blank=True, help_text="Empty: anonymous.")
    route = models.CharField(max_length=100, blank=True, help_text="Empty: no route.")
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    count = models.PositiveBigIntegerField(default=0)

    class Meta:
        verbose_name = "traffic dashboard"
        verbose_name_plural = "traffic dashboard"
        constraints = [
            models.UniqueConstraint(
                fields=["minute", "tenant", "route", "outcome"],
                name="%(app_label)s_%(class)s_unique_minute_tenant_route_outcome",
                violation_error_message="One count per minute, tenant, route and outcome.",
            )
        ]
        indexes = [
            models.Index(fields=["minute", "outcome"], name="limits_minute_outcome"),
            models.Index(fields=["tenant", "minute"], name="limits_minute_tenant"),
        ]

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M} {self.tenant or '-'} {self.route or '-'} {self.outcome}: {self.count}"


class DecisionPeak(models.Model):
    """Decisions of one minute for one tenant and route, every outcome, second by second.

    ``seconds`` always holds 60 counts (a bound of 60 integers a row); ``peak`` is
    their maximum, kept as a column so that the estimate can rule out a tenant in
    aggregate SQL without reading the arrays.
    """

    minute = models.DateTimeField(help_text="Start of the minute, UTC.")
    tenant = models.CharField(max_length=100, blank=True, help_text="Empty: anonymous.")
    route = models.CharField(max_length=100, blank=True, help_text="Empty: no route.")
    count = models.PositiveBigIntegerField(default=0, help_text="Every outcome.")
    limited = models.PositiveBigIntegerField(default=0, help_text="Of them, limited.")
    peak = models.PositiveIntegerField(
        default=0, help_text="Decisions in the busiest second of the minute."
    )
    seconds = ArrayField(
        models.PositiveIntegerField(),
        size=SECONDS,
        help_text="Decisions in each second of the minute, 0 to 59.",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "route", "minute"],
                name="%(app_label)s_%(class)s_unique_tenant_route_minute",
                violation_error_message="One row per tenant, route and minute.",
            )
        ]
        indexes = [models.Index(fields=["minute"], name="limits_peak_minute")]

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M} {self.tenant or '-'} {self.route or '-'}: {self.count}, peak {self.peak}/s"


class DecisionHour(models.Model):
    """One hour of a tenant and route in four figures: what the estimate rules series out by.

    Kept exact by the aggregation from the ``DecisionPeak`` rows it writes: counts
    only grow, so the busiest minute and second of the hour are the greatest of
    the values its minutes ever had.
    """

    hour = models.DateTimeField(help_text="Start of the hour, UTC.")
    tenant = models.CharField(max_length=100, blank=True, help_text="Empty: anonymous.")
    route = models.CharField(max_length=100, blank=True, help_text="Empty: no route.")
    count = models.PositiveBigIntegerField(default=0, help_text="Every outcome.")
    limited = models.PositiveBigIntegerField(default=0, help_text="Of them, limited.")
    busiest_minute = models.PositiveBigIntegerField(
        default=0, help_text="Decisions in the busiest minute of the hour."
    )
    peak = models.PositiveIntegerField(
        default=0, help_text="Decisions in the busiest second of the hour."
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "route", "hour"],
                name="%(app_label)s_%(class)s_unique_tenant_route_hour",
                violation_error_message="One row per tenant, route and hour.",
            )
        ]
        indexes = [models.Index(fields=["hour"], name="limits_hour_hour")]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H:00} {self.tenant or '-'} {self.route or '-'}: {self.count}"


class StatCounter(models.Model):
    """A counter that only grows (decisions per outcome, events lost): Prometheus reads them."""

    name = models.CharField(max_length=60, unique=True)
    value = models.PositiveBigIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name} = {self.value}"


class Rejection(models.Model):
    """Recent rejections of a tenant in one second (identical ones counted together):
    kept per tenant up to a bound of rows, and by age."""

    at = models.DateTimeField()
    tenant = models.CharField(max_length=100, blank=True)
    route = models.CharField(max_length=100, blank=True)
    policy = models.CharField(
        max_length=220, help_text="scope/route; ~ marks an override"
    )
    limit = models.CharField(
        max_length=40, help_text="e.g. user-min, tenant-concurrent"
    )
    dimension = models.CharField(
        max_length=10, help_text="What the rejecting key counted per."
    )
    snapshot_version = models.PositiveIntegerField()
    gateway = models.CharField(max_length=100, blank=True)
    count = models.PositiveIntegerField(
        default=1, help_text="Identical rejections by this gateway in this second."
    )

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [
            models.Index(fields=["tenant", "-at"], name="limits_rejection_tenant_at"),
            models.Index(fields=["at"], name="limits_rejection_at"),
        ]

    def __str__(self) -> str:
        return (
            f"{self.at:%H:%M:%S} {self.tenant or '-'} {self.route or '-'} {self.limit}"
        )


class StreamEntry(models.Model):
    """A decision-stream entry already rolled up; its id is never counted twice."""

    entry_id = models.CharField(max_length=41, unique=True)
    entry_ms = models.BigIntegerField(help_text="The id's milliseconds, for pruning.")
    processed_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "stream entries"

    def __str__(self) -> str:
        return self.entry_id
