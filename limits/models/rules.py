"""The rule tables people edit: tiers, tenants, routes, policies and their limits.

They are the working copy. Gateways never read them: a publish compiles them
into an immutable snapshot (``limits.publishing.services``).
"""

from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ValidationError
from django.core.validators import (
    MaxValueValidator,
    MinValueValidator,
    RegexValidator,
)
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from limits.choices import FailureMode, HttpMethod, ScopeKind
from limits.core.zones import UTC, validate_time_zone
from sluice.model import (
    ALL_ROUTES,
    HTTP_METHODS,
    PatternError,
    parse_path_pattern,
    scope_key,
)

from .base import RuleModel

__all__ = [
    "Policy",
    "Route",
    "RouteClaim",
    "Tenant",
    "Tier",
    "override_expiry_error",
    "validate_http_methods",
]

slug_validator = RegexValidator(
    r"^[a-z0-9][a-z0-9_-]{0,62}$",
    "Use lower-case letters, digits, '-' and '_', starting with a letter or digit.",
)
route_slug_validator = RegexValidator(
    r"^[a-z0-9][a-z0-9._-]{0,62}$",
    "Use lower-case letters, digits, '.', '-' and '_', e.g. 'orders.read'.",
)
positive = MinValueValidator(1, "Must be at least 1.")


def validate_path_pattern(value: str) -> None:
    try:
        parse_path_pattern(value)
    except PatternError as exc:
        raise ValidationError(f"Not a valid path pattern: {exc}.") from None


def validate_http_methods(methods: list[str]) -> None:
    """Refuse what is not one of the HTTP methods a route can match.

    Checked before the array field's own per-item check: Django's ArrayField
    formats its item errors twice, so a method holding ``%`` ended in a
    ValueError instead of this message (the text stays in ``params``).
    """
    unknown = [method for method in methods if method not in HTTP_METHODS]
    if unknown:
        raise ValidationError(
            "Not an HTTP method: %(unknown)s. Use %(known)s.",
            code="invalid_choice",
            params={
                "unknown": ", ".join(repr(method) for method in unknown),
                "known": ", ".join(HTTP_METHODS),
            },
        )


def override_expiry_error(
    expires_at: datetime, *, now: datetime | None = None
) -> str | None:
    """Why ``expires_at`` cannot end a temporary override set at ``now``, or None.

    An override is temporary: it ends in the future, and no later than
    ``settings.SLUICE_OVERRIDE_MAX_DAYS`` from now (a raise "for a while" that
    lasts five years is a permanent policy nobody reviewed).
    """
    now = now or timezone.now()
    if expires_at <= now:
        return "The expiry must be in the future."
    days = int(settings.SLUICE_OVERRIDE_MAX_DAYS)
    latest = now + timedelta(days=days)
    if expires_at > latest:
        return (
            f"An override lasts at most {days} days (SLUICE_OVERRIDE_MAX_DAYS): "
            f"choose an expiry before {latest:%Y-%m-%d %H:%M} UTC, or make it a "
            "permanent tenant policy."
        )
    return None


class Tier(RuleModel):
    """A plan every tenant is on (free, pro, enterprise...)."""

    slug = models.CharField(max_length=63, unique=True, validators=[slug_validator])
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    position = models.PositiveIntegerField(
        default=0, help_text="Order in lists: free before pro."
    )

    class Meta:
        ordering = ["position", "slug"]

    def __str__(self) -> str:
        return self.name


class Tenant(RuleModel):
    """A customer of the API; its tier decides its limits unless a tenant policy does.

    Its calendar (``time_zone``, ``billing_day``) places the periods of its
    calendar quotas: a day or a month starts at local midnight, a billing cycle on
    its billing day (a day the month lacks is the month's last).
    """

    slug = models.CharField(max_length=63, unique=True, validators=[slug_validator])
    name = models.CharField(max_length=200)
    tier = models.ForeignKey(Tier, on_delete=models.PROTECT, related_name="tenants")
    contact_emails = ArrayField(
        models.EmailField(),
        blank=True,
        default=list,
        help_text="Who is told about limit changes, comma-separated.",
    )
    time_zone = models.CharField(
        max_length=64,
        default=UTC,
        validators=[validate_time_zone],
        help_text="IANA time zone (Europe/Paris): calendar quotas reset at local "
        "midnight.",
    )
    billing_day = models.PositiveSmallIntegerField(
        default=1,
        validators=[positive, MaxValueValidator(31, "Must be at most 31.")],
        help_text="Day of the month billing cycles start on (1-31; 31 is the last "
        "day of shorter months).",
    )
    quota_reminders = models.BooleanField(
        default=False,
        db_default=False,  # tenants written by COPY (limits.rules.records) leave it out
        help_text="Tell the tenant (webhooks, emails) when it has used 80 % and "
        "100 % of a calendar quota in a period.",
    )

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(
                condition=Q(billing_day__gte=1, billing_day__lte=31),
                name="%(app_label)s_%(class)s_billing_day_of_a_month",
                violation_error_message="The billing day is a day of the month, 1 to 31.",
            ),
        ]

    def __str__(self) -> str:
        return self.slug


