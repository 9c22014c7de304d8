"""From rule rows to the snapshot's value types: compiling the working copy.

This is the one place where ORM rows become the value types of
``limits.enforcement.snapshot``; everything else reads those values.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import Q

from limits import models
from limits.choices import ScopeKind
from limits.enforcement import snapshot

__all__ = [
    "limit_to_snapshot",
    "policy_to_snapshot",
    "route_to_snapshot",
    "rules_compile",
]


def limit_to_snapshot(limit: models.Limit) -> snapshot.Limit:
    return snapshot.Limit(
        dimension=snapshot.Dimension(limit.dimension),
        rate=limit.rate,
        period=limit.period,
        burst=limit.burst,
        cost=limit.cost,
        shadow=limit.shadow,
    )


def policy_to_snapshot(
    policy: models.Policy, limits: Iterable[models.Limit] | None = None
) -> snapshot.Policy:
    """The snapshot form of ``policy``, with ``limits`` or else its saved limits."""
    rows = policy.limits.all() if limits is None else limits
    return snapshot.Policy(
        scope=policy.scope_key,
        route=policy.route_key,
        limits=tuple(limit_to_snapshot(limit) for limit in rows),
        expires_at=policy.expires_at,
    )


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
