"""The limits of a policy: token buckets (with hot-key options), sliding windows,
calendar quotas and concurrency caps.

One table for every kind, as people think of them: a limit of kind ``rate`` is a
token bucket (rate, period, burst, optional cost, and hot-key options: shards
or leases); a limit of kind ``sliding_window`` admits at most ``rate`` in any
``period`` (the snapshot's ``limit`` and ``window``: the same two numbers a
publisher sets for a bucket, so forms and the API keep one pair of fields, and
a bucket turned into a window keeps them), with an optional cost and nothing
else; a limit of kind ``calendar_quota`` admits at most ``rate`` per calendar
``quota_per`` (day or month) in the tenant's time zone, its month from the 1st
or from the tenant's billing day (``quota_cycle``), with an optional cost and
no period (its period is ``quota_per``), burst or hot-key option; a limit of kind ``concurrent`` caps requests in flight at once
(``max_inflight``, and the ``timeout`` after which a slot a crashed gateway
never released stops counting). Fields of the other kinds stay empty; the
database checks it.
"""

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.core.validators import MaxValueValidator
from django.db import models
from django.db.models import Q

from limits.choices import Dimension, LimitKind, Period, QuotaCycle, QuotaPer
from sluice import model as sluice_model
from sluice.model import (
    DEFAULT_LEASE_MS,
    DEFAULT_TIMEOUT,
    MAX_LEASE_MS,
    MAX_SHARDS,
    MAX_TIMEOUT,
    describe_limit,
)

from .base import RuleModel
from .rules import Policy, positive

__all__ = ["Limit"]

#: Why a sliding window refuses a bucket's settings, by field.
_NOT_FOR_WINDOWS = {
    "burst": "A sliding window has no burst: it admits at most its rate in any period.",
    "shards": "Shards are for rate limits (token buckets) only.",
    "lease": "Leases are for rate limits (token buckets) only.",
}
#: Why a calendar quota refuses a bucket's settings, by field.
_NOT_FOR_QUOTAS = {
    "period": "A calendar quota has no period in seconds: its period is its "
    "quota_per (day or month).",
    "burst": "A calendar quota has no burst: it admits at most its rate per day or month.",
    "shards": "Shards are for rate limits (token buckets) only.",
    "lease": "Leases are for rate limits (token buckets) only.",
}
#: The row's field of a snapshot member a kind finds a problem with.
_FIELD_OF = {
    ".limit": "rate",
    ".window": "period",
    ".per": "quota_per",
    ".cycle": "quota_cycle",
    ".shards": "shards",
    ".lease": "lease",
}

_RATE = Q(kind=LimitKind.RATE)
_SLIDING_WINDOW = Q(kind=LimitKind.SLIDING_WINDOW)
_CALENDAR_QUOTA = Q(kind=LimitKind.CALENDAR_QUOTA)
_CONCURRENT = Q(kind=LimitKind.CONCURRENT)
#: Columns of calendar quotas only, empty on every other kind.
_NO_QUOTA = Q(quota_per="", quota_cycle="")


