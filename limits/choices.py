"""Choices of the rule models, derived from the snapshot vocabulary so both sides agree."""

from django.db import models

from sluice.decision import Outcome as _Outcome
from sluice.model import HTTP_METHODS, PERIODS
from sluice.model import Dimension as _Dimension
from sluice.model import FailureMode as _FailureMode
from sluice.model import ScopeKind as _ScopeKind

FailureMode = models.TextChoices(
    "FailureMode",
    [
        (
            "OPEN",
            (
                _FailureMode.OPEN.value,
                "open: admit up to the whole limit per gateway while the limiter is down",
            ),
        ),
        (
            "CLOSED",
            (_FailureMode.CLOSED.value, "closed: reject while the limiter is down"),
        ),
        ("LOCAL", (_FailureMode.LOCAL.value, "local: a strict in-process limit")),
        (
            "OPEN_UNBOUNDED",
            (
                _FailureMode.OPEN_UNBOUNDED.value,
                "open-unbounded: admit everything while the limiter is down",
            ),
        ),
    ],
)
Dimension = models.TextChoices(
    "Dimension",
    [
        ("TENANT", (_Dimension.TENANT.value, "per tenant")),
        ("USER", (_Dimension.USER.value, "per user")),
        ("API_KEY", (_Dimension.API_KEY.value, "per API key")),
        ("IP", (_Dimension.IP.value, "per IP address")),
    ],
)
ScopeKind = models.TextChoices(
    "ScopeKind",
    [
        ("DEFAULT", (_ScopeKind.DEFAULT.value, "default (everyone)")),
        ("TIER", (_ScopeKind.TIER.value, "one tier")),
        ("TENANT", (_ScopeKind.TENANT.value, "one tenant")),
    ],
)


Outcome = models.TextChoices(
    "Outcome",
    [
        (outcome.name, (outcome.value, outcome.value.replace("_", " ")))
        for outcome in _Outcome
    ],
)


class LimitKind(models.TextChoices):
    """What a limit caps: a rate (a token bucket), requests in any window (a
    sliding-window counter), requests per calendar day or month (a calendar
    quota), or requests in flight at once."""

    RATE = "rate", "rate: a token bucket"
    SLIDING_WINDOW = "sliding_window", "sliding window: at most N in any window"
    CALENDAR_QUOTA = "calendar_quota", "calendar quota: at most N per day or month"
    CONCURRENT = "concurrent", "concurrent: requests in flight at once"


class QuotaPer(models.TextChoices):
    """The period of a calendar quota (the snapshot's ``per``)."""

    DAY = "day", "per day"
    MONTH = "month", "per month"


class QuotaCycle(models.TextChoices):
    """Where a calendar quota's month starts (the snapshot's ``cycle``)."""

    CALENDAR = "calendar", "calendar: midnight, the 1st, in the tenant's time zone"
    BILLING = "billing", "billing cycle: from the tenant's billing day"


class Period(models.IntegerChoices):
    """The periods a rate is expressed over (PERIODS in the snapshot format)."""

    SECOND = 1, "per second"
    MINUTE = 60, "per minute"
    HOUR = 3600, "per hour"
    DAY = 86400, "per day"


assert set(Period.values) == set(PERIODS), "Period must mirror the snapshot format"
HttpMethod = models.TextChoices("HttpMethod", [(m, (m, m)) for m in HTTP_METHODS])


class AuditAction(models.TextChoices):
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"
    PUBLISH = "publish"
    ROLLBACK = "rollback"
    ACTIVATE = "activate"
    TOKEN_CREATE = "token_create", "token created"
    TOKEN_REVOKE = "token_revoke", "token revoked"
    RESEND = "resend", "notification resent"
    APPROVE = "approve", "change request approved"
    SEAL = "seal", "audit chain sealed"
    CANCEL = "cancel", "scheduled version cancelled"
    RESCHEDULE = "reschedule", "scheduled version moved"
    REVIEW = "review", "change request reviewed"


class SnapshotKind(models.TextChoices):
    """How a snapshot came to be: a publish of the working copy, or a rollback."""

    PUBLISH = "publish"
    ROLLBACK = "rollback"


class Role(models.TextChoices):
    """The three groups of people who use the control plane."""

    PRODUCT = "product", "product: edits everything, publishes"
    SUPPORT = "support", "support: temporary tenant overrides"
    VIEWER = "viewer", "viewer: reads"


class DeliveryChannel(models.TextChoices):
    """How a tenant is told: a signed webhook to one endpoint, or an email to its contacts."""

    WEBHOOK = "webhook"
    EMAIL = "email"


class DeliveryKind(models.TextChoices):
    """Why a notification is sent."""

    ANNOUNCEMENT = "announcement", "announcement of a new version"
    REMINDER = "reminder", "reminder before a lowering takes effect"
    CANCELLATION = "cancellation", "a scheduled version was cancelled"
    TEST = "test", "test event"
    QUOTA = "quota", "a calendar quota reached 80 % or 100 %"


class DeliveryState(models.TextChoices):
    """pending -> delivered, or -> retrying -> ... -> delivered | failed; a resend
    puts a delivered or failed notification back to pending."""

    PENDING = "pending", "pending: queued, not tried yet"
    RETRYING = "retrying", "retrying: an attempt failed, another is scheduled"
    DELIVERED = "delivered", "delivered"
    FAILED = "failed", "failed: gave up"
