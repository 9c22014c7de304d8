"""From rule rows to the snapshot's value types: compiling the working copy.

This is the one place where ORM rows become the value types of
``sluice.rules`` (a limit row's own columns map to its value in
``Limit.value_of``, beside the list of those columns); everything else reads
those values.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db.models import Q

from limits import models
from limits.choices import LimitKind, ScopeKind
from limits.core.zones import UTC, zones_of
from sluice import model as sluice_model
from sluice.model import PatternError, RouteTable

__all__ = [
    "limit_rows_from_snapshot",
    "limit_to_snapshot",
    "policy_to_snapshot",
    "route_table_error",
    "route_to_snapshot",
    "rules_compile",
    "rules_require_routable",
]


#: The limit columns a snapshot value is made of, in ``Limit.value_of``'s order.
_LIMIT_FIELDS = models.Limit.SETTINGS


def limit_to_snapshot(
    limit: models.Limit,
) -> sluice_model.RateLimit | sluice_model.ConcurrencyLimit:
    """A row as the snapshot's value: a bucket, a sliding window, a calendar quota,
    or a concurrency cap."""
    return limit.to_value()


def policy_to_snapshot(
    policy: models.Policy, limits: Iterable[models.Limit] | None = None
) -> sluice_model.Policy:
    """The snapshot form of ``policy``, with ``limits`` or else its saved limits.

    Rate limits (buckets, sliding windows, calendar quotas) go to the policy's ``limits``,
    concurrent ones to its ``concurrency``, each in row order.
    """
    rows = policy.limits.all() if limits is None else limits
    values = [limit_to_snapshot(limit) for limit in rows]
    return sluice_model.Policy(
        scope=policy.scope_key,
        route=policy.route_key,
        limits=tuple(
            v for v in values if not isinstance(v, sluice_model.ConcurrencyLimit)
        ),
        expires_at=policy.expires_at,
        concurrency=tuple(
            v for v in values if isinstance(v, sluice_model.ConcurrencyLimit)
        ),
    )


def limit_rows_from_snapshot(
    row: models.Policy, policy: sluice_model.Policy
) -> list[models.Limit]:
    """Unsaved limit rows of ``row`` that compile back to ``policy``'s limits (rollback)."""
    rows = [_row_of_rate(row, lim) for lim in policy.limits]
    return rows + [
        models.Limit(
            policy=row,
            kind=LimitKind.CONCURRENT,
            dimension=cap.dimension.value,
            rate=None,
            period=None,
            burst=None,
            max_inflight=cap.max_inflight,
            timeout=cap.timeout,
            shadow=cap.shadow,
            public_name=cap.name,
            public_description=cap.description,
        )
        for cap in policy.concurrency
    ]


def _row_of_rate(row: models.Policy, lim: sluice_model.RateLimit) -> models.Limit:
    """The unsaved row of one rate limit: a window's limit and window are the row's
    rate and period (``Limit``'s docstring says why)."""
    if isinstance(lim, sluice_model.CalendarQuota):
        return models.Limit(
            policy=row,
            kind=LimitKind.CALENDAR_QUOTA,
            dimension=lim.dimension.value,
            rate=lim.limit,
            period=None,
            burst=None,
            cost=lim.cost,
            shadow=lim.shadow,
            quota_per=lim.per,
            quota_cycle=lim.cycle,
            public_name=lim.name,
            public_description=lim.description,
        )
    if isinstance(lim, sluice_model.SlidingWindow):
        return models.Limit(
            policy=row,
            kind=LimitKind.SLIDING_WINDOW,
            dimension=lim.dimension.value,
            rate=lim.limit,
            period=lim.window,
            burst=None,
            cost=lim.cost,
            shadow=lim.shadow,
            public_name=lim.name,
            public_description=lim.description,
        )
    return models.Limit(
        policy=row,
        dimension=lim.dimension.value,
        rate=lim.rate,
        period=lim.period,
        burst=lim.burst,
        cost=lim.cost,
        shadow=lim.shadow,
        shards=lim.shards,
        lease=lim.lease,
        lease_ms=lim.lease_ms,
        public_name=lim.name,
        public_description=lim.description,
    )