class Route(RuleModel):
    """A named API operation, matched by HTTP method and path pattern."""

    slug = models.CharField(
        max_length=63, unique=True, validators=[route_slug_validator]
    )
    description = models.CharField(max_length=200, blank=True)
    methods = ArrayField(
        models.CharField(max_length=7, choices=HttpMethod.choices),
        help_text="HTTP methods, comma-separated, e.g. GET,HEAD.",
    )
    path_pattern = models.CharField(
        max_length=300,
        validators=[validate_path_pattern],
        help_text="Such as /v1/orders/{id}; a {parameter} takes a whole segment.",
    )
    cost = models.PositiveIntegerField(
        default=1, validators=[positive], help_text="Tokens a request takes by default."
    )
    failure_mode = models.CharField(
        max_length=14,
        choices=FailureMode.choices,
        default=FailureMode.OPEN,
        help_text="What gateways do when the limiter's Redis is unavailable.",
    )
    max_cost = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[positive],
        help_text="The largest cost a request may declare (a header the gateway "
        "sets, Envoy's hits_addend); above it a request counts as this much. "
        "Empty: requests cannot change the route's cost.",
    )

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(
                condition=Q(cost__gte=1),
                name="%(app_label)s_%(class)s_cost_positive",
                violation_error_message="Cost must be at least 1.",
            ),
            models.CheckConstraint(
                condition=Q(max_cost__isnull=True) | Q(max_cost__gte=F("cost")),
                name="%(app_label)s_%(class)s_max_cost_at_least_cost",
                violation_error_message="Max cost must be at least the route's cost.",
            ),
            models.CheckConstraint(
                condition=~Q(methods=[]),
                name="%(app_label)s_%(class)s_methods_not_empty",
                violation_error_message="A route needs at least one HTTP method.",
            ),
        ]

    def __str__(self) -> str:
        return self.slug

    def clean(self) -> None:
        # The constraint above would say it without naming the field.
        if self.max_cost is not None and self.cost and self.max_cost < self.cost:
            raise ValidationError(
                {
                    "max_cost": f"Max cost {self.max_cost} is below the route's cost "
                    f"{self.cost}: a request may declare a cost up to max cost."
                }
            )

    def clean_fields(self, exclude=None) -> None:
        # Accept "get" as well as "GET": normalize before the choices are checked.
        self.methods = sorted({str(method).upper() for method in self.methods or []})
        exclude = set(exclude or ())
        errors: dict[str, list[ValidationError]] = {}
        if "methods" not in exclude:
            try:
                validate_http_methods(self.methods)
            except ValidationError as exc:
                errors["methods"] = exc.error_list
                exclude.add("methods")  # the array field's check would say it again
        try:
            super().clean_fields(exclude)
        except ValidationError as exc:
            errors = exc.update_error_dict(errors)
        if errors:
            raise ValidationError(errors)


class RouteClaim(models.Model):
    """One HTTP method and path shape a route claims, so the database itself keeps
    one route per method and path: two requests saving colliding routes at the same
    moment cannot both pass, whatever the checks before them saw.

    Rows are written by a trigger on the route table (migration
    ``route_claims``), never by code: each route's claims are its methods times
    its pattern with every ``{parameter}`` written ``{}`` (``/v1/orders/{id}`` and
    ``/v1/orders/{order}`` match the same requests). The unique constraint is
    deferred, so one transaction may swap two routes' paths; services check it
    before they return (:func:`limits.rules.claims.route_claims_checked`).
    """

    route = models.ForeignKey(Route, on_delete=models.CASCADE, related_name="claims")
    method = models.CharField(max_length=7)
    path_shape = models.CharField(max_length=300)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["method", "path_shape"],
                name="%(app_label)s_%(class)s_unique_method_path_shape",
                deferrable=models.Deferrable.DEFERRED,
                violation_error_message="Another route claims this method and path.",
            )
        ]

    def __str__(self) -> str:
        return f"{self.method} {self.path_shape}"