class Limit(RuleModel):
    """A limit of a policy: a token bucket (``rate`` per ``period``, ``burst`` deep),
    a sliding window (at most ``rate`` in any ``period``), a calendar quota (at most
    ``rate`` per ``quota_per``, on its ``quota_cycle``) or a cap on requests in
    flight (``max_inflight``), per ``dimension``."""

    #: What a publisher sets on a limit, in the order forms, the API and
    #: :meth:`value_of` list them.
    SETTINGS = (
        "kind",
        "dimension",
        "rate",
        "period",
        "burst",
        "cost",
        "shadow",
        "shards",
        "lease",
        "lease_ms",
        "max_inflight",
        "timeout",
        "quota_per",
        "quota_cycle",
        "public_name",
        "public_description",
    )

    policy = models.ForeignKey(Policy, on_delete=models.CASCADE, related_name="limits")
    kind = models.CharField(
        max_length=14, choices=LimitKind.choices, default=LimitKind.RATE
    )
    dimension = models.CharField(
        max_length=7, choices=Dimension.choices, default=Dimension.TENANT
    )
    rate = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[positive],
        help_text="Requests (tokens) per period; for a sliding window, the most "
        "admitted in any period; for a calendar quota, per day or month.",
    )
    period = models.PositiveIntegerField(
        choices=Period.choices, default=Period.SECOND, null=True, blank=True
    )
    burst = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[positive],
        help_text="Bucket capacity: the largest burst admitted at once.",
    )
    cost = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[positive],
        help_text="Tokens per request; empty means the route's cost.",
    )
    shadow = models.BooleanField(
        default=False,
        help_text="Evaluate and report, but never reject (to try a limit out).",
    )
    shards = models.PositiveSmallIntegerField(
        default=1,
        validators=[positive, MaxValueValidator(MAX_SHARDS)],
        help_text="Hot key: split the bucket into this many keys, each with 1/shards "
        "of the rate and burst.",
    )
    lease = models.PositiveIntegerField(
        default=0,
        help_text="Hot key: tokens a gateway takes at once and spends in process "
        "(0: no leases). A gateway may admit up to this many early.",
    )
    lease_ms = models.PositiveIntegerField(
        "lease time (ms)",
        default=DEFAULT_LEASE_MS,
        validators=[positive, MaxValueValidator(MAX_LEASE_MS)],
        help_text="How long leased tokens may be spent.",
    )
    max_inflight = models.PositiveIntegerField(
        "max in flight",
        null=True,
        blank=True,
        validators=[positive],
        help_text="Concurrent limits: requests in flight at once per key.",
    )
    timeout = models.PositiveIntegerField(
        "slot timeout (s)",
        default=DEFAULT_TIMEOUT,
        validators=[positive, MaxValueValidator(MAX_TIMEOUT)],
        help_text="Concurrent limits: a slot never released (a crashed gateway) stops "
        "counting after this; longer than the slowest request.",
    )
    quota_per = models.CharField(
        "quota per",
        max_length=5,
        choices=QuotaPer.choices,
        blank=True,
        default="",
        help_text="Calendar quotas: a day or a month, from midnight in the tenant's "
        "time zone.",
    )
    quota_cycle = models.CharField(
        "quota cycle",
        max_length=8,
        choices=QuotaCycle.choices,
        blank=True,
        default="",
        help_text="Calendar quotas per month: from the 1st (calendar, the default) or "
        "from the tenant's billing day (billing).",
    )

    public_name = models.CharField(
        max_length=sluice_model.MAX_PUBLIC_NAME,
        blank=True,
        default="",
        help_text='What customers read in a 429; empty: derived ("Rate limit per user").',
    )
    public_description = models.CharField(
        max_length=sluice_model.MAX_PUBLIC_DESCRIPTION,
        blank=True,
        default="",
        help_text="The limit in a 429's detail; empty: derived from the numbers "
        '("2 requests per second per user, bursts of 5").',
    )

    class Meta:
        ordering = ["policy_id", "kind", "dimension", "period"]
        constraints = [
            models.CheckConstraint(
                condition=(
                    _RATE
                    & Q(rate__gte=1, burst__gte=1, period__isnull=False)
                    & (Q(cost__isnull=True) | Q(cost__gte=1))
                    & Q(max_inflight__isnull=True)
                    & _NO_QUOTA
                )
                | (
                    _SLIDING_WINDOW
                    & Q(rate__gte=1, period__isnull=False, burst__isnull=True)
                    & (Q(cost__isnull=True) | Q(cost__gte=1))
                    & Q(max_inflight__isnull=True, lease=0, shards=1)
                    & _NO_QUOTA
                )
                | (
                    _CALENDAR_QUOTA
                    & Q(rate__gte=1, period__isnull=True, burst__isnull=True)
                    & (Q(cost__isnull=True) | Q(cost__gte=1))
                    & Q(max_inflight__isnull=True, lease=0, shards=1)
                    & (
                        Q(quota_per=QuotaPer.DAY, quota_cycle=QuotaCycle.CALENDAR)
                        | Q(quota_per=QuotaPer.MONTH, quota_cycle__in=QuotaCycle.values)
                    )
                )
                | (
                    _CONCURRENT
                    & Q(max_inflight__gte=1, rate__isnull=True, burst__isnull=True)
                    & Q(period__isnull=True, cost__isnull=True, lease=0, shards=1)
                    & _NO_QUOTA
                ),
                name="%(app_label)s_%(class)s_numbers_by_kind",
                violation_error_message="A rate limit needs a rate, a period and a burst of at "
                "least 1; a sliding window needs a rate (its limit) and a period (its window), and no "
                "burst, shards or lease; a calendar quota needs a rate (its limit) and a quota per "
                "(day, or month on the calendar or billing cycle), and no period, burst, shards or "
                "lease; a concurrent limit needs a max in flight of at least 1 and nothing else.",
            ),
            models.CheckConstraint(
                condition=Q(shards__gte=1, lease_ms__gte=1, timeout__gte=1)
                & (Q(shards=1) | Q(lease=0)),
                name="%(app_label)s_%(class)s_hot_key_options",
                violation_error_message="A limit is either sharded or leased, not both.",
            ),
            models.UniqueConstraint(
                fields=["policy", "dimension", "period"],
                name="%(app_label)s_%(class)s_unique_policy_dimension_period",
                violation_error_message="This policy already has a limit for this dimension and period.",
            ),
            models.UniqueConstraint(
                fields=["policy", "dimension"],
                condition=_CONCURRENT,
                name="%(app_label)s_%(class)s_unique_policy_dimension_concurrent",
                violation_error_message="This policy already has a concurrent limit for this dimension.",
            ),
            models.UniqueConstraint(
                fields=["policy", "dimension", "quota_per", "quota_cycle"],
                condition=_CALENDAR_QUOTA,
                name="%(app_label)s_%(class)s_unique_policy_dimension_quota",
                violation_error_message="This policy already has a calendar quota for this "
                "dimension and period.",
            ),
        ]

    def __str__(self) -> str:
        return self.describe()

    def describe(self) -> str:
        """``per user: 100 / s, burst 200``: the way people say it."""
        return describe_limit(self.to_value())

    def to_value(self) -> sluice_model.RateLimit | sluice_model.ConcurrencyLimit:
        """The snapshot's value of this row: a bucket, a sliding window, a calendar
        quota, or a concurrency cap."""
        return self.value_of(*(getattr(self, name) for name in self.SETTINGS))

    @staticmethod
    def value_of(
        kind: str,
        dimension: str,
        rate: int,
        period: int,
        burst: int,
        cost: int | None,
        shadow: bool,
        shards: int,
        lease: int,
        lease_ms: int,
        max_inflight: int,
        timeout: int,
        quota_per: str = "",
        quota_cycle: str = "",
        public_name: str = "",
        public_description: str = "",
    ) -> sluice_model.RateLimit | sluice_model.ConcurrencyLimit:
        """The snapshot's value of one limit's columns (:attr:`SETTINGS`, in order):
        compiling reads columns as tuples, 30,000 limits without model instances."""
        if kind == LimitKind.CONCURRENT:
            return sluice_model.ConcurrencyLimit(
                dimension=sluice_model.Dimension(dimension),
                max_inflight=max_inflight,
                timeout=timeout,
                shadow=shadow,
                name=public_name,
                description=public_description,
            )
        if kind == LimitKind.CALENDAR_QUOTA:
            return sluice_model.CalendarQuota(
                dimension=sluice_model.Dimension(dimension),
                limit=rate,
                per=quota_per,
                cycle=quota_cycle or QuotaCycle.CALENDAR.value,
                cost=cost,
                shadow=shadow,
                name=public_name,
                description=public_description,
            )
        if kind == LimitKind.SLIDING_WINDOW:
            return sluice_model.SlidingWindow(
                dimension=sluice_model.Dimension(dimension),
                limit=rate,
                window=period,
                cost=cost,
                shadow=shadow,
                shards=shards,
                lease=lease,
                name=public_name,
                description=public_description,
            )
        return sluice_model.Limit(
            sluice_model.Dimension(dimension),
            rate,
            period,
            burst,
            cost,
            shadow,
            shards,
            lease,
            lease_ms,
            public_name,
            public_description,
        )

    def clean(self) -> None:
        if self.kind == LimitKind.CONCURRENT:
            self._clean_concurrent()
        elif self.kind == LimitKind.SLIDING_WINDOW:
            self._clean_sliding_window()
        elif self.kind == LimitKind.CALENDAR_QUOTA:
            self._clean_calendar_quota()
        else:
            self._clean_rate()
        if self.kind != LimitKind.CALENDAR_QUOTA:
            self.quota_per = self.quota_cycle = ""  # a quota's fields, on another kind

    def _clean_concurrent(self) -> None:
        if not self.max_inflight:
            raise ValidationError(
                {"max_inflight": "A concurrent limit needs a max in flight."}
            )
        # A concurrency cap has no bucket: what belongs to buckets is dropped.
        self.rate = self.burst = self.period = self.cost = None
        self.shards, self.lease = 1, 0

    def _clean_sliding_window(self) -> None:
        missing = {
            name: "A sliding window needs this."
            for name in ("rate", "period")
            if getattr(self, name) is None
        }
        if missing:
            raise ValidationError(missing)
        # What a sliding window has no use for is refused by name rather than
        # dropped: a burst or a hot-key option set on one is a misunderstanding.
        refused = {
            name: _NOT_FOR_WINDOWS[name]
            for name, unset in (("burst", None), ("shards", 1), ("lease", 0))
            if getattr(self, name) not in (unset, None)
        }
        if refused:
            raise ValidationError(refused)
        self.max_inflight = None
        self.shards, self.lease = 1, 0
        self.lease_ms = DEFAULT_LEASE_MS
        self._raise_problems(sluice_model.SLIDING_WINDOW)

    def _clean_calendar_quota(self) -> None:
        missing = {
            name: "A calendar quota needs this."
            for name in ("rate", "quota_per")
            if not getattr(self, name)
        }
        if missing:
            raise ValidationError(missing)
        # Refused by name as for windows. The period column defaults to one second
        # (a bucket's): left at that default it is what a form or an API body that
        # never named a period sends, so only another period is a misunderstanding.
        refused = {
            name: _NOT_FOR_QUOTAS[name]
            for name, unset in (
                ("period", Period.SECOND),
                ("burst", None),
                ("shards", 1),
                ("lease", 0),
            )
            if getattr(self, name) not in (unset, None)
        }
        self.quota_cycle = self.quota_cycle or QuotaCycle.CALENDAR
        if self.quota_per == QuotaPer.DAY and self.quota_cycle != QuotaCycle.CALENDAR:
            refused["quota_cycle"] = (
                "A billing cycle is a month: a daily quota starts at midnight."
            )
        if refused:
            raise ValidationError(refused)
        self.period = self.max_inflight = None
        self.shards, self.lease = 1, 0
        self.lease_ms = DEFAULT_LEASE_MS
        self._raise_problems(sluice_model.CALENDAR_QUOTA)

    def _raise_problems(self, kind: sluice_model.LimitKind) -> None:
        """ValidationError by field for what ``kind`` finds wrong with this row
        (at the row's own cost, or one: the route's is checked with its policy)."""
        problems = kind.problems(self.to_value(), cost=self.cost or 1)
        if problems:
            raise ValidationError(
                {
                    _FIELD_OF.get(member, NON_FIELD_ERRORS): message
                    for member, message in problems
                }
            )

    def _clean_rate(self) -> None:
        missing = {
            name: "A rate limit needs this."
            for name in ("rate", "period", "burst")
            if getattr(self, name) is None
        }
        if missing:
            raise ValidationError(missing)
        self.max_inflight = None
        if self.cost and self.burst < self.cost:
            raise ValidationError(
                {
                    "burst": f"Burst {self.burst} is below the cost {self.cost}: such requests could never pass."
                }
            )
        if self.shards > 1 and self.lease:
            raise ValidationError(
                {"lease": "A limit is either sharded or leased, not both."}
            )