def route_to_snapshot(route: models.Route) -> sluice_model.Route:
    return sluice_model.Route(
        slug=route.slug,
        methods=tuple(sorted(route.methods)),
        path=route.path_pattern,
        cost=route.cost,
        failure_mode=sluice_model.FailureMode(route.failure_mode),
        max_cost=route.max_cost,
    )


def route_table_error(routes: Iterable[sluice_model.Route]) -> str | None:
    """Why gateways could not match requests to ``routes`` (two of them claim one
    method and path), or None: the client's own route table decides."""
    try:
        RouteTable(routes)
    except PatternError as exc:
        return str(exc)
    return None


def rules_require_routable(rules: sluice_model.Rules) -> sluice_model.Rules:
    """``rules``, or ValidationError when its routes cannot be matched (a working copy
    stored before such routes were refused on save): diffs and explanations resolve
    requests the way gateways would, and cannot with such routes."""
    problem = route_table_error(rules.routes.values())
    if problem is not None:
        raise ValidationError(
            f"The working copy's routes must be fixed first: {problem}. "
            "Change or delete one of those routes."
        )
    return rules


#: Columns a compile reads: values, not model instances (100,000 tenants and
#: 30,000 limits as instances cost ~10 s of Python; as tuples, well under one).
_POLICY_COLUMNS = ("pk", "scope", "tier__slug", "tenant__slug", "route__slug")


def rules_compile(*, tenant: models.Tenant | None = None) -> sluice_model.Rules:
    """The working copy as a rule set, in a fixed number of queries whatever its size.

    With ``tenant``, only what can apply to that tenant (its tier's, its own and the
    default policies): enough for the resolver to answer for it, at any scale.
    Rows are read as tuples; each policy's limits keep ``Limit``'s ordering.
    """
    policies = models.Policy.objects.all()
    tenants = models.Tenant.objects.all()
    if tenant is not None:
        policies = policies.filter(
            Q(scope=ScopeKind.DEFAULT)
            | Q(tier_id=tenant.tier_id)
            | Q(tenant_id=tenant.pk)
        )
        tenants = tenants.filter(pk=tenant.pk)
    calendars = _calendars(tenants)
    return sluice_model.Rules(
        tiers=dict(models.Tier.objects.values_list("slug", "name")),
        tenants=dict(tenants.values_list("slug", "tier__slug")),
        routes={
            route.slug: route_to_snapshot(route) for route in models.Route.objects.all()
        },
        policies=_policies(policies),
        documentation=settings.SLUICE_DOCUMENTATION_URL,
        calendars=calendars,
        zones=zones_of(calendars.values()),
    )


def _calendars(tenants) -> dict[str, sluice_model.Calendar]:
    """The calendars of ``tenants`` that are not the default (UTC, billing day 1):
    of 100,000 tenants, only those read, and written in the snapshot."""
    rows = tenants.exclude(time_zone=UTC, billing_day=1).values_list(
        "slug", "time_zone", "billing_day"
    )
    return {
        slug: sluice_model.Calendar(zone=zone, billing_day=day)
        for slug, zone, day in rows
    }


def _policies(policies) -> tuple[sluice_model.Policy, ...]:
    """Snapshot policies of the ``policies`` queryset, their limits read in one query."""
    limits: dict[int, list[sluice_model.RateLimit]] = defaultdict(list)
    caps: dict[int, list[sluice_model.ConcurrencyLimit]] = defaultdict(list)
    rows = models.Limit.objects.filter(policy__in=policies.values("pk"))
    for policy_id, *columns in rows.values_list("policy_id", *_LIMIT_FIELDS):
        value = models.Limit.value_of(*columns)
        if isinstance(value, sluice_model.ConcurrencyLimit):
            caps[policy_id].append(value)
        else:
            limits[policy_id].append(value)
    return tuple(
        sluice_model.Policy(
            scope=sluice_model.scope_key(scope, tier or tenant),
            route=route or sluice_model.ALL_ROUTES,
            limits=tuple(limits[pk]),
            expires_at=expires_at,
            concurrency=tuple(caps[pk]),
        )
        for pk, scope, tier, tenant, route, expires_at in policies.order_by(
            "pk"
        ).values_list(*_POLICY_COLUMNS, "expires_at")
    )