class Policy(RuleModel):
    """The limits of one (scope, route) pair; the most specific policy wins as a whole.

    A tenant policy with ``expires_at`` is a temporary override (made by support,
    with a reason): while live it beats the permanent policy of the same pair.
    """

    scope = models.CharField(max_length=7, choices=ScopeKind.choices)
    tier = models.ForeignKey(
        Tier, on_delete=models.PROTECT, null=True, blank=True, related_name="policies"
    )
    tenant = models.ForeignKey(
        Tenant, on_delete=models.PROTECT, null=True, blank=True, related_name="policies"
    )
    route = models.ForeignKey(
        Route,
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="policies",
        help_text="Leave empty for every route.",
    )
    reason = models.TextField(
        blank=True, help_text="Why this policy exists; required for overrides."
    )
    expires_at = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Temporary tenant overrides only: when it stops applying.",
    )

    class Meta:
        verbose_name_plural = "policies"
        constraints = [
            models.CheckConstraint(
                condition=(
                    Q(scope=ScopeKind.DEFAULT, tier__isnull=True, tenant__isnull=True)
                    | Q(scope=ScopeKind.TIER, tier__isnull=False, tenant__isnull=True)
                    | Q(scope=ScopeKind.TENANT, tier__isnull=True, tenant__isnull=False)
                ),
                name="%(app_label)s_%(class)s_scope_matches_subject",
                violation_error_message="A default policy names no tier or tenant; a tier policy names a tier; a tenant policy names a tenant.",
            ),
            models.CheckConstraint(
                condition=Q(expires_at__isnull=True) | Q(scope=ScopeKind.TENANT),
                name="%(app_label)s_%(class)s_only_tenant_policies_expire",
                violation_error_message="Only tenant policies can expire.",
            ),
            models.UniqueConstraint(
                fields=["scope", "tier", "tenant", "route"],
                condition=Q(expires_at__isnull=True),
                nulls_distinct=False,
                name="%(app_label)s_%(class)s_unique_scope_route",
                violation_error_message="There is already a policy for this scope and route.",
            ),
            models.UniqueConstraint(
                fields=["scope", "tier", "tenant", "route"],
                condition=Q(expires_at__isnull=False),
                nulls_distinct=False,
                name="%(app_label)s_%(class)s_unique_override_scope_route",
                violation_error_message="There is already a temporary override for this tenant and route.",
            ),
        ]

    def __str__(self) -> str:
        subject = {
            ScopeKind.TIER: f"tier {self.tier.slug}" if self.tier_id else "tier ?",
            ScopeKind.TENANT: f"tenant {self.tenant.slug}"
            if self.tenant_id
            else "tenant ?",
        }.get(self.scope, "default")
        route = self.route.slug if self.route_id else "all routes"
        return f"{subject} · {route}" + (" (override)" if self.expires_at else "")

    @property
    def scope_key(self) -> str:
        """The snapshot's scope string: ``default``, ``tier:pro``, ``tenant:acme``."""
        subject = {ScopeKind.TIER: self.tier, ScopeKind.TENANT: self.tenant}.get(
            self.scope
        )
        return scope_key(self.scope, subject.slug if subject else None)

    @property
    def route_key(self) -> str:
        return self.route.slug if self.route_id else ALL_ROUTES

    @property
    def is_default(self) -> bool:
        """The default policy for all routes: it always exists and cannot be deleted."""
        return (
            self.scope == ScopeKind.DEFAULT
            and self.route_id is None
            and self.expires_at is None
        )

    def clean(self) -> None:
        errors = {}
        if self.scope == ScopeKind.DEFAULT:
            self.tier = self.tenant = None
        elif self.scope == ScopeKind.TIER:
            self.tenant = None
            if self.tier_id is None:
                errors["tier"] = "Choose the tier this policy applies to."
        elif self.scope == ScopeKind.TENANT:
            self.tier = None
            if self.tenant_id is None:
                errors["tenant"] = "Choose the tenant this policy applies to."
        if self.expires_at is not None:
            if self.scope != ScopeKind.TENANT:
                errors["expires_at"] = "Only tenant policies can expire."
            elif problem := override_expiry_error(self.expires_at):
                errors["expires_at"] = problem
            if not self.reason.strip():
                errors["reason"] = "A temporary override needs a reason."
        if errors:
            raise ValidationError(errors)
