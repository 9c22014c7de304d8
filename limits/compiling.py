"""From rule rows to the snapshot's value types: compiling the working copy.

This is the one place where ORM rows become the value types of
``limits.enforcement.snapshot``; everything else reads those values.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Q

from limits import models
from limits.choices import LimitKind, ScopeKind
from limits.enforcement import snapshot

__all__ = [
    "limit_rows_from_snapshot",
    "limit_to_snapshot",
    "policy_to_snapshot",
    "route_to_snapshot",
    "rules_compile",
]


def limit_to_snapshot(
    limit: models.Limit,
) -> snapshot.Limit | snapshot.ConcurrencyLimit:
    """A row as the snapshot's value: a bucket, or a concurrency cap (kind "concurrent")."""
    dimension = snapshot.Dimension(limit.dimension)
    if limit.kind == LimitKind.CONCURRENT:
        return snapshot.ConcurrencyLimit(
            dimension=dimension,
            max_inflight=limit.max_inflight,
            timeout=limit.timeout,
            shadow=limit.shadow,
        )
    return snapshot.Limit(
        dimension=dimension,
        rate=limit.rate,
        period=limit.period,
        burst=limit.burst,
        cost=limit.cost,
        shadow=limit.shadow,
        shards=limit.shards,
        lease=limit.lease,
        lease_ms=limit.lease_ms,
    )


def policy_to_snapshot(
    policy: models.Policy, limits: Iterable[models.Limit] | None = None
) -> snapshot.Policy:
    """The snapshot form of ``policy``, with ``limits`` or else its saved limits.

    Rate limits go to the policy's ``limits``, concurrent ones to its
    ``concurrency``, each in row order.
    """
    rows = policy.limits.all() if limits is None else limits
    values = [limit_to_snapshot(limit) for limit in rows]
    return snapshot.Policy(
        scope=policy.scope_key,
        route=policy.route_key,
        limits=tuple(v for v in values if isinstance(v, snapshot.Limit)),
        expires_at=policy.expires_at,
        concurrency=tuple(
            v for v in values if isinstance(v, snapshot.ConcurrencyLimit)
        ),
    )


def limit_rows_from_snapshot(
    row: models.Policy, policy: snapshot.Policy
) -> list[models.Limit]:
    """Unsaved limit rows of ``row`` that compile back to ``policy``'s limits (rollback)."""
    rows = [
        models.Limit(
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
        )
        for lim in policy.limits
    ]
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
        )
        for cap in policy.concurrency
    ]


def route_to_snapshot(route: models.Route) -> snapshot.Route:
    return snapshot.Route(
        slug=route.slug,
        methods=tuple(sorted(route.methods)),
        path=route.path_pattern,
        cost=route.cost,
        failure_mode=snapshot.FailureMode(route.failure_mode),
    )


def rules_compile(*, tenant: models.Tenant | None = None) -> snapshot.Rules:
    """The working copy as a rule set, in a fixed number of queries whatever its size.

    With ``tenant``, only what can apply to that tenant (its tier's, its own and the
    default policies): enough for the resolver to answer for it, at any scale.
    """
    policies = models.Policy.objects.select_related("tier", "tenant", "route")
    tenants = models.Tenant.objects.all()
    if tenant is not None:
        policies = policies.filter(
            Q(scope=ScopeKind.DEFAULT)
            | Q(tier_id=tenant.tier_id)
            | Q(tenant_id=tenant.pk)
        )
        tenants = tenants.filter(pk=tenant.pk)
    return snapshot.Rules(
        tiers=dict(models.Tier.objects.values_list("slug", "name")),
        tenants=dict(tenants.values_list("slug", "tier__slug")),
        routes={
            route.slug: route_to_snapshot(route) for route in models.Route.objects.all()
        },
        policies=tuple(
            policy_to_snapshot(p) for p in policies.prefetch_related("limits")
        ),
    )
